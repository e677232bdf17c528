"""Group ``consume``: the typed-payload row (issue 28).

* ``typed_messages_vs_manual``: ``consumer.messages(model=Small)`` handing out
  ``TypedMsg[Small]`` over ``consumer.messages()`` plus a hand-written
  ``Small.model_validate_json(msg.data)`` in the loop; both read the same
  stream of small JSON models through a fresh AckNone consumer each round.
  Target >= 0.95: the typed iterator costs no more than the code it replaces.
"""

from __future__ import annotations

import time

from pydantic import BaseModel

import aiojetstream
from aiojetstream import AckPolicy, ConsumerConfig, StorageType, StreamConfig

from .measure import compare, rate
from .report import Row

STREAM = "BTYPED"
SUBJECT = "btyped.data"


class Small(BaseModel):
    """A small model: what a typical event payload looks like."""

    id: int
    name: str
    price: float
    tags: list[str]


async def bench_typed(url: str, messages: int, rounds: int) -> list[Row]:
    """The ``typed_messages_vs_manual`` row."""
    js = await aiojetstream.connect(url)
    try:
        await js.create_stream(
            StreamConfig(name=STREAM, subjects=[SUBJECT], storage=StorageType.MEMORY)
        )
        payload = Small(id=1, name="widget", price=9.5, tags=["a", "b"])
        sent = 0
        while sent < messages:
            batch = min(10_000, messages - sent)
            await js.publish_many(SUBJECT, [payload] * batch)
            sent += batch
        made = 0

        async def consumer() -> aiojetstream.Consumer:
            nonlocal made
            made += 1
            config = ConsumerConfig(durable_name=f"typed{made}", ack_policy=AckPolicy.NONE)
            return await js.create_consumer(STREAM, config)

        async def typed(n: int) -> float:
            c = await consumer()
            got = 0
            start = time.perf_counter()
            async with c.messages(model=Small) as it:
                async for msg in it:
                    msg.value  # noqa: B018  (what a handler reads)
                    got += 1
                    if got >= n:
                        break
            value = rate(n, start)
            await js.delete_consumer(STREAM, c.name)
            return value

        async def manual(n: int) -> float:
            c = await consumer()
            got = 0
            start = time.perf_counter()
            async with c.messages() as it:
                async for msg in it:
                    Small.model_validate_json(msg.data)
                    got += 1
                    if got >= n:
                        break
            value = rate(n, start)
            await js.delete_consumer(STREAM, c.name)
            return value

        ours, baseline = await compare(typed, manual, messages, rounds)
        await js.delete_stream(STREAM)
    finally:
        await js.close()
    return [Row("typed_messages_vs_manual", ours, baseline, "msgs/s")]
