"""A private event loop and connection for code that Spark calls synchronously.

Spark calls ``partitions()``, ``read()``, ``write()`` and the streaming offset
methods from plain threads of its Python workers, where no event loop runs.
:class:`Session` owns a new loop and one :class:`~aiojetstream.JetStreamContext`
on it; every call runs to completion on that loop. Between calls nobody services
the socket, so callers only ask the server for what they are about to consume.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from types import TracebackType
from typing import Any, TypeVar

import aiojetstream
from aiojetstream import ConnectionClosedError, InvalidOptionError, JetStreamContext, TLSError

from ._options import ConnectOptions

__all__ = ["Session", "run_once"]

T = TypeVar("T")


class Session:
    """A private event loop with one JetStream connection on it (sync API)."""

    def __init__(self, options: ConnectOptions, *, max_pending: int | None = None) -> None:
        self._options = options
        self._max_pending = max_pending
        self._loop = asyncio.new_event_loop()
        self._js: JetStreamContext | None = None
        try:
            self._js = self.run(self._connect())
        except BaseException:
            self._loop.close()
            raise

    async def _connect(self) -> JetStreamContext:
        opts = self._options
        try:
            kwargs = opts.connect_kwargs()
            if self._max_pending is not None:
                kwargs["publish_async_max_pending"] = self._max_pending
        except (OSError, ValueError) as exc:
            raise InvalidOptionError(
                f"options 'tlsCaFile' / 'tlsCertFile' / 'tlsKeyFile': {exc}"
            ) from exc
        try:
            return await aiojetstream.connect(opts.servers, **kwargs)
        except (ConnectionClosedError, TLSError) as exc:
            raise ConnectionClosedError(
                f"aiojetstream.spark: cannot reach NATS at {opts.describe()} "
                f"(option 'servers'): {exc}"
            ) from exc

    @property
    def js(self) -> JetStreamContext:
        """The connected context."""
        assert self._js is not None
        return self._js

    def run(self, awaitable: Awaitable[T]) -> T:
        """Run ``awaitable`` to completion on the private loop."""
        return self._loop.run_until_complete(awaitable)

    def close(self) -> None:
        """Close the connection and the loop (idempotent)."""
        loop = self._loop
        if loop.is_closed():
            return
        try:
            if self._js is not None:
                loop.run_until_complete(self._js.close())
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            self._js = None
            loop.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def run_once(
    options: ConnectOptions, work: Callable[[JetStreamContext], Coroutine[Any, Any, T]]
) -> T:
    """Connect, run ``work(js)``, close: one synchronous call."""
    with Session(options) as session:
        return session.run(work(session.js))
