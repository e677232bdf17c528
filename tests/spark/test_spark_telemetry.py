"""Row and batch metrics of the Spark data sources (issue 28), on real Spark.

The counters live in the executors' Python workers, out of reach of an
in-memory reader in the driver. So the test does what a user does on a
cluster: it ships a module with ``addPyFile`` whose function sets up the
worker's MeterProvider (here a console exporter writing one JSON line per
export into a file per worker process), names it in the ``telemetry`` option,
and reads the files back.
"""

from __future__ import annotations

import json
import textwrap
import uuid
from collections import defaultdict
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from aiojetstream import StreamConfig
from spark.spark_helpers import Nats, reader


@pytest.fixture
def worker_setup(spark: SparkSession, tmp_path: Path) -> tuple[str, Path]:
    """A module shipped to the workers: ``<name>:configure`` writes metrics under a directory."""
    out = tmp_path / "metrics"
    out.mkdir()
    name = f"otel_setup_{uuid.uuid4().hex[:8]}"
    source = tmp_path / f"{name}.py"
    source.write_text(
        textwrap.dedent(
            f"""
            import os

            from opentelemetry import metrics
            from opentelemetry.sdk.metrics import MeterProvider
            from opentelemetry.sdk.metrics.export import (
                ConsoleMetricExporter,
                PeriodicExportingMetricReader,
            )


            def configure():
                out = open(os.path.join({str(out)!r}, f"{{os.getpid()}}.jsonl"), "a")
                exporter = ConsoleMetricExporter(
                    out=out, formatter=lambda data: data.to_json(indent=None) + "\\n"
                )
                reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
                metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
            """
        )
    )
    spark.sparkContext.addPyFile(str(source))
    return f"{name}:configure", out


def totals(out: Path, target: str) -> dict[tuple[str, str, str], int]:
    """(metric, operation, format) -> the total over the workers (counters are cumulative)."""
    found: dict[tuple[str, str, str], int] = defaultdict(int)
    for path in out.glob("*.jsonl"):
        last: dict[tuple[str, str, str], int] = {}
        for line in path.read_text().splitlines():
            data = json.loads(line)
            for resource in data["resource_metrics"]:
                for scope in resource["scope_metrics"]:
                    for metric in scope["metrics"]:
                        for point in metric["data"]["data_points"]:
                            labels = point["attributes"]
                            if labels.get("aiojetstream.spark.target") != target:
                                continue
                            key = (
                                metric["name"],
                                labels["aiojetstream.spark.operation"],
                                labels["aiojetstream.spark.format"],
                            )
                            last[key] = point["value"]  # the latest export of this process
        for key, value in last.items():
            found[key] += value
    return dict(found)


def test_reads_and_writes_count_rows_and_batches(
    spark: SparkSession, nats: Nats, name: str, worker_setup: tuple[str, Path]
) -> None:
    telemetry, out = worker_setup
    nats.run(lambda js: js.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"])))
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    old = spark.conf.get(key)
    assert old is not None
    spark.conf.set(key, "100")  # a write of 250 rows in 2 partitions: at least 3 batches
    try:
        df = spark.createDataFrame(
            [(f"row-{i}".encode(),) for i in range(250)], "data binary"
        ).repartition(2)
        df.write.format("jetstream").option("servers", nats.url).option(
            "subject", f"{name}.in"
        ).option("telemetry", telemetry).mode("append").save()
    finally:
        spark.conf.set(key, old)
    # One pass over the data (an orderBy would read it twice: its sampling job too).
    got = reader(spark, nats.url, name, telemetry=telemetry).load().collect()
    assert len(got) == 250
    # Nothing travels per row: the stored messages carry no trace context.
    assert all(not r["headers"] for r in got)

    written = totals(out, f"{name}.in")
    assert written[("aiojetstream.spark.rows", "write", "jetstream")] == 250
    assert 3 <= written[("aiojetstream.spark.batches", "write", "jetstream")] <= 250
    read = totals(out, name)
    assert read[("aiojetstream.spark.rows", "read", "jetstream")] == 250
    assert 1 <= read[("aiojetstream.spark.batches", "read", "jetstream")] <= 250
