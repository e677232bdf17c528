"""Object and key-value reads on a three-node cluster while a restarted node catches up.

nats-server places a read's ordered consumer (R1) on any of the bucket's
peers. On one that restarted and is still catching up, the consumer reports
nothing pending although the leader holds every chunk: the read ended there
and called a healthy object corrupt (``DigestMismatchError``, "read 0 bytes in
0 chunks"), 4 of 16 reads in a round. An application that drops corrupt
objects would have dropped good data.
"""

from __future__ import annotations

import asyncio
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


#: Listings made at once (each consumer lands on any of the 3 peers: most calls miss none).
CALLS = 12


async def test_listings_right_after_a_node_restarts_leave_out_what_was_deleted() -> None:
    """On a replica catching up, the last-per-subject consumer of ``keys()`` and
    ``list()`` starts from that replica's older revisions: a key (an object)
    deleted while the node was down comes first as its old value, its marker
    later. Yielded at the first message, deleted keys were listed as live (50 of
    350 keys, in 2 of 8 calls; 20 deleted objects in 5 of 10)."""
    async with NatsCluster(3) as cluster:
        setup = await aiojetstream.connect(cluster.urls, timeout=10)
        try:
            made = [
                (
                    await setup.create_key_value(
                        KeyValueConfig(
                            bucket="LAGDEL", replicas=3, storage=StorageType.FILE, history=5
                        )
                    )
                ).stream,
                (
                    await setup.create_object_store(
                        ObjectStoreConfig(bucket="LAGDELO", replicas=3, storage=StorageType.FILE)
                    )
                ).stream,
            ]
            clusters = [(await stream.info()).cluster for stream in made]
            leaders = {c.leader for c in clusters if c is not None}
        finally:
            await setup.close()
        # A node that leads neither bucket: the writes go on without an election. The
        # client is not on it (the backlog must not wait in a reconnect buffer).
        victim = next(s for s in cluster.servers if s.server_name not in leaders)
        others = [s.url for s in cluster.servers if s is not victim]
        js = await aiojetstream.connect(others, max_reconnect_attempts=-1, timeout=10)
        try:
            kv = await js.key_value("LAGDEL")
            store = await js.object_store("LAGDELO")
            for i in range(50):
                await kv.put(f"d{i}", b"live")
            for i in range(20):
                await store.put(f"gone{i}", b"x")
            await victim.kill()
            # A backlog for the restarted node to catch up on (32 MB: seconds of it).
            for i in range(4000):
                await js.publish_async(f"$KV.LAGDEL.k.{i % 300}", b"v" * 8000)
            await js.publish_async_complete()
            for i in range(50):
                await _retrying(functools.partial(kv.delete, f"d{i}"))
            for i in range(20):
                await _retrying(functools.partial(store.delete, f"gone{i}"))
            await _retrying(functools.partial(store.put, "kept", b"y"))
            await victim.start()

            async def listed() -> list[str]:
                return [info.name async for info in store.list()]

            # Right away and at once: each read's consumer lands on any of the peers.
            found = await asyncio.gather(
                *(_retrying(lambda: _keys(kv)) for _ in range(CALLS)),
                *(_retrying(listed) for _ in range(CALLS)),
            )
            live = {f"k.{i}" for i in range(300)}
            for keys in found[:CALLS]:
                assert sorted(keys) == sorted(live)
            for objects in found[CALLS:]:
                assert objects == ["kept"]
        finally:
            await js.close()
