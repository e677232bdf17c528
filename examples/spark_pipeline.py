"""A Spark Structured Streaming pipeline between a stream and a key-value bucket.

1. An asyncio service publishes order events (JSON ``{"order_id", "amount",
   "ts"}``) to the stream ``ORDERS``.
2. A Spark streaming job reads the stream with ``format("jetstream")`` from the
   earliest message, parses the JSON in ``data``, counts and sums the orders
   per minute of event time, and writes the totals to the key-value bucket
   ``order_totals`` with ``format("jetstream_kv")`` inside ``foreachBatch``
   (one key per minute, such as ``2026-11-24T05-47``).
   ``Trigger.AvailableNow`` makes the query read what the stream holds when it
   starts, and stop (``examples/spark_shards.py`` caps micro-batches too).
3. More orders arrive and the job runs again from its checkpoint: it reads only
   the new orders and updates the minutes they fall in.
4. The service reads the totals back with ``aiojetstream`` and checks that they
   add up to what it published (exit status 1 when they do not).

Needs Java 17 and ``pip install 'aiojetstream[spark]'``. Run it with
``make spark-demo`` (starts an embedded nats-server when NATS_URL is unset) or
against your own server:
``NATS_URL=nats://127.0.0.1:4222 python examples/spark_pipeline.py``.
The stream ``ORDERS`` (on ``orders.>``) and the bucket ``order_totals`` are
deleted and created again at the start, when this example created them (it
marks them in their metadata); it stops, deleting nothing, when the server
holds a stream or bucket of those names of its own.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import os
import random
import sys
import tempfile
from collections import Counter
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import aiojetstream
import aiojetstream.spark
from aiojetstream import (
    BucketNotFoundError,
    JetStreamContext,
    KeyValueConfig,
    StreamConfig,
    StreamNotFoundError,
)

STREAM = "ORDERS"
BUCKET = "order_totals"
ORDER_SCHEMA = "order_id string, amount decimal(10,2), ts timestamp"
#: The metadata key and value marking the stream and bucket this example created.
OWNER_KEY, OWNER = "created_by", "aiojetstream examples/spark_pipeline.py"
NOT_OURS = (
    "The server has {what} that this example did not create; it deletes and recreates "
    "its own at the start, so it stops here. Run it against another server (unset "
    "NATS_URL for an embedded one), or delete that one yourself."
)
MINUTE_KEY = "yyyy-MM-dd'T'HH-mm"  # KV keys allow no ':' (letters, digits, - _ = . /)


class Expected:
    """What the service published: orders and amount per minute key."""

    def __init__(self) -> None:
        self.orders: Counter[str] = Counter()
        self.amounts: dict[str, Decimal] = {}

    def add(self, ts: datetime, amount: Decimal) -> None:
        """Count one order under its minute."""
        key = ts.strftime("%Y-%m-%dT%H-%M")
        self.orders[key] += 1
        self.amounts[key] = self.amounts.get(key, Decimal(0)) + amount


# ----------------------------------------------------------------------------- asyncio side


async def reset(js: JetStreamContext) -> None:
    """Start from an empty stream and bucket, so the example can run again.

    Only a stream and a bucket this example created (marked by ``OWNER`` in
    their metadata) are deleted: against a server holding a stream ``ORDERS``
    or a bucket ``order_totals`` of its own, the example stops instead.
    """
    with contextlib.suppress(StreamNotFoundError):
        stream = await js.stream(STREAM)
        if (stream.cached_info.config.metadata or {}).get(OWNER_KEY) != OWNER:
            raise SystemExit(NOT_OURS.format(what=f"a stream {STREAM}"))
        await js.delete_stream(STREAM)
    with contextlib.suppress(BucketNotFoundError):
        kv = await js.key_value(BUCKET)
        if (await kv.status()).metadata.get(OWNER_KEY) != OWNER:
            raise SystemExit(NOT_OURS.format(what=f"a key-value bucket {BUCKET}"))
        await js.delete_key_value(BUCKET)
    owner = {OWNER_KEY: OWNER}
    await js.create_stream(StreamConfig(name=STREAM, subjects=["orders.>"], metadata=owner))
    await js.create_key_value(KeyValueConfig(bucket=BUCKET, metadata=owner))


async def publish_orders(
    js: JetStreamContext, first: int, count: int, start: datetime, expected: Expected
) -> None:
    """Publish ``count`` orders with event times in the 8 minutes after ``start``."""
    rng = random.Random(first)
    for n in range(first, first + count):
        ts = start + timedelta(milliseconds=rng.randrange(8 * 60_000))
        amount = Decimal(rng.randint(100, 25_000)) / 100  # 1.00 .. 250.00
        event = {
            "order_id": f"o-{n}",
            "amount": float(amount),
            "ts": ts.isoformat(timespec="milliseconds"),
        }
        region = ("eu", "us")[n % 2]
        # msg_id: a publish retried by this service is stored once.
        await js.publish_async(f"orders.{region}", json.dumps(event).encode(), msg_id=f"o-{n}")
        expected.add(ts, amount)
    await js.publish_async_complete()
    print(f"Published orders o-{first}..o-{first + count - 1} to stream {STREAM}")


async def read_totals(js: JetStreamContext) -> dict[str, tuple[int, Decimal]]:
    """The bucket's totals: minute key -> (orders, amount)."""
    kv = await js.key_value(BUCKET)
    totals: dict[str, tuple[int, Decimal]] = {}
    async for key in kv.keys():
        entry = await kv.get(key)
        value = json.loads(entry.value)  # {"orders": 104, "amount": "11554.92"}
        totals[key] = (int(value["orders"]), Decimal(value["amount"]))
    return totals


# ----------------------------------------------------------------------------- Spark side


def start_spark() -> SparkSession:
    # Python workers must use this interpreter (it has pyarrow and aiojetstream),
    # and the driver should not bind a public interface.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("aiojetstream-spark-pipeline")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    # Installing aiojetstream registers the formats already; this call does the
    # same where the package is only on the path.
    aiojetstream.spark.register(spark)
    return spark


def run_totals_job(spark: SparkSession, url: str, checkpoint: str) -> None:
    """Read ``ORDERS`` from the checkpoint (or the start) to its end; update the totals."""
    orders = (
        spark.readStream.format("jetstream")
        .option("servers", url)
        .option("stream", STREAM)
        .option("startingOffsets", "earliest")  # only for a new checkpoint
        .load()
        .select(F.from_json(F.col("data").cast("string"), ORDER_SCHEMA).alias("order"))
        .select("order.*")
    )
    totals = (
        orders.withWatermark("ts", "10 minutes")
        .groupBy(F.window("ts", "1 minute"))
        .agg(F.count("*").alias("orders"), F.sum("amount").alias("amount"))
        .select(
            F.date_format("window.start", MINUTE_KEY).alias("key"),
            F.to_json(F.struct("orders", F.col("amount").cast("string").alias("amount"))).alias(
                "value"
            ),
        )
    )

    def save(batch: DataFrame, batch_id: int) -> None:
        # Update mode: the batch holds the minutes whose totals changed, with
        # their new running totals. KV writes are batch writes, hence foreachBatch.
        batch.persist()  # computed once for the write and the count
        (
            batch.write.format("jetstream_kv")
            .option("servers", url)
            .option("bucket", BUCKET)
            .mode("append")  # the only save mode; Spark's default errorifexists fails
            .save()
        )
        print(f"  micro-batch {batch_id}: {batch.count()} minute totals written to {BUCKET}")
        batch.unpersist()

    query = (
        totals.writeStream.outputMode("update")
        .foreachBatch(save)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    progress = query.lastProgress
    end = progress["sources"][0]["endOffset"] if progress else None
    if isinstance(end, str) and end.startswith("{'"):  # Spark 4.0: the offset's Python repr
        end = ast.literal_eval(end)
    if isinstance(end, dict):
        end = json.dumps(end)
    print(f"  query done; checkpointed offset {end}")


# ----------------------------------------------------------------------------- the pipeline


async def main() -> int:
    url = os.environ.get("NATS_URL", "nats://127.0.0.1:4222")
    async with await aiojetstream.connect(url) as js:
        await reset(js)
        print(f"Connected to {url}; created stream {STREAM} and bucket {BUCKET}")
        expected = Expected()
        start = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=10)
        await publish_orders(js, 0, 600, start, expected)

        # Spark's API blocks: run it in a thread so this service's loop stays live.
        spark = await asyncio.to_thread(start_spark)
        try:
            with tempfile.TemporaryDirectory(prefix="spark-pipeline-") as checkpoint:
                print("Spark job, first run:")
                await asyncio.to_thread(run_totals_job, spark, url, checkpoint)
                await publish_orders(js, 600, 200, start, expected)
                print("Spark job, second run (from the checkpoint):")
                await asyncio.to_thread(run_totals_job, spark, url, checkpoint)
        finally:
            await asyncio.to_thread(spark.stop)

        totals = await read_totals(js)

    print(f"Totals in bucket {BUCKET}:")
    for key, (n, total) in sorted(totals.items()):
        print(f"  {key}  {n:>4} orders  {total:>10}")
    published = {key: (n, expected.amounts[key]) for key, n in expected.orders.items()}
    if totals != published:
        print(f"MISMATCH: published {published}, the bucket holds {totals}")
        return 1
    count = sum(expected.orders.values())
    amount = sum(expected.amounts.values(), Decimal(0))
    print(f"OK: {count} orders, {amount} in total, over {len(totals)} minutes, match the bucket")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
