"""Benchmarks: aiojetstream against nats-py's own JetStream API, same server, same run.

Starts its own nats-server on loopback, runs each case for both libraries,
takes the median of several rounds and prints ours / nats-py as a ratio.
Results are also written to ``benchmarks/results/latest.json``.

This first cut covers publishing; consumption, KV, memory and import time
follow with the consumption and key-value releases.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import nats

import aiojetstream
from aiojetstream import StorageType, StreamConfig
from aiojetstream.testing import NatsServer

PAYLOAD = b"x" * 128
RESULTS = Path(__file__).resolve().parent / "results" / "latest.json"

Round = Callable[[], Awaitable[float]]


def machine() -> str:
    """A one-line description of this machine."""
    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break

    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()}"


async def median_rate(round_fn: Round, rounds: int) -> float:
    """Median messages per second over ``rounds`` rounds (after one warm-up)."""
    await round_fn()
    rates = [await round_fn() for _ in range(rounds)]
    return statistics.median(rates)


async def bench_publish(url: str, storage: str, count: int, rounds: int) -> tuple[float, float]:
    """Sequential awaited publishes: aiojetstream.publish vs nats-py js.publish."""
    name = f"BPUB_{storage.upper()}"
    ours_js = await aiojetstream.connect(url)
    nc = await nats.connect(url)
    theirs = nc.jetstream()
    try:
        await ours_js.create_or_update_stream(
            StreamConfig(name=name, subjects=[f"bpub.{storage}"], storage=StorageType(storage))
        )
        subject = f"bpub.{storage}"

        async def ours() -> float:
            start = time.perf_counter()
            for _ in range(count):
                await ours_js.publish(subject, PAYLOAD)
            return count / (time.perf_counter() - start)

        async def baseline() -> float:
            start = time.perf_counter()
            for _ in range(count):
                await theirs.publish(subject, PAYLOAD)
            return count / (time.perf_counter() - start)

        b = await median_rate(baseline, rounds)
        o = await median_rate(ours, rounds)
        await ours_js.delete_stream(name)
        return o, b
    finally:
        await ours_js.close()
        await nc.close()


async def bench_publish_async(
    url: str, storage: str, count: int, rounds: int
) -> tuple[float, float]:
    """Pipelined publish_async + completion barrier, both libraries."""
    name = f"BAPUB_{storage.upper()}"
    ours_js = await aiojetstream.connect(url)
    nc = await nats.connect(url)
    theirs = nc.jetstream()
    try:
        await ours_js.create_or_update_stream(
            StreamConfig(name=name, subjects=[f"bapub.{storage}"], storage=StorageType(storage))
        )
        subject = f"bapub.{storage}"

        async def ours() -> float:
            start = time.perf_counter()
            for _ in range(count):
                await ours_js.publish_async(subject, PAYLOAD)
            await ours_js.publish_async_complete(timeout=60)
            return count / (time.perf_counter() - start)

        async def baseline() -> float:
            start = time.perf_counter()
            for _ in range(count):
                await theirs.publish_async(subject, PAYLOAD)
            await theirs.publish_async_completed()
            return count / (time.perf_counter() - start)

        b = await median_rate(baseline, rounds)
        o = await median_rate(ours, rounds)
        await ours_js.delete_stream(name)
        return o, b
    finally:
        await ours_js.close()
        await nc.close()


async def main(argv: list[str] | None = None) -> int:
    """Run the suite and print the table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--count", type=int, default=5000, help="sequential publishes a round")
    parser.add_argument("--async-count", type=int, default=50000, help="async publishes a round")
    args = parser.parse_args(argv)
    results: list[dict[str, Any]] = []
    async with NatsServer() as server:
        for storage in ("memory", "file"):
            short = "mem" if storage == "memory" else "file"
            o, b = await bench_publish(server.url, storage, args.count, args.rounds)
            results.append(_row(f"publish_{short}", o, b, "msgs/s"))
            o, b = await bench_publish_async(server.url, storage, args.async_count, args.rounds)
            results.append(_row(f"publish_async_{short}", o, b, "msgs/s"))
    report = {"machine": machine(), "results": results}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"machine: {report['machine']}")
    print(f"{'case':<22}{'ours':>14}{'nats-py':>14}{'ratio':>8}  unit")
    for r in results:
        name, ours, base, ratio = r["name"], r["ours"], r["baseline"], r["ratio"]
        print(f"{name:<22}{ours:>14,.0f}{base:>14,.0f}{ratio:>8.2f}  {r['unit']}")
    print(f"written to {RESULTS}")
    return 0


def _row(name: str, ours: float, baseline: float, unit: str) -> dict[str, Any]:
    return {
        "name": name,
        "ours": round(ours, 1),
        "baseline": round(baseline, 1),
        "ratio": round(ours / baseline, 3) if baseline else None,
        "unit": unit,
    }


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
