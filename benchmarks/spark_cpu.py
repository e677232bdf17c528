"""Where the CPU goes in the Spark cases: seconds per process group for 1M rows.

``python benchmarks/spark_cpu.py [--rows N] [--rounds R] [--only read|write]`` starts its own
nats-server and a ``local[2]`` session, then reads N stream messages (2
partitions, into Spark's ``noop`` sink) and writes N rows into a stream, with
``format("jetstream")`` and with the ``python`` no-op source of
``spark_noop.py``, and prints, for each, the wall time and the CPU time that
nats-server, the JVM and Spark's Python workers spent on it (from
``/proc/<pid>/stat``; Linux only), scaled to 1M rows, and the last round's
rows/s. The first round warms up and is not shown.

It answers what ``make bench`` cannot: how much of a ratio target is left to
the client once the server and Spark have taken their share. On a 2-core
machine every CPU-second counts against the two cores: a target of ``x`` times
the no-op's rate allows ``2 / (x * noop_rows_per_s)`` CPU-seconds per row in
all, nats-server and the JVM included.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiojetstream import JetStreamContext, StorageType, StreamConfig
from aiojetstream.testing import NatsServer

BENCHMARKS = Path(__file__).resolve().parent
PAYLOAD = b"x" * 128
READ_STREAM, READ_SUBJECT = "CPUREAD", "cpuread.data"
WRITE_STREAM, WRITE_SUBJECT = "CPUWRITE", "cpuwrite.data"
GROUPS = ("nats-server", "jvm", "python workers")


def cpu_seconds() -> dict[int, tuple[str, float]]:
    """User + system CPU seconds of each live descendant of this process, with its group.

    Only descendants: nats-server (started by :class:`NatsServer`), the JVM
    (started by PySpark) and its Python workers, not other processes' servers.
    """
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    found: dict[int, tuple[str, float]] = {}
    for pid in map(int, filter(str.isdigit, os.listdir("/proc"))):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # ended meanwhile
        fields = stat[stat.rindex(")") + 2 :].split()
        parents[pid] = int(fields[1])
        program = Path(argv[0].decode(errors="replace")).name
        if program == "nats-server":
            group = "nats-server"
        elif program == "java":
            group = "jvm"
        elif any(b"pyspark" in arg for arg in argv[1:]):
            group = "python workers"  # pyspark.daemon and its forked workers
        else:
            continue
        found[pid] = (group, (int(fields[11]) + int(fields[12])) / tick)
    me = os.getpid()

    def mine(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == me:
                return True
        return False

    return {pid: entry for pid, entry in found.items() if mine(pid)}


def measure(name: str, rows: int, run: Callable[[], None], last: bool) -> None:
    """Run once; print wall and CPU seconds per 1M rows (when ``last``, with rows/s)."""
    before = cpu_seconds()
    start = time.perf_counter()
    run()
    wall = time.perf_counter() - start
    used = dict.fromkeys(GROUPS, 0.0)
    for pid, (group, seconds) in cpu_seconds().items():
        # A worker that ended meanwhile is missed: Spark keeps its workers between jobs.
        used[group] += seconds - before.get(pid, (group, 0.0))[1]
    scale = 1_000_000 / rows
    parts = "  ".join(f"{g} {used[g] * scale:5.2f}s" for g in GROUPS)
    rate = f"  ({rows / wall:,.0f} rows/s)" if last else ""
    print(f"{name:<14} wall {wall * scale:5.2f}s  {parts}{rate}", flush=True)


def main() -> None:
    """Parse the arguments, set up the server, streams and session; measure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds (after a warm-up)")
    parser.add_argument(
        "--only", choices=("read", "write"), help="only the read cases (or the write cases)"
    )
    args = parser.parse_args()
    # Spark's Python workers must import spark_noop (pickled by reference).
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(BENCHMARKS), os.environ.get("PYTHONPATH", "")) if p
    )
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    sys.path.insert(0, str(BENCHMARKS))
    import spark_noop
    from pyspark.sql import SparkSession

    import aiojetstream.spark

    rows = args.rows
    with NatsServer() as server:
        url = server.url

        async def setup() -> None:
            js: JetStreamContext = await aiojetstream.connect(url)
            try:
                for name, subject in ((READ_STREAM, READ_SUBJECT), (WRITE_STREAM, WRITE_SUBJECT)):
                    await js.create_stream(
                        StreamConfig(name=name, subjects=[subject], storage=StorageType.MEMORY)
                    )
                for _ in range(rows):
                    await js.publish_async(READ_SUBJECT, PAYLOAD)
                await js.publish_async_complete(timeout=300)
            finally:
                await js.close()

        async def purge() -> None:
            js = await aiojetstream.connect(url)
            try:
                await (await js.stream(WRITE_STREAM)).purge()
            finally:
                await js.close()

        asyncio.run(setup())
        spark = (
            SparkSession.builder.master("local[2]")
            .appName("aiojetstream-spark-cpu")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        aiojetstream.spark.register(spark)
        spark.dataSource.register(spark_noop.NoopDataSource)

        def source(fmt: str) -> Any:
            reader = spark.read.format(fmt).option("numPartitions", 2)
            if fmt == "jetstream":
                return reader.option("servers", url).option("stream", READ_STREAM).load()
            return reader.option("rows", rows).load()

        def sink(fmt: str) -> Any:
            frame = spark.range(rows, numPartitions=2).selectExpr(
                "cast(repeat('x', 128) as binary) as data"
            )
            writer = frame.write.format(fmt).mode("append")
            if fmt == "jetstream":
                return writer.option("servers", url).option("subject", WRITE_SUBJECT)
            return writer.option("expect", rows)

        def read(fmt: str) -> Callable[[], None]:
            return lambda: source(fmt).write.format("noop").mode("overwrite").save()

        def write(fmt: str) -> Callable[[], None]:
            def run() -> None:
                if fmt == "jetstream":
                    asyncio.run(purge())
                sink(fmt).save()

            return run

        try:
            cases = [
                ("read jetstream", read("jetstream")),
                ("read no-op", read("bench_noop")),
                ("write jetstream", write("jetstream")),
                ("write no-op", write("bench_noop")),
            ]
            if args.only:
                cases = [case for case in cases if case[0].startswith(args.only)]
            for _, run in cases:
                run()  # warm-up: JVM code paths, Python workers, connections
            print(f"CPU seconds per 1M rows ({rows:,} rows a round, local[2], 128-byte payloads)")
            for i in range(args.rounds):
                for name, run in cases:
                    measure(name, rows, run, last=i == args.rounds - 1)
        finally:
            spark.stop()


if __name__ == "__main__":
    main()
