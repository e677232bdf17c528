"""Listings and a watch's end of the initial values under steady writes.

A reader asked the stream's leader for the last sequence of its filters on
every message with nothing pending after it (a check against a consumer on a
replica still catching up). Each put between the delivery and the leader's
answer moved the target: under steady writes on a link of a few milliseconds
the end never came, ``keys()`` and ``history()`` never returned and a watch
never gave its ``None`` (1,700 checks in 20 s, each one round trip). The
leader is asked once, when the read starts.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

import aiojetstream
from aiojetstream import JetStreamContext, KeyValue, KeyValueConfig
from aiojetstream.testing import NatsServer
from helpers import unique_name
from proxy import ApiCountingProxy

#: The writer's pace (puts a second) and the reader's link (seconds each read waits).
RATE = 400
LINK_DELAY = 0.004
KEYS = 300
LEADER_GETS = "$JS.API.STREAM.MSG.GET."


async def _write_steadily(kv: KeyValue, stop: asyncio.Event) -> int:
    """Put key after key at RATE a second until stopped; how many."""
    loop = asyncio.get_running_loop()
    period = 1 / RATE
    due = loop.time()
    done = 0
    while not stop.is_set():
        await kv.put(f"k{done % KEYS}", b"x")
        done += 1
        due += period
        await asyncio.sleep(max(0.0, due - loop.time()))  # the writer's pace, not a sync
    return done


@pytest.fixture
async def busy(
    nats_server: NatsServer, js: JetStreamContext
) -> AsyncIterator[tuple[ApiCountingProxy, KeyValue]]:
    """A bucket of KEYS keys written RATE times a second, and a slow link to the server."""
    bucket = unique_name("busy")
    kv = await js.create_key_value(KeyValueConfig(bucket=bucket, history=64))
    for i in range(KEYS):
        await kv.put(f"k{i}", b"v0")
    stop = asyncio.Event()
    writer = asyncio.create_task(_write_steadily(kv, stop))
    try:
        async with ApiCountingProxy(nats_server.port) as proxy:
            proxy.delay = LINK_DELAY
            yield proxy, kv
    finally:
        stop.set()
        assert await writer > 0
        await js.delete_key_value(bucket)


async def test_keys_history_and_a_watch_end_under_steady_writes(
    busy: tuple[ApiCountingProxy, KeyValue],
) -> None:
    proxy, writes = busy
    async with await aiojetstream.connect(proxy.url) as reader:
        kv = await reader.key_value(writes.bucket)
        loop = asyncio.get_running_loop()
        start = loop.time()
        async with asyncio.timeout(30):  # (before: never returned)
            keys = [key async for key in kv.keys()]  # noqa: SIM118 (an async iterator)
            assert len(set(keys)) == KEYS
            assert len(await kv.history("k1")) >= 1
            async with kv.watch() as watch:
                before_none = 0
                async for entry in watch:
                    if entry is None:
                        break
                    before_none += 1
        assert before_none >= KEYS
        gets = proxy.api_times(start, loop.time(), LEADER_GETS)
        assert len(gets) <= 3, len(gets)  # one per read (each has one filter)
