"""publish_async across a server restart: every future completes, none hangs."""

from __future__ import annotations

import asyncio

import aiojetstream
from aiojetstream import (
    DisconnectedError,
    JetStreamError,
    PubAck,
    StorageType,
    StreamConfig,
)
from aiojetstream.testing import NatsServer


async def test_publish_async_across_restart() -> None:
    async with NatsServer() as server:
        js = await aiojetstream.connect(
            server.url,
            publish_async_max_pending=256,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.1,
        )
        try:
            await js.create_stream(
                StreamConfig(name="RESTART", subjects=["restart.>"], storage=StorageType.FILE)
            )
            futures: list[asyncio.Future[PubAck]] = []
            publish_errors: list[JetStreamError] = []
            restarted = asyncio.Event()
            total = 10_000

            async def producer() -> None:
                for i in range(total):
                    if i == total // 3:
                        go.set()
                    try:
                        futures.append(
                            await js.publish_async(
                                "restart.x", str(i).encode(), msg_id=str(i), timeout=10
                            )
                        )
                    except JetStreamError as exc:  # typed, never raw nats-py
                        publish_errors.append(exc)

            go = asyncio.Event()

            async def restarter() -> None:
                await go.wait()
                await server.restart()
                restarted.set()

            restart_task = asyncio.create_task(restarter())
            await asyncio.wait_for(producer(), timeout=120)
            await asyncio.wait_for(restart_task, timeout=60)
            assert restarted.is_set()
            await js.publish_async_complete(timeout=60)
            assert js.publish_async_pending == 0

            assert all(f.done() for f in futures)
            acked = [f.result() for f in futures if f.exception() is None]
            failed = [f.exception() for f in futures if f.exception() is not None]
            assert all(isinstance(e, JetStreamError) for e in failed)
            assert any(isinstance(e, DisconnectedError) for e in failed) or publish_errors
            assert acked, "publishing resumed after the restart"
            # Every acknowledged message is stored (file storage survives the restart).
            stream = await js.stream("RESTART")
            info = await stream.info()
            assert info.state.messages >= len({a.seq for a in acked})
            for ack in acked[:: max(1, len(acked) // 50)]:
                assert (await stream.get_msg(ack.seq)).subject == "restart.x"
        finally:
            await js.close()
