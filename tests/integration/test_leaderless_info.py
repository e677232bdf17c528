"""Nothing is decided on a stream's info answered without a leader.

While a replicated stream has no leader, nats-server lets a member of its group
answer ``STREAM.INFO`` itself: ``cluster.leader`` empty and the member's own
state, which can be far behind (a node paused or restarting). A ``jetstream_kv``
read built its snapshot on it (124 of 20,100 keys, deleted keys read as live),
a batch read's end could come from it, and ``clear_backlog`` found "nothing to
clear" (1,500 stored messages were delivered after it). Such an answer is
``ClusterUnavailableError`` there (Spark retries it within ``retryTimeout``).
(The KV readers' side, a leader get answered 503, is tests/unit/test_kv_local.py:
a lone restarted peer sometimes refuses its info with 10008 instead, so a
cluster test of it could not be made to reach that state every time.)
"""

from __future__ import annotations

import asyncio

import pytest

import aiojetstream
from aiojetstream import ClusterUnavailableError, ConsumerConfig, KeyValueConfig, StreamConfig
from aiojetstream._admin import _stream_state
from aiojetstream.spark._kv import _Snapshot
from aiojetstream.spark._options import parse_source_options
from aiojetstream.spark._read import stream_bounds
from aiojetstream.testing import NatsCluster
from helpers import unique_name, wait_until

pytestmark = pytest.mark.cluster


async def test_stream_info_without_a_leader_is_not_read_from() -> None:
    async with NatsCluster(3) as cluster:
        admin = await aiojetstream.connect(cluster.urls, timeout=10)
        name, bucket = unique_name("LEADERLESS"), unique_name("leaderless")
        try:
            stream = await admin.create_stream(
                StreamConfig(name=name, subjects=[f"{name}.>"], num_replicas=3), timeout=10
            )
            kv = await admin.create_key_value(KeyValueConfig(bucket=bucket, replicas=3), timeout=10)
            for i in range(3):
                await admin.publish(f"{name}.x", b"%d" % i)
                await kv.put(f"k{i}", b"v")

            async def placed() -> bool:
                info = await stream.info()
                kv_info = await kv.stream.info()
                return bool(info.cluster and info.cluster.leader) and bool(
                    kv_info.cluster and kv_info.cluster.leader
                )

            await wait_until(placed, 30)
        finally:
            await admin.close()
        lone = cluster.servers[0]
        js = await aiojetstream.connect([lone.url], dont_randomize=True, timeout=2)
        try:
            for other in cluster.servers[1:]:
                await other.stop()  # no quorum: no leader, no election

            async def answered_leaderless() -> bool:
                try:
                    info = (await js.stream(name)).cached_info
                    kv_info = (await js.stream(f"KV_{bucket}")).cached_info
                except aiojetstream.JetStreamTimeoutError:
                    return False  # (the member answers once it gave up on the leader)
                return not (info.cluster and info.cluster.leader) and not (
                    kv_info.cluster and kv_info.cluster.leader
                )

            await wait_until(answered_leaderless, 60, interval=0.5)
            opts = parse_source_options({"servers": lone.url, "stream": name}, streaming=False)
            with pytest.raises(ClusterUnavailableError, match="no leader"):
                await stream_bounds(js, opts, name)
            snapshot = _Snapshot(await js.key_value(bucket), retry_timeout=1)
            with pytest.raises(ClusterUnavailableError, match="no leader"):
                await snapshot._info()
            # clear_backlog's and reset's look-up of the stream's last sequence: asked
            # again within the call's time, then refused.
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 2.0
            with pytest.raises(ClusterUnavailableError, match="no leader"):
                await _stream_state(js._api, name, lambda: deadline - loop.time())
            assert loop.time() >= deadline - 1.0  # it waited for an election
        finally:
            await js.close()


async def test_clear_backlog_right_after_a_scale_up_waits_for_the_leader() -> None:
    """Scaled from one replica to three, a stream names no leader for about 0.1 s:
    clear_backlog raised ClusterUnavailableError there (8 of 8). The look-up is asked
    again within the call's time."""
    async with NatsCluster(3) as cluster:
        js = await aiojetstream.connect(cluster.urls, timeout=10)
        try:
            name = unique_name("SCALEUP")
            config = StreamConfig(name=name, subjects=[f"{name}.>"], num_replicas=1)
            await js.create_stream(config, timeout=10)
            for i in range(5):
                await js.publish(f"{name}.x", b"%d" % i)
            consumer = await js.create_consumer(
                name, ConsumerConfig(durable_name="c", num_replicas=1), timeout=10
            )
            await js.update_stream(config.model_copy(update={"num_replicas": 3}), timeout=10)
            assert await consumer.clear_backlog(timeout=10) == 6
        finally:
            await js.close()
