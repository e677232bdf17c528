"""Cut short by anyio's cancel scopes (asyncio backend), against a real server.

An anyio cancel scope cancels every await of the task until the scope exits,
where ``asyncio.wait_for`` cancels once. A close or a clean-up that awaits
after the first cancellation was cut short there: a cancelled object put left
its chunks in the bucket (unlisted, counting against ``max_bytes``), and a KV
watch left its consumer (for its 5-minute inactive threshold, its pull still
waiting) and its subscription behind. Each test runs in ``anyio.run``.
"""

from __future__ import annotations

import os
import random
from collections.abc import AsyncIterator

import pytest

import aiojetstream
from aiojetstream import KeyValueConfig, ObjectStoreConfig, StorageType
from aiojetstream.testing import NatsServer
from helpers import wait_until

anyio = pytest.importorskip("anyio")


def _run(test: object) -> None:
    anyio.run(test, backend="asyncio")


def test_an_object_put_cancelled_by_a_scope_purges_its_chunks() -> None:
    data = os.urandom(8 * 1024 * 1024)

    async def test() -> None:
        async with NatsServer() as server:
            js = await aiojetstream.connect(server.url)
            try:
                store = await js.create_object_store(
                    ObjectStoreConfig(bucket="CUT", storage=StorageType.MEMORY)
                )
                bucket = await js.stream("OBJ_CUT")

                async def stored() -> bool:
                    return (await bucket.info()).state.messages > 0

                with anyio.CancelScope() as scope:

                    async def pieces() -> AsyncIterator[bytes]:
                        for n, i in enumerate(range(0, len(data), 256 * 1024)):
                            if n == 8:  # some chunks are stored: cut the put here
                                await wait_until(stored, timeout=10)
                                scope.cancel()
                            yield data[i : i + 256 * 1024]

                    await store.put("big", pieces())
                assert scope.cancelled_caught
                await wait_until(lambda: _no_messages(bucket), timeout=10)
                assert [info.name async for info in store.list()] == []
            finally:
                await js.close()

    _run(test)


async def _no_messages(bucket: aiojetstream.Stream) -> bool:
    return (await bucket.info()).state.messages == 0


def test_kv_watches_cut_by_a_scope_leave_nothing_behind() -> None:
    async def test() -> None:
        async with NatsServer() as server:
            js = await aiojetstream.connect(server.url)
            try:
                kv = await js.create_key_value(
                    KeyValueConfig(bucket="CUTW", storage=StorageType.MEMORY)
                )
                for i in range(20):
                    await kv.put(f"k.{i}", b"v")
                subscriptions = len(js.nc._subs)
                rng = random.Random(1)
                cut = 0
                for _ in range(200):
                    with anyio.move_on_after(rng.uniform(0, 0.005)) as scope:
                        async with kv.watch("k.>") as watch:
                            async for entry in watch:
                                if entry is None:
                                    break
                    cut += scope.cancelled_caught
                assert cut  # (some watches were cut short while starting or closing)
                bucket = await js.stream("KV_CUTW")

                async def no_consumers() -> bool:
                    return (await bucket.info()).state.consumer_count == 0

                await wait_until(no_consumers, timeout=10)
                await wait_until(lambda: len(js.nc._subs) == subscriptions, timeout=10)
            finally:
                await js.close()

    _run(test)
