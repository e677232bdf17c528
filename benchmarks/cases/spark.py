"""Group ``spark``: ``format("jetstream")`` against no-op sources and the bare-socket clients.

Measured in a subprocess (``run.py --child spark``, :func:`child_spark`) with
one ``local[2]`` SparkSession, so the JVM and its Python workers are gone
before the next group. Reads and writes of ``--spark-rows`` rows alternate
with the no-op data source of ``spark_noop.py`` (levels ``python``,
``ceiling``, ``rows``) and with the bare-socket clients (``bare_reader.py``,
``bare_publisher.py``, as many consumers or connections as partitions), on the
same session and into the same sinks; around the ``jetstream`` and ``python``
rounds the Python workers' CPU time comes from ``/proc`` (``spark_cpu.py``'s
``cpu_seconds``). Spark pickles the no-op source by reference, so
:func:`child_spark` puts ``benchmarks/`` on the workers' ``PYTHONPATH``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import bare_publisher
import bare_reader

import aiojetstream
from aiojetstream import JetStreamContext, StorageType, StreamConfig

from .measure import BENCHMARKS, alternate, child, fill, rate
from .report import Row, spread

SPARK_STREAM = "BSPARK"  # the same names as in spark_noop.py
SPARK_SUBJECT = "bspark.data"
SPARK_SINK_STREAM = "BSPARKW"
SPARK_SINK_SUBJECT = "bsparkw.data"
#: The Spark reads' numPartitions: as many consumers for the bare-socket reader,
#: as many connections (each with its own window) for the bare-socket publisher.
SPARK_PARTITIONS = 2


def spark_missing() -> str | None:
    """Why the Spark cases cannot run here (None when they can)."""
    if importlib.util.find_spec("pyspark") is None or importlib.util.find_spec("pyarrow") is None:
        return "pyspark and pyarrow are not installed (pip install 'aiojetstream[spark]')"
    java_home = os.environ.get("JAVA_HOME")
    if shutil.which("java") is None and not (java_home and Path(java_home, "bin", "java").exists()):
        return "no Java runtime (java on PATH or JAVA_HOME)"
    return None


def spark_cases(url: str, count: int, rounds: int, verbose: bool) -> list[Row]:
    """The Spark cases, measured in a subprocess (its JVM ends with it)."""
    extra = ("--spark-rounds", str(rounds))
    result = child("spark", url, count, *extra, timeout=1800)
    rows: list[Row] = []
    for case in ("read", "write"):
        ours = result[case]["ours"]
        cpu = result.get(f"{case}_cpu")
        if cpu is not None:  # Linux: from /proc
            rows.append(Row(f"spark_{case}_cpu_vs_noop", cpu["ours"], cpu["noop"], "CPU µs/row"))
        rows.append(Row(f"spark_{case}_vs_server", ours, result[case]["server"], "rows/s"))
        for level in ("noop", "ceiling", "row_noop"):
            base = result[case][level]
            name = f"spark_{case}_vs_{level}"
            rows.append(Row(name, ours, base, "rows/s"))
            if verbose:
                print(
                    f"  {name} rounds: ours {spread(ours)}, {level} {spread(base)}", file=sys.stderr
                )
    return rows


class Admin:
    """Synchronous set-up of the Spark cases' streams: a fresh connection for each call."""

    def __init__(self, url: str) -> None:
        self.url = url

    def __call__(self, work: Callable[[JetStreamContext], Awaitable[Any]]) -> Any:
        async def go() -> Any:
            js = await aiojetstream.connect(self.url)
            try:
                return await work(js)
            finally:
                await js.close()

        return asyncio.run(go())


def child_spark(url: str, count: int, rounds: int) -> dict[str, Any]:
    """Both Spark cases on one ``local[2]`` session; every round's rows/s of each side."""
    # Spark pickles the no-op source's classes by reference: its Python workers
    # (started by the JVM, which inherits this environment) must import spark_noop.
    paths = [str(BENCHMARKS), os.environ.get("PYTHONPATH", "")]
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    import spark_noop
    from pyspark.sql import SparkSession
    from spark_cpu import cpu_seconds

    import aiojetstream.spark
    from aiojetstream.spark._options import SinkOptions

    admin = Admin(url)
    # The bare-socket publisher's window: each Spark task's (the sink's maxPending default).
    window = SinkOptions().max_pending
    measure_cpu = Path("/proc/self/stat").exists()
    cpu: dict[str, dict[str, list[float]]] = {"read_cpu": {}, "write_cpu": {}}

    def with_cpu(case: str, side: str, measure: Callable[[int], float]) -> Callable[[int], float]:
        """``measure``, also noting the Python workers' CPU microseconds per row (not warm-up)."""
        if not measure_cpu:
            return measure

        def run(n: int) -> float:
            before = cpu_seconds()
            value = measure(n)
            used = 0.0
            for pid, (group, seconds) in cpu_seconds().items():
                if group == "python workers":
                    # A worker that ended meanwhile is missed: Spark keeps its workers.
                    used += seconds - before.get(pid, (group, 0.0))[1]
            if n == count:
                cpu[case].setdefault(side, []).append(used / n * 1e6)
            return value

        return run

    async def setup(js: JetStreamContext) -> None:
        for name, subject in (
            (SPARK_STREAM, SPARK_SUBJECT),
            (SPARK_SINK_STREAM, SPARK_SINK_SUBJECT),
        ):
            await js.create_stream(
                StreamConfig(name=name, subjects=[subject], storage=StorageType.MEMORY)
            )
        await fill(js, SPARK_SUBJECT, count)

    admin(setup)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("aiojetstream-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        aiojetstream.spark.register(spark)
        spark.dataSource.register(spark_noop.NoopDataSource)

        def jetstream_read(n: int) -> Any:
            return (
                spark.read.format("jetstream")
                .option("servers", url)
                .option("stream", SPARK_STREAM)
                .option("numPartitions", SPARK_PARTITIONS)
                .option("endingOffsets", n + 1)
                .load()
            )

        def noop_read(n: int, level: str = "python") -> Any:
            return (
                spark.read.format("bench_noop")
                .option("rows", n)
                .option("numPartitions", 2)
                .option("level", level)
                .load()
            )

        if jetstream_read(1).schema != noop_read(1).schema:
            raise RuntimeError("bench_noop's schema is not format('jetstream')'s")
        if (got := jetstream_read(1000).count()) != 1000:
            raise RuntimeError(f"format('jetstream') read {got} of 1000 rows")

        def timed(df: Any, n: int) -> float:
            start = time.perf_counter()
            df.write.format("noop").mode("overwrite").save()
            return rate(n, start)

        def server_read(n: int) -> float:
            # As many AckNone consumers as the read has partitions, sequences 1..n.
            return asyncio.run(bare_reader.read(url, SPARK_STREAM, n, SPARK_PARTITIONS))

        results: dict[str, Any] = {
            "read": alternate(
                {
                    "noop": with_cpu("read_cpu", "noop", lambda n: timed(noop_read(n), n)),
                    "ceiling": lambda n: timed(noop_read(n, "ceiling"), n),
                    "row_noop": lambda n: timed(noop_read(n, "rows"), n),
                    "server": server_read,
                    "ours": with_cpu("read_cpu", "ours", lambda n: timed(jetstream_read(n), n)),
                },
                count,
                rounds,
            )
        }

        def rows(n: int) -> Any:
            return spark.range(n, numPartitions=SPARK_PARTITIONS).selectExpr(
                "cast(repeat('x', 128) as binary) as data"
            )

        async def purge(js: JetStreamContext) -> None:
            await (await js.stream(SPARK_SINK_STREAM)).purge()

        async def stored(js: JetStreamContext) -> int:
            return (await js.stream(SPARK_SINK_STREAM)).cached_info.state.messages

        def jetstream_write(n: int) -> float:
            admin(purge)  # the stream holds only this round's rows
            writer = (
                rows(n)
                .write.format("jetstream")
                .option("servers", url)
                .option("subject", SPARK_SINK_SUBJECT)
                .mode("append")
            )
            start = time.perf_counter()
            writer.save()
            value = rate(n, start)
            if (got := admin(stored)) != n:
                raise RuntimeError(f"format('jetstream') stored {got} of {n} rows")
            return value

        def noop_write(n: int, level: str = "python") -> float:
            writer = (
                rows(n)
                .write.format("bench_noop")
                .option("expect", n)
                .option("level", level)
                .mode("append")
            )
            start = time.perf_counter()
            writer.save()
            return rate(n, start)

        def server_write(n: int) -> float:
            admin(purge)
            value = asyncio.run(
                bare_publisher.publish(
                    url, SPARK_SINK_SUBJECT, n, window=window, connections=SPARK_PARTITIONS
                )
            )
            if (got := admin(stored)) != n:
                raise RuntimeError(f"the bare-socket publisher stored {got} of {n} rows")
            return value

        results["write"] = alternate(
            {
                "noop": with_cpu("write_cpu", "noop", noop_write),
                "ceiling": lambda n: noop_write(n, "ceiling"),
                "row_noop": lambda n: noop_write(n, "rows"),
                "server": server_write,
                "ours": with_cpu("write_cpu", "ours", jetstream_write),
            },
            count,
            rounds,
        )
        if measure_cpu:
            results.update(cpu)
    finally:
        spark.stop()

    async def teardown(js: JetStreamContext) -> None:
        await js.delete_stream(SPARK_STREAM)
        await js.delete_stream(SPARK_SINK_STREAM)

    admin(teardown)
    return results
