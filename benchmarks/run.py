"""Benchmarks: aiojetstream against nats-py's own JetStream API, same server, same run.

Starts its own nats-server on loopback and measures every case for both
libraries on that server with 128-byte payloads. Every round of a group of
cases measures each side once, in alternating order, after a warm-up round;
``--rounds`` rounds (at least 5). A row's figures are the medians of its two
sides' rounds, its ratio (ours / baseline; for latencies lower is better) the
median of the per-round ratios, and its spread the interquartile range of the
per-round ratios over their median (see :data:`SPREAD_WARNING`). The table is
also written to ``benchmarks/results/latest.json``. Memory figures are
measured in fresh subprocesses and have no baseline; import times in fresh
interpreters, alternately one that imports ``nats`` and one that imports what
the README's first program uses (:data:`IMPORT_NAMES`).

The ``*_vs_socket`` and ``*_vs_server`` rows set the library against what the
server itself delivers and stores on this machine: ``bare_reader.py`` and
``bare_publisher.py``, minimal asyncio socket clients (no nats-py, no parsing
beyond message boundaries and counting acknowledgements), measured in the same
rounds.

The Spark cases (group ``spark``, skipped with ``--no-spark``) run in a
subprocess with one ``local[2]`` SparkSession: ``format("jetstream")`` reads
and writes 1M rows against a no-op Python Data Source (``spark_noop.py``), the
same way into the same sinks, and against the bare-socket clients with as many
consumers (connections) as partitions, ``--spark-rounds`` alternating rounds
(at least 3); the Python workers' CPU time per row comes from ``/proc``
(``spark_cpu.py``'s :func:`cpu_seconds`).

The cases are in ``cases/``, a module a group; this is the command line.

Run with ``make bench`` (``python benchmarks/run.py --help`` for the options).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from cases import otel, typed
from cases.consume import bench_consume, create_consume_stream
from cases.kv import bench_kv
from cases.measure import Libraries
from cases.memory import bench_memory, child_buffer, child_growth
from cases.publish import bench_publish, bench_publish_many
from cases.report import GROUPS, Row, machine, print_table
from cases.spark import child_spark, spark_cases, spark_missing
from cases.startup import bench_startup

from aiojetstream.testing import NatsServer

RESULTS = Path(__file__).resolve().parent / "results" / "latest.json"


def selected(args: argparse.Namespace) -> set[str]:
    """The groups of cases this run measures."""
    groups = set(args.only.split(",")) if args.only else set(GROUPS)
    if args.no_spark:
        groups.discard("spark")
    return groups


async def run(args: argparse.Namespace) -> list[Row]:
    """Run the selected groups of cases against one fresh nats-server."""
    groups = selected(args)
    rows: list[Row] = []
    async with NatsServer() as server:
        libs = await Libraries.open(server.url)
        try:
            if "publish" in groups:
                for storage in ("memory", "file"):
                    rows += await bench_publish(libs, storage, args.count, args.rounds)
                    progress(args, rows)
                rows += await bench_publish_many(
                    libs, server.url, args.publish_many_count, args.rounds
                )
                progress(args, rows)
            if groups & {"consume", "memory"}:
                await create_consume_stream(libs.js, args.messages)
            if "consume" in groups:
                rows += await bench_consume(libs, server.url, args.messages, args.rounds)
                progress(args, rows)
                rows += await typed.bench_typed(
                    server.url, min(args.messages, 100_000), args.rounds
                )
                progress(args, rows)
            if groups & {"publish", "consume"} and otel.available():
                rows += await otel.bench_otel(
                    server.url, args.count, args.messages, args.rounds, groups
                )
                progress(args, rows)
            if "kv" in groups:
                rows += await bench_kv(libs, server.url, args.kv_count, args.rounds)
                progress(args, rows)
            if "memory" in groups:
                buffer = min(args.buffer, args.messages)
                rows += await bench_memory(libs, server.url, buffer, args.growth)
                progress(args, rows)
        finally:
            await libs.close()
        if "spark" in groups:  # no client of this process is connected meanwhile
            rows += spark_cases(server.url, args.spark_rows, args.spark_rounds, args.verbose)
            progress(args, rows)
    if "import" in groups:
        rows += bench_startup(args.rounds, args.verbose)
    return rows


def progress(args: argparse.Namespace, rows: list[Row]) -> None:
    """With --verbose, show the rows measured so far on stderr."""
    if args.verbose:
        for r in rows[-6:]:
            print(
                f"  {r.name}: {r.ours:,.1f} / {r.baseline or 0:,.1f}", file=sys.stderr, flush=True
            )


def main(argv: list[str] | None = None) -> int:
    """Run the suite, print the table and write ``results/latest.json``."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds a case (min 5)")
    parser.add_argument("--count", type=int, default=5000, help="sequential publishes a round")
    parser.add_argument("--messages", type=int, default=200_000, help="messages a consume round")
    parser.add_argument(
        "--publish-many-count", type=int, default=1_000_000, help="publish_many messages a round"
    )
    parser.add_argument("--kv-count", type=int, default=3000, help="KV puts / gets a round")
    parser.add_argument("--buffer", type=int, default=100_000, help="buffered messages (RSS)")
    parser.add_argument("--growth", type=int, default=1_000_000, help="messages (RSS growth)")
    parser.add_argument("--spark-rows", type=int, default=1_000_000, help="rows a Spark round")
    parser.add_argument(
        "--spark-rounds", type=int, default=5, help="measured rounds a Spark case (min 3)"
    )
    parser.add_argument("--only", help=f"comma-separated groups of cases: {','.join(GROUPS)}")
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark cases")
    parser.add_argument(
        "--merge",
        action="store_true",
        help=f"a partial run replaces its rows in {RESULTS.name}, keeping the others",
    )
    parser.add_argument("--verbose", action="store_true", help="progress on stderr")
    parser.add_argument("--child", choices=["buffer", "growth", "spark"], help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--child-count", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.spark_rounds = max(3, args.spark_rounds)
    if args.child == "spark":
        print(json.dumps(child_spark(args.url, args.child_count, args.spark_rounds)))
        return 0
    if args.child:
        fn = child_buffer if args.child == "buffer" else child_growth
        print(json.dumps(asyncio.run(fn(args.url, args.child_count))))
        return 0
    args.rounds = max(5, args.rounds)
    unknown = sorted(set(args.only.split(",")) - set(GROUPS)) if args.only else []
    if unknown or not selected(args):
        parser.error(f"--only: no such group {unknown}" if unknown else "no case selected")
    if "spark" in selected(args) and (why := spark_missing()):
        parser.error(f"the Spark cases cannot run: {why}; skip them with --no-spark")
    started = time.perf_counter()
    rows = asyncio.run(run(args))
    description = machine()
    print_table(description, rows)
    took = f"took {time.perf_counter() - started:.0f} s"
    partial = bool(args.only or args.no_spark)
    if partial and not args.merge:
        print(f"{took}; a partial run (--only / --no-spark): {RESULTS.name} left as it was")
        return 0
    results = [r.as_json() for r in rows]
    if partial:
        results = merged(results)
    report = {"machine": description, "results": results}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    print(f"{took}; written to {RESULTS}" + (" (merged)" if partial else ""))
    return 0


def merged(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of ``latest.json`` with those of ``results`` replaced (new ones appended)."""
    fresh = {r["name"]: r for r in results}
    old: list[dict[str, Any]] = []
    if RESULTS.exists():
        old = json.loads(RESULTS.read_text())["results"]
    out = [fresh.pop(r["name"], r) for r in old]
    return out + [r for r in results if r["name"] in fresh]


if __name__ == "__main__":
    raise SystemExit(main())
