"""Under uvloop's event loop (a common production loop), against a real server.

uvloop's transport raises ``RuntimeError`` ("the handler is closed") from a
write to a socket it closed, where asyncio's drops it (3.11) or raises
``TypeError`` (3.12+). A close while reconnecting with an ack in the reconnect
buffer raised that ``RuntimeError`` out of ``js.close()`` without running the
closed callback, and when nats-py gave up reconnecting a waiting ``next()``
hung for good (past its pull's expiry). These run each test in a uvloop loop
of its own (``asyncio.Runner``), not pytest-asyncio's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

import aiojetstream
from aiojetstream import AckPolicy, ConnectionClosedError, ConsumerConfig, StreamConfig
from aiojetstream.testing import NatsServer
from helpers import unique_name, wait_until

uvloop = pytest.importorskip("uvloop")  # (in the dev extra: not on Windows)


def _run(test: Callable[[], Awaitable[None]]) -> None:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert type(runner.get_loop()).__module__.startswith("uvloop")
        runner.run(asyncio.wait_for(test(), 60))


def test_a_close_while_reconnecting_with_an_ack_buffered() -> None:
    async def test() -> None:
        closed = asyncio.Event()

        async def on_closed() -> None:
            closed.set()

        async with NatsServer() as server:
            js = await aiojetstream.connect(server.url, closed_cb=on_closed)
            name = unique_name("UVA")
            await js.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
            consumer = await js.create_consumer(
                name, ConsumerConfig(durable_name="d", ack_policy=AckPolicy.EXPLICIT)
            )
            await js.publish(f"{name}.x", b"1")
            msg = await consumer.next(expires=5)
            await server.kill()
            await wait_until(lambda: js.nc.is_reconnecting, timeout=10)
            await msg.ack()  # into the reconnect buffer
            await asyncio.wait_for(js.close(), 10)  # raised RuntimeError
            await asyncio.wait_for(closed.wait(), 5)
            assert js.nc.is_closed

    _run(test)


def test_reconnects_given_up_with_an_ack_buffered_end_a_waiting_next() -> None:
    async def test() -> None:
        async with NatsServer() as server:
            js = await aiojetstream.connect(
                server.url, max_reconnect_attempts=2, reconnect_time_wait=0.2
            )
            try:
                name = unique_name("UVB")
                await js.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
                consumer = await js.create_consumer(
                    name, ConsumerConfig(durable_name="d", ack_policy=AckPolicy.EXPLICIT)
                )
                await js.publish(f"{name}.x", b"1")
                async with consumer.messages(expires=30) as it:
                    first = await asyncio.wait_for(it.next(), 10)
                    waiting = asyncio.ensure_future(it.next())
                    await server.kill()
                    await wait_until(lambda: js.nc.is_reconnecting, timeout=10)
                    await first.ack()  # into the reconnect buffer
                    with pytest.raises(ConnectionClosedError):
                        await asyncio.wait_for(waiting, 10)  # hung past its expiry
            finally:
                await js.close()

    _run(test)


def test_everyday_calls_under_uvloop() -> None:
    """Publish every way and consume every way, each message once."""

    async def test() -> None:
        async with NatsServer() as server:
            js = await aiojetstream.connect(server.url)
            try:
                name = unique_name("UVC")
                await js.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
                await js.publish(f"{name}.a", b"0")
                await asyncio.gather(
                    *[await js.publish_async(f"{name}.a", b"%d" % i) for i in range(1, 100)]
                )
                await js.publish_many(f"{name}.a", [b"%d" % i for i in range(100, 200)])
                consumer = await js.create_consumer(name, ConsumerConfig(durable_name="d"))
                seqs: list[int] = []
                async with consumer.messages() as it:
                    async for msg in it:
                        seqs.append(msg.metadata.sequence.stream)
                        await msg.ack()
                        if len(seqs) == 200:
                            break
                assert seqs == list(range(1, 201))
                ordered = await js.ordered_consumer(name)
                batch = await ordered.fetch(200, expires=5)
                assert [m.data async for m in batch] == [b"%d" % i for i in range(200)]
            finally:
                await js.close()

    _run(test)
