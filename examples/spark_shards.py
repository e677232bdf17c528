"""Sharded streams as one Spark table: ``streamPattern``, new shards, backlog control.

1. An asyncio service publishes orders to four shard streams ``SHARD-0`` ..
   ``SHARD-3`` (100 each).
2. A Spark streaming job reads every stream matching ``SHARD-[0-9]+`` as one
   table (``streamPattern``), in micro-batches of at most 150 messages over
   all shards (``maxOffsetsPerTrigger``, on every Spark version), each split
   into at least 4 tasks (``minPartitions``), and copies the orders into the
   stream ``ALL_ORDERS`` with a header naming the shard they came from
   (``dedupe=auto``: a retried task stores nothing twice). The job stops once
   it has read what the shards hold (``processAllAvailable``; a scheduled job
   would use ``Trigger.AvailableNow``, which Spark 4.0 and 4.1 run as one
   micro-batch, cap or not).
3. A fifth shard appears and ``SHARD-0`` gets 20 more orders. The job runs
   again from its checkpoint: it copies only the new orders, and reads the new
   shard from its first message.
4. A batch read of ``ALL_ORDERS`` counts the copies per shard and checks them
   against what was published (exit status 1 when they differ).

Needs Java 17 and ``pip install 'aiojetstream[spark]'``. Run it against an
embedded server with ``python -m aiojetstream.testing run -- python
examples/spark_shards.py``, or against your own:
``NATS_URL=nats://127.0.0.1:4222 python examples/spark_shards.py``. The
streams ``SHARD-*`` and ``ALL_ORDERS`` are deleted and created again at the start,
when this example created them (it marks them in their metadata); it stops,
deleting nothing, when the server holds such a stream of its own.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import os
import sys
import tempfile
from collections import Counter

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import aiojetstream
from aiojetstream import JetStreamContext, StreamConfig, StreamNotFoundError

SINK = "ALL_ORDERS"
#: The metadata key and value marking the streams this example created.
OWNER_KEY, OWNER = "created_by", "aiojetstream examples/spark_shards.py"
MARK = {OWNER_KEY: OWNER}


async def reset(js: JetStreamContext, shards: int) -> None:
    """Delete what an earlier run left; create the shards and the sink.

    Only streams this example created (marked by ``OWNER`` in their metadata)
    are deleted: against a server holding a ``SHARD-*`` or ``ALL_ORDERS``
    stream of its own, the example stops instead.
    """
    ours = []
    async for info in js.list_streams():
        name = info.config.name
        if name.startswith("SHARD-") or name == SINK:
            if (info.config.metadata or {}).get(OWNER_KEY) != OWNER:
                raise SystemExit(
                    f"The server has a stream {name} that this example did not create; it "
                    "deletes and recreates its own at the start, so it stops here. Run it "
                    "against another server, or delete that one yourself."
                )
            ours.append(name)
    for name in ours:
        with contextlib.suppress(StreamNotFoundError):
            await js.delete_stream(name)
    for shard in range(shards):
        await create_shard(js, shard)
    await js.create_stream(StreamConfig(name=SINK, subjects=["all.>"], metadata=MARK))


async def create_shard(js: JetStreamContext, shard: int) -> None:
    """Create stream ``SHARD-<shard>`` capturing ``shard.<shard>.>``."""
    await js.create_stream(
        StreamConfig(name=f"SHARD-{shard}", subjects=[f"shard.{shard}.>"], metadata=MARK)
    )


async def publish(
    js: JetStreamContext, shard: int, first: int, count: int, sent: Counter[str]
) -> None:
    """Publish orders ``first .. first + count - 1`` to one shard."""
    for n in range(first, first + count):
        order = {"order_id": f"s{shard}-o{n}", "amount": n % 50 + 1}
        await js.publish_async(f"shard.{shard}.orders", json.dumps(order).encode())
    await js.publish_async_complete()
    sent[f"SHARD-{shard}"] += count


def start_spark() -> SparkSession:
    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers need aiojetstream and pyarrow
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("aiojetstream-spark-shards")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def copy_shards(spark: SparkSession, url: str, checkpoint: str) -> None:
    """Copy every new order of every shard into ``ALL_ORDERS``, then stop."""
    orders = (
        spark.readStream.format("jetstream")
        .option("servers", url)
        .option("streamPattern", "SHARD-[0-9]+")  # a full match over stream names
        .option("startingOffsets", "earliest")  # only for a new checkpoint
        .option("maxOffsetsPerTrigger", 150)  # messages per micro-batch, all shards
        .option("minPartitions", 4)  # tasks per micro-batch, at least
        .load()
        .select(
            "data",
            F.create_map(F.lit("shard"), F.col("stream")).alias("headers"),
            "stream",  # with seq: each row's dedupe=auto id names the message it copies
            "seq",
        )
    )
    query = (
        orders.writeStream.format("jetstream")
        .option("servers", url)
        .option("subject", "all.orders")
        .option("dedupe", "auto")
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()  # until the shards hold nothing unread
    finally:
        query.stop()
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    sizes = [int(p["numInputRows"]) for p in batches]
    print(f"  {sum(sizes)} orders copied in micro-batches of {sizes}")
    end = batches[-1]["sources"][0]["endOffset"]
    if isinstance(end, str):  # JSON text (Spark 4.0 may give the offset's Python repr)
        end = ast.literal_eval(end) if end.startswith("{'") else json.loads(end)
    end = end["streams"]
    print("  checkpointed: " + ", ".join(f"{s} next {p['seq']}" for s, p in sorted(end.items())))


def copies_per_shard(spark: SparkSession, url: str) -> Counter[str]:
    """A batch read of ``ALL_ORDERS``: how many copies came from each shard."""
    copies = spark.read.format("jetstream").option("servers", url).option("stream", SINK).load()
    rows = copies.groupBy(F.col("headers")["shard"].alias("shard")).count().collect()
    return Counter({r["shard"]: int(r["count"]) for r in rows})


async def main() -> int:
    url = os.environ.get("NATS_URL", "nats://127.0.0.1:4222")
    sent: Counter[str] = Counter()
    spark = start_spark()
    try:
        with tempfile.TemporaryDirectory() as work:
            checkpoint = os.path.join(work, "checkpoint")
            async with await aiojetstream.connect(url) as js:
                await reset(js, shards=4)
                for shard in range(4):
                    await publish(js, shard, 0, 100, sent)
                print(f"Published 100 orders to each of SHARD-0..SHARD-3 at {url}")
                print("First run:")
                copy_shards(spark, url, checkpoint)
                await create_shard(js, 4)
                await publish(js, 4, 0, 50, sent)
                await publish(js, 0, 100, 20, sent)
                print("Created SHARD-4 with 50 orders; published 20 more to SHARD-0")
                print("Second run (from the checkpoint):")
                copy_shards(spark, url, checkpoint)
            copied = copies_per_shard(spark, url)
    finally:
        spark.stop()
    for name, copies in sorted(copied.items()):
        print(f"  {name}: {copies} copies")
    if copied != sent:
        print(f"MISMATCH: published {dict(sent)}, copied {dict(copied)}")
        return 1
    print(f"OK: {sum(sent.values())} orders from {len(sent)} shards, each copied exactly once")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
