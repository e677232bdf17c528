"""Writes through ``format("jetstream")`` and ``format("jetstream_kv")`` on real Spark."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import Column, SparkSession
from pyspark.sql.functions import col, udf

from aiojetstream import (
    JetStreamContext,
    KeyNotFoundError,
    KeyValueConfig,
    RawStreamMessage,
    StreamConfig,
)
from helpers import wait_until_sync
from spark.spark_helpers import Nats, reader, rows


def create(nats: Nats, stream: str, **config: object) -> None:
    nats.run(
        lambda js: js.create_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"], **config))
    )


def stored(nats: Nats, stream: str) -> int:
    return nats.run(lambda js: js.stream(stream)).cached_info.state.messages


def test_write_read_round_trip_with_ttl(spark: SparkSession, nats: Nats, name: str) -> None:
    create(nats, name, allow_msg_ttl=True)
    data = [
        (b"keep-1", f"{name}.a", {"X-Trace": "t1", "Kind": "k"}, "id-1", None),
        (b"gone-1", f"{name}.b", None, None, 1.0),
        (b"keep-2", f"{name}.a", {"X-Trace": "t2"}, None, 3600.0),
        (b"gone-2", f"{name}.c", {"X-Trace": "t3"}, "id-4", 1.5),
    ]
    df = spark.createDataFrame(
        data, "data binary, subject string, headers map<string,string>, msg_id string, ttl double"
    )
    df.write.format("jetstream").option("servers", nats.url).mode("append").save()
    # All four were stored (last_seq 4); the 1 s ones expire, the others stay.
    wait_until_sync(lambda: stored(nats, name) == 2, timeout=15, message="TTL expiry")
    assert nats.run(lambda js: js.stream(name)).cached_info.state.last_seq == 4
    back = {
        bytes(r["data"]): r for r in rows(reader(spark, nats.url, name).load())
    }  # 4.0: bytearray
    assert sorted(back) == [b"keep-1", b"keep-2"]
    assert back[b"keep-1"]["headers"] == {"X-Trace": "t1", "Kind": "k", "Nats-Msg-Id": "id-1"}
    assert back[b"keep-2"]["headers"] == {"X-Trace": "t2", "Nats-TTL": "3600"}
    assert back[b"keep-1"]["subject"] == f"{name}.a"
    assert back[b"keep-2"]["subject"] == f"{name}.a"
    # A duration string works as well as seconds.
    spark.createDataFrame(
        [(b"s", f"{name}.s", "1h30m")], "data binary, subject string, ttl string"
    ).write.format("jetstream").option("servers", nats.url).mode("append").save()
    assert nats.run(lambda js: js.stream(name)).cached_info.state.messages == 3
    last = nats.run(nats.js.stream(name))
    assert nats.run(last.get_msg(5)).headers == {"Nats-TTL": "5400"}


def test_write_string_data_and_option_subject(spark: SparkSession, nats: Nats, name: str) -> None:
    create(nats, name)
    df = spark.createDataFrame(
        [("hello", None), ("world", f"{name}.own"), ("numbers", None)],
        "data string, subject string",
    )
    # The option overrides the 'subject' column for every row (Kafka's topic option).
    df.write.format("jetstream").option("servers", nats.url).option(
        "subject", f"{name}.default"
    ).mode("append").save()
    got = rows(reader(spark, nats.url, name).load())
    assert sorted((r["subject"], r["data"]) for r in got) == sorted(
        [
            (f"{name}.default", b"hello"),
            (f"{name}.default", b"world"),
            (f"{name}.default", b"numbers"),
        ]
    )


def test_option_subject_retargets_a_copy_of_a_read(
    spark: SparkSession, nats: Nats, name: str
) -> None:
    """A whole read (it has a 'subject' column) written with option('subject'): the
    column won, the rows went back into the source stream and the target got none."""
    source, target = name + "SRC", name + "DST"
    create(nats, source)
    create(nats, target)
    spark.createDataFrame(
        [(b"%d" % i, f"{source}.e") for i in range(5)], "data binary, subject string"
    ).write.format("jetstream").option("servers", nats.url).mode("append").save()
    reader(spark, nats.url, source).load().write.format("jetstream").option(
        "servers", nats.url
    ).option("subject", f"{target}.copy").option("dedupe", "auto").mode("append").save()
    assert stored(nats, source) == 5
    got = rows(reader(spark, nats.url, target).load())
    assert sorted((r["subject"], bytes(r["data"])) for r in got) == [
        (f"{target}.copy", b"%d" % i) for i in range(5)
    ]


@pytest.fixture
def small_arrow_batches(spark: SparkSession) -> Iterator[None]:
    """Arrow batches of 100 rows: a task that fails part-way has published some rows."""
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    old = spark.conf.get(key)
    assert old is not None
    spark.conf.set(key, "100")
    try:
        yield
    finally:
        spark.conf.set(key, old)


def fail_first_attempt(column: Column) -> Column:
    """A UDF failing each task's first attempt part-way through its rows.

    Defined inside the function so cloudpickle ships it by value (the test
    module is not importable in Spark's workers).
    """

    def fail(i: int) -> int:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is not None and ctx.attemptNumber() == 0 and i % 10_000 == 9_000:
            raise RuntimeError("injected task failure")
        return i

    return udf(fail, "long", useArrow=False)(column)  # a row UDF: no pandas


ROWS = 20_000


def retried_write(spark: SparkSession, url: str, stream: str, **options: str) -> None:
    df = spark.range(0, ROWS, numPartitions=2).select(fail_first_attempt(col("id")).alias("id"))
    df = df.selectExpr("cast(id as string) as data", "concat('id-', id) as msg_id")
    if options.pop("with_msg_id", "yes") == "no":
        df = df.drop("msg_id")
    # A small publish window: acks arrive (and rows are stored) before the failure.
    w = (
        df.write.format("jetstream")
        .option("servers", url)
        .option("subject", f"{stream}.w")
        .option("maxPending", "20")
    )
    for key, value in options.items():
        w = w.option(key, value)
    w.mode("append").save()


def test_task_retries_without_ids_duplicate(
    spark: SparkSession, nats: Nats, name: str, small_arrow_batches: None
) -> None:
    """The control: the injected failure really republishes rows when nothing dedupes."""
    create(nats, name)
    retried_write(spark, nats.url, name, with_msg_id="no")
    assert stored(nats, name) > ROWS


def test_task_retries_store_once_with_msg_id(
    spark: SparkSession, nats: Nats, name: str, small_arrow_batches: None
) -> None:
    create(nats, name)
    retried_write(spark, nats.url, name)
    assert stored(nats, name) == ROWS


def test_task_retries_store_once_with_dedupe_auto(
    spark: SparkSession, nats: Nats, name: str, small_arrow_batches: None
) -> None:
    create(nats, name)
    retried_write(spark, nats.url, name, with_msg_id="no", dedupe="auto")
    assert stored(nats, name) == ROWS
    got = rows(reader(spark, nats.url, name).load())
    assert sorted(int(r["data"]) for r in got) == list(range(ROWS))
    assert all(r["headers"]["Nats-Msg-Id"] for r in got)


def everything(nats: Nats, stream: str) -> list[RawStreamMessage]:
    """Every message ``stream`` holds, gaps and all (by batch direct gets)."""

    async def work(js: JetStreamContext) -> list[RawStreamMessage]:
        handle = await js.stream(stream)
        out: list[RawStreamMessage] = []
        while True:
            start = out[-1].seq + 1 if out else 1
            page = [m async for m in handle.get_batch(500, seq=start)]
            if not page:
                return out
            out += page

    return nats.run(work)


def test_dedupe_auto_ids_name_the_message_a_row_was_read_from(
    spark: SparkSession, nats: Nats, name: str, small_arrow_batches: None
) -> None:
    """A copy with dedupe=auto whose retried task reads one message fewer (removed from
    the source between the attempts, here by a per-subject limit): the ids were row
    positions, so every later row took the id of the row before it, and the first row
    the first attempt had not stored was dropped as a duplicate: never copied, no error.
    With the read's ``stream`` and ``seq`` columns the ids name the message."""
    source, target, count = f"{name}S", f"{name}T", 4_000
    create(nats, source, max_msgs_per_subject=1, allow_direct=True)
    create(nats, target, allow_direct=True)

    async def fill(js: JetStreamContext) -> None:
        for i in range(count):
            await js.publish_async(f"{source}.k{i}", b"%d" % (i + 1))
        await js.publish_async_complete(timeout=60)

    nats.run(fill)
    url = nats.url

    def remove_one_then_fail(seq: int) -> int:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is not None and ctx.attemptNumber() == 0 and seq == 3_601:
            import asyncio

            import aiojetstream

            async def replace() -> None:
                js = await aiojetstream.connect(url)
                try:  # the per-subject limit removes sequence 10 from the source
                    await js.publish(f"{source}.k9", b"new")
                finally:
                    await js.close()

            asyncio.run(replace())
            raise RuntimeError("injected task failure")
        return seq

    fail = udf(remove_one_then_fail, "long", useArrow=False)
    df = reader(spark, url, source, numPartitions=1).load()
    copy = df.select("data", "stream", fail(col("seq")).alias("seq"))
    # A small publish window: rows past sequence 10 are stored before the failure.
    copy.write.format("jetstream").option("servers", url).option(
        "subject", f"{target}.copy"
    ).option("dedupe", "auto").option("maxPending", "20").mode("append").save()
    held = {m.data for m in everything(nats, source) if m.seq <= count}
    copied = [m.data for m in everything(nats, target)]
    assert len(held) == count - 1
    assert held - set(copied) == set()  # every message the source still holds was copied
    assert len(copied) == count  # and each once (sequence 10 too, by the first attempt)


def test_dedupe_auto_keeps_a_msg_id_given_in_the_headers(
    spark: SparkSession, nats: Nats, name: str
) -> None:
    """A copy job (the read side's headers carry the source's Nats-Msg-Id) written
    with dedupe=auto: the generated id replaced the row's own, and a re-run stored
    every row again."""
    create(nats, name)
    data = [
        (b"a", {"Nats-Msg-Id": "orig-1", "X": "1"}, None),
        (b"b", {"X": "2"}, None),
        (b"c", {"Nats-Msg-Id": "orig-3"}, "col-3"),  # the msg_id column wins
    ]
    df = spark.createDataFrame(data, "data binary, headers map<string,string>, msg_id string")
    for _ in range(2):  # a re-run of the same job
        df.coalesce(1).write.format("jetstream").option("servers", nats.url).option(
            "subject", f"{name}.x"
        ).option("dedupe", "auto").mode("append").save()
    got = {bytes(r["data"]): r["headers"] for r in rows(reader(spark, nats.url, name).load())}
    assert got[b"a"]["Nats-Msg-Id"] == "orig-1"
    assert got[b"c"]["Nats-Msg-Id"] == "col-3"
    assert got[b"b"]["Nats-Msg-Id"] not in ("orig-1", "col-3")
    # Rows with an id of their own were stored once; the row without one gets a new
    # id per write (as documented), so it was stored twice.
    assert stored(nats, name) == 4


def test_failed_ack_fails_the_write(spark: SparkSession, nats: Nats, name: str) -> None:
    create(nats, name, max_msgs=5, discard="new")
    df = spark.range(0, 20, numPartitions=1).selectExpr("cast(id as string) as data")
    with pytest.raises(PySparkException, match=r"maximum messages exceeded|10077"):
        df.write.format("jetstream").option("servers", nats.url).option(
            "subject", f"{name}.x"
        ).mode("append").save()
    assert stored(nats, name) == 5


def test_streaming_write_dedupe_auto_with_retries_and_replay(
    spark: SparkSession, nats: Nats, name: str, tmp_path: Path, small_arrow_batches: None
) -> None:
    """Several micro-batches (maxRecordsPerTrigger), failed task attempts and a
    replayed batch store every row exactly once: the ids hold the batch id, so the
    batches' equal partition and row numbers are not taken for duplicates."""
    source, target = name + "SRC", name + "DST"
    create(nats, source)
    create(nats, target)

    async def fill(js: JetStreamContext) -> None:
        for i in range(ROWS):
            await js.publish_async(f"{source}.e", b"%d" % i)
        await js.publish_async_complete()

    nats.run(fill)
    df = (
        spark.readStream.format("jetstream")
        .option("servers", nats.url)
        .option("stream", source)
        .option("startingOffsets", "earliest")
        .option("numPartitions", "2")
        .option("maxRecordsPerTrigger", str(ROWS // 4))
        .load()
        .select(fail_first_attempt(col("seq") - 1).alias("n"), col("data"))
        .select("data")
    )

    def run() -> int:
        """Run the query until it has copied what the source holds; its batches."""
        query = (
            df.writeStream.format("jetstream")
            .option("servers", nats.url)
            .option("subject", f"{target}.copy")
            .option("dedupe", "auto")
            .option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(processingTime="0 seconds")  # several capped batches on every version
            .start()
        )
        try:
            query.processAllAvailable()
        finally:
            query.stop()
        assert query.exception() is None
        return sum(1 for p in query.recentProgress if p["numInputRows"])

    assert run() >= 4
    assert stored(nats, target) == ROWS
    copied = rows(reader(spark, nats.url, target).load())
    assert sorted(int(r["data"]) for r in copied) == list(range(ROWS))
    # Replay the last micro-batch, as after a crash between the write and the commit
    # log: the same query and batch ids, so the stream drops every copy.
    commits = [p for p in (tmp_path / "cp" / "commits").iterdir() if p.name.isdigit()]
    last = max(commits, key=lambda p: int(p.name))
    last.unlink()
    (tmp_path / "cp" / "commits" / f".{last.name}.crc").unlink(missing_ok=True)
    assert run() >= 1
    assert stored(nats, target) == ROWS


def test_streaming_copy_replayed_in_other_partitions_stores_once(
    spark: SparkSession, nats: Nats, name: str, tmp_path: Path
) -> None:
    """A micro-batch of a copy (stream and seq kept, dedupe=auto) replayed after a
    restart with another numPartitions: its ranges are cut elsewhere, and the ids held
    the partition, so every message that changed partitions was stored again. (A source
    whose first sequence moved, with failOnDataLoss=false, cuts elsewhere too.)"""
    source, target, count = name + "SRC", name + "DST", 100
    create(nats, source)
    create(nats, target, allow_direct=True)

    async def fill(js: JetStreamContext) -> None:
        for i in range(count):
            await js.publish_async(f"{source}.e", b"%d" % i)
        await js.publish_async_complete()

    nats.run(fill)
    checkpoint = tmp_path / "cp"

    def run(partitions: int) -> None:
        query = (
            spark.readStream.format("jetstream")
            .option("servers", nats.url)
            .option("stream", source)
            .option("startingOffsets", "earliest")
            .option("numPartitions", str(partitions))
            .load()
            .select("data", "stream", "seq")
            .writeStream.format("jetstream")
            .option("servers", nats.url)
            .option("subject", f"{target}.copy")
            .option("dedupe", "auto")
            .option("checkpointLocation", str(checkpoint))
            .start()
        )
        try:
            query.processAllAvailable()
        finally:
            query.stop()
        assert query.exception() is None

    run(2)
    assert stored(nats, target) == count
    # Replay the batch, as after a crash between the write and the commit log.
    for done in (checkpoint / "commits").iterdir():
        done.unlink()
    run(3)
    copied = [int(m.data) for m in everything(nats, target)]
    assert sorted(copied) == list(range(count))


def test_kv_write_and_read(spark: SparkSession, nats: Nats, name: str) -> None:
    nats.run(lambda js: js.create_key_value(KeyValueConfig(bucket=name, history=5)))
    kv = nats.run(lambda js: js.key_value(name))
    nats.run(kv.put("old", b"will be deleted"))
    nats.run(kv.put("kept", b"from before"))
    df = spark.createDataFrame(
        [("a", b"1"), ("b", b"2"), ("a", b"3"), ("old", None), ("c", b"")],
        "key string, value binary",
    )
    df.coalesce(1).write.format("jetstream_kv").option("servers", nats.url).option(
        "bucket", name
    ).mode("append").save()
    assert nats.run(kv.get("a")).value == b"3"
    with pytest.raises(KeyNotFoundError):
        nats.run(kv.get("old"))
    got = (
        spark.read.format("jetstream_kv").option("servers", nats.url).option("bucket", name).load()
    )
    table = {r["key"]: r for r in got.collect()}
    assert {k: r["value"] for k, r in table.items()} == {
        "a": b"3",
        "b": b"2",
        "c": b"",
        "kept": b"from before",
    }
    assert {r["bucket"] for r in table.values()} == {name}
    assert table["a"]["revision"] == nats.run(kv.get("a")).revision
    # Spark's timestamps are microseconds; collect() gives them naive, in local time.
    created = nats.run(kv.get("a")).created
    assert table["a"]["created"].timestamp() == pytest.approx(created.timestamp(), abs=1e-6)
    # String values are written as UTF-8.
    spark.createDataFrame([("s", "text")], "key string, value string").write.format(
        "jetstream_kv"
    ).option("servers", nats.url).option("bucket", name).mode("append").save()
    assert nats.run(kv.get("s")).value == b"text"
    # The same read in a session whose timestamps are TIMESTAMP_NTZ (was: "fixed schema").
    spark.conf.set("spark.sql.timestampType", "TIMESTAMP_NTZ")
    try:
        again = spark.read.format("jetstream_kv").option("servers", nats.url)
        keys = sorted(r["key"] for r in again.option("bucket", name).load().collect())
        assert keys == ["a", "b", "c", "kept", "s"]
    finally:
        spark.conf.unset("spark.sql.timestampType")
