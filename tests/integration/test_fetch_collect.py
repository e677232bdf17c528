"""``MessageBatch.collect()`` against a real nats-server: a fetch's messages at once.

A fetch's plain messages are built and buffered by the router itself (one
count per read); these tests pin that what ``collect()`` returns is exactly
what iteration yields: order, content, headers, the batch limit, the end of
the pull and a terminal error after the messages received before it.
"""

from __future__ import annotations

import asyncio

import pytest

from aiojetstream import (
    AckPolicy,
    Consumer,
    ConsumerConfig,
    ConsumerDeletedError,
    ConsumerNotFoundError,
    JetStreamContext,
    StorageType,
    StreamConfig,
)
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
