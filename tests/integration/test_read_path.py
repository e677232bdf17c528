"""The read path's batching against a real nats-server (fast path).

A ``messages()`` loop that finds its messages buffered never yields to the
event loop, so nats-py's flusher task does not run meanwhile. Pull requests
are written when the engine asks for them, and acks once a few kilobytes of
them are queued: neither waits for the loop to run dry. Every message still
arrives once, in order, and every ack counts.
"""

from __future__ import annotations

from typing import Any

import pytest

from aiojetstream import (
    AckPolicy,
    Consumer,
    ConsumerConfig,
    JetStreamContext,
    StorageType,
    StreamConfig,
    _conn,
)
from helpers import unique_name, wait_until


async def _consumer(js: JetStreamContext, count: int, ack: AckPolicy) -> Consumer:
    stream = unique_name("READ")
    await js.create_stream(
        StreamConfig(name=stream, subjects=[f"{stream}.>"], storage=StorageType.MEMORY)
    )
    for i in range(count):
        await js.publish_async(f"{stream}.x", b"%d" % i)
    await js.publish_async_complete(timeout=30)
    return await js.create_consumer(stream, ConsumerConfig(name="reader", ack_policy=ack))


def _driver_of(it: Any) -> Any:
    return it._driver


@pytest.fixture
def fast(js: JetStreamContext) -> Any:
    if not js._conn.fast:
        pytest.skip("the fast path's write timing (the fallback writes from tasks)")
    return js._conn.nc


async def test_a_pull_is_written_while_the_buffer_is_handed_out(
    js: JetStreamContext, fast: Any
) -> None:
    consumer = await _consumer(js, 300, AckPolicy.NONE)
    async with consumer.messages(max_messages=100) as it:
        driver = _driver_of(it)
        await wait_until(lambda: driver.buffered == 100, message="a full buffer")
        pulls = driver.engine.pulls
        seen = []
        for _ in range(60):  # past the threshold (50): the engine asks for more
            msg = await it.__anext__()  # buffered: no yield to the event loop
            seen.append(int(msg.data))
            assert fast._pending == [], "nothing waits in nats-py's queue"
        driver._settle()
        assert driver.engine.pulls == pulls + 1
        async for msg in it:
            seen.append(int(msg.data))
            if len(seen) == 300:
                break
    assert seen == list(range(300))


async def test_acks_go_out_while_the_buffer_is_handed_out(js: JetStreamContext, fast: Any) -> None:
    consumer = await _consumer(js, 400, AckPolicy.EXPLICIT)
    async with consumer.messages(max_messages=400) as it:
        driver = _driver_of(it)
        await wait_until(lambda: driver.buffered == 400, message="a full buffer")
        for i in range(400):
            msg = await it.__anext__()  # buffered: no yield to the event loop
            assert int(msg.data) == i
            await msg.ack()
            assert fast._pending_data_size < _conn.ACK_WRITE_BYTES
        assert fast._pending_data_size > 0  # the last few wait for the flusher

    async def all_acked() -> bool:
        info = await consumer.info()
        return info.num_ack_pending == 0 and info.ack_floor.consumer_seq == 400

    await wait_until(all_acked, message="the server counted every ack")
