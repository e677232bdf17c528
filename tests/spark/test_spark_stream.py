"""Streaming reads of ``format("jetstream")``: triggers, checkpoints, limits, data loss."""

from __future__ import annotations

import json
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from aiojetstream import JetStreamContext, StreamConfig
from helpers import wait_until_sync
from spark.spark_helpers import Nats, requires_spark, run_available_now, start_query


def create(nats: Nats, stream: str) -> None:
    nats.run(lambda js: js.create_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"])))


def publish(nats: Nats, stream: str, first: int, count: int) -> None:
    async def work(js: JetStreamContext) -> None:
        for i in range(first, first + count):
            await js.publish_async(f"{stream}.e", b"%d" % i)
        await js.publish_async_complete()

    nats.run(work)


class Collector:
    """A foreachBatch sink (runs in this driver process): every row of every batch."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.lock = threading.Lock()

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        seqs = [r["seq"] for r in df.select("seq").collect()]
        with self.lock:
            self.batches.append(sorted(seqs))

    @property
    def seqs(self) -> list[int]:
        with self.lock:
            return [s for b in self.batches for s in b]


def stream_df(spark: SparkSession, url: str, stream: str, **options: Any) -> DataFrame:
    r = spark.readStream.format("jetstream").option("servers", url).option("stream", stream)
    for key, value in options.items():
        r = r.option(key, str(value))
    return r.load()


def test_available_now_and_restart_from_checkpoint(
    spark: SparkSession, nats: Nats, name: str, tmp_path: Path
) -> None:
    create(nats, name)
    publish(nats, name, 0, 250)
    sink = Collector()
    df = stream_df(spark, nats.url, name, startingOffsets="earliest", numPartitions=2)
    run_available_now(df, sink, tmp_path / "cp")
    assert sink.seqs == list(range(1, 251))
    publish(nats, name, 250, 120)
    # Run again from the checkpoint: only the new messages, none twice.
    run_available_now(df, sink, tmp_path / "cp")
    publish(nats, name, 370, 30)
    run_available_now(df, sink, tmp_path / "cp")
    assert sink.seqs == list(range(1, 401))
    # A restart with nothing new reads nothing.
    before = len(sink.seqs)
    run_available_now(df, sink, tmp_path / "cp")
    assert len(sink.seqs) == before
    # The offsets Spark checkpointed are {"stream", "seq", "created", "from"} with seq =
    # next sequence, the stream's creation time and where that batch started.
    offsets = sorted(
        (p for p in (tmp_path / "cp" / "offsets").iterdir() if p.name.isdigit()),
        key=lambda p: int(p.name),
    )
    last = json.loads(offsets[-1].read_text().splitlines()[-1])
    created = nats.run(lambda js: js.stream(name)).cached_info.created.isoformat()
    assert last == {"stream": name, "seq": 401, "created": created, "from": 371}


def test_default_start_is_latest(
    spark: SparkSession, nats: Nats, name: str, tmp_path: Path
) -> None:
    create(nats, name)
    publish(nats, name, 0, 50)
    sink = Collector()
    run_available_now(stream_df(spark, nats.url, name), sink, tmp_path / "cp")
    assert sink.seqs == []
    publish(nats, name, 50, 5)
    run_available_now(stream_df(spark, nats.url, name), sink, tmp_path / "cp")
    assert sink.seqs == [51, 52, 53, 54, 55]


def test_processing_time_trigger(
    spark: SparkSession, nats: Nats, name: str, tmp_path: Path
) -> None:
    create(nats, name)
    sink = Collector()
    df = stream_df(spark, nats.url, name, startingOffsets="earliest")
    query = start_query(df, sink, tmp_path / "cp", "500 milliseconds")
    try:
        publish(nats, name, 0, 100)
        wait_until_sync(lambda: len(sink.seqs) >= 100, timeout=60, message="first 100")
        publish(nats, name, 100, 100)
        wait_until_sync(lambda: len(sink.seqs) >= 200, timeout=60, message="second 100")
    finally:
        query.stop()
    assert query.exception() is None
    assert sink.seqs == list(range(1, 201))


def test_max_records_per_trigger(
    spark: SparkSession, nats: Nats, name: str, tmp_path: Path
) -> None:
    """Every Spark version (4.0/4.1 included): at most 100 per micro-batch."""
    create(nats, name)
    publish(nats, name, 0, 350)
    sink = Collector()
    df = stream_df(spark, nats.url, name, startingOffsets="earliest", maxRecordsPerTrigger=100)
    query = start_query(df, sink, tmp_path / "cp", "100 milliseconds")
    try:
        wait_until_sync(
            lambda: len(sink.seqs) >= 350 or not query.isActive, timeout=120, interval=0.1
        )
    finally:
        query.stop()
    assert query.exception() is None
    assert [len(b) for b in sink.batches if b] == [100, 100, 100, 50]
    assert sink.seqs == list(range(1, 351))


@requires_spark((4, 2), "Trigger.AvailableNow in several micro-batches (4.0/4.1 run one)")
def test_max_records_per_trigger_available_now(
    spark: SparkSession, nats: Nats, name: str, tmp_path: Path
) -> None:
    create(nats, name)
    publish(nats, name, 0, 350)
    sink = Collector()
    df = stream_df(spark, nats.url, name, startingOffsets="earliest", maxRecordsPerTrigger=100)
    run_available_now(df, sink, tmp_path / "cp")
    assert [len(b) for b in sink.batches] == [100, 100, 100, 50]
    assert sink.seqs == list(range(1, 351))


def test_data_loss_on_restart(spark: SparkSession, nats: Nats, name: str, tmp_path: Path) -> None:
    create(nats, name)
    publish(nats, name, 0, 10)
    sink = Collector()
    strict = stream_df(spark, nats.url, name, startingOffsets="earliest")
    run_available_now(strict, sink, tmp_path / "cp")
    assert sink.seqs == list(range(1, 11))
    publish(nats, name, 10, 10)  # 11..20, never read
    stream = nats.run(lambda js: js.stream(name))
    assert nats.run(stream.purge(sequence=16)) == 15  # 11..15 lost before the restart
    with pytest.raises(PySparkException, match=r"no longer holds sequences 11\.\.15"):
        run_available_now(strict, sink, tmp_path / "cp")
    assert sink.seqs == list(range(1, 11))
    lenient = stream_df(spark, nats.url, name, startingOffsets="earliest", failOnDataLoss="false")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_available_now(lenient, sink, tmp_path / "cp")
    assert sink.seqs == list(range(1, 11)) + list(range(16, 21))


@pytest.mark.parametrize("new_messages", [5, 30], ids=["shorter", "longer"])
def test_recreated_stream_is_reported(
    spark: SparkSession, nats: Nats, name: str, tmp_path: Path, new_messages: int
) -> None:
    """Deleted and created again, shorter than the offset or (the case that went
    unnoticed: the query read on from the old offset and never read the new
    stream's first 20 messages) longer."""
    create(nats, name)
    publish(nats, name, 0, 20)
    sink = Collector()
    df = stream_df(spark, nats.url, name, startingOffsets="earliest")
    run_available_now(df, sink, tmp_path / "cp")
    assert sink.seqs == list(range(1, 21))
    nats.run(lambda js: js.delete_stream(name))
    create(nats, name)
    publish(nats, name, 0, new_messages)  # sequences restart at 1
    with pytest.raises(PySparkException, match="was deleted and created again"):
        run_available_now(df, sink, tmp_path / "cp")
    assert sink.seqs == list(range(1, 21))
    # failOnDataLoss=false: the new stream from its first sequence.
    lenient = stream_df(spark, nats.url, name, startingOffsets="earliest", failOnDataLoss="false")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_available_now(lenient, sink, tmp_path / "cp")
    assert sink.seqs == list(range(1, 21)) + list(range(1, new_messages + 1))


def test_checkpoint_of_another_stream_is_refused(
    spark: SparkSession, nats: Nats, name: str, tmp_path: Path
) -> None:
    create(nats, name)
    other = name + "X"
    create(nats, other)
    publish(nats, name, 0, 3)
    sink = Collector()
    run_available_now(stream_df(spark, nats.url, name, startingOffsets="earliest"), sink, tmp_path)
    with pytest.raises(PySparkException, match="checkpoint holds offsets of stream"):
        run_available_now(stream_df(spark, nats.url, other), sink, tmp_path)
