"""Real Spark: several streams as one table, partitioning, connection reuse, push-down, options."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from aiojetstream import JetStreamContext, StreamConfig
from helpers import wait_until_sync
from spark.spark_helpers import CreateSpy, Nats, requires_spark, run_available_now, start_query

#: Python data sources take pushed filters from Spark 4.1 on.


def create(nats_: Nats, stream: str, count: int, subject: str = "e") -> None:
    async def work(js: JetStreamContext) -> None:
        await js.create_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"]))
        for i in range(count):
            await js.publish_async(f"{stream}.{subject}", b"%s-%d" % (stream.encode(), i + 1))
        await js.publish_async_complete()

    nats_.run(work)


def publish(nats_: Nats, subject: str, count: int, first: int = 1) -> None:
    async def work(js: JetStreamContext) -> None:
        for i in range(first, first + count):
            await js.publish_async(subject, b"%d" % i)
        await js.publish_async_complete()

    nats_.run(work)


def read(spark: SparkSession, url: str, **options: Any) -> DataFrame:
    r = spark.read.format("jetstream").option("servers", url)
    for key, value in options.items():
        r = r.option(key, str(value))
    return r.load()


def triples(df: DataFrame) -> list[tuple[str, int, bytes]]:
    return sorted((r["stream"], r["seq"], bytes(r["data"])) for r in df.collect())


@pytest.fixture
def spy_factory(nats: Nats) -> Iterator[Any]:
    spies: list[CreateSpy] = []

    def make(stream: str) -> CreateSpy:
        spies.append(CreateSpy(nats.url, stream))
        return spies[-1]

    yield make
    for spy in spies:
        spy.close()


# ----------------------------------------------------------------------------- batch


def test_streams_read_as_one_table(spark: SparkSession, nats: Nats, name: str) -> None:
    a, b, c = f"{name}-0", f"{name}-1", f"{name}-2"
    create(nats, a, 5)
    create(nats, b, 3)
    create(nats, c, 2)
    df = read(spark, nats.url, streams=f"{a},{b}")
    assert triples(df) == [(a, i, b"%s-%d" % (a.encode(), i)) for i in range(1, 6)] + [
        (b, i, b"%s-%d" % (b.encode(), i)) for i in range(1, 4)
    ]
    # A full match of the pattern: c matches, X-prefixed streams do not.
    create(nats, f"X{name}-3", 1)
    df = read(spark, nats.url, streamPattern=f"{name}-[0-9]")
    assert {r["stream"] for r in df.select("stream").collect()} == {a, b, c}
    assert df.count() == 10


def test_offsets_per_stream_as_json(spark: SparkSession, nats: Nats, name: str) -> None:
    a, b = f"{name}-0", f"{name}-1"
    create(nats, a, 10)
    create(nats, b, 10)
    df = read(
        spark,
        nats.url,
        streams=f"{a},{b}",
        startingOffsets=json.dumps({a: 4, b: "earliest"}),
        endingOffsets=json.dumps({a: 6, b: "latest"}),
    )
    assert [(s, q) for s, q, _ in triples(df)] == [(a, 4), (a, 5)] + [(b, i) for i in range(1, 11)]


def test_one_streams_checkpoint_offset_in_a_read_of_several(
    spark: SparkSession, nats: Nats, name: str
) -> None:
    """A checkpoint offset naming one stream applies to that stream only (it was
    taken as every stream's: the other one silently started at its sequence)."""
    a, b = f"{name}-0", f"{name}-1"
    create(nats, a, 10)
    create(nats, b, 10)
    offset = json.dumps({"stream": a, "seq": 7, "created": "2026-11-25T02:11:20+00:00"})
    df = read(spark, nats.url, streams=f"{a},{b}", startingOffsets=offset)
    assert [(s, q) for s, q, _ in triples(df)] == [(a, i) for i in range(7, 11)] + [
        (b, i) for i in range(1, 11)
    ]


def test_min_partitions_and_the_default(spark: SparkSession, nats: Nats, name: str) -> None:
    a, b = f"{name}-0", f"{name}-1"
    create(nats, a, 30)
    create(nats, b, 3)
    assert read(spark, nats.url, streams=f"{a},{b}").rdd.getNumPartitions() == 2  # one each
    df = read(spark, nats.url, streams=f"{a},{b}", minPartitions=8)
    assert df.rdd.getNumPartitions() == 8
    assert df.count() == 33
    df = read(spark, nats.url, stream=a, numPartitions=3)
    assert df.rdd.getNumPartitions() == 3


def test_one_connection_per_worker_process(
    spark: SparkSession, nats: Nats, name: str, spy_factory: Any
) -> None:
    create(nats, name, 800)
    spy = spy_factory(name)
    df = read(spark, nats.url, stream=name, numPartitions=8)
    assert df.count() == 800
    wait_until_sync(lambda: len(spy.configs()) == 8, message="8 read consumers")
    # Eight tasks on two cores: the Python workers reuse their connection (at most
    # one per worker process, two run at a time), instead of one per task.
    assert len(spy.connections()) <= 3, spy.connections()


def test_unknown_option_fails_when_planned(spark: SparkSession, nats: Nats, name: str) -> None:
    create(nats, name, 2)
    with pytest.raises(PySparkException, match="did you mean 'startingOffsets'"):
        read(spark, nats.url, stream=name, startingOffset="earliest").collect()
    lenient = read(
        spark, nats.url, stream=name, startingOffset="earliest", ignoreUnknownOptions="true"
    )
    assert lenient.count() == 2
    with pytest.raises(PySparkException, match="exactly one of the options 'stream'"):
        read(spark, nats.url, stream=name, streams=name).collect()


def test_timestamps_as_epoch_milliseconds(spark: SparkSession, nats: Nats, name: str) -> None:
    create(nats, name, 0)
    # Three groups of ten, each published once the clock has passed the previous
    # group's last message by 2 ms: every group has milliseconds of its own.
    first: list[datetime] = []
    for group in range(3):
        publish(nats, f"{name}.e", 10, first=10 * group + 1)
        last = nats.run(get_time(nats.js, name, 10 * group + 10))
        first.append(nats.run(get_time(nats.js, name, 10 * group + 1)))
        passed = last + timedelta(milliseconds=2)
        wait_until_sync(lambda passed=passed: datetime.now(UTC) > passed)  # type: ignore[misc]
    start, end = (int(t.timestamp() * 1000) for t in first[1:])
    df = read(spark, nats.url, stream=name, startingTimestamp=start, endingTimestamp=end)
    assert sorted(r["seq"] for r in df.collect()) == list(range(11, 21))
    iso = first[1].isoformat()
    df = read(spark, nats.url, stream=name, startingTimestamp=iso, endingTimestamp=end)
    assert sorted(r["seq"] for r in df.collect()) == list(range(11, 21))


async def get_time(js: JetStreamContext, stream: str, seq: int) -> datetime:
    return (await (await js.stream(stream)).get_msg(seq)).time


@requires_spark((4, 1), "filter push-down (pushFilters)")
def test_filter_push_down_narrows_the_read(
    spark: SparkSession, nats: Nats, name: str, spy_factory: Any
) -> None:
    create(nats, name, 0)
    for part in ("a", "b.x", "b.y", "c"):
        publish(nats, f"{name}.{part}", 5)
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        spy = spy_factory(name)

        def df() -> DataFrame:
            # A new DataFrame per query: Spark 4.1-4.3 reuse a DataFrame's planned read,
            # pushed filters included, for every scan of it (docs).
            return read(spark, nats.url, stream=name, pushDownPredicate="true")

        got = df().filter(f"subject = '{name}.a' AND seq >= 3").collect()
        assert sorted(r["seq"] for r in got) == [3, 4, 5]
        wait_until_sync(lambda: len(spy.configs()) == 1)
        config = spy.configs()[0]
        assert config["filter_subject"] == f"{name}.a"
        assert config["opt_start_seq"] == 3
        got = df().filter(f"subject LIKE '{name}.b.%'").collect()
        assert sorted(r["seq"] for r in got) == list(range(6, 16))
        wait_until_sync(lambda: len(spy.configs()) == 2)
        assert spy.configs()[1]["filter_subject"] == f"{name}.b.>"
        got = df().filter(f"subject IN ('{name}.a', '{name}.c') AND seq < 17").collect()
        assert sorted(r["seq"] for r in got) == [1, 2, 3, 4, 5, 16]
        wait_until_sync(lambda: len(spy.configs()) == 3)
        assert sorted(spy.configs()[2]["filter_subjects"]) == [f"{name}.a", f"{name}.c"]
        # A time filter starts the read at the first message at or after it.
        rows = df().orderBy("seq").collect()
        assert len(rows) == 20
        cut = rows[12]["timestamp"]
        whole = df()
        got = whole.filter(whole.timestamp >= cut).collect()
        assert sorted(r["seq"] for r in got) == [r["seq"] for r in rows if r["timestamp"] >= cut]
        # Contradictory filters read nothing (no consumer at all).
        before = len(spy.configs())
        assert df().filter("seq > 10 AND seq < 5").count() == 0
        assert len(spy.configs()) == before
    finally:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")
    # With push-down off (the default) the same filters work, evaluated by Spark.
    got = read(spark, nats.url, stream=name).filter(f"subject = '{name}.a'").collect()
    assert len(got) == 5


@requires_spark((4, 1), "filter push-down (pushFilters)")
def test_filters_are_not_pushed_unless_asked_for(
    spark: SparkSession, nats: Nats, name: str, spy_factory: Any
) -> None:
    """With Spark's push-down setting on (session-wide, perhaps for another source),
    the filters a query pushes narrowed the read planned for the whole DataFrame:
    Spark 4.1-4.3 use the read planned for the last filters pushed for every scan of
    it, so a union of two filtered halves of one DataFrame read one half twice."""
    create(nats, name, 0)
    publish(nats, f"{name}.a", 10)
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        spy = spy_factory(name)
        df = read(spark, nats.url, stream=name)
        both = df.filter("seq < 3").union(df.filter("seq > 7"))
        assert sorted(r["seq"] for r in both.collect()) == [1, 2, 8, 9, 10]
        df.createOrReplaceTempView(f"v_{name}")
        counts = spark.sql(
            f"SELECT (SELECT count(*) FROM v_{name} WHERE seq < 3) AS early, "
            f"(SELECT count(*) FROM v_{name} WHERE seq > 7) AS late"
        ).collect()[0]
        assert (counts["early"], counts["late"]) == (2, 3)
        # No read consumer was narrowed to a pushed filter.
        wait_until_sync(lambda: len(spy.configs()) >= 2)
        assert all("opt_start_seq" not in c or c["opt_start_seq"] == 1 for c in spy.configs())
    finally:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")


# ----------------------------------------------------------------------------- streaming


class Collector:
    """A foreachBatch sink (runs in this driver process): (stream, seq) of every batch."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[str, int]]] = []
        self.lock = threading.Lock()

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        rows = sorted((r["stream"], r["seq"]) for r in df.select("stream", "seq").collect())
        with self.lock:
            self.batches.append(rows)

    @property
    def rows(self) -> list[tuple[str, int]]:
        with self.lock:
            return sorted(r for b in self.batches for r in b)


def stream_df(spark: SparkSession, url: str, **options: Any) -> DataFrame:
    r = spark.readStream.format("jetstream").option("servers", url)
    for key, value in options.items():
        r = r.option(key, str(value))
    return r.load()


def test_pattern_query_picks_up_new_streams_and_fails_on_a_deleted_one(
    spark: SparkSession, nats: Nats, name: str, tmp_path: Path
) -> None:
    a, b = f"{name}-A", f"{name}-B"
    create(nats, a, 4)
    sink = Collector()
    df = stream_df(spark, nats.url, streamPattern=f"{name}-.*", startingOffsets="earliest")
    query = start_query(df, sink, tmp_path / "cp", "200 milliseconds")
    try:
        wait_until_sync(lambda: len(sink.rows) == 4, timeout=60)
        create(nats, b, 3)  # after the query started: read from its first message
        wait_until_sync(lambda: len(sink.rows) == 7, timeout=60)
        assert sink.rows == [(a, i) for i in range(1, 5)] + [(b, i) for i in range(1, 4)]
        nats.run(lambda js: js.delete_stream(b))
        wait_until_sync(lambda: not query.isActive, timeout=60, message="data loss not noticed")
        assert "was deleted" in str(query.exception())
    finally:
        query.stop()


def test_max_offsets_per_trigger_over_streams(
    spark: SparkSession, nats: Nats, name: str, tmp_path: Path
) -> None:
    a, b, c = f"{name}-A", f"{name}-B", f"{name}-C"
    create(nats, a, 90)
    create(nats, b, 30)
    create(nats, c, 1)  # its share of the first batch is 0.2: one, not none
    sink = Collector()
    df = stream_df(
        spark,
        nats.url,
        streams=f"{a},{b},{c}",
        startingOffsets="earliest",
        maxOffsetsPerTrigger=25,
    )
    # A processing-time trigger: Spark 4.0/4.1 run Trigger.AvailableNow as one batch.
    query = start_query(df, sink, tmp_path / "cp", "100 milliseconds")
    try:
        wait_until_sync(lambda: len(sink.rows) >= 121 or not query.isActive, timeout=120)
    finally:
        query.stop()
    assert query.exception() is None
    assert sink.rows == ([(a, i) for i in range(1, 91)] + [(b, i) for i in range(1, 31)] + [(c, 1)])
    assert max(len(batch) for batch in sink.batches) <= 25
    batches = [batch for batch in sink.batches if batch]
    assert len(batches) == 5  # 121 / 25, rounded up
    assert (c, 1) in batches[0]  # was: in the third (0 of the cap until then)


def test_single_stream_checkpoint_continues_with_streams(
    spark: SparkSession, nats: Nats, name: str, tmp_path: Path
) -> None:
    a, b = f"{name}-A", f"{name}-B"
    create(nats, a, 5)
    sink = Collector()
    checkpoint = tmp_path / "cp"
    run_available_now(
        stream_df(spark, nats.url, stream=a, startingOffsets="earliest"), sink, checkpoint
    )
    assert sink.rows == [(a, i) for i in range(1, 6)]
    publish(nats, f"{a}.e", 2)
    create(nats, b, 3)
    again = Collector()
    run_available_now(stream_df(spark, nats.url, streams=f"{a},{b}"), again, checkpoint)
    assert again.rows == [(a, 6), (a, 7), (b, 1), (b, 2), (b, 3)]
