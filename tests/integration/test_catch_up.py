"""The documented "read what is there, then stop" loop (docs/consumers.md, "Catching up").

It is a ``fetch_no_wait`` loop: each pull takes what the stream holds now
without waiting, and an empty pull ends the loop, so it also ends on an
empty stream (a ``messages()`` loop that breaks at ``num_pending == 0``
waits forever there: no message ever comes to say so).
"""

from __future__ import annotations

import asyncio

import pytest

from aiojetstream import (
    Consumer,
    ConsumerConfig,
    DeliverPolicy,
    JetStreamContext,
    Msg,
    OrderedConsumerConfig,
    StreamConfig,
)
from helpers import unique_name, wait_until

#: The loop must end at once on an empty stream: a generous bound on a loaded machine.
BOUND = 5.0


async def catch_up(source: object, batch: int = 100) -> list[Msg]:
    """The documented loop, as written there (``source`` a consumer or ordered consumer)."""
    read: list[Msg] = []
    while True:
        msgs = await (await source.fetch_no_wait(batch)).collect()  # type: ignore[attr-defined]
        if not msgs:
            break
        for msg in msgs:
            read.append(msg)
    return read


async def new_stream(js: JetStreamContext, n: int) -> str:
    name = unique_name("CATCH")
    await js.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
    for i in range(n):
        await js.publish_async(f"{name}.x", b"%d" % i)
    await js.publish_async_complete()
    return name


async def _pending(consumer: Consumer, count: int) -> bool:
    return (await consumer.info()).num_pending == count


@pytest.mark.parametrize("kind", ["durable", "ordered"])
async def test_an_empty_stream_ends_the_loop_at_once(js: JetStreamContext, kind: str) -> None:
    name = await new_stream(js, 0)
    if kind == "durable":
        source: object = await js.create_consumer(name, ConsumerConfig(durable_name="d"))
    else:
        source = await js.ordered_consumer(name)
    assert await asyncio.wait_for(catch_up(source), BOUND) == []


async def test_a_durable_reads_everything_then_stops(js: JetStreamContext) -> None:
    name = await new_stream(js, 250)
    consumer = await js.create_consumer(name, ConsumerConfig(durable_name="d"))
    msgs = await asyncio.wait_for(catch_up(consumer), BOUND * 4)
    assert [m.metadata.sequence.stream for m in msgs] == list(range(1, 251))
    for msg in msgs:
        await msg.ack()
    await js.publish(f"{name}.x", b"later")
    # The server tells its consumers of a stored message a moment after the publish's
    # acknowledgement (a queue): until then a no-wait pull finds nothing (seen in CI).
    await wait_until(lambda: _pending(consumer, 1), timeout=BOUND)
    (later,) = await asyncio.wait_for(catch_up(consumer), BOUND)
    assert (later.metadata.sequence.stream, later.data) == (251, b"later")


async def test_an_ordered_replay_from_a_sequence_then_stops(js: JetStreamContext) -> None:
    name = await new_stream(js, 250)
    oc = await js.ordered_consumer(
        name,
        OrderedConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=100),
    )
    msgs = await asyncio.wait_for(catch_up(oc, 64), BOUND * 4)
    assert [m.metadata.sequence.stream for m in msgs] == list(range(100, 251))
    # Past the end: nothing, at once.
    assert await asyncio.wait_for(catch_up(oc), BOUND) == []
