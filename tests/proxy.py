"""TCP proxies for fault tests (import as ``from proxy import ...``).

:class:`ApiCountingProxy` counts a client's JetStream API requests; it is
shared by the fault tests that bound request rates during an outage
(RELIABILITY goal 4: at most 20 API or pull requests a second): the pull
engine's (tests/integration/test_consume_faults.py) and publishing's
(tests/reliability/test_cluster_publish.py). The reliability harness's
threaded TcpProxy logs requests with the same :class:`PubScanner`.

:class:`StallingProxy` cuts its connections and stalls a client's reconnect
half way (a reconnect attempt that fails after its handshake).

:class:`HoldingProxy` holds what the server sends from a given byte string on
until the client sends another (a slow link, made to order).

:class:`DroppingProxy` drops some of a client's publishes on their way to the
server (a request lost without a word, made to order).

:class:`RewritingProxy` rewrites chosen messages the server sends to the
client (a buggy or hostile server, or a man in the middle, made to order).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Self

__all__ = [
    "HOST",
    "MAX_REQUESTS_PER_SECOND",
    "ApiCountingProxy",
    "DroppingProxy",
    "Frame",
    "HoldingProxy",
    "PubScanner",
    "RewritingProxy",
    "StallingProxy",
    "max_per_second",
]

HOST = "127.0.0.1"
#: RELIABILITY goal 4: at most this many pull or API requests per second in an outage.
MAX_REQUESTS_PER_SECOND = 20


def _now() -> float:
    return asyncio.get_running_loop().time()


def max_per_second(times: list[float]) -> int:
    """The largest number of events inside any one-second window."""
    times = sorted(times)
    best = 0
    j = 0
    for i, t in enumerate(times):
        while times[j] <= t - 1.0:
            j += 1
        best = max(best, i - j + 1)
    return best


class PubScanner:
    """The subjects of the ``PUB``/``HPUB`` operations in a client's bytes, fed as they come.

    Only operation lines are read (split on whitespace; the last word is the
    payload's length, which is skipped): a subject is known as soon as its
    operation line is complete, before its payload arrives.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._skip = 0

    def feed(self, data: bytes) -> list[str]:
        """The subjects of the ``PUB``/``HPUB`` lines completed by ``data``."""
        buf = self._buf
        buf += data
        subjects: list[str] = []
        while True:
            if self._skip:
                n = min(self._skip, len(buf))
                del buf[:n]
                self._skip -= n
                if self._skip:
                    break
            end = buf.find(b"\r\n")
            if end < 0:
                break
            words = bytes(buf[:end]).split()
            del buf[: end + 2]
            if words and words[0].upper() in (b"PUB", b"HPUB"):
                subjects.append(words[1].decode())
                self._skip = int(words[-1]) + 2
        return subjects


class _Listening:
    """A proxy's listening side: a port of its own and the tasks of its connections.

    Subclasses set up what they keep, call ``_listen(upstream_port)`` and
    define ``_to_server`` and ``_to_client`` (the two directions of the default
    ``_accept``), or an ``_accept`` of their own (a connection's task: it adds
    itself to ``_tasks``).
    """

    def _listen(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def url(self) -> str:
        return f"nats://{HOST}:{self.port}"

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A connection's task: relays through ``_to_server`` and ``_to_client`` until one ends."""
        me = asyncio.current_task()
        assert me is not None
        self._tasks.add(me)
        pipes: list[asyncio.Task[None]] = []
        up_writer: asyncio.StreamWriter | None = None
        try:
            up_reader, up_writer = await asyncio.open_connection(HOST, self.upstream_port)
            pipes = [
                asyncio.create_task(self._to_server(reader, up_writer)),
                asyncio.create_task(self._to_client(up_reader, writer)),
            ]
            await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        except (OSError, asyncio.CancelledError):
            pass  # the server is gone, or the proxy is closing
        finally:
            for pipe in pipes:
                pipe.cancel()
            try:
                await asyncio.gather(*pipes, return_exceptions=True)
            finally:
                for w in (writer, up_writer):
                    if w is not None:
                        w.transport.abort()
                self._tasks.discard(me)

    async def _to_server(
        self, reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter
    ) -> None:
        """Client to server (the default ``_accept``'s)."""
        raise NotImplementedError

    async def _to_client(
        self, up_reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Server to client (the default ``_accept``'s): everything, as it comes."""
        with contextlib.suppress(OSError):
            while data := await up_reader.read(65536):
                writer.write(data)
                await writer.drain()

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._accept, HOST, 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.wait_for(self._server.wait_closed(), 10)


class ApiCountingProxy(_Listening):
    """A TCP proxy in front of a server that logs the client's ``$JS.API.>`` publishes.

    It parses the client-to-server protocol (``PUB``/``HPUB`` with their
    payload lengths) and forwards every byte unchanged; ``api`` holds the
    (loop time, subject) of every ``PUB``/``HPUB`` the client sent, whatever
    the subject (:meth:`api_times` filters by prefix). When the upstream
    server is down it accepts and closes at once, like a refused connection.
    Its tasks run in the test's event loop: a leak check's baseline must be
    taken after the client connected through it.
    """

    def __init__(self, upstream_port: int) -> None:
        self._listen(upstream_port)
        self.api: list[tuple[float, str]] = []
        #: Seconds each read from the client waits before it is forwarded (a slow link).
        self.delay = 0.0
        #: Cleared, what the server sends is held (in order) until it is set again.
        self.downstream = asyncio.Event()
        self.downstream.set()

    def api_times(self, start: float, end: float, prefix: str = "$JS.API.") -> list[float]:
        """When the client sent a message whose subject starts with ``prefix`` in [start, end]."""
        return [t for t, s in self.api if start <= t <= end and s.startswith(prefix)]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        me = asyncio.current_task()
        assert me is not None
        self._tasks.add(me)
        try:
            await self._serve(reader, writer)
        except asyncio.CancelledError:
            pass  # the proxy is closing
        finally:
            self._tasks.discard(me)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        pipes: list[asyncio.Task[None]] = []
        up_writer: asyncio.StreamWriter | None = None
        try:
            try:
                up_reader, up_writer = await asyncio.open_connection(HOST, self.upstream_port)
            except OSError:
                return
            pipes = [
                asyncio.create_task(self._pipe(reader, up_writer, parse=True)),
                asyncio.create_task(self._pipe(up_reader, writer, parse=False)),
            ]
            await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pipe in pipes:
                pipe.cancel()
            writers = [w for w in (writer, up_writer) if w is not None]
            try:
                await asyncio.gather(*pipes, return_exceptions=True)
            finally:
                # Closed even when the proxy's close cancels the wait above: a client
                # connection left open kept Server.wait_closed() waiting (Python 3.12).
                for w in writers:
                    w.close()
                for w in writers:
                    with contextlib.suppress(OSError):
                        await w.wait_closed()

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, parse: bool
    ) -> None:
        scanner = PubScanner() if parse else None
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                if scanner is not None:
                    # Parse before forwarding: once the server answers a PING sent
                    # after some request, that request is already logged.
                    self.api.extend((_now(), subject) for subject in scanner.feed(data))
                    if self.delay:
                        await asyncio.sleep(self.delay)  # simulates the link, syncs nothing
                else:
                    await self.downstream.wait()
                writer.write(data)
                await writer.drain()


class StallingProxy(_Listening):
    """A TCP proxy in front of a server that cuts its connections, or stalls the next one.

    :meth:`cut` closes every client connection at once (the client reconnects).
    :meth:`stall_next` makes the next connection fail a reconnect half way:
    it relays the handshake (INFO, CONNECT, PING, PONG), then, once the client
    sends its second PING (the reconnect's flush, after its subscriptions are
    replayed), writes ``inject(what the client sent)`` to the client and from
    then on relays nothing from the server, leaving the connection open: the
    flush is never answered. ``accepted`` counts the connections. While
    :attr:`holding`, a new connection is accepted and held with nothing relayed,
    not even the server's INFO (a hung server: the client waits in its handshake).
    """

    def __init__(self, upstream_port: int) -> None:
        self._listen(upstream_port)
        self.accepted = 0
        self.holding = False
        self._stall: Callable[[bytes], bytes] | None = None
        self._clients: set[asyncio.StreamWriter] = set()

    @property
    def open_connections(self) -> int:
        """How many client connections are open (neither side closed them yet)."""
        return len(self._clients)

    def cut(self) -> None:
        """Close every client connection now."""
        for writer in self._clients:
            writer.transport.abort()

    def stall_next(self, inject: Callable[[bytes], bytes]) -> None:
        """Stall the next connection after the reconnect's handshake (see the class)."""
        self._stall = inject

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        me = asyncio.current_task()
        assert me is not None
        self._tasks.add(me)
        self.accepted += 1
        inject, self._stall = self._stall, None
        self._clients.add(writer)
        pipes: list[asyncio.Task[None]] = []
        up_writer: asyncio.StreamWriter | None = None
        try:
            if self.holding:
                while await reader.read(65536):
                    pass  # (until the client gives up or cut() aborts it)
                return
            up_reader, up_writer = await asyncio.open_connection(HOST, self.upstream_port)
            stalled = asyncio.Event()
            pipes = [
                asyncio.create_task(self._up(reader, up_writer, writer, inject, stalled)),
                asyncio.create_task(self._down(up_reader, writer, stalled)),
            ]
            await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        except (OSError, asyncio.CancelledError):
            pass  # the server is gone, or the proxy is closing
        finally:
            self._clients.discard(writer)
            for pipe in pipes:
                pipe.cancel()
            try:
                await asyncio.gather(*pipes, return_exceptions=True)
            finally:
                # Even when the proxy's close cancels the wait above (see ApiCountingProxy).
                for w in (writer, up_writer):
                    if w is not None:
                        w.transport.abort()
                self._tasks.discard(me)

    @staticmethod
    async def _up(
        reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
        writer: asyncio.StreamWriter,
        inject: Callable[[bytes], bytes] | None,
        stalled: asyncio.Event,
    ) -> None:
        sent = bytearray()
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                if inject is not None and not stalled.is_set():
                    sent += data
                    if sent.count(b"PING\r\n") >= 2:
                        stalled.set()  # before the PING reaches the server: no PONG relayed
                        writer.write(inject(bytes(sent)))
                up_writer.write(data)
                await up_writer.drain()

    @staticmethod
    async def _down(
        up_reader: asyncio.StreamReader, writer: asyncio.StreamWriter, stalled: asyncio.Event
    ) -> None:
        with contextlib.suppress(OSError):
            while data := await up_reader.read(65536):
                if not stalled.is_set():
                    writer.write(data)
                    await writer.drain()


class HoldingProxy(_Listening):
    """A TCP proxy holding the server's bytes from ``hold_from`` until the client sends ``until``.

    Once what the server sends contains ``hold_from``, that read and everything
    after it stay in the proxy (in order) until the client's bytes contain
    ``until``; then the held bytes go out and the proxy relays as usual. Once
    only, on the first connection that sees ``hold_from``. ``released`` is set
    when the held bytes went out.
    """

    def __init__(self, upstream_port: int, hold_from: bytes, until: bytes) -> None:
        self._listen(upstream_port)
        self.hold_from = hold_from
        self.until = until
        self.holding = asyncio.Event()
        self.released = asyncio.Event()

    async def _to_server(
        self, reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter
    ) -> None:
        seen = b""
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                up_writer.write(data)
                await up_writer.drain()
                if self.holding.is_set() and not self.released.is_set():
                    seen = (seen + data)[-(len(self.until) + 65536) :]
                    if self.until in seen:
                        self.released.set()

    async def _to_client(
        self, up_reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        # The server's reads go out in order through one queue; the sender waits
        # for the release before the first read that holds ``hold_from``.
        chunks: asyncio.Queue[bytes] = asyncio.Queue()
        sender = asyncio.create_task(self._send(chunks, writer))
        try:
            with contextlib.suppress(OSError):
                while data := await up_reader.read(65536):
                    chunks.put_nowait(data)
        finally:
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)

    async def _send(self, chunks: asyncio.Queue[bytes], writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while True:
                data = await chunks.get()
                if not self.holding.is_set() and self.hold_from in data:
                    self.holding.set()
                    await self.released.wait()
                writer.write(data)
                await writer.drain()


class DroppingProxy(_Listening):
    """A TCP proxy that drops chosen publishes of a client before they reach the server.

    :meth:`drop` arms it: the next ``count`` ``PUB``/``HPUB`` operations whose
    subject starts with ``prefix`` are taken out of the client's bytes (the
    operation line and its payload); everything else goes through unchanged and
    in order. ``dropped`` holds the (loop time, subject) of each publish dropped.
    For example a pull request that a consumer leader change lost: the server
    never answers it. :meth:`hold` reorders instead: the next publish to a
    subject starting with ``prefix`` is held back until one starting with
    ``until`` has gone through, then sent after it (the server's API workers
    serving a later request first, made to order); ``held`` counts those.
    ``passed`` lists the subjects of the publishes that went through.
    """

    def __init__(self, upstream_port: int) -> None:
        self._listen(upstream_port)
        self._prefix = b""
        self._count = 0
        self.dropped: list[tuple[float, str]] = []
        self._hold = b""
        self._until = b""
        self._held: bytes | None = None
        self.held = 0
        self.passed: list[str] = []

    def drop(self, prefix: str, count: int = 1) -> None:
        """Drop the next ``count`` publishes to subjects starting with ``prefix``."""
        self._prefix = prefix.encode()
        self._count = count

    def hold(self, prefix: str, until: str) -> None:
        """Hold the next publish to ``prefix...`` back until one to ``until...`` went through."""
        self._hold = prefix.encode()
        self._until = until.encode()

    def _filter(self, buf: bytearray) -> bytearray:
        """Take the complete operations off ``buf``: what goes on to the server."""
        out = bytearray()
        while (end := buf.find(b"\r\n")) >= 0:
            words = bytes(buf[:end]).split()
            size = end + 2
            if words and words[0].upper() in (b"PUB", b"HPUB"):
                size += int(words[-1]) + 2  # the payload and its CRLF
                if len(buf) < size:
                    break  # the payload is not all here yet
                if self._count and words[1].startswith(self._prefix):
                    self._count -= 1
                    self.dropped.append((_now(), words[1].decode()))
                    del buf[:size]
                    continue
                if self._hold and words[1].startswith(self._hold):
                    self._hold = b""
                    self._held = bytes(buf[:size])
                    del buf[:size]
                    continue
                self.passed.append(words[1].decode())
                if self._held is not None and words[1].startswith(self._until):
                    out += buf[:size] + self._held
                    self._held = None
                    self.held += 1
                    del buf[:size]
                    continue
            out += buf[:size]
            del buf[:size]
        return out

    async def _to_server(
        self, reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter
    ) -> None:
        buf = bytearray()
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                buf += data
                out = self._filter(buf)
                if out:
                    up_writer.write(out)
                    await up_writer.drain()


@dataclass(frozen=True)
class Frame:
    """A message the server sends (``MSG`` or ``HMSG``), as :class:`RewritingProxy` sees it.

    ``request`` is the subject of the client's publish whose reply inbox this
    message is sent to (an API call's, a publish's, a direct get's), None for
    any other (a delivery, a heartbeat).
    """

    subject: bytes
    sid: bytes
    reply: bytes
    hdr: bytes | None
    payload: bytes
    request: bytes | None = None

    def replace(self, **changes: Any) -> Frame:
        """A copy with ``changes``."""
        return dataclasses.replace(self, **changes)

    def encode(self) -> bytes:
        """The frame on the wire (its sizes computed anew)."""
        reply = b" " + self.reply if self.reply else b""
        if self.hdr is None:
            return b"MSG %b %b%b %d\r\n%b\r\n" % (
                self.subject,
                self.sid,
                reply,
                len(self.payload),
                self.payload,
            )
        size = len(self.hdr) + len(self.payload)
        return b"HMSG %b %b%b %d %d\r\n%b%b\r\n" % (
            self.subject,
            self.sid,
            reply,
            len(self.hdr),
            size,
            self.hdr,
            self.payload,
        )


#: What :class:`RewritingProxy` sends for a frame: None (the frame as it is) or these.
Rewrite = Callable[[Frame], list[Frame] | None]


class RewritingProxy(_Listening):
    """A TCP proxy that rewrites chosen messages a server sends (a hostile server, made to order).

    The client's bytes go through unchanged; their ``PUB``/``HPUB`` operations
    tell which subject each reply inbox was sent with (a frame's ``request``).
    The server's ``MSG``/``HMSG`` frames go through :attr:`rewrite` (when set),
    which returns None to send the frame as it is, or the frames to send
    instead (none: the frame is dropped); every other line goes through as it
    is. :attr:`rewrite` may be set and cleared at any time.
    """

    def __init__(self, upstream_port: int, rewrite: Rewrite | None = None) -> None:
        self._listen(upstream_port)
        self.rewrite = rewrite
        #: Reply inbox -> the subject the client sent with it.
        self.requests: dict[bytes, bytes] = {}

    def cut(self) -> None:
        """Close every client connection (their tasks abort both sides; the client reconnects)."""
        for task in self._tasks:
            task.cancel()

    async def _to_server(
        self, reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter
    ) -> None:
        buf = bytearray()
        skip = 0
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                # Read before forwarding: the inbox is known before its reply can come.
                buf += data
                while True:
                    if skip:
                        n = min(skip, len(buf))
                        del buf[:n]
                        skip -= n
                        if skip:
                            break
                    end = buf.find(b"\r\n")
                    if end < 0:
                        break
                    words = bytes(buf[:end]).split()
                    del buf[: end + 2]
                    op = words[0].upper() if words else b""
                    if op in (b"PUB", b"HPUB"):
                        # PUB <subject> [reply] <size>, HPUB <subject> [reply] <hdr> <size>
                        if len(words) == (4 if op == b"PUB" else 5):
                            self.requests[words[2]] = words[1]
                        skip = int(words[-1]) + 2
                up_writer.write(data)
                await up_writer.drain()

    async def _to_client(
        self, up_reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        buf = bytearray()
        with contextlib.suppress(OSError):
            while data := await up_reader.read(65536):
                buf += data
                out = bytearray()
                while (end := buf.find(b"\r\n")) >= 0:
                    words = bytes(buf[:end]).split()
                    op = words[0].upper() if words else b""
                    if op not in (b"MSG", b"HMSG"):
                        out += buf[: end + 2]
                        del buf[: end + 2]
                        continue
                    # MSG <subject> <sid> [reply] <size>, HMSG ... [reply] <hdr> <size>
                    total = int(words[-1])
                    if len(buf) < end + 2 + total + 2:
                        break  # the payload is not all here yet
                    body = bytes(buf[end + 2 : end + 2 + total])
                    del buf[: end + 2 + total + 2]
                    if op == b"HMSG":
                        split = int(words[-2])
                        hdr: bytes | None = body[:split]
                        payload = body[split:]
                        reply = words[3] if len(words) == 6 else b""
                    else:
                        hdr, payload = None, body
                        reply = words[3] if len(words) == 5 else b""
                    frame = Frame(
                        words[1], words[2], reply, hdr, payload, self.requests.get(words[1])
                    )
                    rewrite = self.rewrite
                    sent = None if rewrite is None else rewrite(frame)
                    for each in [frame] if sent is None else sent:
                        out += each.encode()
                if out:
                    writer.write(out)
                    await writer.drain()
