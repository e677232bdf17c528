"""The ordered consumer spots a lost *last* message from the heartbeats (RELIABILITY K3, O1).

A message lost on the way (say in a reconnect) with nothing published after
it leaves no consumer-sequence gap to see: the ordered consumer (a KV
watcher) would miss that value until the next change. Pull heartbeats carry
``Nats-Last-Consumer``, the consumer sequence the server delivered last; more
than what arrived means a loss, and the ordered consumer resets at once.

The loss is staged: after three real deliveries a second connection sends the
driver's inbox the heartbeat the server would send had it delivered a fourth
message that never arrived (nats-server 2.15.1 heartbeats look exactly like
this, ``Nats-Last-Stream`` included).
"""

from __future__ import annotations

import asyncio
from typing import cast

import pytest

from aiojetstream import JetStreamContext, StorageType, StreamConfig, connect
from aiojetstream._ordered import OrderedSource
from helpers import unique_name, wait_until


def _heartbeat(last_consumer: int, last_stream: int) -> bytes:
    return (
        f"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: {last_consumer}\r\n"
        f"Nats-Last-Stream: {last_stream}\r\n\r\n"
    ).encode()


async def test_a_heartbeat_past_what_arrived_resets(js: JetStreamContext, nats_url: str) -> None:
    stream = unique_name("OHB")
    subject = f"{stream}.x"
    await js.create_stream(
        StreamConfig(name=stream, subjects=[subject], storage=StorageType.MEMORY)
    )
    for i in range(3):
        await js.publish(subject, b"%d" % i)
    oc = await js.ordered_consumer(stream)
    other = await connect(nats_url)
    try:
        async with oc.messages(heartbeat=0.5, expires=5) as it:
            got = [(await asyncio.wait_for(it.next(), 5)).data for _ in range(3)]
            assert got == [b"0", b"1", b"2"]
            first = oc.name
            driver = cast(OrderedSource, it._driver)._driver
            assert driver is not None
            inbox = driver._inbox

            pending = asyncio.create_task(it.next())
            # What the server's own heartbeats say (Nats-Last-Consumer: 3) changes nothing.
            other._api.conn.publish_nowait(inbox, b"", b"", _heartbeat(3, 3))
            await other.nc.flush()
            await js.nc.flush()  # the heartbeat was read before the PONG
            assert not oc._needs_reset
            assert not pending.done()

            # "Delivered" a fourth message that never arrived: reset at once.
            other._api.conn.publish_nowait(inbox, b"", b"", _heartbeat(4, 4))
            await other.nc.flush()
            await wait_until(lambda: oc.name not in (None, first), timeout=5, message="a reset")
            assert oc.cursor == 3  # the new consumer starts after the last one handed out
            assert not pending.done()

            await js.publish(subject, b"3")
            msg = await asyncio.wait_for(pending, 5)
            assert msg.data == b"3"
            assert msg.metadata.sequence.stream == 4
    finally:
        await other.close()


async def test_a_heartbeat_with_a_huge_last_consumer_changes_nothing(
    js: JetStreamContext, nats_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``Nats-Last-Consumer`` past int()'s 4,300 digits raised ValueError inside the
    connection's read path. It is no sequence: ignored, as a malformed value is."""
    stream = unique_name("OHH")
    subject = f"{stream}.x"
    await js.create_stream(
        StreamConfig(name=stream, subjects=[subject], storage=StorageType.MEMORY)
    )
    await js.publish(subject, b"0")
    oc = await js.ordered_consumer(stream)
    other = await connect(nats_url)
    try:
        async with oc.messages(heartbeat=0.5, expires=5) as it:
            assert (await asyncio.wait_for(it.next(), 5)).data == b"0"
            first = oc.name
            driver = cast(OrderedSource, it._driver)._driver
            assert driver is not None
            pending = asyncio.create_task(it.next())
            huge = "9" * 5000
            block = (
                f"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: {huge}\r\n"
                f"Nats-Last-Stream: {huge}\r\n\r\n"
            ).encode()
            other._api.conn.publish_nowait(driver._inbox, b"", b"", block)
            await other.nc.flush()
            await js.nc.flush()  # the heartbeat was read before the PONG
            assert js.nc.is_connected
            assert not oc._needs_reset
            assert oc.name == first
            await js.publish(subject, b"1")
            assert (await asyncio.wait_for(pending, 5)).data == b"1"
            assert oc.name == first
    finally:
        await other.close()
    # The handler of the heartbeat did not fail (it logged a ValueError traceback).
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text
