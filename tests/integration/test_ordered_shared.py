"""An ordered consumer shared by tasks: messages() as a pool, fetches one at a time."""

from __future__ import annotations

import asyncio
import collections
from typing import Any

from aiojetstream import InvalidOptionError, JetStreamContext, StorageType, StreamConfig
from helpers import unique_name, wait_until


async def _stream(js: JetStreamContext, count: int) -> str:
    name = unique_name("OPOOL")
    await js.create_stream(
        StreamConfig(name=name, subjects=[f"{name}.>"], storage=StorageType.MEMORY)
    )
    await js.publish_many(f"{name}.x", [b"m%d" % i for i in range(1, count + 1)])
    return name


async def test_a_pool_checks_every_message_after_a_shared_run(js: JetStreamContext) -> None:
    """Task A waited for a message inside next() while task B counted the run that
    arrived (take(), without the lock), then A took the run's first message: B's count
    was one too many, the next message went out unchecked and an API reset of the
    consumer (seq 10) handed 10..25 out a second time."""
    stream = await _stream(js, 20)
    ordered = await js.ordered_consumer(stream)
    handed: list[int] = []
    async with ordered.messages(max_messages=100, expires=5) as it:
        while len(handed) < 20:
            handed.append((await it.next()).metadata.sequence.stream)
        source: Any = it._driver  # the ordered source: next() tries its take() first
        a = asyncio.create_task(it.next())
        await wait_until(source._reading.locked)  # A waits in the driver

        async def worker_b() -> None:
            # A worker back from its work: takes what is buffered, at once.
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 10
            while len(handed) < 24 and loop.time() < deadline:
                if source._driver is not None and source._driver.buffered:
                    handed.append((await it.next()).metadata.sequence.stream)
                await asyncio.sleep(0)  # a yield: the worker's own work

        b = asyncio.create_task(worker_b())
        await js.publish_many(f"{stream}.x", [b"m%d" % i for i in range(21, 26)])
        handed.append((await a).metadata.sequence.stream)
        await b
        # Another client resets the ordered consumer's consumer through the API.
        assert ordered.name is not None
        await (await js.consumer(stream, ordered.name)).reset(10)
        last = (await js.publish(f"{stream}.x", b"last")).seq
        while handed[-1] != last:
            handed.append((await asyncio.wait_for(it.next(), 10)).metadata.sequence.stream)
    duplicates = [seq for seq, n in collections.Counter(handed).items() if n > 1]
    assert duplicates == []
    assert sorted(handed) == list(range(1, last + 1))


async def test_a_fetch_renewing_its_consumer_is_still_running(js: JetStreamContext) -> None:
    """A fetch whose consumer was gone recreates it and pulls again; meanwhile its batch
    said done, and another fetch started beside it (two resets at once, both short)."""
    stream = await _stream(js, 40)
    ordered = await js.ordered_consumer(stream)
    first = [
        m.metadata.sequence.stream for m in await (await ordered.fetch(5, expires=2)).collect()
    ]
    assert ordered.name is not None
    await js.delete_consumer(stream, ordered.name)  # the next fetch recreates it
    refused = 0
    a_done = asyncio.Event()

    async def fetch_a() -> list[int]:
        try:
            batch = await ordered.fetch(10, expires=3)
            return [m.metadata.sequence.stream async for m in batch]
        finally:
            a_done.set()

    async def fetch_b() -> list[int]:
        nonlocal refused
        while not a_done.is_set():
            try:
                batch = await ordered.fetch(10, expires=3)
            except InvalidOptionError:
                refused += 1
                await asyncio.sleep(0)  # a yield: try again while A runs
                continue
            return [m.metadata.sequence.stream async for m in batch]
        return []

    got_a, got_b = await asyncio.gather(fetch_a(), fetch_b())
    assert first == [1, 2, 3, 4, 5]
    assert got_a == list(range(6, 16))  # not cut short by a second reset beside it
    assert got_b in ([], list(range(16, 26)))
    assert refused > 0
