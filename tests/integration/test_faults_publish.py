"""publish_async across a server restart: every future completes, none hangs."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter

import aiojetstream
from aiojetstream import (
    DisconnectedError,
    JetStreamError,
    JetStreamTimeoutError,
    NoRespondersError,
    PubAck,
    StorageType,
    StreamConfig,
)
from aiojetstream.testing import NatsServer
from helpers import unique_name

logger = logging.getLogger(__name__)


async def test_publish_async_across_restart() -> None:
    async with NatsServer() as server:
        js = await aiojetstream.connect(
            server.url,
            publish_async_max_pending=256,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.1,
        )
        try:
            name = unique_name("RESTART")
            await js.create_stream(
                StreamConfig(name=name, subjects=["restart.>"], storage=StorageType.FILE)
            )
            futures: list[tuple[bytes, asyncio.Future[PubAck]]] = []
            publish_errors: list[JetStreamError] = []
            restarted = asyncio.Event()
            total = 10_000

            async def producer() -> None:
                for i in range(total):
                    if i == total // 3:
                        go.set()
                    payload = str(i).encode()
                    try:
                        # The ack timeout is a wait, not the subject: long enough for a
                        # restart on a loaded machine, so no future fails by timing out.
                        fut = await js.publish_async(
                            "restart.x", payload, msg_id=str(i), timeout=30
                        )
                    except JetStreamError as exc:  # typed, never raw nats-py
                        publish_errors.append(exc)
                    else:
                        futures.append((payload, fut))

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

            assert all(f.done() for _, f in futures)
            acked = {p: f.result() for p, f in futures if f.exception() is None}
            failed = [f.exception() for _, f in futures if f.exception() is not None]
            logger.warning(
                "publish_async across a restart: %d acked, failed %s, publish_async raised %s",
                len(acked),
                Counter(type(e).__name__ for e in failed),
                Counter(type(e).__name__ for e in publish_errors),
            )
            # publish_async itself never raised: while disconnected the messages go
            # to the reconnect buffer, and the window had room again after the drop.
            assert publish_errors == []
            # Two failures only: the acks outstanding when the connection dropped
            # (the producer never stops, so there were some), and 503 for messages
            # that the reconnect flushed before the restarted server's stream
            # answered on its subject (publish_async does not retry).
            disconnected = [e for e in failed if isinstance(e, DisconnectedError)]
            no_responders = {p for p, f in futures if isinstance(f.exception(), NoRespondersError)}
            assert disconnected, "no publish was outstanding when the connection dropped"
            assert len(disconnected) + len(no_responders) == len(failed), failed
            assert len(acked) + len(failed) == total

            # Every acknowledged message is stored under its ack's sequence (file
            # storage survives the restart), and nothing is stored twice (msg ids).
            stream = await js.stream(name)
            stored_count = (await stream.info()).state.messages
            stored: dict[int, bytes] = {}
            oc = await js.ordered_consumer(name)
            async with oc.messages(max_messages=1000) as it:
                while len(stored) < stored_count:
                    msg = await asyncio.wait_for(it.next(), 10)
                    stored[msg.metadata.sequence.stream] = msg.data
            for payload, ack in acked.items():
                assert stored.get(ack.seq) == payload, (payload, ack)
            assert len(set(stored.values())) == len(stored), "a message was stored twice"
            # What is stored beyond the acked ones can only be messages whose ack
            # was lost in the restart.
            unacked = {p for p, f in futures if f.exception() is not None}
            assert set(stored.values()) - set(acked) <= unacked
            # A 503 means no stream had the message.
            assert not no_responders & set(stored.values())
        finally:
            await js.close()


async def test_complete_ends_quietly_when_the_last_acks_time_out_with_it() -> None:
    """``publish_async_complete(timeout=T)`` beside publishes whose own ack deadline
    is T too: when both ran out in the same pass of the loop, it raised "0
    asynchronous publishes still pending" (3 of 3). Each future has its error."""
    async with NatsServer(jetstream=True) as server:
        js = await aiojetstream.connect(server.url, timeout=1)
        try:
            name = unique_name("CZERO")
            await js.create_stream(StreamConfig(name=name, subjects=[name]))
            server.freeze()
            try:
                for _ in range(3):
                    future = await js.publish_async(name, b"q")  # its ack deadline: 1 s
                    await js.publish_async_complete(timeout=1)
                    assert future.done()
                    assert isinstance(future.exception(), JetStreamTimeoutError)
            finally:
                server.thaw()
        finally:
            await js.close()
