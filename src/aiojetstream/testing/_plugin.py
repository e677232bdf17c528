"""The pytest plugin: the ``nats_server``, ``nats_url`` and ``js`` fixtures.

pytest loads it through the ``pytest11`` entry point ``aiojetstream.testing``:
the package re-exports these fixtures, so registering the package registers them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

try:
    import pytest
except ImportError:  # pragma: no cover - pytest is only needed for the plugin part
    pytest = None  # type: ignore[assignment]

from ._server import NatsServer

if TYPE_CHECKING:
    from aiojetstream._context import JetStreamContext

#: Whether pytest is installed (the fixtures below are defined only then).
HAS_PYTEST = pytest is not None


async def _delete_all_streams(ctx: JetStreamContext) -> None:
    import aiojetstream

    names = [name async for name in ctx.stream_names()]
    for name in names:
        try:
            await ctx.delete_stream(name)
        except aiojetstream.StreamNotFoundError:
            continue  # deleted meanwhile (for example by a stream's own limits)


if HAS_PYTEST:
    if TYPE_CHECKING:
        _async_fixture = pytest.fixture
    else:
        try:
            from pytest_asyncio import fixture as _async_fixture
        except ImportError:  # pragma: no cover - `js` needs an asyncio plugin anyway
            _async_fixture = pytest.fixture

    @pytest.fixture(scope="session")
    def nats_server() -> Iterator[NatsServer]:
        """Yield a JetStream-enabled :class:`NatsServer` shared by the session.

        Synchronous, so it works with any event-loop scope. Tests that kill,
        freeze or restart a server should start their own instead.
        """
        server = NatsServer()
        server.start_sync()
        try:
            yield server
        finally:
            server.stop_sync()

    @pytest.fixture(scope="session")
    def nats_url(nats_server: NatsServer) -> str:
        """Return the URL of the session's ``nats_server``."""
        return nats_server.url

    @_async_fixture
    async def js(nats_server: NatsServer) -> AsyncIterator[JetStreamContext]:
        """Yield an ``aiojetstream`` context connected to ``nats_server``.

        Every stream (and so every consumer and key-value bucket) is deleted
        before the test and again afterwards, then the context is closed.

        The fixture does not wait after the deletes. nats-server (seen with
        2.15.1) finishes removing a file-storage stream after its delete reply:
        a stream re-created under the same name a few milliseconds later can
        come back with the deleted stream's messages, and nothing observable
        marks the end of the removal. Give each test its own stream and bucket
        names (for example a prefix plus a random suffix) rather than reusing
        one name from test to test.
        """
        import aiojetstream

        ctx = await aiojetstream.connect(servers=nats_server.url)
        try:
            await _delete_all_streams(ctx)
            yield ctx
            if ctx.nc.is_connected:
                await _delete_all_streams(ctx)
            else:
                cleaner = await aiojetstream.connect(servers=nats_server.url)
                try:
                    await _delete_all_streams(cleaner)
                finally:
                    await cleaner.close()
        finally:
            await ctx.close()
