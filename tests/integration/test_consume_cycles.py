"""Lifecycle and back-to-back behaviour: no leaks after 1000 cycles, no lingering-pull stalls."""

from __future__ import annotations

import asyncio

from aiojetstream import (
    AckPolicy,
    ConsumerConfig,
    JetStreamContext,
    Msg,
    StorageType,
    StreamConfig,
)
from aiojetstream import _conn as conn_internals
from helpers import unique_name, wait_until

CYCLES = 1000


def _task_count() -> int:
    return len([t for t in asyncio.all_tasks() if not t.done()])


async def test_no_leaks_after_1000_cycles(js: JetStreamContext) -> None:
    stream = unique_name("LEAK")
    await js.create_stream(
        StreamConfig(name=stream, subjects=["leak.>"], storage=StorageType.MEMORY)
    )
    # AckNone: every operation moves the consumer on, so give it plenty to read.
    for i in range(12 * CYCLES):
        await js.publish_async("leak.x", str(i).encode())
    await js.publish_async_complete(timeout=60)
    consumer = await js.create_consumer(
        stream, ConsumerConfig(durable_name="cycler", ack_policy=AckPolicy.NONE)
    )
    nc = js.nc
    tasks0 = _task_count()
    subs0 = len(nc._subs)
    listeners0 = js._conn.listener_count()

    async def one_cycle() -> None:
        # fetch
        batch = await consumer.fetch(1, expires=5)
        got = [m async for m in batch]
        assert len(got) == 1
        # messages
        async with consumer.messages(max_messages=2) as it:
            await it.next()
        # consume
        first: asyncio.Future[Msg] = asyncio.get_running_loop().create_future()

        def handler(m: Msg) -> None:
            if not first.done():
                first.set_result(m)

        ctx = await consumer.consume(handler, max_messages=2)
        await asyncio.wait_for(first, 10)
        ctx.stop()
        await asyncio.wait_for(ctx.closed(), 10)
        # ordered
        oc = await js.ordered_consumer(stream)
        async with oc.messages(max_messages=2) as oit:
            await oit.next()

    async def all_cycles() -> None:
        for _ in range(CYCLES):
            await one_cycle()

    await asyncio.wait_for(all_cycles(), timeout=600)

    # Nothing left behind: tasks, subscriptions, connection callbacks, raw routes,
    # and on the server only the durable consumer.
    await wait_until(lambda: _task_count() <= tasks0, timeout=10, message="tasks back to baseline")
    assert len(nc._subs) == subs0
    assert js._conn.listener_count() == listeners0
    router = conn_internals._ROUTERS.get(nc)
    assert router is None or not router.routes
    assert [n async for n in js.consumer_names(stream)] == ["cycler"]


async def test_back_to_back_fetch_never_stalls(js: JetStreamContext) -> None:
    """1000 rounds of publish one / fetch(10, expires=1) (nats.py #933, #986).

    A fetch must never miss the message published just before it because an
    earlier pull request lingers on the server. The rounds run as 40
    independent consumers doing 25 sequential rounds each, so the suite does
    not spend 1000 expiry periods in a row; every round still has the exact
    shape of the reported failure.
    """
    stream = unique_name("B2B")
    await js.create_stream(
        StreamConfig(name=stream, subjects=["b2b.>"], storage=StorageType.MEMORY)
    )
    workers, rounds = 40, 25
    loop = asyncio.get_running_loop()
    durations: list[float] = []

    async def worker(w: int) -> None:
        consumer = await js.create_consumer(
            stream,
            ConsumerConfig(
                durable_name=f"w{w}", filter_subject=f"b2b.{w}", ack_policy=AckPolicy.EXPLICIT
            ),
        )
        for r in range(rounds):
            payload = f"{w}:{r}".encode()
            await js.publish(f"b2b.{w}", payload)
            started = loop.time()
            got = [m async for m in await consumer.fetch(10, expires=1)]
            durations.append(loop.time() - started)
            assert [m.data for m in got] == [payload], f"worker {w} round {r}: {got}"
            await got[0].ack()

    await asyncio.wait_for(asyncio.gather(*(worker(w) for w in range(workers))), timeout=300)
    assert len(durations) == workers * rounds == 1000
    # Each fetch ends at its expiry (1 s) plus the grace for the server's 408,
    # never after a lingering request's full timeout.
    assert max(durations) < 1 + 3.0, sorted(durations)[-5:]
