"""``MessageBatch.collect()`` against a real nats-server: a fetch's messages at once.

A fetch's plain messages are built and buffered by the router itself (one
count per read); these tests pin that what ``collect()`` returns is exactly
what iteration yields: order, content, headers, the batch limit, the end of
the pull and a terminal error after the messages received before it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import cast

import pytest

import aiojetstream
from aiojetstream import (
    AckPolicy,
    Consumer,
    ConsumerConfig,
    ConsumerDeletedError,
    ConsumerNotFoundError,
    JetStreamContext,
    Msg,
    StorageType,
    StreamConfig,
)
from aiojetstream._message import parse_metadata
from aiojetstream._pull_driver import PullDriver
from helpers import unique_name, wait_until


async def _stream(js: JetStreamContext, count: int, *, headers_every: int = 0) -> str:
    stream = unique_name("COLL")
    await js.create_stream(
        StreamConfig(name=stream, subjects=[f"{stream}.>"], storage=StorageType.MEMORY)
    )
    for i in range(count):
        headers = {"n": str(i)} if headers_every and i % headers_every == 0 else None
        await js.publish_async(f"{stream}.{i % 3}", str(i).encode(), headers=headers)
    await js.publish_async_complete(timeout=30)
    return stream


async def _consumer(js: JetStreamContext, stream: str, ack: AckPolicy) -> Consumer:
    return await js.create_consumer(stream, ConsumerConfig(durable_name="c", ack_policy=ack))


async def test_collect_returns_the_fetch_in_order(js: JetStreamContext) -> None:
    stream = await _stream(js, 3000, headers_every=7)
    consumer = await _consumer(js, stream, AckPolicy.NONE)
    msgs = await (await consumer.fetch(2500, expires=5)).collect()
    assert [m.data for m in msgs] == [str(i).encode() for i in range(2500)]
    assert [m.metadata.sequence.stream for m in msgs] == list(range(1, 2501))
    assert [m.subject for m in msgs] == [f"{stream}.{i % 3}" for i in range(2500)]
    # Messages with headers (routed one by one) keep their place among the plain ones.
    assert [m.headers for m in msgs] == [{"n": str(i)} if i % 7 == 0 else None for i in range(2500)]
    # The batch limit held: the next fetch starts right after it.
    rest = await (await consumer.fetch(1000, expires=1)).collect()
    assert [m.metadata.sequence.stream for m in rest] == list(range(2501, 3001))


async def test_collect_after_iteration_returns_the_rest(js: JetStreamContext) -> None:
    stream = await _stream(js, 100)
    consumer = await _consumer(js, stream, AckPolicy.EXPLICIT)
    batch = await consumer.fetch(100, expires=5)
    first = [await batch.__anext__() for _ in range(10)]
    rest = await batch.collect()
    assert [m.data for m in first + rest] == [str(i).encode() for i in range(100)]
    assert await batch.collect() == []  # nothing left; the pull ended normally
    for m in rest:
        await m.ack()  # ackable like iterated ones

    async def ten_pending() -> bool:  # (the server applies acks asynchronously)
        return (await consumer.info()).num_ack_pending == 10

    await wait_until(ten_pending, message="the acks of the collected messages did not count")
    assert (await consumer.info()).ack_floor.stream_seq == 0  # the first ten are not acked


async def test_collect_of_a_partial_fetch_ends_with_the_pull(js: JetStreamContext) -> None:
    stream = await _stream(js, 40)
    consumer = await _consumer(js, stream, AckPolicy.NONE)
    loop = asyncio.get_running_loop()
    started = loop.time()
    msgs = await (await consumer.fetch(100, expires=1)).collect()
    assert len(msgs) == 40
    assert loop.time() - started < 4.0  # ended by the request's expiry, not hanging
    assert await (await consumer.fetch_no_wait(10)).collect() == []


async def test_collect_returns_the_messages_before_a_terminal_error(
    js: JetStreamContext,
) -> None:
    stream = await _stream(js, 5)
    consumer = await _consumer(js, stream, AckPolicy.NONE)
    batch = await consumer.fetch(50, expires=30)

    async def delivered() -> bool:
        return (await consumer.info()).delivered.stream_seq == 5

    await wait_until(delivered, message="the five messages were not delivered")
    await js.delete_consumer(stream, "c")
    msgs = await batch.collect()
    assert [m.data for m in msgs] == [str(i).encode() for i in range(5)]
    with pytest.raises((ConsumerDeletedError, ConsumerNotFoundError)):
        await batch.collect()


async def test_ordered_collect_stops_at_nothing_and_keeps_order(js: JetStreamContext) -> None:
    stream = await _stream(js, 500, headers_every=11)
    ordered = await js.ordered_consumer(stream)
    msgs = await (await ordered.fetch(300, expires=5)).collect()
    assert [m.metadata.sequence.stream for m in msgs] == list(range(1, 301))
    msgs = await (await ordered.fetch(300, expires=1)).collect()
    assert [m.metadata.sequence.stream for m in msgs] == list(range(301, 501))


async def test_ordered_collect_cancelled_loses_nothing(js: JetStreamContext) -> None:
    """A collect cancelled while the pull runs (``wait_for``) accepts nothing:
    the next fetch delivers the same messages again, in order."""
    stream = await _stream(js, 20)
    ordered = await js.ordered_consumer(stream)
    batch = await ordered.fetch(100, expires=30)
    collecting = asyncio.ensure_future(batch.collect())

    async def twenty_buffered() -> bool:  # every message arrived; the pull still waits
        return batch._driver.buffered == 20

    await wait_until(twenty_buffered, message="the twenty messages did not arrive")
    collecting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await collecting
    msgs = await (await ordered.fetch(100, expires=1)).collect()
    assert [m.metadata.sequence.stream for m in msgs] == list(range(1, 21))


async def test_next_cancelled_while_its_batch_closes_loses_nothing(
    js: JetStreamContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``next()`` took its message, then awaited the batch's close: a cancel there
    (``wait_for``, ``asyncio.timeout``) lost the message, for good on an AckNone
    consumer. The close now runs after ``next()`` returned."""
    stream = await _stream(js, 1)
    consumer = await js.create_consumer(stream, ConsumerConfig(ack_policy=AckPolicy.NONE))
    closing = asyncio.Event()
    close = PullDriver.aclose

    async def slow_close(self: PullDriver) -> None:
        closing.set()
        await asyncio.sleep(0)  # a cancellation point, as the unsubscribe's
        await close(self)

    monkeypatch.setattr(PullDriver, "aclose", slow_close)
    task = asyncio.ensure_future(consumer.next(expires=5))
    await asyncio.wait_for(closing.wait(), 5)
    task.cancel()  # while next() would still be closing its batch
    msg = await task
    assert msg.data == b"0"


async def test_ordered_fetch_closed_early_restarts_at_the_cursor(js: JetStreamContext) -> None:
    """Left after five messages, an ordered fetch drops what the server already
    delivered; the next fetch resets to the cursor and delivers it again."""
    stream = await _stream(js, 20)
    ordered = await js.ordered_consumer(stream)
    got: list[int] = []
    async with await ordered.fetch(100, expires=2) as batch:
        async for msg in batch:
            got.append(msg.metadata.sequence.stream)
            if len(got) == 5:
                break
    msgs = await (await ordered.fetch(100, expires=1)).collect()
    assert got + [m.metadata.sequence.stream for m in msgs] == list(range(1, 21))


# --------------------------------------------------------------------------- columns


@pytest.fixture(params=["fast", "fallback"])
async def path_js(
    request: pytest.FixtureRequest, nats_url: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[JetStreamContext]:
    """A context on the path named by the parameter (the fallback builds columns from Msgs)."""
    from aiojetstream import _conn

    fast = request.param == "fast"
    monkeypatch.setenv(_conn.FAST_PATH_ENV, "1" if fast else "0")
    js = await aiojetstream.connect(nats_url)
    try:
        assert js._conn.fast is fast
        yield js
    finally:
        await js.close()


#: Payloads that look like the protocol to a bulk framer, an empty one, and large ones.
ODD_PAYLOADS = [
    b"",
    b"\r\n",
    b"a\r\nMSG x 1 $JS.ACK.X.c.1.1.1.1.0 1\r\nb",
    b"\r\nMSG ",
    b"x" * 70_000,
    bytes(range(256)) * 3,
    b"MSG s 1 r 2\r\nhi\r\n",
]


async def test_collect_columns_is_collect_as_columns(path_js: JetStreamContext) -> None:
    """The same messages, in order, as collect() returns: subjects, replies, headers, data."""
    pytest.importorskip("pyarrow")
    js = path_js
    stream = unique_name("COLS")
    await js.create_stream(
        StreamConfig(name=stream, subjects=[f"{stream}.>"], storage=StorageType.MEMORY)
    )
    sent: list[tuple[str, bytes, dict[str, str] | None]] = []
    for i in range(3000):
        payload = ODD_PAYLOADS[i % 50] if i % 50 < len(ODD_PAYLOADS) else b"%d" % i
        headers = (
            {"n": str(i), "Nats-Msg-Id": f"id{i}"} if i % 97 == 0 else None
        )  # headers among plain messages
        subject = f"{stream}.{i % 3}"
        sent.append((subject, payload, headers))
        await js.publish_async(subject, payload, headers=headers)
    await js.publish_async_complete(timeout=30)
    columns_consumer = await js.create_consumer(
        stream, ConsumerConfig(durable_name="cols", ack_policy=AckPolicy.NONE)
    )
    msgs_consumer = await js.create_consumer(
        stream, ConsumerConfig(durable_name="msgs", ack_policy=AckPolicy.NONE)
    )
    got: list[dict[str, object]] = []
    want: list[Msg] = []
    while len(got) < len(sent):
        async with await columns_consumer.fetch_no_wait(1000, max_bytes=1 << 20) as fetched:
            batch = await fetched.collect_columns()
            assert batch.schema.names == ["subject", "reply", "headers", "data"]
            assert batch.num_rows > 0
            got += batch.to_pylist()
        async with await msgs_consumer.fetch_no_wait(1000, max_bytes=1 << 20) as fetched:
            want += await fetched.collect()
    assert len(got) == len(want) == len(sent)
    for row, msg, (subject, payload, headers) in zip(got, want, sent, strict=True):
        assert row["subject"] == msg.subject == subject
        assert row["data"] == msg.data == payload
        pairs = cast(list[tuple[str, str]] | None, row["headers"])
        assert (dict(pairs) if pairs is not None else None) == msg.headers
        assert msg.headers == headers
        meta = parse_metadata(str(row["reply"]))
        assert meta.sequence.stream == msg.metadata.sequence.stream
        assert meta.timestamp == msg.metadata.timestamp
        assert meta.consumer == "cols"
    assert [parse_metadata(str(r["reply"])).sequence.stream for r in got] == list(range(1, 3001))


async def test_collect_columns_keeps_the_batch_limit_and_the_error(js: JetStreamContext) -> None:
    """Messages past the fetch's batch are not taken; a terminal error after the messages."""
    pytest.importorskip("pyarrow")
    stream = await _stream(js, 500)
    consumer = await _consumer(js, stream, AckPolicy.NONE)
    batch = await (await consumer.fetch(120, expires=2)).collect_columns()
    assert batch.num_rows == 120
    seqs = [parse_metadata(r).sequence.stream for r in batch.column("reply").to_pylist()]
    assert seqs == list(range(1, 121))
    rest = await (await consumer.fetch_no_wait(1000)).collect_columns()
    seqs = [parse_metadata(r).sequence.stream for r in rest.column("reply").to_pylist()]
    assert seqs == list(range(121, 501))
    # Nothing left: an empty batch (no_wait ends at once).
    empty = await (await consumer.fetch_no_wait(10)).collect_columns()
    assert empty.num_rows == 0
    assert empty.schema.names == ["subject", "reply", "headers", "data"]
    # The consumer deleted while a fetch waits: the error comes from the call.
    fetched = await consumer.fetch(10, expires=5)
    await js.delete_consumer(stream, consumer.name)
    with pytest.raises((ConsumerDeletedError, ConsumerNotFoundError)):
        await fetched.collect_columns()
    await fetched.aclose()


async def test_iterating_a_batch_in_column_mode_yields_messages(js: JetStreamContext) -> None:
    """Runs buffered in column mode become messages again for iteration and collect()."""
    pytest.importorskip("pyarrow")
    stream = await _stream(js, 300)
    consumer = await _consumer(js, stream, AckPolicy.NONE)
    fetched = await consumer.fetch(300, expires=2)
    driver = fetched._driver
    # Column mode on as collect_columns() switches it, then read as messages.
    from aiojetstream import _columns

    assert driver._sink is not None
    driver._columns = True
    driver._sink.bulk = _columns.Framer()
    await driver.wait_finished()
    first = [m async for m in fetched]
    assert [m.data for m in first] == [str(i).encode() for i in range(300)]
    assert [m.metadata.sequence.stream for m in first] == list(range(1, 301))


async def test_collect_columns_of_messages_with_one_header(path_js: JetStreamContext) -> None:
    """Msg ids on every message (as a deduplicated write stores them): the same as collect()."""
    pytest.importorskip("pyarrow")
    js = path_js
    stream = unique_name("COLH")
    await js.create_stream(
        StreamConfig(name=stream, subjects=[f"{stream}.>"], storage=StorageType.MEMORY)
    )
    payloads = [
        ODD_PAYLOADS[i % 40] if i % 40 < len(ODD_PAYLOADS) else b"%d" % i for i in range(2000)
    ]
    headers: list[dict[str, str] | None] = [
        {"A": "1", "B": "2"} if i % 301 == 0 else None for i in range(2000)
    ]
    ids = [f"id {i}" if i % 211 == 0 else f"id-{i}" for i in range(2000)]
    await js.publish_many(f"{stream}.h", payloads, headers=headers, msg_ids=ids)
    cols = await js.create_consumer(stream, ConsumerConfig(ack_policy=AckPolicy.NONE))
    msgs = await js.create_consumer(stream, ConsumerConfig(ack_policy=AckPolicy.NONE))
    got: list[dict[str, object]] = []
    want: list[Msg] = []
    while len(got) < 2000:
        async with await cols.fetch_no_wait(700, max_bytes=1 << 20) as fetched:
            got += (await fetched.collect_columns()).to_pylist()
        async with await msgs.fetch_no_wait(700, max_bytes=1 << 20) as fetched:
            want += await fetched.collect()
    assert len(got) == len(want) == 2000
    for row, msg in zip(got, want, strict=True):
        assert row["data"] == msg.data
        assert row["subject"] == msg.subject
        pairs = cast(list[tuple[str, str]] | None, row["headers"])
        assert (dict(pairs) if pairs is not None else None) == msg.headers
        assert parse_metadata(str(row["reply"])).sequence == msg.metadata.sequence
    assert [m.headers for m in want[:2]] == [
        {"A": "1", "B": "2", "Nats-Msg-Id": "id 0"},
        {"Nats-Msg-Id": "id-1"},
    ]
