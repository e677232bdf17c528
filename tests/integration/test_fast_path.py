"""Both paths of the nats-py boundary (``aiojetstream._conn``), against a real server.

* The fast path (nats-py internals, parser hook) is on by default.
* ``AIOJETSTREAM_FAST_PATH=0`` switches it off for the connections made while
  it is set; so does a nats-py that lacks one of the internals. Either way the
  choice is made per connection and logged once.
* Publishing, requests, acks, pulls and key-value work on both paths, and
  their errors reach the caller on both: an asynchronous publish that fails
  in the fallback's background task fails its future.
* Malformed protocol from the server makes the client reconnect at once
  instead of leaving it with a dead read loop (RELIABILITY G3).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator
from typing import Any

import nats
import pytest

import aiojetstream
from aiojetstream import (
    AckPolicy,
    ConsumerConfig,
    DisconnectedError,
    JetStreamContext,
    JetStreamTimeoutError,
    KeyValueConfig,
    MaxPayloadExceededError,
    NoRespondersError,
    PubAck,
    StorageType,
    StreamConfig,
    _conn,
)
from aiojetstream.testing import NatsServer
from helpers import unique_name, wait_until
from proxy import StallingProxy

STEP = 10.0  # bound of any single wait for the server


async def _connect(url: str, **options: Any) -> JetStreamContext:
    return await aiojetstream.connect(url, **options)


@pytest.fixture(params=["fast", "fallback"])
async def path_js(
    request: pytest.FixtureRequest, nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[JetStreamContext]:
    """A context on the path named by the parameter, whatever the environment says."""
    fast = request.param == "fast"
    monkeypatch.setenv(_conn.FAST_PATH_ENV, "1" if fast else "0")
    js = await _connect(nats_server.url)
    try:
        assert js._conn.fast is fast
        yield js
    finally:
        await js.close()


async def _stream(js: JetStreamContext, prefix: str) -> tuple[str, str]:
    name = unique_name(prefix)
    subject = name.lower()
    await js.create_stream(
        StreamConfig(name=name, subjects=[f"{subject}.>"], storage=StorageType.MEMORY)
    )
    return name, subject


# --------------------------------------------------------------------------- the switch


async def test_the_fast_path_is_on_by_default(
    nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(_conn.FAST_PATH_ENV, raising=False)
    assert _conn.fast_path_missing(_conn.NatsClient()) == []  # the pinned nats-py has it all
    js = await _connect(nats_server.url)
    try:
        assert js._conn.fast
        name, subject = await _stream(js, "FAST")
        await js.publish(f"{subject}.a", b"x")  # a request: the reply router is up
        nc = js.nc
        assert "parse" in vars(nc._ps), "nats-py's parser is hooked"
        assert _conn._ROUTERS[nc].ps is nc._ps
        await js.delete_stream(name)
    finally:
        await js.close()


async def test_the_js_fixture_follows_the_switch(js: JetStreamContext) -> None:
    # In `make test-fallback` (AIOJETSTREAM_FAST_PATH=0) every `js` is on the fallback.
    assert js._conn.fast is _conn.fast_path_switched_on()
    await js.account_info()  # a request
    assert (js.nc in _conn._ROUTERS) is js._conn.fast
    assert ("parse" in vars(js.nc._ps)) is js._conn.fast


@pytest.mark.parametrize("value", ["0", "false", "No", " off "])
async def test_switching_off_is_per_connection_and_logged_once(
    nats_server: NatsServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    value: str,
) -> None:
    monkeypatch.setenv(_conn.FAST_PATH_ENV, value)
    with caplog.at_level(logging.DEBUG, logger="aiojetstream"):
        off = await _connect(nats_server.url)
        monkeypatch.delenv(_conn.FAST_PATH_ENV)
        on = await _connect(nats_server.url)
        again = JetStreamContext(off.nc)  # a second context on the same client
    try:
        assert not off._conn.fast
        assert on._conn.fast
        assert not again._conn.fast, "the path belongs to the connection"
        switched = [r for r in caplog.records if _conn.FAST_PATH_ENV in r.getMessage()]
        assert len(switched) == 1
        assert switched[0].levelno == logging.INFO
    finally:
        await again.close()
        await off.close()
        await on.close()


async def test_a_bad_switch_value_is_refused(
    nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(_conn.FAST_PATH_ENV, "maybe")
    with pytest.raises(aiojetstream.InvalidOptionError, match=_conn.FAST_PATH_ENV):
        await _connect(nats_server.url)


async def test_missing_nats_py_internals_select_the_fallback(
    nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # As if a nats-py release had renamed one of the attributes the fast path uses.
    monkeypatch.delenv(_conn.FAST_PATH_ENV, raising=False)
    monkeypatch.setitem(_conn._FAST_PATH_ATTRIBUTES, "_renamed_by_nats_py", int)
    with caplog.at_level(logging.INFO, logger="aiojetstream"):
        js = await _connect(nats_server.url)
    try:
        assert not js._conn.fast
        lacking = [r for r in caplog.records if "_renamed_by_nats_py" in r.getMessage()]
        assert len(lacking) == 1
        assert lacking[0].levelno == logging.INFO
        await _round_trip(js)
        assert js.nc not in _conn._ROUTERS, "nothing hooked into nats-py"
        assert "parse" not in vars(js.nc._ps)
    finally:
        await js.close()


# --------------------------------------------------------------------------- both paths


async def _round_trip(js: JetStreamContext) -> None:
    """Publish, publish_async, fetch + ack, messages(), consume() and key-value."""
    name, subject = await _stream(js, "PATHS")
    try:
        ack = await js.publish(f"{subject}.a", b"0", headers={"X-Key": "v"})
        assert ack.seq == 1
        futures = [await js.publish_async(f"{subject}.b", b"%d" % i) for i in range(1, 20)]
        acks = await asyncio.wait_for(asyncio.gather(*futures), STEP)
        assert [a.seq for a in acks] == list(range(2, 21))

        async def consumer(durable: str) -> Any:
            config = ConsumerConfig(durable_name=durable, ack_policy=AckPolicy.EXPLICIT)
            return await js.create_consumer(name, config)

        expected = [b"%d" % i for i in range(20)]
        fetching = await consumer("fetch")
        batch = [m async for m in await fetching.fetch(5, expires=STEP)]
        assert [m.data for m in batch] == expected[:5]
        assert batch[0].headers == {"X-Key": "v"}
        for m in batch:
            await m.ack()
        assert [m.data async for m in await fetching.fetch(100, expires=1)] == expected[5:]

        seen: list[bytes] = []
        async with (await consumer("messages")).messages(max_messages=7) as it:
            async for m in it:
                seen.append(m.data)
                await m.double_ack()
                if len(seen) == 20:
                    break
        assert seen == expected

        got: list[bytes] = []
        done = asyncio.Event()

        async def handler(msg: Any) -> None:
            got.append(msg.data)
            await msg.ack()
            if len(got) == 20:
                done.set()

        ctx = await (await consumer("consume")).consume(handler, max_messages=3)
        try:
            await asyncio.wait_for(done.wait(), STEP)
        finally:
            ctx.stop()
            await ctx.closed()
        assert got == expected

        bucket = unique_name("B")
        kv = await js.create_key_value(KeyValueConfig(bucket=bucket))
        try:
            assert await kv.put("k", b"v1") == 1
            entry = await kv.get("k")
            assert entry is not None
            assert entry.value == b"v1"
        finally:
            await js.delete_key_value(bucket)
    finally:
        await js.delete_stream(name)


async def test_round_trip(path_js: JetStreamContext) -> None:
    await _round_trip(path_js)


async def test_request_errors_reach_the_caller(path_js: JetStreamContext) -> None:
    conn = path_js._conn
    with pytest.raises(NoRespondersError):
        await conn.request(unique_name("nobody"), b"", 5)
    silent = unique_name("silent")
    sub = await conn.subscribe_raw(silent, lambda s, r, d, h: None)
    try:
        await conn.flush(STEP)
        with pytest.raises(JetStreamTimeoutError):
            await conn.request(silent, b"", 0.2)
    finally:
        await sub.unsubscribe()
    with pytest.raises(MaxPayloadExceededError):
        await conn.request(silent, b"x" * (conn.max_payload + 1), 5)


async def test_awaited_publishes_are_stored_after_earlier_asynchronous_ones(
    path_js: JetStreamContext,
) -> None:
    # On the fallback publish_async and publish_many_async hand their messages
    # to tasks; an awaited publish queued its own at once and was stored first.
    js = path_js
    name, subject = await _stream(js, "ORDER")
    first = await js.publish_async(f"{subject}.a", b"1")
    second = await js.publish(f"{subject}.a", b"2")
    assert ((await asyncio.wait_for(first, STEP)).seq, second.seq) == (1, 2)
    many = await js.publish_many_async(f"{subject}.b", [b"3", b"4"])
    after = await js.publish(f"{subject}.b", b"5")
    await asyncio.wait_for(many, STEP)
    assert after.seq == 5
    # A publish without a reply (an atomic batch's message) waits its turn too.
    third = await js.publish_async(f"{subject}.c", b"6")
    await js._conn.publish(f"{subject}.c", b"7")
    await js.publish(f"{subject}.c", b"8")
    assert (await asyncio.wait_for(third, STEP)).seq == 6
    stream = await js.stream(name)
    datas = [(await stream.get_msg(seq)).data for seq in range(1, 9)]
    assert datas == [b"%d" % i for i in range(1, 9)]
    await js.delete_stream(name)


async def test_publishes_refused_while_disconnected_fail_their_futures(
    monkeypatch: pytest.MonkeyPatch, fast: bool
) -> None:
    # While disconnected, publishes wait in nats-py's reconnect buffer (4 KiB
    # here). Those that do not fit are refused: at once on the fast path
    # (publish_async raises), in the background task on the fallback, where
    # the future must fail then rather than time out after its 60 s.
    monkeypatch.setenv(_conn.FAST_PATH_ENV, "1" if fast else "0")
    async with NatsServer() as server:
        js = await _connect(
            server.url,
            pending_size=4096,
            publish_async_timeout=60,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.1,
        )
        try:
            assert js._conn.fast is fast
            name = unique_name("BUF")
            await js.create_stream(
                StreamConfig(name=name, subjects=["buf.>"], storage=StorageType.FILE)
            )
            first = await js.publish_async("buf.a", b"first")
            assert (await asyncio.wait_for(first, STEP)).seq == 1

            down = asyncio.Event()

            class Listener:
                def on_disconnected(self) -> None:
                    down.set()

                def on_reconnected(self) -> None:
                    """Nothing to do."""

                def on_closed(self) -> None:
                    """Nothing to do."""

            listener = Listener()
            js._conn.add_listener(listener)
            await server.kill()
            await asyncio.wait_for(down.wait(), STEP)

            refused_at_once = 0
            futures: list[asyncio.Future[PubAck]] = []
            for i in range(12):
                try:
                    futures.append(await js.publish_async("buf.b", b"%04d" % i + b"y" * 996))
                except DisconnectedError:
                    refused_at_once += 1

            def refused() -> int:
                failed = [f for f in futures if f.done() and f.exception() is not None]
                assert all(isinstance(f.exception(), DisconnectedError) for f in failed)
                return refused_at_once + len(failed)

            # Still disconnected: the refusals are known now, not at the ack timeout.
            await wait_until(lambda: refused() > 0, timeout=5)
            assert not js.nc.is_connected
            assert (refused_at_once > 0) is fast  # the fallback refuses in its task

            await server.start()
            results = await asyncio.wait_for(
                asyncio.gather(*futures, return_exceptions=True), 3 * STEP
            )
            acked = [r for r in results if isinstance(r, PubAck)]
            assert all(isinstance(r, PubAck | DisconnectedError) for r in results), results
            assert acked, "the buffered publishes went out after the reconnect"
            assert refused() + len(acked) == 12
            info = await (await js.stream(name)).info()
            assert info.state.messages == 1 + len(acked)
            js._conn.remove_listener(listener)
        finally:
            await js.close()


@pytest.fixture(params=[True, False], ids=["fast", "fallback"])
def fast(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


# --------------------------------------------------------------------------- the read loop


class _InjectingProxy:
    """A TCP proxy in front of a server that can write extra bytes to the client."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self.clients: list[asyncio.StreamWriter] = []
        self._server: asyncio.Server | None = None
        self._handlers: list[asyncio.Task[Any]] = []

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    async def __aenter__(self) -> _InjectingProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self.clients:
            writer.close()  # ends both pipes of its connection, then its handler
        handlers = await asyncio.wait_for(asyncio.gather(*self._handlers), STEP)
        assert handlers == [None] * len(handlers)
        await asyncio.wait_for(self._server.wait_closed(), STEP)

    def inject(self, data: bytes) -> None:
        """Write ``data`` to the newest client connection, between two server frames."""
        self.clients[-1].write(data)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        me = asyncio.current_task()
        assert me is not None
        self._handlers.append(me)
        self.clients.append(writer)
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        pipes = [
            asyncio.create_task(self._pipe(reader, up_writer)),
            asyncio.create_task(self._pipe(up_reader, writer)),
        ]
        try:
            await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pipe in pipes:
                pipe.cancel()
            await asyncio.gather(*pipes, return_exceptions=True)
            for w in (writer, up_writer):
                w.close()
                with contextlib.suppress(OSError):
                    await w.wait_closed()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()


# --------------------------------------------------------------------------- direct reads


def _direct_reads(js: JetStreamContext) -> Any:
    """The router's reads in front of ``js``'s current transport (None: not installed there)."""
    router = _conn._ROUTERS.get(js.nc)
    transport = _conn._asyncio_transport(js.nc)
    if router is None or transport is None or router._reads is None:
        return None
    assert router._reads.transport is transport
    assert transport.get_protocol() is router._reads
    return router._reads


def _count_read_loop_parses(js: JetStreamContext) -> list[int]:
    """Count the reads nats-py's read loop hands to the (hooked) parser from now on."""
    ps = js.nc._ps
    hooked = ps.parse
    calls = [0]

    async def counting(data: bytes = b"") -> None:
        calls[0] += 1
        await hooked(data)

    ps.parse = counting  # type: ignore[method-assign]
    return calls


async def test_replies_and_messages_are_taken_where_the_socket_delivers_them(
    nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No wake-up of nats-py's read loop per reply or per batch of messages."""
    monkeypatch.delenv(_conn.FAST_PATH_ENV, raising=False)
    js = await _connect(nats_server.url)
    try:
        name, subject = await _stream(js, "DIRECT")
        await js.account_info()  # a request: the router is in front from the next read on
        await js.account_info()
        assert _direct_reads(js) is not None
        calls = _count_read_loop_parses(js)
        for i in range(20):
            await js.publish(f"{subject}.a", b"%d" % i)
        consumer = await js.create_consumer(name, ConsumerConfig(ack_policy=AckPolicy.NONE))
        got = [m.data async for m in await consumer.fetch(20, expires=STEP)]
        assert got == [b"%d" % i for i in range(20)]
        # A keep-alive PING from the server goes to the read loop: allow a few.
        assert calls[0] < 5, calls
    finally:
        await js.close()


async def test_socket_reads_start_at_asyncios_size(
    nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Up to READ_SIZE only while reads come full (see test_router_fuzz): a larger
    # size costs every read, and messages() reads little at a time.
    from aiojetstream._conn._reads import READ_SIZE

    monkeypatch.delenv(_conn.FAST_PATH_ENV, raising=False)
    js = await _connect(nats_server.url)
    try:
        await js.account_info()  # a request: the router is in front from the next read on
        await js.account_info()
        reads = _direct_reads(js)
        assert reads is not None
        assert READ_SIZE == 1 << 20
        assert reads.base == 256 * 1024  # asyncio's selector transport's
        assert reads.transport.max_size == reads.base
    finally:
        await js.close()


@pytest.mark.parametrize(
    "garbage",
    [
        pytest.param(b"-ERR \r\n", id="bare-ERR"),  # nats-py 2.16: AttributeError
        pytest.param(b"INFO {\r\n", id="INFO-not-JSON"),  # nats-py 2.16: JSONDecodeError
        pytest.param(b"MSG s 1 x\r\n", id="bad-MSG-size"),  # ProtocolError in nats-py too
        # More digits than int() takes: a ValueError, raised where the socket delivers.
        pytest.param(b"MSG s 1 " + b"9" * 5000 + b"\r\n", id="huge-MSG-size"),
    ],
)
async def test_malformed_protocol_makes_the_client_reconnect(
    nats_server: NatsServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    garbage: bytes,
) -> None:
    # With nats-py alone the first two end its read loop: the connection goes
    # silent until the keep-alive gives up on it (a minute here). The router
    # turns them into the protocol error nats-py answers with a reconnect.
    monkeypatch.delenv(_conn.FAST_PATH_ENV, raising=False)
    reconnected = asyncio.Event()

    async def on_reconnect() -> None:
        reconnected.set()

    async with _InjectingProxy(nats_server.port) as proxy:
        js = await _connect(
            proxy.url, ping_interval=60, reconnected_cb=on_reconnect, reconnect_time_wait=0.1
        )
        try:
            assert js._conn.fast
            await js.account_info()  # a request: the parser is hooked from now on
            assert "parse" in vars(js.nc._ps)
            await js._conn.flush(STEP)  # nothing in flight: the bytes land between frames
            before = _direct_reads(js)
            assert before is not None
            with caplog.at_level(logging.WARNING):
                proxy.inject(garbage)
                await asyncio.wait_for(reconnected.wait(), STEP)
            assert not [r for r in caplog.records if r.name.startswith("nats")], caplog.text
            await js.account_info()  # the new connection works
            await js.account_info()
            reads = _direct_reads(js)  # in front of the new transport
            assert reads is not None
            assert reads is not before
        finally:
            await js.close()


async def test_writes_between_a_lost_socket_and_the_reconnect_are_dropped_not_raised(
    nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Between asyncio seeing the connection lost and nats-py's read loop hearing of
    # it, the client still says connected and the fast path writes to the socket.
    # Python 3.11 drops such a write; from 3.12 asyncio's writelines() raised
    # TypeError there instead (CPython gh-136234), out of a pull request or an ack.
    monkeypatch.delenv(_conn.FAST_PATH_ENV, raising=False)
    reconnected = asyncio.Event()

    async def on_reconnect() -> None:
        reconnected.set()

    js = await _connect(nats_server.url, reconnected_cb=on_reconnect, reconnect_time_wait=0.1)
    try:
        assert js._conn.fast
        await js.account_info()
        transport = _conn._asyncio_transport(js.nc)
        assert transport is not None
        transport.abort()
        await asyncio.sleep(0)  # asyncio's connection_lost runs; nats-py's read loop not yet
        assert transport.is_closing()
        assert js.nc.is_connected
        js._conn.publish_now(b"lost.pull", b"{}", b"_INBOX.lost")  # one write, at once
        js._conn.publish_nowait(b"lost.a", b"1")
        js._conn.write_queued()  # what is queued, in one write
        await asyncio.wait_for(reconnected.wait(), STEP)
        await js.account_info()  # the new connection works
    finally:
        await js.close()


def _client_tasks(nc: Any) -> list[str]:
    """The pending tasks of nats-py client ``nc`` (its read loop, pings, flusher...)."""
    names = []
    for task in asyncio.all_tasks():
        coro = task.get_coro()
        frame = getattr(coro, "cr_frame", None)
        if not task.done() and frame is not None and frame.f_locals.get("self") is nc:
            names.append(str(getattr(coro, "__qualname__", "")))
    return sorted(names)


async def test_a_reconnect_attempt_that_fails_after_its_handshake_leaves_nothing_behind(
    nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch, fast: bool
) -> None:
    """A reconnect attempt that got through the handshake and part of a message, then
    failed (its flush unanswered), left nats-py's parser holding that part and its
    read loop, pings, flusher and socket running: the next connection's bytes
    completed the message (a payload spliced from two connections), the read loop
    left over read the new socket too, and the tasks outlived ``close()``."""
    monkeypatch.setenv(_conn.FAST_PATH_ENV, "1" if fast else "0")
    subject = unique_name("splice").lower()
    reconnected = asyncio.Event()
    injected: list[bool] = []

    async def on_reconnect() -> None:
        reconnected.set()

    def partial_message(client_sent: bytes) -> bytes:
        # A message on the subscription cut short: 6 of its 10 payload bytes.
        found = re.search(rb"SUB %b +(\d+)\r\n" % subject.encode(), client_sent)
        injected.append(found is not None)
        sid = b"1" if found is None else found[1]
        return b"MSG %b %b 10\r\n123456" % (subject.encode(), sid)

    async with StallingProxy(nats_server.port) as proxy:
        js = await _connect(
            proxy.url, ping_interval=60, reconnect_time_wait=0.1, reconnected_cb=on_reconnect
        )
        nc = js.nc
        pub = await nats.connect(nats_server.url)
        try:
            # nats-py's reconnect waits 10 s for the PONG of its flush (a default
            # argument, no option): 0.5 s here.
            flush = nc.flush

            async def short_flush(timeout: float = 0.5) -> None:
                await flush(timeout)  # type: ignore[arg-type]

            nc.flush = short_flush  # type: ignore[method-assign]
            got: list[bytes] = []

            async def on_msg(msg: Any) -> None:
                got.append(msg.data)

            await nc.subscribe(subject, cb=on_msg)
            if fast:
                await js.account_info()  # a request: the router parses from now on
                assert "parse" in vars(nc._ps)
            await js._conn.flush(STEP)
            proxy.stall_next(partial_message)
            proxy.cut()
            await asyncio.wait_for(reconnected.wait(), STEP)
            assert injected == [True]
            await pub.publish(subject, b"whole")
            await pub.flush()
            await wait_until(lambda: b"whole" in got, STEP)
            assert got == [b"whole"]  # not b"123456PONG" first
            # The stalled attempt given up, then the next one (the PONG of its flush
            # was not taken as the rest of the message).
            assert proxy.accepted == 3
            tasks = _client_tasks(nc)
            assert tasks == ["Client._flusher", "Client._ping_interval", "Client._read_loop"]
            await wait_until(lambda: proxy.open_connections == 1, STEP)  # the stalled one closed
        finally:
            await pub.close()
            await js.close()
        await wait_until(lambda: not _client_tasks(nc), STEP)


async def test_a_request_counts_its_headers_against_max_payload() -> None:
    """The connection's own check of a request's size left its header block out:
    a request within max_payload by its payload alone went out, the server
    answered -ERR 'Maximum Payload Violation' and closed the connection for good.
    (The public calls check sizes first; this is the connection's backstop.)"""
    async with NatsServer(config={"max_payload": 1024}) as server:
        js = await aiojetstream.connect(server.url)
        try:
            header_block = b"NATS/1.0\r\nX: " + b"h" * 100 + b"\r\n\r\n"
            with pytest.raises(MaxPayloadExceededError):
                await js._conn.request("svc.x", b"x" * 1000, 1, header_block)
            assert js.nc.is_connected
            with pytest.raises(NoRespondersError):  # the connection still works
                await js._conn.request("svc.x", b"x" * 10, 1, header_block)
        finally:
            await js.close()


#: Stored messages whose headers look like a status to a careless reader: a user
#: header ``Status`` (nats-py's parser files it where it files a status line's
#: code), and header blocks the server stores as they are (not "NATS/1.0").
_STATUS_LOOKALIKES = [
    b"NATS/1.0\r\nStatus: 404\r\n\r\n",
    b"NATS/1.0\r\nStatus: 200\r\nDescription: fine\r\n\r\n",
    b"NATS/1.1 200\r\nK: v\r\n\r\n",
    b"NATS/1.0\r\nK: ok\r\n\r\n",
]


async def test_stored_messages_that_look_like_statuses_are_delivered(
    path_js: JetStreamContext, nats_server: NatsServer
) -> None:
    """A stored message with a user header ``Status: 404`` was read as a status on
    the fallback path (never delivered: redelivered and dropped after every
    ack_wait; a direct get raised MessageNotFoundError), and one whose header block
    starts "NATS/1.1 200" on both paths (reported as a malformed status)."""
    js = path_js
    stream = unique_name("LOOK")
    subject = stream.lower()
    await js.create_stream(
        StreamConfig(
            name=stream, subjects=[f"{subject}.>"], storage=StorageType.MEMORY, allow_direct=True
        )
    )
    host, port = nats_server.url.removeprefix("nats://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        await reader.readline()  # INFO
        writer.write(b'CONNECT {"verbose":false,"headers":true,"protocol":1}\r\n')
        for i, block in enumerate(_STATUS_LOOKALIKES):
            payload = b"p%d" % i
            writer.write(
                b"HPUB %b.%d %d %d\r\n%b%b\r\n"
                % (subject.encode(), i, len(block), len(block) + len(payload), block, payload)
            )
        writer.write(b"PING\r\n")
        await writer.drain()
        assert await asyncio.wait_for(reader.readline(), STEP) == b"PONG\r\n"
    finally:
        writer.close()
    count = len(_STATUS_LOOKALIKES)
    handle = await js.stream(stream)
    await wait_until(lambda: _messages(handle, count), STEP)
    consumer = await js.create_consumer(stream, ConsumerConfig(ack_policy=AckPolicy.EXPLICIT))
    errors: list[Exception] = []
    got: list[bytes] = []

    async def take(msgs: Any) -> None:
        async for msg in msgs:
            got.append(msg.data)
            await msg.ack()
            if len(got) == count:
                return

    async with consumer.messages(error_handler=errors.append) as msgs:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(take(msgs), STEP)
    assert got == [b"p%d" % i for i in range(count)]
    assert errors == []
    batch = await (await js.create_consumer(stream, ConsumerConfig())).fetch(count, expires=2)
    assert [m.data for m in await batch.collect()] == got
    for seq in range(1, count + 1):  # direct gets (allow_direct), one by one and batched
        assert (await handle.get_msg(seq)).data == b"p%d" % (seq - 1)
    batch_got = [m async for m in handle.get_batch(count, seq=1)]
    assert [m.data for m in batch_got] == got
    # ... with their headers: the fallback's batch get took "Status: 404" for a status line
    assert [m.headers for m in batch_got] == [
        (await handle.get_msg(s)).headers for s in (1, 2, 3, 4)
    ]
    assert (batch_got[0].headers or {}).get("Status") == "404"


async def _messages(stream: Any, count: int) -> bool:
    return int((await stream.info()).state.messages) == count
