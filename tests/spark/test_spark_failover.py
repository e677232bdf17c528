"""A streaming query copying an R3 stream while the stream's leader is killed (NatsCluster(3)).

The source's driver-side calls (stream info, offsets) and its read tasks ride
out the election within ``retryTimeout``; the sink's tasks that fail on it are
retried by Spark (``local[2,4]``) and ``dedupe=auto`` keeps the retried rows
from being stored twice. The copy ends with every source message exactly once.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from aiojetstream import JetStreamContext, JetStreamError
from aiojetstream.testing import NatsCluster
from helpers import unique_name, wait_until_sync
from reliability.harness import create_r3_stream, move_stream_leader, wait_stream_leader
from spark.spark_helpers import Nats

pytestmark = pytest.mark.cluster

COUNT = 3000


@pytest.fixture
def cluster() -> Iterator[NatsCluster]:
    nodes = NatsCluster(3)
    nodes.start_sync()
    try:
        yield nodes
    finally:
        nodes.stop_sync()


def count(nats: Nats, stream: str) -> int:
    """The messages ``stream`` holds; 0 while its info is not answered (an election)."""

    async def work(js: JetStreamContext) -> int:
        try:
            return (await (await js.stream(stream)).info(timeout=2)).state.messages
        except (JetStreamError, TimeoutError):
            return 0

    return nats.run(work)


def stored(nats: Nats, stream: str) -> list[bytes]:
    async def work(js: JetStreamContext) -> list[bytes]:
        info = await (await js.stream(stream)).info()
        if info.state.messages == 0:
            return []
        consumer = await js.ordered_consumer(stream)
        out = []
        async for msg in consumer.messages():
            out.append(msg.data)
            if msg.metadata.num_pending == 0:
                break
        return out

    return nats.run(work)


def test_streaming_copy_survives_a_leader_kill(
    spark: SparkSession, cluster: NatsCluster, tmp_path: Path
) -> None:
    n1 = cluster.servers[0]
    nats = Nats(n1.url)  # the test's own connection stays on n1, never killed
    try:
        src, dst = unique_name("SRC"), unique_name("DST")
        nats.run(lambda js: create_r3_stream(js, src, [f"{src}.>"]))
        nats.run(lambda js: create_r3_stream(js, dst, [f"{dst}.>"]))
        nats.run(lambda js: move_stream_leader(js, src, "n2"))

        async def fill(js: JetStreamContext) -> None:
            for i in range(COUNT):
                await js.publish_async(f"{src}.e", b"m-%d" % i)
            await js.publish_async_complete()

        nats.run(fill)
        servers = ",".join(cluster.urls)
        df = (
            spark.readStream.format("jetstream")
            .option("servers", servers)
            .option("stream", src)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "150")
            .option("retryTimeout", "60")
            .load()
            .select("data")
        )
        query = (
            df.writeStream.format("jetstream")
            .option("servers", servers)
            .option("subject", f"{dst}.copy")
            .option("dedupe", "auto")
            .option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(processingTime="100 milliseconds")
            .start()
        )
        try:
            wait_until_sync(
                lambda: len(stored(nats, dst)) >= 300, timeout=120, message="copy started"
            )
            nats.run(cluster.server("n2").kill())  # the source's leader
            nats.run(lambda js: wait_stream_leader(js, src, avoid={"n2"}, current=False))
            wait_until_sync(
                lambda: count(nats, dst) >= COUNT or not query.isActive,
                timeout=240,
                interval=0.5,
                message="the copy never completed",
            )
            assert query.isActive, query.exception()
        finally:
            query.stop()
        copied = stored(nats, dst)
        assert sorted(copied) == sorted(b"m-%d" % i for i in range(COUNT))  # exactly once
        assert len(copied) == COUNT
    finally:
        nats.close()
