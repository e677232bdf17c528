"""How the cases measure: alternating rounds, rates, the two libraries, subprocesses.

Every round of a group of cases measures each side once, in the opposite
order every other round, after a warm-up round of a tenth of the work
(:func:`measure_rounds`, :func:`alternate` for synchronous sides), so the
machine's drift hits all sides alike and every ratio compares figures taken
back to back.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext as NatsJetStream

import aiojetstream
from aiojetstream import JetStreamContext

PAYLOAD = b"x" * 128
#: ``benchmarks/``: Spark's Python workers get it on their ``PYTHONPATH``.
BENCHMARKS = Path(__file__).resolve().parents[1]
#: The command line; its ``--child`` modes measure in a fresh interpreter.
RUN = BENCHMARKS / "run.py"

Measure = Callable[[int], Awaitable[float]]


async def measure_rounds(
    sides: dict[str, Measure], count: int, rounds: int
) -> dict[str, list[float]]:
    """Every round's figure of each side, after a warm-up round of a tenth of ``count``.

    Each round measures every side once; the order is reversed every other
    round, so that neither side always comes first (after the other's
    clean-up) and drift in the machine's speed hits all alike.
    """
    warm = max(1, count // 10)
    for measure in sides.values():
        await measure(warm)
    figures: dict[str, list[float]] = {name: [] for name in sides}
    order = list(sides)
    for i in range(rounds):
        for name in order if i % 2 == 0 else reversed(order):
            figures[name].append(await sides[name](count))
    return figures


async def compare(
    ours: Measure, baseline: Measure, count: int, rounds: int
) -> tuple[list[float], list[float]]:
    """Every round's figure of ours and of the baseline (see :func:`measure_rounds`)."""
    figures = await measure_rounds({"baseline": baseline, "ours": ours}, count, rounds)
    return figures["ours"], figures["baseline"]


def alternate(
    sides: dict[str, Callable[[int], float]], count: int, rounds: int
) -> dict[str, list[float]]:
    """:func:`measure_rounds` for synchronous cases (the same order and warm-up)."""
    warm = max(1, count // 10)
    for measure in sides.values():
        measure(warm)
    figures: dict[str, list[float]] = {name: [] for name in sides}
    order = list(sides)
    for i in range(rounds):
        for name in order if i % 2 == 0 else reversed(order):
            figures[name].append(sides[name](count))
    return figures


def rate(count: int, start: float) -> float:
    """Operations per second since ``start`` (a perf_counter reading)."""
    return count / (time.perf_counter() - start)


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest rank."""
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


class Libraries:
    """One aiojetstream context and one nats-py connection to the same server."""

    def __init__(self, js: JetStreamContext, nc: NatsClient) -> None:
        self.js = js
        self.nc = nc
        self.theirs: NatsJetStream = nc.jetstream()

    @classmethod
    async def open(cls, url: str) -> Libraries:
        """Connect both libraries."""
        return cls(await aiojetstream.connect(url), await nats.connect(url))

    async def close(self) -> None:
        """Close both connections."""
        await self.js.close()
        await self.nc.close()


async def fill(js: JetStreamContext, subject: str, count: int) -> None:
    """Publish ``count`` payloads to ``subject`` (pipelined) and wait for every ack."""
    for _ in range(count):
        await js.publish_async(subject, PAYLOAD)
    await js.publish_async_complete(timeout=120)


def child(mode: str, url: str, count: int, *extra: str, timeout: float = 300) -> dict[str, Any]:
    """Run a measurement in a fresh interpreter (``run.py --child``); its JSON result."""
    cmd = [sys.executable, str(RUN), "--child", mode, "--url", url, "--child-count", str(count)]
    out = subprocess.run(
        [*cmd, *extra], check=False, capture_output=True, text=True, timeout=timeout
    )
    if out.returncode:
        raise RuntimeError(f"{mode} measurement failed:\n{out.stderr[-5000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result
