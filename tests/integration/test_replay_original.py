"""Consumers replaying at the original pace (``replay_policy=original``).

nats-server sleeps out the gap between two stored messages without sending a
heartbeat: a gap longer than 2 x heartbeat read as missed heartbeats. The
ordered consumer then made a new consumer at the next message, which the
server sent at once (the gap cut short), and both kinds reported a
``NoHeartbeatError`` although nothing was wrong.
"""

from __future__ import annotations

import asyncio

from aiojetstream import (
    AckPolicy,
    ConsumerConfig,
    JetStreamContext,
    JetStreamError,
    OrderedConsumerConfig,
    ReplayPolicy,
    StorageType,
    StreamConfig,
)
from helpers import unique_name

GAP = 3.0  # between the stored messages; 6 x the heartbeat below
HEARTBEAT = 0.5


async def _stream_with_a_gap(js: JetStreamContext) -> str:
    name = unique_name("PACED")
    await js.create_stream(
        StreamConfig(name=name, subjects=[f"{name}.>"], storage=StorageType.MEMORY)
    )
    await js.publish(f"{name}.a", b"1")
    await asyncio.sleep(GAP)  # the stored gap under test (a pace, not a wait for anything)
    await js.publish(f"{name}.a", b"2")
    return name


async def test_replay_original_keeps_its_gaps_without_errors(js: JetStreamContext) -> None:
    stream = await _stream_with_a_gap(js)
    loop = asyncio.get_running_loop()

    ordered = await js.ordered_consumer(
        stream, OrderedConsumerConfig(replay_policy=ReplayPolicy.ORIGINAL)
    )
    errors: list[JetStreamError] = []
    times: list[float] = []
    names: list[str | None] = []
    async with (
        asyncio.timeout(30),
        ordered.messages(heartbeat=HEARTBEAT, error_handler=errors.append) as it,
    ):
        async for msg in it:
            times.append(loop.time())
            names.append(ordered.name)
            if msg.data == b"2":
                break
    assert times[1] - times[0] >= GAP - 0.5  # the gap kept, not cut short by a reset
    assert names[0] == names[1]  # the same consumer: no reset
    assert errors == []

    durable = await js.create_consumer(
        stream,
        ConsumerConfig(
            durable_name="d", replay_policy=ReplayPolicy.ORIGINAL, ack_policy=AckPolicy.NONE
        ),
    )
    times.clear()
    async with (
        asyncio.timeout(30),
        durable.messages(heartbeat=HEARTBEAT, error_handler=errors.append) as it,
    ):
        async for msg in it:
            times.append(loop.time())
            if msg.data == b"2":
                break
    assert times[1] - times[0] >= GAP - 0.5
    assert errors == []

    # A fetch (and the ordered consumer's, which next() uses) waits for its expires:
    # it raised NoHeartbeatError at 2 x heartbeat, and the ordered one reset.
    fetcher = await js.create_consumer(
        stream,
        ConsumerConfig(
            durable_name="f", replay_policy=ReplayPolicy.ORIGINAL, ack_policy=AckPolicy.NONE
        ),
    )
    began = loop.time()
    async with await fetcher.fetch(2, expires=GAP + 5, heartbeat=HEARTBEAT) as fetched:
        assert [m.data async for m in fetched] == [b"1", b"2"]
    assert loop.time() - began >= GAP - 0.5
    again = await js.ordered_consumer(
        stream, OrderedConsumerConfig(replay_policy=ReplayPolicy.ORIGINAL)
    )
    async with await again.fetch(2, expires=GAP + 5, heartbeat=HEARTBEAT) as fetched:
        assert [m.data async for m in fetched] == [b"1", b"2"]
    assert again.name is not None
    assert again.name.endswith("_1")  # its first consumer: no reset
