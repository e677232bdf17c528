"""``examples/pipeline``: the Spark Declarative Pipeline runs twice, as its README says.

The example's files are copied into the test's directory with the spec's
``storage:`` pointed there (Spark wants an absolute URI, so the example names
one under /tmp), and ``spark-pipelines --conf spark.sql.catalogImplementation=hive
run --spec ...`` runs there twice (its metastore and warehouse land in the
working directory). The first run archives every order; the second, after more
orders were published, archives only those. Each run starts a local Spark
Connect server of its own (about 90 s on a loaded 2-core machine).
"""

from __future__ import annotations

import re
import shutil
import sys
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

from aiojetstream import JetStreamContext, StreamConfig
from spark.spark_helpers import Nats, requires_spark, stored, wait_no_consumers
from spark.spark_processes import (
    assert_connect_port_free,
    run_process,
    spark_env,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pipeline"
SPARK_PIPELINES = Path(sys.executable).parent / "spark-pipelines"
REGIONS = ("eu", "us", "asia")
RUN_TIMEOUT = 400.0

pytestmark = requires_spark((4, 1), "Spark Declarative Pipelines (pyspark.pipelines)")


#: The settings of every run, as the README gives them.
CONFS = (
    "--conf",
    "spark.sql.catalogImplementation=hive",
    # The local Connect server listens on every interface unless told otherwise.
    "--conf",
    "spark.connect.grpc.binding.address=127.0.0.1",
)


def test_readme_runs_with_the_settings_the_test_uses() -> None:
    """Each ``spark-pipelines`` command of the README passes the settings the test passes."""
    text = (EXAMPLE / "README.md").read_text()
    commands = re.findall(r"^spark-pipelines (?:.*\\\n)*.*$", text, flags=re.M)
    assert len(commands) >= 3
    for command in commands:
        words = command.replace("\\\n", " ").split()
        assert words[1 : 1 + len(CONFS)] == list(CONFS), command
        assert words[1 + len(CONFS) : 4 + len(CONFS)] == [
            "run",
            "--spec",
            "examples/pipeline/spark-pipeline.yml",
        ]


def publish_orders(nats: Nats, stream: str, first: int, count: int) -> None:
    async def work(js: JetStreamContext) -> None:
        for n in range(first, first + count):
            await js.publish_async(f"{stream}.{REGIONS[n % 3]}", b'{"order_id": "o-%d"}' % n)
        await js.publish_async_complete()

    nats.run(work)


def expected_archive(stream: str, prefix: str, count: int) -> list[tuple[str, str]]:
    return sorted(
        (f"{prefix}.{stream}.{REGIONS[n % 3]}", f'{{"order_id": "o-{n}"}}') for n in range(count)
    )


def per_subject(workdir: Path) -> dict[str, int]:
    """The materialized view ``orders_per_subject``, read from its files."""
    table = pq.read_table(workdir / "spark-warehouse" / "orders_per_subject")
    return dict(
        zip(table.column("subject").to_pylist(), table.column("orders").to_pylist(), strict=True)
    )


def test_pipeline_example_runs_twice(nats: Nats, name: str, tmp_path: Path) -> None:
    source, archive, prefix = name, name + "_ARC", name + "_ARC"

    async def make(js: JetStreamContext) -> None:
        await js.create_stream(StreamConfig(name=source, subjects=[f"{source}.>"]))
        await js.create_stream(
            StreamConfig(name=archive, subjects=[f"{prefix}.>"], allow_direct=True)
        )

    nats.run(make)
    # The example, with its storage in this test's directory.
    pipeline = tmp_path / "pipeline"
    shutil.copytree(EXAMPLE, pipeline, ignore=shutil.ignore_patterns("__pycache__"))
    spec = pipeline / "spark-pipeline.yml"
    text, replaced = re.subn(
        r"^storage: .*$",
        f"storage: {(tmp_path / 'storage').as_uri()}",
        spec.read_text(),
        flags=re.M,
    )
    assert replaced == 1
    spec.write_text(text)
    env = spark_env(
        NATS_URL=nats.url, ORDERS_STREAM=source, ORDERS_SUBJECT="", ARCHIVE_PREFIX=prefix
    )
    argv = [str(SPARK_PIPELINES), *CONFS, "run", "--spec", str(spec)]
    assert_connect_port_free()

    publish_orders(nats, source, 0, 300)
    first = run_process(argv, tmp_path / "run-1.log", env, RUN_TIMEOUT, cwd=tmp_path)
    assert "Run is COMPLETED" in first.stdout
    archived = stored(nats, archive)
    assert sorted((m.subject, m.data.decode()) for m in archived) == expected_archive(
        source, prefix, 300
    )
    ids = [(m.headers or {}).get("Nats-Msg-Id") for m in archived]
    assert None not in ids  # dedupe=auto
    assert len(set(ids)) == 300
    assert per_subject(tmp_path) == {f"{source}.{r}": 100 for r in REGIONS}

    # More orders; the second run archives those only.
    publish_orders(nats, source, 300, 120)
    second = run_process(argv, tmp_path / "run-2.log", env, RUN_TIMEOUT, cwd=tmp_path)
    assert "Run is COMPLETED" in second.stdout
    again = stored(nats, archive)
    assert again[:300] == archived
    assert sorted((m.subject, m.data.decode()) for m in again) == expected_archive(
        source, prefix, 420
    )
    assert len({(m.headers or {}).get("Nats-Msg-Id") for m in again}) == 420
    assert per_subject(tmp_path) == {f"{source}.{r}": 140 for r in REGIONS}
    assert Counter(m.subject for m in again[300:]) == {
        f"{prefix}.{source}.{r}": 40 for r in REGIONS
    }
    wait_no_consumers(nats, source)
