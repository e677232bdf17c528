"""What the bare-socket clients (``bare_reader.py``, ``bare_publisher.py``) share.

:class:`BareConnection` is one ``asyncio.Protocol`` connection that writes
``CONNECT``, its ``SUB`` commands and a ``PING`` (the ``PONG`` makes it
:attr:`~BareConnection.ready`), answers the server's ``PING``, and fails its
futures on ``-ERR`` or when the server closes the connection. Each client
parses its ``MSG``/``HMSG`` frames in its own ``data_received`` loop (the hot
path, kept inline: no call per message) and hands every other line to
:meth:`BareConnection.control`.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

CONNECT: Final = (
    b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true,'
    b'"protocol":1}\r\n'
)


def host_port(url: str) -> tuple[str, int]:
    """The host and port of a ``nats://host:port`` URL."""
    host, _, port = url.removeprefix("nats://").rpartition(":")
    return host, int(port)


class BareConnection(asyncio.Protocol):
    """A connection's set-up and control lines; subclasses parse the messages."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def subscriptions(self) -> bytes:
        """The ``SUB`` commands written after ``CONNECT``."""
        raise NotImplementedError

    def futures(self) -> tuple[asyncio.Future[Any] | None, ...]:
        """The futures a failure of the connection fails."""
        return (self.ready,)

    def fail(self, error: Exception) -> None:
        """Fail every pending future of :meth:`futures` with ``error``."""
        for future in self.futures():
            if future is not None and not future.done():
                future.set_exception(error)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(CONNECT + self.subscriptions() + b"PING\r\n")

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(ConnectionError(f"the server closed the connection: {exc}"))

    def control(self, line: bytes) -> bool:
        """A line that is no message (without its CRLF); False when it is ``-ERR``.

        ``PING`` is answered, the first ``PONG`` makes the connection ready,
        ``-ERR`` fails it; ``INFO`` and ``+OK`` need nothing.
        """
        if line == b"PING":
            assert self.transport is not None
            self.transport.write(b"PONG\r\n")
        elif line == b"PONG":
            if not self.ready.done():
                self.ready.set_result(None)
        elif line.startswith(b"-ERR"):
            self.fail(ConnectionError(line.decode(errors="replace")))
            return False
        return True
