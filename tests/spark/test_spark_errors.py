"""Bad input for the Spark formats: each a clear error naming the option, before a job runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from aiojetstream import (
    FeatureNotSupportedError,
    JetStreamContext,
    KeyValueConfig,
    StreamConfig,
)
from spark.spark_helpers import Nats, reader

UNREACHABLE = "nats://127.0.0.1:1"


def jobs(spark: SparkSession) -> int:
    """How many Spark jobs have started so far."""
    return len(spark.sparkContext.statusTracker().getJobIdsForGroup())


def test_missing_stream(spark: SparkSession, nats: Nats) -> None:
    df = spark.read.format("jetstream").option("servers", nats.url).load()
    with pytest.raises(PySparkException, match=r"exactly one of the options 'stream'.*got none"):
        df.collect()


def test_unknown_stream_before_any_job(spark: SparkSession, nats: Nats, name: str) -> None:
    before = jobs(spark)
    with pytest.raises(PySparkException, match=rf"option 'stream': stream '{name}' does not exist"):
        reader(spark, nats.url, name).load().collect()
    assert jobs(spark) == before


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("startingOffsets", "yesterday", "option 'startingOffsets': expected earliest | latest"),
        ("startingOffsets", "0", "option 'startingOffsets'"),
        ("endingOffsets", "earliest", "option 'endingOffsets': expected latest"),
        ("endingOffsets", "-3", "option 'endingOffsets'"),
        ("startingTimestamp", "last tuesday", "option 'startingTimestamp': expected an ISO-8601"),
        ("numPartitions", "zero", "option 'numPartitions'"),
        ("failOnDataLoss", "maybe", "option 'failOnDataLoss'"),
        ("subject", "a..b", "option 'subject'"),
    ],
)
def test_malformed_read_options_fail_at_load(
    spark: SparkSession, nats: Nats, name: str, option: str, value: str, message: str
) -> None:
    with pytest.raises(PySparkException, match=message):
        reader(spark, nats.url, name, **{option: value}).load()


def test_ending_before_starting(spark: SparkSession, nats: Nats, name: str) -> None:
    with pytest.raises(PySparkException, match=r"'endingOffsets' \(5\) is before"):
        reader(spark, nats.url, name, startingOffsets=10, endingOffsets=5).load()


def test_ending_offsets_refused_for_streams(spark: SparkSession, nats: Nats, name: str) -> None:
    nats.run(lambda js: js.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"])))
    df = (
        spark.readStream.format("jetstream")
        .option("servers", nats.url)
        .option("stream", name)
        .option("endingOffsets", "10")
    )
    with pytest.raises(PySparkException, match="'endingOffsets' applies to batch reads only"):
        df.load().writeStream.format("console").start().awaitTermination(30)


def test_unreachable_server(spark: SparkSession) -> None:
    before = jobs(spark)
    with pytest.raises(
        PySparkException, match=r"cannot reach NATS at nats://127.0.0.1:1 \(option 'servers'\)"
    ):
        reader(spark, UNREACHABLE, "ORDERS").load().collect()
    assert jobs(spark) == before


def test_write_without_data_column(spark: SparkSession, nats: Nats) -> None:
    df = spark.createDataFrame([("x", "a.b")], "payload string, subject string")
    with pytest.raises(PySparkException, match="need a 'data' column"):
        df.write.format("jetstream").option("servers", nats.url).mode("append").save()


def test_write_without_subject(spark: SparkSession, nats: Nats) -> None:
    df = spark.createDataFrame([("x",)], "data string")
    with pytest.raises(PySparkException, match="need a subject"):
        df.write.format("jetstream").option("servers", nats.url).mode("append").save()


def test_write_subject_no_stream_captures(spark: SparkSession, nats: Nats, name: str) -> None:
    """The task's publish says what is wrong and what to do. Nothing but the connection
    is checked before the job: the account's subject mappings and imports reach streams
    a check of stream subjects does not see (tests/integration/test_spark_sink.py)."""
    df = spark.createDataFrame([("x",)], "data string")
    with pytest.raises(
        PySparkException,
        match=rf"NoRespondersError: no stream captures subject '{name}.x': "
        "create a stream whose subjects match it",
    ):
        df.write.format("jetstream").option("servers", nats.url).option(
            "subject", f"{name}.x"
        ).mode("append").save()


def test_write_wrong_column_types(spark: SparkSession, nats: Nats) -> None:
    df = spark.createDataFrame([(1, "a.b")], "data int, subject string")
    with pytest.raises(PySparkException, match="column 'data' must be binary or string"):
        df.write.format("jetstream").option("servers", nats.url).mode("append").save()
    df = spark.createDataFrame([("x", "a.b", 5)], "data string, subject string, headers int")
    with pytest.raises(PySparkException, match="column 'headers' must be map<string,string>"):
        df.write.format("jetstream").option("servers", nats.url).mode("append").save()


def test_write_with_a_column_twice_is_refused_before_the_job(
    spark: SparkSession, nats: Nats, name: str
) -> None:
    """A join leaving two 'msg_id' columns (or two 'value's) passed the check and
    failed in every task with Spark's DUPLICATED_FIELD_NAME_IN_ARROW_STRUCT."""
    left = spark.createDataFrame([(1, "x", "a")], "id int, data string, msg_id string")
    right = spark.createDataFrame([(1, "b")], "id int, msg_id string")
    joined = left.join(right, "id").drop("id")
    with pytest.raises(PySparkException, match="has column 'msg_id' twice"):
        joined.write.format("jetstream").option("servers", nats.url).option(
            "subject", f"{name}.x"
        ).mode("append").save()
    kv = spark.createDataFrame([(1, "k", b"v")], "id int, key string, value binary")
    values = spark.createDataFrame([(1, b"w")], "id int, value binary")
    with pytest.raises(PySparkException, match="has column 'value' twice"):
        kv.join(values, "id").drop("id").write.format("jetstream_kv").option(
            "servers", nats.url
        ).option("bucket", name).mode("append").save()


def test_write_overwrite_refused(spark: SparkSession, nats: Nats, name: str) -> None:
    df = spark.createDataFrame([("x",)], "data string")
    with pytest.raises(PySparkException, match=r"mode\('append'\) only"):
        df.write.format("jetstream").option("servers", nats.url).option(
            "subject", f"{name}.x"
        ).mode("overwrite").save()


def test_kv_missing_and_unknown_bucket(spark: SparkSession, nats: Nats, name: str) -> None:
    with pytest.raises(PySparkException, match="option 'bucket' is required"):
        spark.read.format("jetstream_kv").option("servers", nats.url).load().collect()
    with pytest.raises(PySparkException, match=rf"option 'bucket': bucket '{name}' does not exist"):
        spark.read.format("jetstream_kv").option("servers", nats.url).option(
            "bucket", name
        ).load().collect()
    df = spark.createDataFrame([("k", b"v")], "key string, value binary")
    with pytest.raises(PySparkException, match=rf"bucket '{name}' does not exist"):
        df.write.format("jetstream_kv").option("servers", nats.url).option("bucket", name).mode(
            "append"
        ).save()
    with pytest.raises(PySparkException, match="need columns 'key' and 'value'"):
        spark.createDataFrame([("k",)], "key string").write.format("jetstream_kv").option(
            "servers", nats.url
        ).option("bucket", name).mode("append").save()
    # A malformed bucket name fails at load(), before any job (was: when planned).
    with pytest.raises(PySparkException, match="option 'bucket': invalid name"):
        spark.read.format("jetstream_kv").option("servers", nats.url).option(
            "bucket", "no such.bucket"
        ).load()


def test_user_schema_refused(spark: SparkSession, nats: Nats, name: str) -> None:
    nats.run(lambda js: js.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"])))
    df = (
        spark.read.format("jetstream")
        .schema("data binary")
        .option("servers", nats.url)
        .option("stream", name)
        .load()
    )
    with pytest.raises(PySparkException, match=r"has a fixed schema struct<stream:string"):
        df.collect()


def test_complete_output_mode_refused(
    spark: SparkSession, nats: Nats, name: str, tmp_path: Path
) -> None:
    nats.run(lambda js: js.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"])))
    counts = (
        spark.readStream.format("jetstream")
        .option("servers", nats.url)
        .option("stream", name)
        .load()
        .groupBy("subject")
        .count()
        .selectExpr("cast(count as string) AS data")
    )
    writer = (
        counts.writeStream.format("jetstream")
        .option("servers", nats.url)
        .option("subject", f"{name}.counts")
        .option("checkpointLocation", str(tmp_path))
        .outputMode("complete")
    )
    with pytest.raises(PySparkException, match=r"cannot take outputMode\('complete'\)"):
        writer.start().awaitTermination(60)


def test_kv_read_of_a_bucket_without_direct_gets(
    spark: SparkSession, nats: Nats, name: str
) -> None:
    """Refused when planned, naming the bucket (the task would fail with no responders)."""

    async def without_direct(js: JetStreamContext) -> None:
        kv = await js.create_key_value(KeyValueConfig(bucket=name))
        config = kv.stream.cached_info.config
        await js.update_stream(config.model_copy(update={"allow_direct": False}))

    nats.run(without_direct)
    with pytest.raises(PySparkException, match=rf"bucket '{name}' does not allow direct gets"):
        spark.read.format("jetstream_kv").option("servers", nats.url).option(
            "bucket", name
        ).load().collect()


def test_kv_read_from_a_server_before_2_11(
    nats: Nats, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server without batch direct gets is refused when the read is planned."""
    from aiojetstream.spark._kv import KVReader
    from aiojetstream.spark._options import parse_kv_options

    nats.run(lambda js: js.create_key_value(KeyValueConfig(bucket=name)))

    async def level_of_2_10(self: JetStreamContext, *, timeout: float | None = None) -> int:
        return 0

    monkeypatch.setattr(JetStreamContext, "api_level", level_of_2_10)
    reader = KVReader(parse_kv_options({"servers": nats.url, "bucket": name}))
    with pytest.raises(FeatureNotSupportedError, match=r"nats-server >= 2\.11"):
        reader.partitions()


def _first_lines(error: BaseException, count: int) -> list[str]:
    return str(error).splitlines()[:count]


def test_errors_show_the_message_first(spark: SparkSession, nats: Nats, name: str) -> None:
    """Issue 26: the message is in the first lines, not under 17 frames (was 1,538 characters).

    Spark shows a data source's error as its formatted traceback: the entry
    point re-raises it with a traceback of one frame, without its chain.
    """
    missing = name  # no such stream or bucket
    with pytest.raises(PySparkException) as read:
        reader(spark, nats.url, missing).load().collect()
    lines = _first_lines(read.value, 4)
    assert lines[0].endswith("Traceback (most recent call last):")
    assert lines[3] == (
        f"aiojetstream._errors.InvalidOptionError: option 'stream': stream {missing!r} "
        f"does not exist at {nats.url}"
    )
    assert len(str(read.value)) < 500, str(read.value)
    with pytest.raises(PySparkException) as unreachable:
        reader(spark, UNREACHABLE, name).load().collect()
    assert _first_lines(unreachable.value, 4)[3].startswith(
        "aiojetstream._errors.ConnectionFailedError: aiojetstream.spark: cannot reach NATS at "
        f"{UNREACHABLE} (option 'servers'): could not connect to {UNREACHABLE} (tried twice): "
    )
    with pytest.raises(PySparkException) as kv:
        spark.read.format("jetstream_kv").option("servers", nats.url).option(
            "bucket", missing
        ).load().collect()
    assert _first_lines(kv.value, 4)[3].endswith(
        f"option 'bucket': bucket {missing!r} does not exist at {nats.url}"
    )
