"""A Spark driver run as a subprocess: a batch read, a batch write and a streaming copy.

One Python process holds one SparkContext, and the test session's own is a
``local[2,4]`` one, so the tests that need another kind of session (a
standalone cluster, Spark Connect) run this script in a process of its own::

    python three_ways.py (--master spark://127.0.0.1:P | --remote local[2]) \
        --servers URL --source A --target B --copy C --checkpoint DIR --out result.json

It does three things with ``format("jetstream")``:

1. reads stream ``--source`` in four partitions (every row: stream, seq,
   subject, data) and, on a cluster, notes which Python worker process (pid)
   and which executor (its working directory) read each partition;
2. writes 600 rows from ``spark.range`` into stream ``--target`` with
   ``.mode("append")`` (subject ``<target>.<id % 3>``, data ``w-<id>``);
3. copies ``--source`` into ``--copy`` with a streaming query
   (a processing-time trigger until all is read, ``maxRecordsPerTrigger=400``, sink
   ``dedupe=auto``).

and writes what it saw as JSON to ``--out``; the test checks the streams with
a connection of its own. The formats are found without ``register()``: the
installed ``pyspark_jetstream`` module registers them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

WRITE_ROWS = 600
MAX_RECORDS_PER_TRIGGER = 400


def session(args: argparse.Namespace) -> SparkSession:
    builder = SparkSession.builder.appName("aiojetstream-three-ways")
    if args.remote:
        # The local Connect server listens on every interface unless told otherwise.
        builder = builder.remote(args.remote).config(
            "spark.connect.grpc.binding.address", "127.0.0.1"
        )
    else:
        builder = (
            builder.master(args.master)
            .config("spark.cores.max", "2")
            .config("spark.executor.cores", "1")
            .config("spark.executor.memory", "512m")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            # Start the first job only once both executors are there (not a sleep:
            # Spark's scheduler waits for the registrations, up to the bound).
            .config("spark.scheduler.minRegisteredResourcesRatio", "1.0")
            .config("spark.scheduler.maxRegisteredResourcesWaitingTime", "120s")
        )
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    builder = (
        builder.config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
    )
    return builder.getOrCreate()


def where_read(spark: SparkSession, args: argparse.Namespace) -> list[list[Any]]:
    """(pid, working directory) of the Python worker behind each partition of a read."""
    import pyarrow as pa

    def locate(batches: Iterator[Any]) -> Iterator[Any]:
        rows = sum(b.num_rows for b in batches)
        yield pa.RecordBatch.from_pydict(
            {"pid": [os.getpid()], "cwd": [os.getcwd()], "rows": [rows]}
        )

    df = source(spark, args).load().select("seq")
    located = df.mapInArrow(locate, "pid long, cwd string, rows long").collect()
    return [[r["pid"], r["cwd"], r["rows"]] for r in located]


def source(spark: SparkSession, args: argparse.Namespace) -> Any:
    return (
        spark.read.format("jetstream")
        .option("servers", args.servers)
        .option("stream", args.source)
        .option("numPartitions", 4)
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    how = parser.add_mutually_exclusive_group(required=True)
    how.add_argument("--master")
    how.add_argument("--remote")
    parser.add_argument("--servers", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--target", required=True)
    parser.add_argument("--copy", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    out: dict[str, Any] = {"pid": os.getpid()}
    timings: dict[str, float] = {}
    started = time.monotonic()
    spark = session(args)
    if not args.remote:
        spark.sparkContext.setLogLevel("WARN")
    out["spark_version"] = spark.version
    timings["session"] = time.monotonic() - started

    # 1. A batch read: every row.
    step = time.monotonic()
    rows = (
        source(spark, args)
        .load()
        .selectExpr("stream", "seq", "subject", "cast(data AS string) AS data")
    )
    out["read"] = [
        [r["stream"], r["seq"], r["subject"], r["data"]] for r in rows.orderBy("seq").collect()
    ]
    if not args.remote:
        out["where_read"] = where_read(spark, args)
    timings["read"] = time.monotonic() - step

    # 2. A batch write.
    step = time.monotonic()
    (
        spark.range(0, WRITE_ROWS, 1, 3)
        .select(
            F.concat(F.lit(f"{args.target}."), (F.col("id") % 3).cast("string")).alias("subject"),
            F.concat(F.lit("w-"), F.col("id").cast("string")).alias("data"),
        )
        .write.format("jetstream")
        .option("servers", args.servers)
        .mode("append")
        .save()
    )
    timings["write"] = time.monotonic() - step

    # 3. A streaming copy, in micro-batches of at most MAX_RECORDS_PER_TRIGGER.
    step = time.monotonic()
    query = (
        spark.readStream.format("jetstream")
        .option("servers", args.servers)
        .option("stream", args.source)
        .option("startingOffsets", "earliest")
        .option("maxRecordsPerTrigger", MAX_RECORDS_PER_TRIGGER)
        .option("numPartitions", 2)
        .load()
        .select("data")
        .writeStream.format("jetstream")
        .option("servers", args.servers)
        .option("subject", f"{args.copy}.copied")
        .option("dedupe", "auto")
        .option("checkpointLocation", args.checkpoint)
        .outputMode("append")
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    # Until the source holds nothing unread (Spark 4.0/4.1 would run AvailableNow
    # as one capped micro-batch).
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    failure = query.exception()
    if failure is not None:
        raise failure
    # The property, not ["numInputRows"]: over Connect only the sources carry the count.
    out["stream_batches"] = [p.numInputRows for p in query.recentProgress if p.numInputRows > 0]
    timings["stream"] = time.monotonic() - step

    step = time.monotonic()
    spark.stop()
    timings["stop"] = time.monotonic() - step
    out["timings"] = timings
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
