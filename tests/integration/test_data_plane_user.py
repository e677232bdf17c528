"""A user allowed to publish and read but not to ask for account info ($JS.API.INFO).

The newer features check the server's API level before sending. For such a
user the level request is never answered (nats-py only hears an asynchronous
permissions error), so the check is left to the server after a short probe:
the feature works, the first call pays at most the probe, later calls nothing.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest_asyncio

import aiojetstream
from aiojetstream import JetStreamContext, StreamConfig
from aiojetstream._features import LEVEL_PROBE
from aiojetstream.testing import NatsServer

CONFIG = """
accounts: {
  A: {
    jetstream: enabled
    users: [
      {user: admin, password: admin},
      {user: app, password: app, permissions: {
         publish: {allow: [
           "cnt.>", "$JS.API.STREAM.INFO.CNT", "$JS.API.DIRECT.GET.CNT", "$JS.API.DIRECT.GET.CNT.>"
         ]},
         subscribe: {allow: ["_INBOX.>"]}}}
    ]
  }
}
"""


@pytest_asyncio.fixture
async def server() -> AsyncIterator[NatsServer]:
    async with NatsServer(config=CONFIG) as srv:
        admin = await aiojetstream.connect(srv.url.replace("nats://", "nats://admin:admin@"))
        try:
            await admin.create_stream(
                StreamConfig(
                    name="CNT", subjects=["cnt.>"], allow_msg_counter=True, allow_direct=True
                )
            )
            await admin.counter("CNT").add("cnt.a", 1)
        finally:
            await admin.close()
        yield srv


async def app_context(server: NatsServer) -> JetStreamContext:
    return await aiojetstream.connect(server.url.replace("nats://", "nats://app:app@"), timeout=5)


async def test_counters_work_without_account_info(server: NatsServer) -> None:
    js = await app_context(server)
    try:
        counter = js.counter("CNT")
        started = time.monotonic()
        assert await counter.add("cnt.a", 2) == 3  # the probe, then the increment
        first = time.monotonic() - started
        started = time.monotonic()
        assert await counter.get("cnt.a") == 3
        assert await counter.add("cnt.a", 1) == 4
        later = time.monotonic() - started
    finally:
        await js.close()
    # The first call waited for the level no longer than the probe (not its 5 s
    # timeout); later calls do not ask again.
    assert first < LEVEL_PROBE + 3.0, first
    assert later < LEVEL_PROBE, later


async def test_batch_get_works_without_account_info(server: NatsServer) -> None:
    js = await app_context(server)
    try:
        stream = await js.stream("CNT")
        got = [msg.subject async for msg in stream.get_batch(10)]
    finally:
        await js.close()
    assert got == ["cnt.a"]
