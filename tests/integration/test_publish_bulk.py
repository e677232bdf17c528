"""``publish_many`` (bulk publishing) against a real server.

Many publishes per call through the async publish window, no future each,
every outcome counted (the Spark sink's path). Runs on the fast path and, in
``make test``'s fallback run, on nats-py's own publish.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

import aiojetstream
from aiojetstream import (
    ConnectionClosedError,
    DiscardPolicy,
    InvalidHeaderError,
    InvalidOptionError,
    InvalidSubjectError,
    InvalidTTLError,
    JetStreamContext,
    JetStreamTimeoutError,
    MaxPayloadExceededError,
    NoRespondersError,
    PublishSummary,
    StorageType,
    StreamConfig,
    StreamFullError,
)
from aiojetstream._publish import AckTally, AsyncPublisher
from aiojetstream.testing import NatsServer
from helpers import unique_name, wait_until


async def _stream(js: JetStreamContext, prefix: str, **config: object) -> str:
    name = unique_name(prefix)
    await js.create_stream(
        StreamConfig(
            name=name,
            subjects=[f"{name}.>"],
            storage=StorageType.MEMORY,
            duplicate_window=timedelta(minutes=1),
            **config,
        )
    )
    return name


def _window(js: JetStreamContext) -> AsyncPublisher:
    return js._publisher


async def test_one_subject_all_stored_in_order(js: JetStreamContext) -> None:
    name = await _stream(js, "BULK")
    payloads: list[bytes | bytearray | memoryview] = [b"%d" % i for i in range(5000)]
    payloads[1] = bytearray(b"1")
    payloads[2] = memoryview(b"2")
    summary = await asyncio.wait_for(js.publish_many(f"{name}.a", payloads), 60)
    assert summary == PublishSummary(stored=5000, duplicates=0)
    assert js.publish_async_pending == 0
    stream = await js.stream(name)
    assert stream.cached_info.state.messages == 5000
    assert [(await stream.get_msg(seq)).data for seq in (1, 2, 3, 5000)] == [
        b"0",
        b"1",
        b"2",
        b"4999",
    ]
    assert await js.publish_many(f"{name}.a", []) == PublishSummary(0, 0)


async def test_subjects_headers_msg_ids_and_duplicates(js: JetStreamContext) -> None:
    name = await _stream(js, "BULKH")
    subjects = [f"{name}.{'ab'[i % 2]}" for i in range(10)]
    payloads = [b"p%d" % i for i in range(10)]
    headers = [{"X-Row": str(i)} if i % 2 else None for i in range(10)]
    msg_ids = [f"id-{i}" if i % 3 else None for i in range(10)]
    first = await js.publish_many(subjects, payloads, headers=headers, msg_ids=msg_ids)
    assert first == PublishSummary(stored=10, duplicates=0)
    # Again: the rows with a msg id are duplicates, the others are stored twice.
    again = await js.publish_many(subjects, payloads, headers=headers, msg_ids=msg_ids)
    with_id = sum(1 for m in msg_ids if m)
    assert again == PublishSummary(stored=10, duplicates=with_id)
    stream = await js.stream(name)
    assert stream.cached_info.state.messages == 10 + (10 - with_id)
    msg = await stream.get_msg(2)
    assert (msg.subject, msg.data) == (f"{name}.b", b"p1")
    assert msg.headers == {"X-Row": "1", "Nats-Msg-Id": "id-1"}
    assert (await stream.get_msg(1)).headers is None


async def test_ttls_per_message(js: JetStreamContext) -> None:
    name = await _stream(js, "BULKT", allow_msg_ttl=True)
    summary = await js.publish_many(f"{name}.t", [b"a", b"b", b"c"], ttls=[None, 60, "1h"])
    assert summary.stored == 3
    stream = await js.stream(name)
    assert (await stream.get_msg(1)).headers is None
    assert [(await stream.get_msg(seq)).headers for seq in (2, 3)] == [
        {"Nats-TTL": "60"},
        {"Nats-TTL": "3600"},
    ]


async def test_server_errors_are_typed(js: JetStreamContext) -> None:
    name = await _stream(js, "BULKF", max_msgs=3, discard=DiscardPolicy.NEW)
    with pytest.raises(StreamFullError) as info:
        await asyncio.wait_for(js.publish_many(f"{name}.x", [b"1", b"2", b"3", b"4", b"5"]), 30)
    assert info.value.err_code == 10077
    await asyncio.wait_for(js.publish_async_complete(), 30)
    assert (await js.stream(name)).cached_info.state.messages == 3
    with pytest.raises(NoRespondersError):
        await asyncio.wait_for(js.publish_many("nobody.listens.here", [b"x"]), 30)
    # Several subjects: the error does not name the first as the one no stream captures.
    name = await _stream(js, "BULKNR")
    with pytest.raises(NoRespondersError, match=r"subject 'nobody\.listens\.here': create"):
        await asyncio.wait_for(js.publish_many(["nobody.listens.here"] * 2, [b"x", b"y"]), 30)
    with pytest.raises(NoRespondersError, match=rf"'{name}\.ok' or another subject of the batch"):
        await asyncio.wait_for(
            js.publish_many([f"{name}.ok", "nobody.listens.here"], [b"x", b"y"]), 30
        )


async def test_bad_input_sends_nothing(js: JetStreamContext) -> None:
    name = await _stream(js, "BULKB")
    subject = f"{name}.a"
    limit = js.nc.max_payload
    bad_calls: dict[str, tuple[type[Exception], Callable[[], Awaitable[object]]]] = {
        "payload over max_payload": (
            MaxPayloadExceededError,
            lambda: js.publish_many(subject, [b"ok", b"x" * (limit + 1)]),
        ),
        "payload and headers over max_payload": (
            MaxPayloadExceededError,
            lambda: js.publish_many(
                subject, [b"ok", b"x" * (limit - 20)], headers=[None, {"X": "y" * 40}]
            ),
        ),
        "a wildcard subject": (InvalidSubjectError, lambda: js.publish_many(f"{name}.*", [b"ok"])),
        "one bad subject of many": (
            InvalidSubjectError,
            lambda: js.publish_many([subject, f"{name} x"], [b"ok", b"ok"]),
        ),
        "a subject too long for the protocol line": (
            InvalidSubjectError,
            lambda: js.publish_many("s." * 2100 + "x", [b"ok"]),
        ),
        "a bad header": (
            InvalidHeaderError,
            lambda: js.publish_many(subject, [b"ok", b"ok"], headers=[None, {"Bad Key": "v"}]),
        ),
        "a bad ttl": (InvalidTTLError, lambda: js.publish_many(subject, [b"ok"], ttls=["soon"])),
        "a str payload": (InvalidOptionError, lambda: js.publish_many(subject, [b"ok", "text"])),
        "fewer subjects than payloads": (
            InvalidOptionError,
            lambda: js.publish_many([subject], [b"ok", b"ok"]),
        ),
        "fewer msg ids than payloads": (
            InvalidOptionError,
            lambda: js.publish_many(subject, [b"ok", b"ok"], msg_ids=["a"]),
        ),
        "a bad timeout": (
            InvalidOptionError,
            lambda: js.publish_many(subject, [b"ok"], timeout=-1),
        ),
    }
    for what, (error, call) in bad_calls.items():
        with pytest.raises(error):
            await call()
        assert js.publish_async_pending == 0, what
    assert (await js.stream(name)).cached_info.state.messages == 0


async def test_sizes_are_all_checked_before_the_first_chunk_goes(nats_server: NatsServer) -> None:
    async with await aiojetstream.connect(nats_server.url, publish_async_max_pending=8) as js:
        name = await _stream(js, "BULKS")
        payloads = [b"ok"] * 19 + [b"x" * (js.nc.max_payload + 1)]  # past the first chunks
        with pytest.raises(MaxPayloadExceededError):
            await js.publish_many(f"{name}.a", payloads)
        too_long = [{"X": "y" * 40} if i == 19 else None for i in range(20)]
        near = [b"ok"] * 19 + [b"x" * (js.nc.max_payload - 20)]
        with pytest.raises(MaxPayloadExceededError):
            await js.publish_many(f"{name}.a", near, headers=too_long)
        assert js.publish_async_pending == 0
        assert (await js.stream(name)).cached_info.state.messages == 0


async def test_publish_many_async_keeps_calls_in_order(nats_server: NatsServer) -> None:
    async with await aiojetstream.connect(nats_server.url, publish_async_max_pending=16) as js:
        name = await _stream(js, "BULKA")
        futures = [
            await js.publish_many_async(f"{name}.o", [b"%d" % (batch * 50 + i) for i in range(50)])
            for batch in range(10)
        ]
        summaries = await asyncio.wait_for(asyncio.gather(*futures), 30)
        assert summaries == [PublishSummary(stored=50, duplicates=0)] * 10
        stream = await js.stream(name)
        assert stream.cached_info.state.messages == 500
        for seq in (1, 50, 51, 250, 500):
            assert (await stream.get_msg(seq)).data == b"%d" % (seq - 1)


async def test_a_failure_known_while_sending_stops_the_call(nats_server: NatsServer) -> None:
    async with await aiojetstream.connect(nats_server.url, publish_async_max_pending=4) as js:
        name = await _stream(js, "BULKX", max_msgs=2, discard=DiscardPolicy.NEW)
        with pytest.raises(StreamFullError):
            await asyncio.wait_for(js.publish_many_async(f"{name}.x", [b"m"] * 400), 30)
        await asyncio.wait_for(js.publish_async_complete(), 30)
        # It stopped sending once the refusal was known: far fewer than 400 went out.
        assert js.nc.stats["out_msgs"] < 100


async def test_ack_timeout(js: JetStreamContext) -> None:
    sub = await js.nc.subscribe("silent.bulk")  # receives, never replies
    sub2 = await js.nc.subscribe("silent.bulk2")
    try:
        with pytest.raises(JetStreamTimeoutError, match=r"to 'silent\.bulk'$"):
            await asyncio.wait_for(js.publish_many("silent.bulk", [b"a", b"b"], timeout=0.5), 10)
        with pytest.raises(JetStreamTimeoutError, match=r"'silent\.bulk' or another subject"):
            await asyncio.wait_for(
                js.publish_many(["silent.bulk", "silent.bulk2"], [b"a", b"b"], timeout=0.5), 10
            )
        await asyncio.wait_for(js.publish_async_complete(), 10)
        assert js.publish_async_pending == 0
    finally:
        await sub.unsubscribe()
        await sub2.unsubscribe()


async def test_close_fails_outstanding_publishes(nats_server: NatsServer) -> None:
    js = await aiojetstream.connect(nats_server.url)
    sub = await js.nc.subscribe("silent.bulk.close")
    task = asyncio.create_task(js.publish_many("silent.bulk.close", [b"a", b"b"], timeout=60))
    await wait_until(lambda: js.publish_async_pending == 2, 10)
    await js.close()
    with pytest.raises(ConnectionClosedError):
        await asyncio.wait_for(task, 10)
    with pytest.raises(ConnectionClosedError):
        await js.publish_many("any.subject", [b"x"])
    with pytest.raises(ConnectionClosedError):
        await js.publish_many("any.subject", [])
    del sub


# ----------------------------------------------------------------------------- internals


async def test_the_window_bounds_bulk_sends(nats_server: NatsServer) -> None:
    async with await aiojetstream.connect(nats_server.url, publish_async_max_pending=8) as js:
        name = await _stream(js, "BULKW")
        window = _window(js)
        tally = AckTally()
        peak = sent = 0
        while sent < 200:
            room = await window.wait_for_room()
            assert 1 <= room <= 8
            window.send_many(f"{name}.w".encode(), None, [b"%d" % sent] * room, None, tally)
            sent += room
            peak = max(peak, js.publish_async_pending)
        assert peak == 8
        await asyncio.wait_for(tally.wait(), 30)
        assert tally.stored == sent


async def test_sending_before_the_window_is_up_is_refused(nats_server: NatsServer) -> None:
    async with await aiojetstream.connect(nats_server.url) as js:
        tally = AckTally()
        with pytest.raises(InvalidOptionError, match="wait_for_room"):
            _window(js).send_many(b"any.subject", None, [b"x"], None, tally)
        assert tally.outstanding == 0


# ----------------------------------------------------------------------------- Arrow payloads


def _arrow(payloads: list[bytes]) -> Any:
    pa = pytest.importorskip("pyarrow")
    return pa.array(payloads, pa.binary())


async def _datas(js: JetStreamContext, name: str, count: int) -> list[bytes]:
    """What the stream stores, in order (an AckNone fetch of all of it)."""
    from aiojetstream import AckPolicy, ConsumerConfig

    consumer = await js.create_consumer(name, ConsumerConfig(ack_policy=AckPolicy.NONE))
    got: list[bytes] = []
    while len(got) < count:
        batch = await (await consumer.fetch_no_wait(count - len(got))).collect()
        assert batch, "the stream holds fewer messages than published"
        got += [m.data for m in batch]
    return got


ODD = [b"", b"\r\n", b"x\r\nPUB a b 1\r\ny", b"MSG s 1 2\r\nhi\r\n", bytes(range(256))]


async def test_arrow_payloads_all_stored_in_order(nats_server: NatsServer) -> None:
    """Commands built a batch at a time; acknowledgements counted by runs; every one stored."""
    async with await aiojetstream.connect(nats_server.url, publish_async_max_pending=700) as js:
        name = await _stream(js, "BULKAR")
        payloads = [ODD[i % 100] if i % 100 < len(ODD) else b"%d" % i for i in range(5000)]
        summary = await asyncio.wait_for(js.publish_many(f"{name}.a", _arrow(payloads)), 60)
        assert summary == PublishSummary(stored=5000, duplicates=0)
        assert js.publish_async_pending == 0
        sink = _window(js)._sink
        assert sink is not None
        # Acknowledgements counted by runs on the fast path (make test-fallback: one by one).
        assert (sink.bulk is not None) is js._conn.fast
        assert await _datas(js, name, 5000) == payloads
        # Subjects one per payload; a chunked array; large_binary.
        pa = pytest.importorskip("pyarrow")
        subjects = [f"{name}.{'abc'[i % 3]}" for i in range(3000)]
        chunked = pa.chunked_array([pa.array(payloads[:1000]), pa.array(payloads[1000:3000])])
        assert await js.publish_many(subjects, chunked) == PublishSummary(3000, 0)
        big = pa.array(payloads[:10], pa.large_binary())
        assert await js.publish_many(f"{name}.b", big) == PublishSummary(10, 0)
        stream = await js.stream(name)
        assert stream.cached_info.state.messages == 8010
        for seq in (5001, 5002, 5003, 8000):
            msg = await stream.get_msg(seq)
            assert msg.subject == subjects[seq - 5001]
            assert msg.data == payloads[seq - 5001]


async def test_arrow_payloads_bad_input_sends_nothing(js: JetStreamContext) -> None:
    pa = pytest.importorskip("pyarrow")
    name = await _stream(js, "BULKAB")
    subject = f"{name}.a"
    limit = js.nc.max_payload
    bad_calls: dict[str, tuple[type[Exception], Callable[[], Awaitable[object]]]] = {
        "a null": (InvalidOptionError, lambda: js.publish_many(subject, pa.array([b"a", None]))),
        "a string column": (InvalidOptionError, lambda: js.publish_many(subject, pa.array(["a"]))),
        "payload over max_payload": (
            MaxPayloadExceededError,
            lambda: js.publish_many(subject, pa.array([b"ok", b"x" * (limit + 1)])),
        ),
        "a wildcard subject": (
            InvalidSubjectError,
            lambda: js.publish_many(f"{name}.*", pa.array([b"ok"])),
        ),
        "one bad subject of many": (
            InvalidSubjectError,
            lambda: js.publish_many([subject, f"{name} x"], pa.array([b"ok", b"ok"])),
        ),
        "a subject too long for the protocol line": (
            InvalidSubjectError,
            lambda: js.publish_many("s." * 2100 + "x", pa.array([b"ok"])),
        ),
        "fewer subjects than payloads": (
            InvalidOptionError,
            lambda: js.publish_many([subject], pa.array([b"ok", b"ok"])),
        ),
        "a msg id with a lone surrogate": (  # (was a bare UnicodeEncodeError)
            InvalidHeaderError,
            lambda: js.publish_many(subject, pa.array([b"ok"]), msg_ids=["bad\ud800id"]),
        ),
    }
    for what, (error, call) in bad_calls.items():
        with pytest.raises(error):
            await call()
        assert js.publish_async_pending == 0, what
    assert (await js.stream(name)).cached_info.state.messages == 0


async def test_arrow_payloads_server_errors_are_typed(js: JetStreamContext) -> None:
    pa = pytest.importorskip("pyarrow")
    name = await _stream(js, "BULKAF", max_msgs=3, discard=DiscardPolicy.NEW)
    with pytest.raises(StreamFullError) as info:
        await asyncio.wait_for(js.publish_many(f"{name}.x", pa.array([b"m"] * 50)), 30)
    assert info.value.err_code == 10077
    await asyncio.wait_for(js.publish_async_complete(), 30)
    assert js.publish_async_pending == 0
    assert (await js.stream(name)).cached_info.state.messages == 3
    with pytest.raises(NoRespondersError):
        await asyncio.wait_for(js.publish_many("nobody.listens.here", pa.array([b"x"] * 5)), 30)
    name = await _stream(js, "BULKANR")
    with pytest.raises(NoRespondersError, match=rf"'{name}\.ok' or another subject of the batch"):
        await asyncio.wait_for(
            js.publish_many([f"{name}.ok", "nobody.listens.here"], pa.array([b"x", b"y"])), 30
        )


async def test_duplicates_are_counted_after_runs_were_counted(js: JetStreamContext) -> None:
    """Once acknowledgements are counted by runs, a duplicate is still told apart."""
    name = await _stream(js, "BULKAD")
    subject = f"{name}.d"
    assert await js.publish_many(subject, _arrow([b"x"] * 300)) == PublishSummary(300, 0)
    ids = [f"id-{i % 150}" for i in range(400)]  # 250 repeats within the window
    summary = await asyncio.wait_for(
        js.publish_many(subject, _arrow([b"y"] * 400), msg_ids=ids), 30
    )
    assert summary == PublishSummary(stored=400, duplicates=250)
    assert (await js.stream(name)).cached_info.state.messages == 450


async def test_arrow_payloads_ack_timeout_and_close(nats_server: NatsServer) -> None:
    pa = pytest.importorskip("pyarrow")
    js = await aiojetstream.connect(nats_server.url)
    sub = await js.nc.subscribe("silent.bulk.arrow")  # receives, never replies
    with pytest.raises(JetStreamTimeoutError):
        await asyncio.wait_for(
            js.publish_many("silent.bulk.arrow", pa.array([b"a", b"b"]), timeout=0.5), 10
        )
    await asyncio.wait_for(js.publish_async_complete(), 10)
    assert js.publish_async_pending == 0
    task = asyncio.create_task(
        js.publish_many("silent.bulk.arrow", pa.array([b"a"] * 3), timeout=60)
    )
    await wait_until(lambda: js.publish_async_pending == 3, 10)
    await js.close()
    with pytest.raises(ConnectionClosedError):
        await asyncio.wait_for(task, 10)
    del sub


async def test_arrow_payloads_on_the_fallback(
    nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AIOJETSTREAM_FAST_PATH=0: the payloads go out one by one, with the same outcome."""
    from aiojetstream import _conn

    monkeypatch.setenv(_conn.FAST_PATH_ENV, "0")
    async with await aiojetstream.connect(nats_server.url) as js:
        assert not js._conn.fast
        name = await _stream(js, "BULKAFB")
        payloads = [b"%d" % i for i in range(500)] + ODD
        summary = await asyncio.wait_for(js.publish_many(f"{name}.f", _arrow(payloads)), 60)
        assert summary == PublishSummary(len(payloads), 0)
        assert await _datas(js, name, len(payloads)) == payloads


async def test_arrow_payloads_with_msg_ids(js: JetStreamContext) -> None:
    """Plain msg ids go as a column (HPUB a batch at a time); others are checked one by one."""
    pa = pytest.importorskip("pyarrow")
    name = await _stream(js, "BULKAI")
    subject = f"{name}.i"
    ids = [f"id-{i % 300}" for i in range(500)]  # 200 repeats
    summary = await asyncio.wait_for(
        js.publish_many(subject, _arrow([b"%d" % i for i in range(500)]), msg_ids=ids), 30
    )
    assert summary == PublishSummary(stored=500, duplicates=200)
    again = await js.publish_many(subject, _arrow([b"x"] * 3), msg_ids=pa.array(ids[:3]))
    assert again == PublishSummary(stored=3, duplicates=3)
    stream = await js.stream(name)
    assert stream.cached_info.state.messages == 300
    for seq in (1, 150, 300):
        msg = await stream.get_msg(seq)
        assert msg.headers == {"Nats-Msg-Id": f"id-{seq - 1}"}
        assert msg.data == b"%d" % (seq - 1)
    # Ids that are not plain: one by one, with the per-message rules.
    odd = await js.publish_many(subject, _arrow([b"o", b"p"]), msg_ids=["spaced id", None])
    assert odd == PublishSummary(stored=2, duplicates=0)
    assert (await stream.get_msg(301)).headers == {"Nats-Msg-Id": "spaced id"}
    assert (await stream.get_msg(302)).headers is None
    # Whitespace around an id: refused (sent stripped, " a" and "a" would be one id,
    # and the second message dropped as a duplicate).
    for spaced in (" spaced id", "spaced id "):
        with pytest.raises(InvalidOptionError, match="whitespace"):
            await js.publish_many(subject, _arrow([b"o"]), msg_ids=[spaced])
    with pytest.raises(InvalidHeaderError):
        await js.publish_many(subject, _arrow([b"o"]), msg_ids=["a\r\nb"])
    with pytest.raises(InvalidOptionError):
        await js.publish_many(subject, _arrow([b"o"]), msg_ids=[""])
    with pytest.raises(InvalidOptionError):
        await js.publish_many(subject, _arrow([b"o", b"p"]), msg_ids=["a"])
    limit = js.nc.max_payload
    with pytest.raises(MaxPayloadExceededError):  # the header block makes it too large
        await js.publish_many(subject, _arrow([b"ok", b"x" * (limit - 10)]), msg_ids=["a", "b"])
    assert js.publish_async_pending == 0
    assert (await js.stream(name)).cached_info.state.messages == 302
