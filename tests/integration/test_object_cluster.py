"""Object and key-value reads on a three-node cluster while a restarted node catches up.

nats-server places a read's ordered consumer (R1) on any of the bucket's
peers. On one that restarted and is still catching up, the consumer reports
nothing pending although the leader holds every chunk: the read ended there
and called a healthy object corrupt (``DigestMismatchError``, "read 0 bytes in
0 chunks"), 4 of 16 reads in a round. An application that drops corrupt
objects would have dropped good data.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

import aiojetstream
from aiojetstream import (
    JetStreamTimeoutError,
    KeyValue,
    KeyValueConfig,
    ObjectStoreConfig,
    StorageType,
)
from aiojetstream.testing import NatsCluster

pytestmark = pytest.mark.cluster

T = TypeVar("T")


async def _retrying(call: Callable[[], Awaitable[T]]) -> T:
    """``call()``, again when it timed out (4 times at most).

    Unanswered while a node is away or recovers (a direct get routed to the
    killed node's interest, a consumer creation on the restarted one): a user
    tries again. Never a wrong answer: any other error is raised.
    """
    for _ in range(4):
        try:
            return await call()
        except JetStreamTimeoutError:
            pass
    return await call()


async def test_reads_right_after_a_node_restarts_get_the_whole_object() -> None:
    async with NatsCluster(3) as cluster:
        js = await aiojetstream.connect(cluster.urls, max_reconnect_attempts=-1, timeout=10)
        try:
            store = await js.create_object_store(
                ObjectStoreConfig(bucket="LAG", replicas=3, storage=StorageType.FILE)
            )
            leader = (await store.stream.info()).cluster
            assert leader is not None
            # A node that leads nothing the puts need: they go on without an election.
            victim = next(s for s in cluster.servers if s.server_name != leader.leader)
            await victim.kill()
            digests = {}
            for i in range(8):
                data = os.urandom(2 * 1024 * 1024 + i)
                digests[f"o{i}"] = hashlib.sha256(data).digest()
                await _retrying(functools.partial(store.put, f"o{i}", data))
            await victim.start()
            for _ in range(2):  # right away, while the restarted node catches up
                for name, digest in digests.items():
                    got = await _retrying(functools.partial(store.get_bytes, name))
                    assert hashlib.sha256(got).digest() == digest, name
        finally:
            await js.close()


async def test_kv_reads_right_after_a_node_restarts_see_every_key() -> None:
    """The same placement for ``keys()`` and ``history()``: a consumer on a replica
    still catching up had nothing more, and the read ended there without an error
    (0 of 301 keys, 301 of 601, 1 of 3 revisions)."""
    async with NatsCluster(3) as cluster:
        js = await aiojetstream.connect(cluster.urls, max_reconnect_attempts=-1, timeout=10)
        try:
            kv = await js.create_key_value(
                KeyValueConfig(bucket="LAGKV", replicas=3, storage=StorageType.FILE, history=5)
            )
            bucket = await js.stream("KV_LAGKV")
            leader = bucket.cached_info.cluster
            assert leader is not None
            victim = next(s for s in cluster.servers if s.server_name != leader.leader)
            await kv.put("h", b"0")
            await victim.kill()
            for i in range(300):
                await _retrying(functools.partial(kv.put, f"k.{i}", b"v" * 2000))
            await _retrying(functools.partial(kv.put, "h", b"1"))
            await _retrying(functools.partial(kv.put, "h", b"2"))
            await victim.start()
            for _ in range(6):  # right away, while the restarted node catches up
                keys = await _retrying(lambda: _keys(kv))
                assert len(keys) == 301
                history = await _retrying(functools.partial(kv.history, "h"))
                assert [e.value for e in history] == [b"0", b"1", b"2"]
        finally:
            await js.close()


async def _keys(kv: KeyValue) -> list[str]:
    return [key async for key in kv.keys()]  # noqa: SIM118 (an async iterator)
