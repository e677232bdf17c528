"""The pull driver's batched hot path against its one-message-at-a-time path.

In message-mode ``messages()`` / ``consume()`` the driver hands the router a
:class:`~aiojetstream._conn.RawSink` (the router builds and buffers plain
messages itself and counts them once per read), tells the engine a read's
arrivals at once, and hands out ``quiet_consumptions()`` messages before
telling it. Fed the same reads (messages, heartbeats and request-end statuses
in any order, cut anywhere) and the same takes, a batched driver and an
unbatched one hand out the same messages, send the same pull requests at the
same moments and end with the same engine state.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from nats.aio.client import Client as NatsClient

from aiojetstream import InvalidResponseError, _conn
from aiojetstream._message import Msg
from aiojetstream._priority import PinState
from aiojetstream._pull_driver import PullDriver
from aiojetstream._pull_engine import (
    PullEngine,
    buffer_limits,
    resolve_consume,
    resolve_fetch,
)

SID = 7
SUBJECT = b"orders.new"


class FakeConn:
    """The part of Conn a started driver uses; records the pulls it sends."""

    fast = True
    is_closed = False
    is_down = False

    def __init__(self) -> None:
        self.sent: list[tuple[int, bytes]] = []
        self.step = 0

    def new_inbox(self) -> str:
        return "_INBOX.test"

    def publish_nowait(self, subject: bytes, payload: bytes, *args: Any) -> None:
        self.sent.append((self.step, payload))

    def write_queued(self) -> None:
        self.sent.append((self.step, b"(written)"))

    def publish_now(self, subject: bytes, payload: bytes, *args: Any) -> None:
        self.publish_nowait(subject, payload)
        self.write_queued()

    def add_listener(self, listener: object) -> None:
        pass

    def remove_listener(self, listener: object) -> None:
        pass

    def outside(self) -> bool:
        return False  # (used in its own loop)

    def refuse_outside(self) -> None:
        pass


class FakeApi:
    timeout = 5.0

    def __init__(self) -> None:
        self.conn = FakeConn()

    def subject(self, template: str, **fields: str) -> str:
        return "$JS.API.CONSUMER.MSG.NEXT.ORDERS.worker"


async def _never(timeout: float | None) -> None:
    raise AssertionError("no consumer check expected")


class FakeSub:
    """``detach()`` as RawSubscription does it: the router stops delivering at once."""

    def __init__(self, router: _conn._Router) -> None:
        self.router = router

    def detach(self) -> None:
        self.router.routes.pop(SID, None)
        self.router.sinks.pop(SID, None)

    async def unsubscribe(self) -> None:
        self.detach()


def _driver(
    batched: bool,
    max_messages: int,
    threshold: int,
    now: float,
    single: bool = False,
    runs: bool = False,
) -> tuple[PullDriver, NatsClient]:
    if single:
        settings_ = resolve_fetch(max_messages=max_messages, expires=3600.0)
    else:
        settings_ = resolve_consume(max_messages=max_messages, threshold_messages=threshold)
    driver = PullDriver(FakeApi(), "ORDERS", "worker", settings_, _never)  # type: ignore[arg-type]
    driver._batching = batched and not single
    nc = NatsClient()
    router = _conn._Router(nc)
    router.routes[SID] = driver._on_raw
    driver._sub = FakeSub(router)  # type: ignore[assignment]
    if batched and runs and not single:
        # As messages() and consume() on the fast path: runs of bytes (PlainRun).
        driver._lazy = True
        router.sinks[SID] = _conn.RawSink(
            driver._buffer.append,
            Msg,
            driver._acker,
            driver._on_arrivals,
            fill=True,
            runs=driver._start_run,
        )
    elif batched:
        router.sinks[SID] = _conn.RawSink(
            driver._buffer.append, Msg, driver._acker, driver._on_arrivals
        )
    driver._loop = asyncio.get_running_loop()
    driver._now = lambda: now  # type: ignore[method-assign]
    driver._run(driver.engine.start(now))
    return driver, nc


def engine_state(engine: PullEngine) -> dict[str, object]:
    """Every field of the engine (as in test_pull_engine)."""
    state: dict[str, object] = {}
    for name in PullEngine.__slots__:
        value = getattr(engine, name)
        if isinstance(value, PinState):
            value = (value.id, value.changes)
        elif isinstance(value, BaseException):
            value = (type(value), str(value))
        state[name] = value
    return state


def _msg(seq: int) -> bytes:
    reply = b"$JS.ACK.ORDERS.worker.1.%d.%d.1700000000000000000.0" % (seq, seq)
    payload = b"m%d" % seq
    return b"MSG %b %d %b %d\r\n%b\r\n" % (SUBJECT, SID, reply, len(payload), payload)


def _status(block: bytes) -> bytes:
    return b"HMSG %b %d %d %d\r\n%b\r\n" % (SUBJECT, SID, len(block), len(block), block)


HEARTBEAT = _status(b"NATS/1.0 100 Idle Heartbeat\r\n\r\n")


def _timeout(pending: int) -> bytes:
    return _status(
        b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: %d\r\n"
        b"Nats-Pending-Bytes: 0\r\n\r\n" % pending
    )


STEP = st.one_of(
    st.tuples(st.just("msgs"), st.integers(1, 40)),
    st.tuples(st.just("take"), st.integers(1, 40)),
    st.tuples(st.just("heartbeat"), st.just(0)),
    st.tuples(st.just("408"), st.integers(0, 60)),
    st.tuples(st.just("cut"), st.integers(1, 200)),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    max_messages=st.integers(1, 60),
    threshold=st.integers(1, 60),
    steps=st.lists(STEP, max_size=40),
    single=st.booleans(),
)
@example(  # runs of bytes cut by reads, a heartbeat and a 408 among them, taken in parts
    max_messages=60,
    threshold=30,
    steps=[
        ("msgs", 40),
        ("cut", 150),
        ("take", 5),
        ("msgs", 30),
        ("heartbeat", 0),
        ("msgs", 10),
        ("408", 3),
        ("cut", 90),
        ("take", 17),
        ("take", 40),
        ("msgs", 20),
        ("take", 40),
    ],
    single=False,
)
async def test_batched_driver_matches_the_one_at_a_time_driver(
    max_messages: int, threshold: int, steps: list[tuple[str, int]], single: bool
) -> None:
    """Also for a fetch (``single``): the router buffers its plain messages too,
    the driver tells the engine at once and drops what arrives after its end."""
    threshold = min(threshold, max_messages)
    now = asyncio.get_running_loop().time() + 1000.0  # one clock for both; no timer fires
    drivers = [
        _driver(True, max_messages, threshold, now, single),
        _driver(False, max_messages, threshold, now, single),
        _driver(True, max_messages, threshold, now, single, runs=True),
    ]
    taken: list[list[bytes]] = [[], [], []]
    seq = 0
    pending = b""  # bytes of the stream not fed yet (a read may end mid-frame)
    try:
        for index, (kind, n) in enumerate(steps):
            for driver, _ in drivers:
                driver._conn.step = index  # type: ignore[attr-defined]
            if kind == "msgs":
                for _ in range(n):
                    seq += 1
                    pending += _msg(seq)
            elif kind == "heartbeat":
                pending += HEARTBEAT
            elif kind == "408":
                pending += _timeout(n)
            if kind == "cut" or kind == "take":
                cut = len(pending) if kind == "take" else min(n * 10, len(pending))
                chunk, pending = pending[:cut], pending[cut:]
                for _, nc in drivers:
                    await nc._ps.parse(chunk)
            if kind == "take":
                for side, (driver, _) in enumerate(drivers):
                    for _ in range(n):
                        msg = driver.take()
                        if msg is None:
                            break
                        taken[side].append(msg.data)
            # What is buffered, and its two ends, alike whatever holds the messages.
            ends = [driver.buffer_ends() for driver, _ in drivers]
            seen = {
                (count, first and (first._reply, first.data), last and (last._reply, last.data))
                for count, first, last in ends
            }
            assert len(seen) == 1, ends
            assert {driver.buffered for driver, _ in drivers} == {ends[0][0]}
        (batched, _), (plain, _), (lazy, _) = drivers
        assert taken[0] == taken[1] == taken[2]
        assert lazy._conn.sent == plain._conn.sent  # type: ignore[attr-defined]
        assert lazy.finished == plain.finished
        lazy._settle()
        assert engine_state(lazy.engine) == engine_state(plain.engine)
        assert batched._conn.sent == plain._conn.sent  # type: ignore[attr-defined]
        assert batched.finished == plain.finished
        batched._settle()
        assert engine_state(batched.engine) == engine_state(plain.engine)
        assert batched.buffered == plain.buffered
        if batched.finished:
            # collect() takes the rest at once, as the same number of takes would
            assert [m.data for m in await lazy.collect()] == [m.data for m in batched._buffer]
            collected = [m.data for m in await batched.collect()]
            took: list[bytes] = []
            while (msg := plain.take()) is not None:
                took.append(msg.data)
            assert collected == took
            # every message taken once, in order: a prefix of those sent (a fetch drops
            # only what arrives after its end)
            sent = [b"m%d" % s for s in range(1, seq + 1)]
            assert taken[0] + collected == sent[: len(taken[0]) + len(collected)]
            assert batched.buffered == plain.buffered == 0
            assert engine_state(batched.engine) == engine_state(plain.engine)
    finally:
        for driver, _ in drivers:
            await driver.aclose()


# --------------------------------------------------------------------------- the buffer's limit
#
# Messages nobody pulled for (another client publishing to the pull's inbox, a
# server delivering more than asked) were buffered without limit: the buffer of
# a stuck consume() grew by every message sent to its inbox. It now holds at
# most buffer_limits() (4 x max_messages, 4 x max_bytes in byte mode); the newest
# beyond are dropped, counted by the engine as taken, and the first drop of the
# run is reported.


async def _exists(timeout: float | None) -> None:
    pass


def _flood_driver(mode: str, now: float) -> tuple[PullDriver, NatsClient, list[Exception]]:
    errors: list[Exception] = []
    if mode == "bytes":
        settings_ = resolve_consume(max_bytes=2000)
    else:
        settings_ = resolve_consume(max_messages=10)
    driver = PullDriver(
        FakeApi(),  # type: ignore[arg-type]
        "ORDERS",
        "worker",
        settings_,
        _exists,
        error_handler=errors.append,
    )
    nc = NatsClient()
    router = _conn._Router(nc)
    router.routes[SID] = driver._on_raw
    driver._sub = FakeSub(router)  # type: ignore[assignment]
    driver._batching = mode in ("batched", "lazy", "headers")
    if mode == "lazy":
        driver._lazy = True
        router.sinks[SID] = _conn.RawSink(
            driver._buffer.append,
            Msg,
            driver._acker,
            driver._on_arrivals,
            fill=True,
            runs=driver._start_run,
        )
    elif mode == "batched":
        router.sinks[SID] = _conn.RawSink(
            driver._buffer.append, Msg, driver._acker, driver._on_arrivals
        )
    driver._loop = asyncio.get_running_loop()
    driver._now = lambda: now  # type: ignore[method-assign]
    driver._run(driver.engine.start(now))
    return driver, nc, errors


def _with_header(seq: int) -> bytes:
    reply = b"$JS.ACK.ORDERS.worker.1.%d.%d.1700000000000000000.0" % (seq, seq)
    hdr = b"NATS/1.0\r\nX: y\r\n\r\n"
    payload = b"m%d" % seq
    return b"HMSG %b %d %b %d %d\r\n%b%b\r\n" % (
        SUBJECT,
        SID,
        reply,
        len(hdr),
        len(hdr) + len(payload),
        hdr,
        payload,
    )


@pytest.mark.parametrize("mode", ["batched", "lazy", "plain", "headers", "bytes"])
async def test_a_flood_of_unpulled_messages_is_capped_and_reported(mode: str) -> None:
    now = asyncio.get_running_loop().time() + 1000.0
    driver, nc, errors = _flood_driver(mode, now)
    limit, byte_limit = buffer_limits(driver.settings)
    frame = _with_header if mode == "headers" else _msg
    try:
        seq = 0
        for _ in range(5):  # reads of 2,000 messages each, nothing taken
            chunk = b""
            for _ in range(2000):
                seq += 1
                chunk += frame(seq)
            await nc._ps.parse(chunk)
            engine = driver.engine
            driver._settle()
            assert driver.buffered == engine.buffered_messages
            if mode == "bytes":
                assert engine.buffered_bytes <= byte_limit
                assert driver.buffered < 2000
            else:
                assert driver.buffered == limit == 40
            # the engine's counts still balance: dropped messages count as taken
            assert engine.requested + engine.unsolicited == (
                engine.delivered + engine.released + engine.outstanding_messages
            )
        assert driver.dropped == seq - driver.buffered
        # reported once, as an invalid response
        assert len(errors) == 1
        assert isinstance(errors[0], InvalidResponseError)
        assert "limit" in str(errors[0])
        # the oldest are kept, in order, and the run goes on as before
        kept = [msg.data for msg in await _take_all(driver)]
        assert kept == [b"m%d" % s for s in range(1, len(kept) + 1)]
        assert not driver.finished
        driver._settle()
        assert driver.engine.buffered_messages == 0
    finally:
        await driver.aclose()


async def _take_all(driver: PullDriver) -> list[Msg]:
    taken: list[Msg] = []
    while (msg := driver.take()) is not None:
        taken.append(msg)
    return taken


async def test_legitimate_unpulled_messages_stay_below_the_limit() -> None:
    """A reconnect writes the outstanding pull off; the server still fills it and the
    new one: twice the maximum, all buffered, nothing dropped or reported."""
    now = asyncio.get_running_loop().time() + 1000.0
    driver, nc, errors = _flood_driver("lazy", now)
    try:
        driver.on_disconnected()
        driver.on_reconnected()
        assert driver._check_task is not None
        await driver._check_task  # the consumer exists: a new pull for 10
        assert driver.engine.outstanding_messages == 10
        await nc._ps.parse(b"".join(_msg(seq) for seq in range(1, 21)))
        assert driver.buffered == 20
        assert driver.dropped == 0
        assert not errors
    finally:
        await driver.aclose()


@pytest.mark.parametrize("mode", ["batched", "lazy", "plain", "headers", "bytes"])
async def test_many_write_offs_drop_nothing_they_asked_for(mode: str) -> None:
    """Each reconnect writes the outstanding pull off, and the server keeps it until it
    expires: after five, six pulls' worth arrive, all asked for. A fixed 4x limit
    dropped the newest of them (lost for good on an AckNone consumer) and reported a
    flood. The limit counts what written-off pulls may still deliver."""
    now = asyncio.get_running_loop().time() + 1000.0
    driver, nc, errors = _flood_driver(mode, now)
    frame = _with_header if mode == "headers" else _msg
    try:
        for _ in range(5):
            driver.on_disconnected()
            driver.on_reconnected()
            assert driver._check_task is not None
            await driver._check_task  # the consumer exists: a new pull
        late, late_bytes = driver.engine.written_off(driver._now())
        if mode == "bytes":
            assert late_bytes == 5 * 2000
        else:
            assert late == 5 * 10
        count = 60 if mode != "bytes" else 0
        if mode == "bytes":
            # pulls of up to 2,000 bytes: as many messages as six pulls hold
            one = len(frame(1))
            count = 6 * (2000 // one)
        await nc._ps.parse(b"".join(frame(seq) for seq in range(1, count + 1)))
        driver._settle()
        assert driver.dropped == 0
        assert driver.buffered == count
        assert not errors
    finally:
        await driver.aclose()


def test_written_off_pulls_expire() -> None:
    settings_ = resolve_consume(max_messages=10, expires=30)
    engine = PullEngine(settings_)
    engine.start(0.0)
    engine.on_disconnected(1.0)
    assert engine.written_off(2.0) == (10, engine.written_off(2.0)[1])
    # gone once the written-off pull has expired on the server too
    assert engine.written_off(1.0 + 30 + max(1.0, settings_.heartbeat) + 0.001)[0] == 0
