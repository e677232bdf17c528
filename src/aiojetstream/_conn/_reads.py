"""Direct socket reads: the router scans the bytes where the socket delivers them."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from ._nats import Router

__all__ = ["READ_SIZE", "DirectReads"]

logger = logging.getLogger("aiojetstream")

#: The most bytes one socket read takes while reads come full (asyncio's default
#: is 256 KiB): a read holding more messages lets column mode frame them in
#: longer runs (each run costs a few dozen Arrow calls, see ``_columns``), and
#: takes fewer reads and router passes for a large fetch. A read returns what
#: the socket holds, but a larger size costs every read (the bytes object of a
#: read is allocated at this size first): a read that asyncio's size would have
#: taken whole brings the transport back to it. ``messages()``, whose reads
#: its pulls keep short, thus reads at asyncio's size (about 0.2 CPU-us a
#: message less than at 1 MiB).
READ_SIZE: Final = 1 << 20


class DirectReads(asyncio.Protocol):
    """Stands in front of nats-py's ``StreamReaderProtocol`` on one transport.

    The bytes the socket delivers go to :meth:`Router.direct` while nats-py's
    read loop has parsed everything the stream reader was given (``handed``
    is 0) and is not inside the parser; what the router returns, and every
    byte while the read loop has some left, goes to the stream reader as
    before. Everything else (end of file, connection lost, write flow
    control) is passed on unchanged.
    """

    def __init__(
        self, router: Router, transport: asyncio.Transport, inner: asyncio.Protocol
    ) -> None:
        self.router = router
        self.transport = transport
        self.inner = inner
        #: Bytes given to the stream reader that nats-py's read loop has not read yet.
        self.handed = 0
        #: The transport's own read size (0: not a selector socket transport, or
        #: already reading READ_SIZE): reads switch between it and READ_SIZE.
        self.base = 0
        size = getattr(transport, "max_size", None)
        if isinstance(size, int) and size < READ_SIZE:
            self.base = size

    @classmethod
    def install(cls, router: Router, transport: asyncio.Transport) -> DirectReads | None:
        """Put one in front of ``transport``'s stream reader protocol (None: not that kind)."""
        if transport.is_closing():
            return None
        inner = transport.get_protocol()
        if type(inner) is not asyncio.StreamReaderProtocol:
            return None
        reads = cls(router, transport, inner)
        transport.set_protocol(reads)
        return reads

    def uninstall(self) -> None:
        """Give the transport its stream reader protocol back (a closed one delivers nothing).

        A TLS transport closed twice (by the server, then by nats-py) has no
        protocol any more: ``get_protocol()`` raises there.
        """
        transport = self.transport
        if not transport.is_closing() and transport.get_protocol() is self:
            transport.set_protocol(self.inner)

    def data_received(self, data: bytes) -> None:
        base = self.base
        if base:
            # A full read: the socket may hold more, read up to READ_SIZE. One the
            # transport's own size would have taken whole: back to that size.
            size = len(data)
            if size >= self.transport.max_size:  # type: ignore[attr-defined]
                self.transport.max_size = READ_SIZE  # type: ignore[attr-defined]
            elif size < base:
                self.transport.max_size = base  # type: ignore[attr-defined]
        if not self.handed:
            try:
                data = self.router.direct(data)
            except Exception as exc:
                # The read loop would turn this into a reconnect (ProtocolError);
                # raised here it would close the socket under nats-py's read loop,
                # which then ends without one. Drop the connection: nats-py sees
                # its end and reconnects.
                logger.warning("malformed protocol from the server (%r): reconnecting", exc)
                self.transport.abort()
                return
            if not data:
                return
        self.handed += len(data)
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()
