"""The connection's edges, against a real nats-server: callbacks that raise, closing
while nats-py drains, and server URLs that can not be parsed."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import Any

import nats
import pytest

import aiojetstream
from aiojetstream import (
    ConnectionClosedError,
    ConsumerConfig,
    InvalidOptionError,
    JetStreamTimeoutError,
    StorageType,
    StreamConfig,
)
from aiojetstream._conn import CLOSE_FLUSH_TIMEOUT, Conn
from aiojetstream.testing import NatsServer
from helpers import unique_name, wait_until


async def test_a_raising_disconnected_callback_does_not_stop_the_reconnect() -> None:
    """nats-py awaits the disconnected callback inside its reconnect task: one that
    raised ended that task, and the client stayed reconnecting for good."""
    calls: list[str] = []

    async def raising() -> None:
        calls.append("disconnected")
        raise RuntimeError("a user's callback fails")

    async with NatsServer() as server:
        js = await aiojetstream.connect(server.url, disconnected_cb=raising)
        try:
            name = unique_name("CB")
            await js.create_stream(
                StreamConfig(name=name, subjects=[f"{name}.>"], storage=StorageType.FILE)
            )
            await server.restart()
            await wait_until(lambda: bool(calls) and js.nc.is_connected, 20)
            assert (await js.publish(f"{name}.x", b"back", timeout=10)).seq == 1
        finally:
            await js.close()


async def test_close_while_nats_py_drains_raises_nothing_untranslated() -> None:
    """``js.close()`` during ``nc.drain()``: nats-py's ConnectionDrainingError from
    unsubscribing escaped untranslated."""
    async with NatsServer() as server:
        nc = await nats.connect(server.url)
        js = aiojetstream.JetStreamContext(nc)
        name = unique_name("DR")
        await js.create_stream(
            StreamConfig(name=name, subjects=[f"{name}.>"], storage=StorageType.MEMORY)
        )
        await (await js.publish_async(f"{name}.x", b"x"))  # the reply subscription exists
        # A subscription whose callback holds a message keeps the drain going.
        release = asyncio.Event()
        held = asyncio.Event()

        async def hold(msg: object) -> None:
            held.set()
            await release.wait()

        await nc.subscribe("held", cb=hold)
        await nc.publish("held", b"")
        await asyncio.wait_for(held.wait(), 5)
        drain = asyncio.create_task(nc.drain())
        await wait_until(lambda: nc.is_draining, 5)
        await js.close()
        release.set()
        await drain


@pytest.mark.parametrize("url", ["nats://127.0.0.1:99999", "nats://[::1", "nats://h:abc"])
async def test_an_unparsable_server_url_is_an_invalid_option(url: str) -> None:
    with pytest.raises(InvalidOptionError, match="invalid server URL"):
        await aiojetstream.connect(url)


async def _account_info_in_flight(js: aiojetstream.JetStreamContext) -> asyncio.Task[object]:
    """An API request the (frozen) server will not answer, waiting for its reply."""
    stats = js.nc.stats
    sent = stats["out_msgs"]
    task: asyncio.Task[object] = asyncio.create_task(js.account_info(timeout=30))
    await wait_until(lambda: stats["out_msgs"] > sent or task.done())
    assert not task.done()
    return task


async def test_close_fails_the_requests_in_flight_at_once() -> None:
    """``js.close()`` while a request waits: it waited out its whole timeout (30 s
    here) and then reported a timeout; now ConnectionClosedError at the close."""
    async with NatsServer() as server:
        js = await aiojetstream.connect(server.url)
        await js.account_info()  # the request inbox exists
        server.freeze()
        try:
            task = await _account_info_in_flight(js)
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            await js.close()
            with pytest.raises(ConnectionClosedError):
                await asyncio.wait_for(task, 5)
            assert loop.time() - t0 < CLOSE_FLUSH_TIMEOUT + 3
        finally:
            server.thaw()


async def test_a_connection_nats_py_closes_fails_the_requests_in_flight() -> None:
    """nats-py closes the connection by itself (no reconnect allowed, server gone):
    the request in flight fails then, not 30 s later with a timeout."""
    async with NatsServer() as server:
        js = await aiojetstream.connect(server.url, allow_reconnect=False)
        try:
            await js.account_info()
            server.freeze()
            task = await _account_info_in_flight(js)
            await server.kill()
            with pytest.raises(ConnectionClosedError):
                await asyncio.wait_for(task, 10)
            assert js.nc.is_closed
        finally:
            await js.close()


async def test_close_while_reconnecting_with_data_queued_closes_cleanly() -> None:
    """The server is gone and a request waits in nats-py's reconnect buffer:
    ``js.close()`` raised nats-py's raw ``ConnectionResetError`` from flushing the
    lost connection, and nats-py's close stopped half way (no closed callback)."""
    closed = asyncio.Event()

    async def on_closed() -> None:
        closed.set()

    async with NatsServer() as server:
        js = await aiojetstream.connect(server.url, closed_cb=on_closed)
        await js.account_info()
        await server.stop()
        await wait_until(lambda: js.nc.is_reconnecting, 10)
        with pytest.raises(JetStreamTimeoutError):
            await js.account_info(timeout=0.5)  # queued, never sent
        await js.close()
        assert js.nc.is_closed
        await asyncio.wait_for(closed.wait(), 5)


@pytest.mark.parametrize("listener", [False, True], ids=["callback", "listener"])
@pytest.mark.parametrize("gave_up", [False, True], ids=["closed", "out-of-attempts"])
async def test_a_connection_closed_while_reconnecting_reports_its_disconnect_once(
    listener: bool, gave_up: bool
) -> None:
    """nats-py calls its disconnected callback again when it closes a client
    whose connection was already lost (``close()`` while reconnecting, or out of
    reconnect attempts): ``disconnected_cb`` and every listener's
    ``on_disconnected`` ran twice for one lost connection (nats.go: once)."""
    events: list[str] = []

    async def on_disconnected() -> None:
        events.append("disconnected")

    async def on_reconnected() -> None:
        events.append("reconnected")

    async def on_closed() -> None:
        events.append("closed")

    class Listener:
        def on_disconnected(self) -> None:
            events.append("listener disconnected")

        def on_reconnected(self) -> None:
            events.append("listener reconnected")

        def on_closed(self) -> None:
            events.append("listener closed")

    async with NatsServer() as server:
        js = await aiojetstream.connect(
            server.url,
            reconnect_time_wait=0.1,
            max_reconnect_attempts=3 if gave_up else 60,
            disconnected_cb=on_disconnected,
            reconnected_cb=on_reconnected,
            closed_cb=on_closed,
        )
        try:
            if listener:
                js._conn.add_listener(Listener())
            assert js._conn.listener_count() == int(listener)
            # A disconnect and its reconnect, then another disconnect: each told.
            await server.restart()
            await wait_until(lambda: js.nc.is_connected and "reconnected" in events, 20)
            await server.stop()
            await wait_until(lambda: events.count("disconnected") == 2, 10)
            if not gave_up:
                await wait_until(lambda: js.nc.is_reconnecting, 10)
                await js.close()
            await wait_until(lambda: "closed" in events, 10)
        finally:
            await js.close()
        expected = ["disconnected", "reconnected", "disconnected", "closed"]
        if listener:
            expected = [
                f"{who}{what}"
                for what in expected
                for who in ("listener ", "")  # the listeners first
            ]
        assert events == expected


async def test_a_reconnect_attempt_lost_after_connecting_is_told_again() -> None:
    """Only the repeat of nats-py's close is dropped: a reconnect attempt that
    connected (what was queued was written to it) and was then lost is told as
    a lost connection again (``publish_async`` futures fail at once then)."""
    from aiojetstream._conn._connect import one_disconnect_each

    class Client:
        is_closed = False

    events: list[str] = []

    async def on_disconnected() -> None:
        events.append("disconnected")

    async def on_reconnected() -> None:
        events.append("reconnected")

    nc = Client()
    disconnected, reconnected = one_disconnect_each(nc, on_disconnected, None)  # type: ignore[arg-type]
    await disconnected()
    await disconnected()  # nats-py's next _attempt_reconnect: another connection lost
    await reconnected()
    await disconnected()
    nc.is_closed = True
    await disconnected()  # nats-py's close repeats it: dropped
    assert events == ["disconnected", "disconnected", "disconnected"]
    disconnected, reconnected = one_disconnect_each(nc, on_disconnected, on_reconnected)  # type: ignore[arg-type]
    await reconnected()
    assert events[-1] == "reconnected"


async def test_a_cancelled_close_goes_on_and_closing_again_waits_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``js.close()`` cancelled once it closes the connection (a timeout at shutdown):
    the close goes on, and a second ``close()`` waits for it. The socket stayed open
    (nats-py marked the client closed first), and closing again returned at once."""
    async with NatsServer() as server:
        js = await aiojetstream.connect(server.url)
        await js.account_info()
        original = Conn.close
        callers: list[asyncio.Task[None]] = []

        async def close(self: Conn) -> None:
            # The caller of js.close() is cancelled at the first await from here on.
            callers[0].cancel()
            await original(self)

        monkeypatch.setattr(Conn, "close", close)
        first = asyncio.ensure_future(js.close())
        callers.append(first)
        with pytest.raises(asyncio.CancelledError):
            await first
        await asyncio.wait_for(js.close(), 10)
        assert js.nc.is_closed

        async def no_connections() -> bool:
            connz: dict[str, int] = await server.monitor("connz")
            return connz["num_connections"] == 0

        await wait_until(no_connections, 10, message="the closed context's socket stayed open")


@pytest.mark.parametrize("callback", ["disconnected_cb", "closed_cb"])
async def test_a_connection_callback_that_closes_the_context_returns(
    nats_server: NatsServer, callback: str
) -> None:
    """A callback run by the close that closes the context too (clean-up code): it
    awaited the close's own task from inside it, and neither call ever returned."""
    ended: list[str] = []
    js: aiojetstream.JetStreamContext | None = None

    async def close_again() -> None:
        assert js is not None
        await js.close()
        ended.append(callback)

    options: dict[str, Any] = {callback: close_again}
    js = await aiojetstream.connect(nats_server.url, **options)
    await asyncio.wait_for(js.close(), 10)
    assert ended == [callback]


@pytest.mark.filterwarnings("error::RuntimeWarning")
async def test_a_consume_stopped_from_the_reconnected_callback_leaves_no_unawaited_coroutine(
    nats_server: NatsServer,
) -> None:
    """The pull driver spawned its consumer check on the reconnect, wrapped in another
    coroutine; stopping the consume before that task ran cancelled the wrapper and
    dropped the check unstarted: "coroutine 'PullDriver._check_consumer' was never
    awaited"."""
    import gc
    import warnings

    from aiojetstream import ConsumerConfig
    from proxy import StallingProxy

    ctx: Any = None
    reconnected = asyncio.Event()

    async def on_reconnected() -> None:
        if ctx is not None:
            ctx.stop()  # "on reconnect, restart the workers"
        reconnected.set()

    async with StallingProxy(nats_server.port) as proxy:
        js = await aiojetstream.connect(
            proxy.url, reconnect_time_wait=0.1, reconnected_cb=on_reconnected
        )
        try:
            name = unique_name("CB")
            await js.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
            consumer: Any = await js.create_consumer(name, ConsumerConfig(durable_name="d"))
            ctx = await consumer.consume(lambda msg: None, expires=5)
            driver = ctx._driver
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                proxy.cut()
                await asyncio.wait_for(reconnected.wait(), 20)
                assert await asyncio.wait_for(ctx.closed(), 10) is None

                await wait_until(lambda: not driver._tasks, 10)  # its cleanup ran
                ctx = driver = consumer = None  # the check task goes with the driver
                gc.collect()
            unawaited = [str(w.message) for w in caught if "never awaited" in str(w.message)]
            assert unawaited == []
        finally:
            await js.close()


async def test_a_connection_the_server_closed_says_why_in_later_calls() -> None:
    """nats-py closes for good on an ``-ERR`` such as 'Maximum Control Line Exceeded'
    (a core publish on the shared connection with a subject over the server's
    ``max_control_line``): the calls after it said only 'the connection is closed'."""
    async with NatsServer(config={"max_control_line": 512}) as server:
        closed = asyncio.Event()

        async def on_closed() -> None:
            closed.set()

        js = await aiojetstream.connect(server.url, closed_cb=on_closed)
        try:
            await js.account_info()
            await js.nc.publish("x" * 600, b"")
            await asyncio.wait_for(closed.wait(), 10)
            with pytest.raises(ConnectionClosedError) as raised:
                await js.account_info()
            assert "maximum control line exceeded" in str(raised.value).lower()
        finally:
            await js.close()


async def test_used_up_reconnects_say_so_and_a_close_of_the_users_says_nothing_more() -> None:
    """Reconnect attempts used up name the cause; a close the user asked for, after
    errors that closed nothing (a permissions violation), adds no cause."""
    async with NatsServer() as server:
        closed = asyncio.Event()

        async def on_closed() -> None:
            closed.set()

        js = await aiojetstream.connect(
            server.url, max_reconnect_attempts=1, reconnect_time_wait=0.05, closed_cb=on_closed
        )
        try:
            await server.kill()
            await asyncio.wait_for(closed.wait(), 20)
            with pytest.raises(ConnectionClosedError) as raised:
                await js.account_info()
            assert "max_reconnect_attempts" in str(raised.value)
        finally:
            await js.close()
    users = {
        "users": [{"user": "u", "password": "p", "permissions": {"publish": ["$JS.>", "_INBOX.>"]}}]
    }
    async with NatsServer(config={"authorization": users}) as server:
        errors: list[Exception] = []

        async def on_error(exc: Exception) -> None:
            errors.append(exc)

        js = await aiojetstream.connect(server.url, user="u", password="p", error_cb=on_error)
        await js.nc.publish("forbidden", b"")
        await wait_until(lambda: bool(errors), 10)
        assert js.nc.last_error is not None
        await js.close()
        with pytest.raises(ConnectionClosedError) as raised:
            await js.account_info()
        assert str(raised.value) == "the connection is closed"


async def test_nats_py_durations_take_every_duration_form() -> None:
    """``reconnect_time_wait="100ms"`` went to nats-py as it came: connected, then at
    the first reconnect its handler raised ValueError at every attempt, which nats-py
    retried at once (a full CPU, millions of log lines; a publish never returned).
    ``ping_interval="5s"`` killed nats-py's ping task: a hung server never noticed."""
    async with NatsServer(jetstream=True) as server:
        js = await aiojetstream.connect(
            server.url,
            reconnect_time_wait="100ms",
            ping_interval=timedelta(seconds=4),
            connect_timeout="2s",
            drain_timeout=10,
            max_reconnect_attempts=-1,
        )
        try:
            options = js.nc.options
            assert options["reconnect_time_wait"] == 0.1
            assert options["ping_interval"] == 4.0
            assert options["connect_timeout"] == 2.0
            assert options["drain_timeout"] == 10
            name = unique_name("DUR")
            await js.create_stream(StreamConfig(name=name, subjects=[name]))
            await server.restart()
            ack = await asyncio.wait_for(js.publish(name, b"x", timeout=20), 30)
            assert ack.seq == 1
        finally:
            await js.close()


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("reconnect_time_wait", "soon", "reconnect_time_wait"),
        ("reconnect_time_wait", -1, "reconnect_time_wait"),
        ("ping_interval", 0, "ping_interval"),
        ("ping_interval", float("nan"), "ping_interval"),
        ("connect_timeout", True, "connect_timeout"),
        ("flush_timeout", "1x", "flush_timeout"),
        ("max_reconnect_attempts", "5", "max_reconnect_attempts must be an int"),
        ("max_reconnect_attempts", float("inf"), r"must be an int \(-1: for ever\)"),
        ("max_outstanding_pings", 0, "at least 1"),
        ("pending_size", 1.5, "pending_size must be an int"),
    ],
)
async def test_nats_py_options_that_are_no_duration_or_count_are_refused_first(
    option: str, value: object, says: str
) -> None:
    """Refused before anything is dialed: nothing listens at the URL."""
    options: dict[str, Any] = {option: value}
    with pytest.raises(InvalidOptionError, match=says):
        await aiojetstream.connect("nats://127.0.0.1:1", **options)


async def test_the_late_pong_of_a_drain_given_up_keeps_the_connection() -> None:
    """A consume() drain waits for a PONG within the API timeout. One that came
    later (a hung server, a GC pause) set the result of nats-py's cancelled future:
    taken for malformed protocol, the connection was dropped and every call in
    flight failed with ``DisconnectedError``."""
    async with NatsServer(jetstream=True) as server:
        disconnects: list[bool] = []

        async def on_disconnect() -> None:
            disconnects.append(True)

        js = await aiojetstream.connect(server.url, timeout=1, disconnected_cb=on_disconnect)
        try:
            name = unique_name("PONG")
            await js.create_stream(StreamConfig(name=name, subjects=[name]))
            consumer = await js.create_consumer(name, ConsumerConfig(durable_name="d"))
            ctx = await consumer.consume(lambda msg: None)
            server.freeze()
            try:
                with contextlib.suppress(JetStreamTimeoutError):
                    await ctx.drain()  # its PONG does not come in time
            finally:
                server.thaw()
            # The late PONG comes first, then this flush's.
            await js.nc.flush(timeout=5)
            assert (await js.publish(name, b"x")).seq == 1
            assert disconnects == []
            assert js.nc.stats["reconnects"] == 0
        finally:
            await js.close()


async def test_a_fallback_request_beside_a_full_buffer_ends_in_its_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On the fallback, past nats-py's ``pending_size`` (2 MiB) queued for a hung
    server, nats-py waits for its buffer to be written before a request is even
    sent, without a bound: ``account_info(timeout=1)`` waited for good."""
    monkeypatch.setenv("AIOJETSTREAM_FAST_PATH", "0")
    async with NatsServer(jetstream=True) as server:
        js = await aiojetstream.connect(server.url, timeout=1)
        try:
            assert not js._conn.fast
            name = unique_name("FULL")
            await js.create_stream(StreamConfig(name=name, subjects=[name]))
            server.freeze()
            try:
                # 36 MB queued (the socket's buffers take some of it).
                for _ in range(6):
                    with contextlib.suppress(JetStreamTimeoutError):
                        await js.publish(name, bytes(1_000_000), timeout=0.3)
                with contextlib.suppress(JetStreamTimeoutError):
                    await js.publish_many(name, [bytes(1_000_000)] * 30, timeout=1)
                began = asyncio.get_running_loop().time()
                with pytest.raises(JetStreamTimeoutError):
                    await asyncio.wait_for(js.account_info(timeout=1), 10)
                assert asyncio.get_running_loop().time() - began < 2.0
            finally:
                server.thaw()
        finally:
            await js.close()


async def test_nats_py_counts_it_takes_are_taken(nats_url: str) -> None:
    """nats-py reads any negative ``max_reconnect_attempts`` as "for ever" and a
    ``flusher_queue_size`` of 0 as unbounded: neither is refused."""
    js = await aiojetstream.connect(nats_url, max_reconnect_attempts=-2, flusher_queue_size=0)
    try:
        await js.account_info()
    finally:
        await js.close()
