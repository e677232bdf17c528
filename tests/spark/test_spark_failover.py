"""Spark reads and writes while a stream's leader is killed (NatsCluster(3)).

A streaming query copies an R3 stream: the source's driver-side calls (stream
info, offsets) and its read tasks ride out the election within
``retryTimeout``; the sink's tasks that fail on it are retried by Spark
(``local[2,4]``) and ``dedupe=auto`` keeps the retried rows from being stored
twice. The copy ends with every source message exactly once.

``format("jetstream_kv")`` rides it out the same way: its planning, read task
and write task (driven directly, as Spark's Python worker does) run right
after the kill of an R3 bucket's leader.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from pyspark.sql import Row, SparkSession
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from aiojetstream import JetStreamContext, JetStreamError, KeyValueConfig
from aiojetstream.spark._kv import JetStreamKVDataSource, KVReader
from aiojetstream.spark._options import parse_kv_options
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


def test_kv_read_and_write_ride_out_a_leader_kill(cluster: NatsCluster) -> None:
    """Without retries each call failed with the STREAM.INFO timeout of the dead leader."""
    nats = Nats(cluster.servers[0].url)  # the test's own connection stays on n1
    try:
        bucket = unique_name("KVF")
        keys = [f"k{i:02d}" for i in range(50)]

        async def fill(js: JetStreamContext) -> None:
            kv = await js.create_key_value(KeyValueConfig(bucket=bucket, replicas=3))
            for key in keys:
                await kv.put(key, b"v")

        nats.run(fill)
        nats.run(lambda js: move_stream_leader(js, f"KV_{bucket}", "n2"))
        nats.run(cluster.server("n2").kill())
        options = {
            "servers": ",".join(s.url for s in cluster.servers if s.server_name != "n2"),
            "bucket": bucket,
            "timeout": "2",  # a request to the dead leader fails after 2 s: then retried
            "retryTimeout": "60",
        }
        schema = StructType([StructField("key", StringType()), StructField("value", BinaryType())])

        def plan_and_read() -> list[str]:
            reader = KVReader(parse_kv_options(options))
            (partition,) = reader.partitions()
            return [k for b in reader.read(partition) for k in b.column("key").to_pylist()]

        def read() -> list[str]:
            reader = KVReader(parse_kv_options(options))
            batches = reader.read(InputPartition(bucket))
            return [k for b in batches for k in b.column("key").to_pylist()]

        def write() -> int:
            writer = JetStreamKVDataSource(options).writer(schema, False)
            return writer.write(iter([Row(key="written", value=b"w")])).rows

        # All at once, right after the kill: each meets the election.
        with ThreadPoolExecutor(3) as pool:
            planned = pool.submit(plan_and_read)
            task = pool.submit(read)
            written = pool.submit(write)
            # The reads may or may not see the write's key (they run side by side).
            assert [k for k in sorted(planned.result(timeout=120)) if k != "written"] == keys
            assert [k for k in sorted(task.result(timeout=120)) if k != "written"] == keys
            assert written.result(timeout=120) == 1
        kv = nats.run(lambda js: js.key_value(bucket))
        assert nats.run(kv.get("written")).value == b"w"
    finally:
        nats.close()
