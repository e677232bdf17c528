"""Benchmarks: aiojetstream against nats-py's own JetStream API, same server, same run.

Starts its own nats-server on loopback and measures every case for both
libraries on that server with 128-byte payloads. Each figure is the median of
``--rounds`` rounds (at least 5) after a warm-up; the rounds of the two
libraries alternate so that drift in the machine's speed hits both alike. The
table gives the ratio ours / nats-py (for latencies lower is better) and is
also written to ``benchmarks/results/latest.json``. Memory and import-time
figures are measured in fresh subprocesses and have no baseline.

Run with ``make bench`` (``python benchmarks/run.py --help`` for the options).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg as NatsMsg
from nats.js import JetStreamContext as NatsJetStream

import aiojetstream
from aiojetstream import (
    AckPolicy,
    ConsumerConfig,
    JetStreamContext,
    KeyValueConfig,
    Msg,
    StorageType,
    StreamConfig,
)
from aiojetstream.testing import NatsServer, find_nats_server

PAYLOAD = b"x" * 128
RESULTS = Path(__file__).resolve().parent / "results" / "latest.json"
MIB = 1024 * 1024

CONSUME_STREAM = "BCONS"
CONSUME_SUBJECT = "bcons.data"
GROWTH_STREAM = "BGROW"
GROWTH_SUBJECT = "bgrow.data"
KV_BUCKET = "BKV"
KV_KEYS = 100

#: Targets: case -> (comparison, threshold); ratios for cases with a baseline.
TARGETS: dict[str, tuple[str, float]] = {
    "publish_mem": (">=", 1.1),
    "publish_file": (">=", 1.1),
    "publish_async_mem": (">=", 2.0),
    "publish_async_file": (">=", 2.0),
    "messages_ack_none": (">=", 4.5),
    "messages_ack_explicit": (">=", 3.0),
    "messages_ack_none_vs_core": (">=", 0.8),
    "ordered": (">=", 1.0),
    "kv_put": (">=", 1.0),
    "kv_get_p50": ("<=", 0.8),
    "rss_bytes_per_buffered_msg": ("<=", 400),
    "rss_growth_1m_msgs_mib": ("<", 50),
    "import_ms_over_nats": ("<=", 150),
}

Measure = Callable[[int], Awaitable[float]]


# --------------------------------------------------------------------------- helpers


def machine() -> str:
    """A one-line description of this machine."""
    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    try:
        out = subprocess.run(
            [find_nats_server(), "--version"], capture_output=True, text=True, timeout=10
        )
        server = out.stdout.strip().replace("nats-server: v", "nats-server ")
    except (OSError, subprocess.SubprocessError):
        server = "nats-server"
    return (
        f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{platform.system()}, {server}, nats-py {version('nats-py')}"
    )


def rss() -> int:
    """This process's resident set size in bytes (Linux: current, elsewhere: peak)."""
    statm = Path("/proc/self/statm")
    if statm.exists():
        return int(statm.read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


async def compare(ours: Measure, baseline: Measure, count: int, rounds: int) -> tuple[float, float]:
    """Median of ``rounds`` alternating rounds of each, after a smaller warm-up round."""
    warm = max(1, count // 10)
    await baseline(warm)
    await ours(warm)
    o: list[float] = []
    b: list[float] = []
    for _ in range(rounds):
        b.append(await baseline(count))
        o.append(await ours(count))
    return statistics.median(o), statistics.median(b)


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


# --------------------------------------------------------------------------- publishing


async def bench_publish(libs: Libraries, storage: str, count: int, rounds: int) -> list[Row]:
    """Sequential awaited publishes, then pipelined publish_async + completion barrier."""
    short = "mem" if storage == "memory" else "file"
    name = f"BPUB_{short.upper()}"
    subject = f"bpub.{short}"
    js, theirs = libs.js, libs.theirs
    await js.create_stream(
        StreamConfig(name=name, subjects=[subject], storage=StorageType(storage), max_msgs=100_000)
    )

    async def ours_seq(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            await js.publish(subject, PAYLOAD)
        return rate(n, start)

    async def base_seq(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            await theirs.publish(subject, PAYLOAD)
        return rate(n, start)

    async def ours_async(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            await js.publish_async(subject, PAYLOAD)
        await js.publish_async_complete(timeout=120)
        return rate(n, start)

    async def base_async(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            await theirs.publish_async(subject, PAYLOAD)
        await theirs.publish_async_completed()
        return rate(n, start)

    try:
        seq = await compare(ours_seq, base_seq, count, rounds)
        pipelined = await compare(ours_async, base_async, count * 10, rounds)
    finally:
        await js.delete_stream(name)
    return [
        Row(f"publish_{short}", *seq, "msgs/s"),
        Row(f"publish_async_{short}", *pipelined, "msgs/s"),
    ]


# --------------------------------------------------------------------------- consuming


class Consumers:
    """Creates a fresh consumer on the consumption stream for every round."""

    def __init__(self, libs: Libraries) -> None:
        self.libs = libs
        self.serial = 0

    async def create(self, ack: AckPolicy) -> str:
        self.serial += 1
        name = f"c{self.serial}"
        await self.libs.js.create_consumer(
            CONSUME_STREAM, ConsumerConfig(name=name, ack_policy=ack)
        )
        return name

    async def delete(self, name: str) -> None:
        await self.libs.js.delete_consumer(CONSUME_STREAM, name)

    async def nats_fetch_loop(
        self, n: int, ack: AckPolicy, on_msg: Callable[[NatsMsg], Awaitable[None]] | None = None
    ) -> float:
        """nats-py: ``pull_subscribe`` (bound to a fresh consumer) and a fetch(1000) loop."""
        name = await self.create(ack)
        sub = await self.libs.theirs.pull_subscribe_bind(name, stream=CONSUME_STREAM)
        got = 0
        start = time.perf_counter()
        while got < n:
            for m in await sub.fetch(min(1000, n - got), timeout=5):
                got += 1
                if on_msg is not None:
                    await on_msg(m)
                elif ack is AckPolicy.EXPLICIT:
                    await m.ack()
        value = rate(n, start)
        await sub.unsubscribe()
        await self.delete(name)
        return value


async def bench_consume(libs: Libraries, count: int, rounds: int) -> list[Row]:
    """messages() without and with acks, consume(), fetch() and the ordered consumer."""
    js, theirs = libs.js, libs.theirs
    consumers = Consumers(libs)
    rows: list[Row] = []

    async def ours_messages(n: int, ack: AckPolicy) -> float:
        name = await consumers.create(ack)
        consumer = await js.consumer(CONSUME_STREAM, name)
        got = 0
        value = 0.0
        start = time.perf_counter()
        async with consumer.messages() as it:
            async for msg in it:
                if ack is AckPolicy.EXPLICIT:
                    await msg.ack()
                got += 1
                if got >= n:
                    value = rate(n, start)  # before closing, as for nats-py
                    break
        await consumers.delete(name)
        return value

    async def ours_none(n: int) -> float:
        return await ours_messages(n, AckPolicy.NONE)

    async def base_none(n: int) -> float:
        return await consumers.nats_fetch_loop(n, AckPolicy.NONE)

    async def ours_explicit(n: int) -> float:
        return await ours_messages(n, AckPolicy.EXPLICIT)

    async def base_explicit(n: int) -> float:
        return await consumers.nats_fetch_loop(n, AckPolicy.EXPLICIT)

    none = await compare(ours_none, base_none, count, rounds)
    rows.append(Row("messages_ack_none", *none, "msgs/s"))
    rows.append(
        Row(
            "messages_ack_explicit",
            *await compare(ours_explicit, base_explicit, count, rounds),
            "msgs/s",
        )
    )

    core = statistics.median([await core_subscription_rate(libs, count) for _ in range(rounds)])
    rows.append(Row("messages_ack_none_vs_core", none[0], core, "msgs/s"))

    async def ours_consume(n: int) -> float:
        name = await consumers.create(AckPolicy.NONE)
        consumer = await js.consumer(CONSUME_STREAM, name)
        done = asyncio.get_running_loop().create_future()
        got = 0

        async def handler(msg: Msg) -> None:
            nonlocal got
            got += 1
            if got == n:
                done.set_result(None)

        start = time.perf_counter()
        ctx = await consumer.consume(handler)
        await done
        value = rate(n, start)
        ctx.stop()
        await ctx.closed()
        await consumers.delete(name)
        return value

    async def base_consume(n: int) -> float:
        got = 0

        async def handler(msg: NatsMsg) -> None:
            nonlocal got
            got += 1

        return await consumers.nats_fetch_loop(n, AckPolicy.NONE, handler)

    rows.append(
        Row("consume_callback", *await compare(ours_consume, base_consume, count, rounds), "msgs/s")
    )

    async def ours_fetch(n: int) -> float:
        name = await consumers.create(AckPolicy.NONE)
        consumer = await js.consumer(CONSUME_STREAM, name)
        got = 0
        start = time.perf_counter()
        while got < n:
            batch = await consumer.fetch(min(1000, n - got), expires=5)
            async for _ in batch:
                got += 1
        value = rate(n, start)
        await consumers.delete(name)
        return value

    rows.append(Row("fetch_loop", *await compare(ours_fetch, base_none, count, rounds), "msgs/s"))

    async def ours_ordered(n: int) -> float:
        oc = await js.ordered_consumer(CONSUME_STREAM)
        got = 0
        value = 0.0
        start = time.perf_counter()
        async with oc.messages() as it:
            async for _ in it:
                got += 1
                if got >= n:
                    value = rate(n, start)  # before closing (deletes the consumer)
                    break
        return value

    async def base_ordered(n: int) -> float:
        done = asyncio.get_running_loop().create_future()
        got = 0

        async def handler(msg: NatsMsg) -> None:
            nonlocal got
            got += 1
            if got == n and not done.done():
                done.set_result(None)

        start = time.perf_counter()
        sub = await theirs.subscribe(
            CONSUME_SUBJECT, stream=CONSUME_STREAM, ordered_consumer=True, cb=handler
        )
        await done
        value = rate(n, start)
        await sub.unsubscribe()
        return value

    rows.append(Row("ordered", *await compare(ours_ordered, base_ordered, count, rounds), "msgs/s"))
    return rows


async def core_subscription_rate(libs: Libraries, count: int) -> float:
    """nats-py core ``subscribe(cb=...)`` receive rate of ``count`` messages.

    A second, raw connection writes all ``count`` PUBs at once (next to no CPU),
    so the figure is the subscriber's receive rate.
    """
    nc = libs.nc
    subject = "bcore.data"
    done = asyncio.get_running_loop().create_future()
    got = 0

    async def handler(msg: NatsMsg) -> None:
        nonlocal got
        got += 1
        if got == count:
            done.set_result(None)

    sub = await nc.subscribe(subject, cb=handler, pending_msgs_limit=0, pending_bytes_limit=0)
    await nc.flush()
    url = nc.connected_url
    assert url is not None
    assert url.hostname is not None
    assert url.port is not None
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    await reader.readline()  # INFO
    writer.write(b'CONNECT {"verbose":false,"pedantic":false}\r\nPING\r\n')
    while (await reader.readline()).strip() != b"PONG":
        pass
    pub = b"PUB %b %d\r\n%b\r\n" % (subject.encode(), len(PAYLOAD), PAYLOAD)
    blob = pub * count
    start = time.perf_counter()
    writer.write(blob)
    await done
    value = rate(count, start)
    writer.close()
    await writer.wait_closed()
    await sub.unsubscribe()
    return value


# --------------------------------------------------------------------------- key-value


async def bench_kv(libs: Libraries, count: int, rounds: int) -> list[Row]:
    """Sequential puts (ops/s) and gets (latency percentiles), same bucket for both."""
    js = libs.js
    kv = await js.create_key_value(KeyValueConfig(bucket=KV_BUCKET))
    theirs = await libs.theirs.key_value(KV_BUCKET)
    keys = [f"key{i}" for i in range(KV_KEYS)]

    async def ours_put(n: int) -> float:
        start = time.perf_counter()
        for i in range(n):
            await kv.put(keys[i % KV_KEYS], PAYLOAD)
        return rate(n, start)

    async def base_put(n: int) -> float:
        start = time.perf_counter()
        for i in range(n):
            await theirs.put(keys[i % KV_KEYS], PAYLOAD)
        return rate(n, start)

    rows = [Row("kv_put", *await compare(ours_put, base_put, count, rounds), "ops/s")]

    async def ours_get(n: int) -> list[float]:
        out: list[float] = []
        clock = time.perf_counter
        for i in range(n):
            t = clock()
            await kv.get(keys[i % KV_KEYS])
            out.append(clock() - t)
        return out

    async def base_get(n: int) -> list[float]:
        out: list[float] = []
        clock = time.perf_counter
        for i in range(n):
            t = clock()
            await theirs.get(keys[i % KV_KEYS])
            out.append(clock() - t)
        return out

    await base_get(count // 10)
    await ours_get(count // 10)
    o50: list[float] = []
    o99: list[float] = []
    b50: list[float] = []
    b99: list[float] = []
    for _ in range(rounds):
        b = await base_get(count)
        o = await ours_get(count)
        b50.append(percentile(b, 0.5) * 1e6)
        b99.append(percentile(b, 0.99) * 1e6)
        o50.append(percentile(o, 0.5) * 1e6)
        o99.append(percentile(o, 0.99) * 1e6)
    rows.append(Row("kv_get_p50", statistics.median(o50), statistics.median(b50), "µs"))
    rows.append(Row("kv_get_p99", statistics.median(o99), statistics.median(b99), "µs"))
    await js.delete_key_value(KV_BUCKET)
    return rows


# --------------------------------------------------------------------------- memory, import


def child(mode: str, url: str, count: int) -> dict[str, float]:
    """Run a memory measurement in a fresh interpreter and return its JSON result."""
    cmd = [sys.executable, __file__, "--child", mode, "--url", url, "--child-count", str(count)]
    out = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=300)
    if out.returncode:
        raise RuntimeError(f"{mode} measurement failed:\n{out.stderr}")
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


async def child_buffer(url: str, count: int) -> dict[str, float]:
    """RSS per message of a full, unconsumed ``messages(max_messages=count)`` buffer."""
    js = await aiojetstream.connect(url)
    try:
        name = "rssbuf"
        consumer = await js.create_consumer(
            CONSUME_STREAM, ConsumerConfig(name=name, ack_policy=AckPolicy.NONE)
        )
        batch = await consumer.fetch(10, expires=1)  # warm every code path up
        async for _ in batch:
            pass
        await asyncio.sleep(0.1)
        gc.collect()
        before = rss()
        stats = js.nc.stats
        received = stats["in_msgs"]
        async with consumer.messages(max_messages=count) as it:
            deadline = time.monotonic() + 120
            while stats["in_msgs"] - received < count:
                if time.monotonic() > deadline:
                    raise TimeoutError("the buffer did not fill up")
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.2)
            gc.collect()
            grown = rss() - before
            del it
        await js.delete_consumer(CONSUME_STREAM, name)
        return {"value": grown / count}
    finally:
        await js.close()


async def child_growth(url: str, count: int) -> dict[str, float]:
    """Largest RSS growth while consuming ``count`` messages with default settings (acked)."""
    js = await aiojetstream.connect(url)
    try:
        consumer = await js.create_consumer(GROWTH_STREAM, ConsumerConfig(name="growth"))
        batch = await consumer.fetch(10, expires=1)
        async for msg in batch:
            await msg.ack()
        gc.collect()
        before = peak = rss()
        got = 10
        async with consumer.messages() as it:
            async for msg in it:
                await msg.ack()
                got += 1
                if got % 50_000 == 0:
                    peak = max(peak, rss())
                if got >= count:
                    break
        peak = max(peak, rss())
        await js.delete_consumer(GROWTH_STREAM, "growth")
        return {"value": (peak - before) / MIB}
    finally:
        await js.close()


IMPORT_SNIPPET = (
    "import time, nats\n"
    "t = time.perf_counter()\n"
    "import aiojetstream\n"
    "print((time.perf_counter() - t) * 1000)\n"
)


def import_ms(rounds: int) -> float:
    """Median milliseconds ``import aiojetstream`` adds after ``import nats`` (fresh processes)."""

    # Measured as installed packages are used: with bytecode caches (the warm-up
    # run writes them even where PYTHONDONTWRITEBYTECODE is set).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

    def once() -> float:
        out = subprocess.run(
            [sys.executable, "-c", IMPORT_SNIPPET],
            check=True,
            capture_output=True,
            text=True,
            env=env,
        )
        return float(out.stdout.strip())

    once()  # warm the file system cache and the bytecode caches
    return statistics.median(once() for _ in range(max(rounds, 7)))


# --------------------------------------------------------------------------- report


class Row:
    """One line of the table."""

    def __init__(self, name: str, ours: float, baseline: float | None, unit: str) -> None:
        self.name = name
        self.ours = ours
        self.baseline = baseline
        self.unit = unit

    @property
    def ratio(self) -> float | None:
        if self.baseline is None or not self.baseline:
            return None
        return self.ours / self.baseline

    def as_json(self) -> dict[str, Any]:
        ratio = self.ratio
        return {
            "name": self.name,
            "ours": round(self.ours, 1),
            "baseline": None if self.baseline is None else round(self.baseline, 1),
            "ratio": None if ratio is None else round(ratio, 3),
            "unit": self.unit,
        }

    def target(self) -> tuple[str, bool | None]:
        """The target as text and whether it holds (None without a target)."""
        spec = TARGETS.get(self.name)
        if spec is None:
            return "", None
        op, limit = spec
        value = self.ours if self.baseline is None else self.ratio
        assert value is not None
        holds = value >= limit if op == ">=" else value <= limit if op == "<=" else value < limit
        suffix = "x" if self.baseline is not None else f" {self.unit}"
        return f"{op} {limit:g}{suffix}", holds


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"


def print_table(machine_text: str, rows: list[Row]) -> None:
    print(f"machine: {machine_text}")
    print(f"{'case':<28}{'ours':>12}{'nats-py':>12}{'ratio':>8}  {'unit':<8}{'target':<14}")
    for r in rows:
        ratio = r.ratio
        text, holds = r.target()
        mark = "" if holds is None else ("ok" if holds else "MISSED")
        print(
            f"{r.name:<28}{_number(r.ours):>12}{_number(r.baseline):>12}"
            f"{'-' if ratio is None else f'{ratio:.2f}':>8}  {r.unit:<8}{text:<14}{mark}"
        )


# --------------------------------------------------------------------------- main


GROUPS = ("publish", "consume", "kv", "memory", "import")


async def run(args: argparse.Namespace) -> list[Row]:
    """Run the selected groups of cases against one fresh nats-server."""
    groups = set(args.only.split(",")) if args.only else set(GROUPS)
    rows: list[Row] = []
    async with NatsServer() as server:
        libs = await Libraries.open(server.url)
        js = libs.js
        try:
            if "publish" in groups:
                for storage in ("memory", "file"):
                    rows += await bench_publish(libs, storage, args.count, args.rounds)
                    progress(args, rows)
            if groups & {"consume", "memory"}:
                await js.create_stream(
                    StreamConfig(
                        name=CONSUME_STREAM, subjects=[CONSUME_SUBJECT], storage=StorageType.MEMORY
                    )
                )
                await fill(js, CONSUME_SUBJECT, args.messages)
            if "consume" in groups:
                rows += await bench_consume(libs, args.messages, args.rounds)
                progress(args, rows)
            if "kv" in groups:
                rows += await bench_kv(libs, args.kv_count, args.rounds)
                progress(args, rows)
            if "memory" in groups:
                buffered = child("buffer", server.url, min(args.buffer, args.messages))
                rows.append(Row("rss_bytes_per_buffered_msg", buffered["value"], None, "bytes"))
                await js.delete_stream(CONSUME_STREAM)
                await js.create_stream(
                    StreamConfig(
                        name=GROWTH_STREAM, subjects=[GROWTH_SUBJECT], storage=StorageType.MEMORY
                    )
                )
                await fill(js, GROWTH_SUBJECT, args.growth)
                grown = child("growth", server.url, args.growth)
                rows.append(Row("rss_growth_1m_msgs_mib", grown["value"], None, "MiB"))
                await js.delete_stream(GROWTH_STREAM)
                progress(args, rows)
        finally:
            await libs.close()
    if "import" in groups:
        rows.append(Row("import_ms_over_nats", import_ms(args.rounds), None, "ms"))
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
    parser.add_argument("--kv-count", type=int, default=3000, help="KV puts / gets a round")
    parser.add_argument("--buffer", type=int, default=100_000, help="buffered messages (RSS)")
    parser.add_argument("--growth", type=int, default=1_000_000, help="messages (RSS growth)")
    parser.add_argument("--only", help=f"comma-separated groups of cases: {','.join(GROUPS)}")
    parser.add_argument("--verbose", action="store_true", help="progress on stderr")
    parser.add_argument("--child", choices=["buffer", "growth"], help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--child-count", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        fn = child_buffer if args.child == "buffer" else child_growth
        print(json.dumps(asyncio.run(fn(args.url, args.child_count))))
        return 0
    args.rounds = max(5, args.rounds)
    started = time.perf_counter()
    rows = asyncio.run(run(args))
    description = machine()
    print_table(description, rows)
    took = f"took {time.perf_counter() - started:.0f} s"
    if args.only:
        print(f"{took}; a partial run (--only): {RESULTS.name} left as it was")
        return 0
    report = {"machine": description, "results": [r.as_json() for r in rows]}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    print(f"{took}; written to {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
