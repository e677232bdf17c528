"""Bulk publishing (``AsyncPublisher.send_many`` with an ``AckTally``) against a real server.

The Spark sink's path: many publishes per call, no future each, every outcome
counted. Runs on the fast path and (``make test``'s fallback run) on nats-py's
own publish.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

import aiojetstream
from aiojetstream import (
    ConnectionClosedError,
    DiscardPolicy,
    InvalidOptionError,
    InvalidSubjectError,
    JetStreamContext,
    JetStreamTimeoutError,
    MaxPayloadExceededError,
    NoRespondersError,
    StorageType,
    StreamConfig,
    StreamFullError,
)
from aiojetstream._publish import AckTally, AsyncPublisher, build_headers, header_block
from aiojetstream.testing import NatsServer
from helpers import unique_name


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
    window = _window(js)
    tally = AckTally()
    payloads = [b"%d" % i for i in range(1000)]
    sent = 0
    while sent < len(payloads):
        room = await window.wait_for_room()
        chunk = payloads[sent : sent + room]
        window.send_many(f"{name}.a".encode(), None, chunk, None, tally)
        sent += len(chunk)
    await asyncio.wait_for(tally.wait(), 30)
    assert (tally.stored, tally.duplicates, tally.outstanding, tally.error) == (1000, 0, 0, None)
    assert js.publish_async_pending == 0
    stream = await js.stream(name)
    assert stream.cached_info.state.messages == 1000
    assert (await stream.get_msg(1)).data == b"0"
    assert (await stream.get_msg(1000)).data == b"999"


async def test_subjects_and_headers_per_row_and_duplicates(js: JetStreamContext) -> None:
    name = await _stream(js, "BULKH")
    window = _window(js)
    subjects = [f"{name}.{'ab'[i % 2]}".encode() for i in range(10)]
    payloads = [b"p%d" % i for i in range(10)]
    blocks = [
        header_block(build_headers({"X-Row": str(i)}, f"id-{i}", None, None, None, None, None))
        if i % 3
        else None
        for i in range(10)
    ]
    await window.wait_for_room()
    first = AckTally()
    window.send_many(None, subjects, payloads, blocks, first)
    await asyncio.wait_for(first.wait(), 30)
    assert (first.stored, first.duplicates) == (10, 0)
    # Sent again: the rows with a msg id are duplicates, the others stored twice.
    again = AckTally()
    window.send_many(None, subjects, payloads, blocks, again)
    await asyncio.wait_for(again.wait(), 30)
    with_id = sum(1 for b in blocks if b)
    assert (again.stored, again.duplicates) == (10, with_id)
    stream = await js.stream(name)
    assert stream.cached_info.state.messages == 10 + (10 - with_id)
    msg = await stream.get_msg(2)
    assert (msg.subject, msg.data) == (f"{name}.b", b"p1")
    assert msg.headers is not None
    assert msg.headers["X-Row"] == "1"
    assert msg.headers["Nats-Msg-Id"] == "id-1"


async def test_server_errors_reach_the_tally_typed(js: JetStreamContext) -> None:
    name = await _stream(js, "BULKF", max_msgs=3, discard=DiscardPolicy.NEW)
    window = _window(js)
    await window.wait_for_room()
    full = AckTally()
    window.send_many(f"{name}.x".encode(), None, [b"1", b"2", b"3", b"4", b"5"], None, full)
    with pytest.raises(StreamFullError) as info:
        await asyncio.wait_for(full.wait(), 30)
    assert info.value.err_code == 10077
    assert full.error is info.value
    await asyncio.wait_for(js.publish_async_complete(), 30)
    assert full.stored == 3
    assert full.outstanding == 0
    nobody = AckTally()
    window.send_many(b"nobody.listens.here", None, [b"x"], None, nobody)
    with pytest.raises(NoRespondersError):
        await asyncio.wait_for(nobody.wait(), 30)


async def test_bad_input_sends_nothing(js: JetStreamContext) -> None:
    name = await _stream(js, "BULKB")
    window = _window(js)
    await window.wait_for_room()
    tally = AckTally()
    too_big = b"x" * (js.nc.max_payload + 1)
    with pytest.raises(MaxPayloadExceededError):
        window.send_many(f"{name}.a".encode(), None, [b"ok", too_big], None, tally)
    block = header_block({"X-Big": "y" * 100})
    assert block is not None
    edge = b"x" * (js.nc.max_payload - len(block) + 1)  # fits alone, not with its headers
    with pytest.raises(MaxPayloadExceededError):
        window.send_many(f"{name}.a".encode(), None, [b"ok", edge], [None, block], tally)
    long_subject = ("s." * 2100).encode() + b"x"
    with pytest.raises(InvalidSubjectError):
        window.send_many(long_subject, None, [b"ok"], None, tally)
    assert (tally.outstanding, js.publish_async_pending) == (0, 0)
    assert (await js.stream(name)).cached_info.state.messages == 0


async def test_ack_timeout_fails_the_tally(js: JetStreamContext) -> None:
    sub = await js.nc.subscribe("silent.bulk")  # receives, never replies
    try:
        window = _window(js)
        await window.wait_for_room()
        tally = AckTally()
        window.send_many(b"silent.bulk", None, [b"a", b"b"], None, tally, timeout=0.5)
        with pytest.raises(JetStreamTimeoutError):
            await asyncio.wait_for(tally.wait(), 10)
        await asyncio.wait_for(js.publish_async_complete(), 10)
        assert tally.outstanding == 0
        assert js.publish_async_pending == 0
    finally:
        await sub.unsubscribe()


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


async def test_close_fails_outstanding_bulk_publishes(nats_server: NatsServer) -> None:
    js = await aiojetstream.connect(nats_server.url)
    sub = await js.nc.subscribe("silent.bulk.close")
    window = _window(js)
    await window.wait_for_room()
    tally = AckTally()
    window.send_many(b"silent.bulk.close", None, [b"a", b"b", b"c"], None, tally, timeout=60)
    await js.close()
    with pytest.raises(ConnectionClosedError):
        await asyncio.wait_for(tally.wait(), 10)
    assert tally.outstanding == 0
    with pytest.raises(ConnectionClosedError):
        window.send_many(b"any.subject", None, [b"x"], None, AckTally())
    del sub
