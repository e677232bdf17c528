"""The pipeline's datasets: orders from a stream, counts per subject, a copy into another stream.

- ``orders``: a streaming table fed by ``spark.readStream.format("jetstream")``
  (every message of the stream, from the first; each run reads on from where
  the previous one stopped).
- ``orders_per_subject``: a materialized view counting the orders per subject.
- ``archive``: a sink of format ``jetstream`` fed by an append flow: each order
  is published again under ``<ARCHIVE_PREFIX>.<its subject>``, with a message id
  derived from the write (``dedupe=auto``), so a retried task stores nothing
  twice.

Environment variables (defaults in brackets): ``NATS_URL``
[nats://127.0.0.1:4222], ``ORDERS_STREAM`` [ORDERS], ``ORDERS_SUBJECT``
[every subject of the stream], ``ARCHIVE_PREFIX`` [archive]. The stream that
captures ``<ARCHIVE_PREFIX>.>`` must exist.
"""

import os

from pyspark import pipelines as dp
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

NATS_URL = os.environ.get("NATS_URL", "nats://127.0.0.1:4222")
ORDERS_STREAM = os.environ.get("ORDERS_STREAM", "ORDERS")
ORDERS_SUBJECT = os.environ.get("ORDERS_SUBJECT", "")
ARCHIVE_PREFIX = os.environ.get("ARCHIVE_PREFIX", "archive")

# spark-pipelines >= 4.2 also gives these files a global `spark`; 4.1 does not.
spark = SparkSession.active()


@dp.table(
    comment="Every message of the orders stream: stream, subject, seq, timestamp, headers, data."
)
def orders() -> DataFrame:
    reader = (
        spark.readStream.format("jetstream")
        .option("servers", NATS_URL)
        .option("stream", ORDERS_STREAM)
        .option("startingOffsets", "earliest")
    )
    if ORDERS_SUBJECT:
        reader = reader.option("subject", ORDERS_SUBJECT)
    return reader.load()


@dp.materialized_view(comment="How many orders each subject holds.")
def orders_per_subject() -> DataFrame:
    return spark.read.table("orders").groupBy("subject").agg(F.count("*").alias("orders"))


dp.create_sink(
    "archive",
    "jetstream",
    {"servers": NATS_URL, "dedupe": "auto"},
)


@dp.append_flow(target="archive")
def archive_orders() -> DataFrame:
    return spark.readStream.table("orders").select(
        F.concat(F.lit(ARCHIVE_PREFIX + "."), "subject").alias("subject"),
        "data",
    )
