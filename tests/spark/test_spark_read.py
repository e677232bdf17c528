"""Batch reads of ``format("jetstream")`` on real Spark against a real nats-server."""

from __future__ import annotations

import warnings
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

import aiojetstream.spark
from aiojetstream import JetStreamContext, StreamConfig
from helpers import wait_until_sync
from spark.spark_helpers import Nats, reader, rows

N = 300


def publish_mixed(nats: Nats, stream: str, n: int = N) -> list[dict[str, Any]]:
    """Publish n messages over three subjects, every other one with headers."""

    async def work(js: JetStreamContext) -> list[dict[str, Any]]:
        await js.create_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"]))
        sent = []
        for i in range(n):
            subject = f"{stream}.{('a', 'b', 'c')[i % 3]}"
            headers = {"Idx": str(i), "Kind": "odd"} if i % 2 else None
            data = b"payload-%d" % i
            ack = await js.publish(subject, data, headers=headers)
            sent.append({"subject": subject, "seq": ack.seq, "headers": headers, "data": data})
        return sent

    return nats.run(work)


def comparable(got: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"subject": r["subject"], "seq": r["seq"], "headers": r["headers"], "data": r["data"]}
        for r in got
    ]


def test_read_everything_exactly(spark: SparkSession, nats: Nats, name: str) -> None:
    sent = publish_mixed(nats, name)
    df = reader(spark, nats.url, name, numPartitions=3).load()
    assert df.rdd.getNumPartitions() == 3
    got = rows(df)
    assert comparable(got) == sent
    assert {r["stream"] for r in got} == {name}
    # Timestamps are the server's, in order, to the microsecond.
    stamps = [r["timestamp"] for r in got]
    assert stamps == sorted(stamps)
    info = nats.run(lambda js: js.stream(name))
    assert info.cached_info.state.messages == N
    # Each partition's ephemeral consumer was deleted at the end.
    assert nats.run(lambda js: js.stream(name)).cached_info.state.consumer_count == 0


def test_read_in_a_session_whose_timestamps_are_ntz(
    spark: SparkSession, nats: Nats, name: str
) -> None:
    """``spark.sql.timestampType=TIMESTAMP_NTZ`` does not turn the format's schema against it."""
    publish_mixed(nats, name, 5)
    spark.conf.set("spark.sql.timestampType", "TIMESTAMP_NTZ")
    try:
        df = reader(spark, nats.url, name).load()  # was: InvalidOptionError, a "fixed schema"
        assert df.schema["timestamp"].dataType.simpleString() == "timestamp"
        assert [r["seq"] for r in rows(df)] == [1, 2, 3, 4, 5]
    finally:
        spark.conf.unset("spark.sql.timestampType")


def test_sequence_ranges(spark: SparkSession, nats: Nats, name: str) -> None:
    sent = publish_mixed(nats, name)
    got = rows(reader(spark, nats.url, name, startingOffsets=11, endingOffsets=51).load())
    assert comparable(got) == sent[10:50]  # end exclusive, as Kafka's endingOffsets
    # A batch read from the end would always be empty: refused, as Kafka refuses it.
    with pytest.raises(PySparkException, match="'latest' applies to streaming reads only"):
        reader(spark, nats.url, name, startingOffsets="latest").load().collect()
    got = rows(reader(spark, nats.url, name, startingOffsets="earliest", endingOffsets=3).load())
    assert [r["seq"] for r in got] == [1, 2]
    # An end past the stream's end is its end now (the read stays repeatable).
    far = reader(spark, nats.url, name, startingOffsets=290, endingOffsets=10**12).load()
    assert far.rdd.getNumPartitions() == 1
    assert [r["seq"] for r in rows(far)] == list(range(290, 301))
    # A checkpoint-style JSON offset works as a starting point too.
    got = rows(
        reader(spark, nats.url, name, startingOffsets=f'{{"stream": "{name}", "seq": 299}}').load()
    )
    assert [r["seq"] for r in got] == [299, 300]


def test_subject_filters(spark: SparkSession, nats: Nats, name: str) -> None:
    sent = publish_mixed(nats, name)
    got = rows(reader(spark, nats.url, name, subject=f"{name}.b", numPartitions=4).load())
    assert comparable(got) == [m for m in sent if m["subject"].endswith(".b")]
    got = rows(reader(spark, nats.url, name, subject=f"{name}.a, {name}.c").load())
    assert comparable(got) == [m for m in sent if not m["subject"].endswith(".b")]
    got = rows(reader(spark, nats.url, name, subject=f"{name}.nothing").load())
    assert got == []


def test_starting_timestamp(spark: SparkSession, nats: Nats, name: str) -> None:
    publish_mixed(nats, name, 10)
    stream = nats.run(lambda js: js.stream(name))
    sixth = nats.run(stream.get_msg(6))
    got = rows(reader(spark, nats.url, name, startingTimestamp=sixth.time.isoformat()).load())
    assert [r["seq"] for r in got] == [6, 7, 8, 9, 10]
    future = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert rows(reader(spark, nats.url, name, startingTimestamp=future).load()) == []


def test_explicit_register_and_limit_leaves_no_consumer(
    spark: SparkSession, nats: Nats, name: str
) -> None:
    aiojetstream.spark.register(spark)  # idempotent next to the automatic registration
    publish_mixed(nats, name)
    first = reader(spark, nats.url, name, inactiveThreshold=2).load().limit(5).collect()
    assert len(first) == 5

    def consumers() -> int:
        return nats.run(lambda js: js.stream(name)).cached_info.state.consumer_count

    # limit() abandons the partition's generator; its consumer goes within its threshold.
    wait_until_sync(lambda: consumers() == 0, timeout=2 + 8, message="read consumer removed")


def test_failed_task_leaves_no_consumer(spark: SparkSession, nats: Nats, name: str) -> None:
    from pyspark.sql.functions import col, udf

    publish_mixed(nats, name)

    @udf("long", useArrow=False)  # a row UDF: pandas is not needed
    def explode(seq: int) -> int:
        if seq == 150:
            raise RuntimeError("boom")
        return seq

    df = reader(spark, nats.url, name, inactiveThreshold=2).load()
    with pytest.raises(PySparkException, match="boom"):
        df.select(explode(col("seq"))).collect()
    wait_until_sync(
        lambda: nats.run(lambda js: js.stream(name)).cached_info.state.consumer_count == 0,
        timeout=2 + 8,
    )


def test_data_loss_batch(spark: SparkSession, nats: Nats, name: str) -> None:
    publish_mixed(nats, name, 20)
    nats.run(lambda js: js.stream(name)).cached_info  # noqa: B018
    stream = nats.run(lambda js: js.stream(name))
    assert nats.run(stream.purge(sequence=11)) == 10  # 1..10 are gone
    with pytest.raises(PySparkException, match=r"no longer holds sequences 5\.\.10"):
        reader(spark, nats.url, name, startingOffsets=5).load().collect()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = rows(reader(spark, nats.url, name, startingOffsets=5, failOnDataLoss="false").load())
    assert [r["seq"] for r in got] == list(range(11, 21))
