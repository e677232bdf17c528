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

Run with ``make bench`` (``python benchmarks/run.py --help`` for the options).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any, Final

import bare_publisher
import bare_reader
import nats
import otel_rows
import typed_rows
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
from aiojetstream._context import DEFAULT_MAX_PENDING
from aiojetstream.testing import NatsServer, find_nats_server

PAYLOAD = b"x" * 128
BENCHMARKS = Path(__file__).resolve().parent
RESULTS = BENCHMARKS / "results" / "latest.json"
MIB = 1024 * 1024

CONSUME_STREAM = "BCONS"
CONSUME_SUBJECT = "bcons.data"
GROWTH_STREAM = "BGROW"
GROWTH_SUBJECT = "bgrow.data"
KV_BUCKET = "BKV"
KV_KEYS = 100
SPARK_STREAM = "BSPARK"  # the same names as in spark_noop.py
SPARK_SUBJECT = "bspark.data"
SPARK_SINK_STREAM = "BSPARKW"
SPARK_SINK_SUBJECT = "bsparkw.data"
#: The Spark reads' numPartitions: as many consumers for the bare-socket reader,
#: as many connections (each with its own window) for the bare-socket publisher.
SPARK_PARTITIONS = 2
PUBLISH_MANY_STREAM = "BPUBMANY"
PUBLISH_MANY_SUBJECT = "bpubmany.data"

#: Targets: case -> (comparison, threshold); ratios for cases with a baseline.
TARGETS: dict[str, tuple[str, float]] = {
    "publish_mem": (">=", 1.1),
    "publish_file": (">=", 1.1),
    "publish_async_mem": (">=", 2.0),
    "publish_async_file": (">=", 2.0),
    "messages_ack_none": (">=", 4.5),
    "messages_ack_explicit": (">=", 3.0),
    # Issue 14 (Performance II): past nats-py's own core subscription.
    "messages_ack_none_vs_core": (">=", 1.25),
    "consume_vs_core": (">=", 1.25),
    "messages_ack_explicit_vs_core": (">=", 0.7),
    # Issue 27: against what the server delivers and stores (bare-socket clients).
    "messages_vs_socket": (">=", 0.8),
    "publish_many_vs_socket": (">=", 0.6),
    "ordered": (">=", 1.5),
    "kv_put": (">=", 1.0),
    "kv_get_p50": ("<=", 0.6),
    "rss_bytes_per_buffered_msg": ("<=", 400),
    "rss_growth_1m_msgs_mib": ("<", 50),
    "import_ms_over_nats": ("<=", 150),
    "import_ratio_over_nats": ("<=", 0.5),
    # Issue 26: the command line answers --version and --help in under half a second.
    "cli_version_ms": ("<=", 500),
    "cli_help_ms": ("<=", 500),
    # Issue 27 (issue 8's spark_*_vs_noop targets withdrawn: those rows are information).
    # CPU rows: Python-worker CPU per row over the no-op source's; lower is better.
    "spark_read_cpu_vs_noop": ("<=", 3.0),
    "spark_write_cpu_vs_noop": ("<=", 5.0),
    "spark_read_vs_server": (">=", 0.7),
    "spark_write_vs_server": (">=", 0.6),
    # Issue 28: an instrumented context (OpenTelemetry SDK) against a plain one.
    "publish_async_otel_vs_plain": (">=", 0.7),
    "messages_otel_vs_plain": (">=", 0.7),
    # Issue 28: messages(model=...) over messages() plus a hand-written model_validate_json.
    "typed_messages_vs_manual": (">=", 0.95),
}

#: Above this spread (the interquartile range of a row's per-round ratios over
#: their median: the middle half of the rounds differ by more than 15 %) the
#: run prints a warning: the ratio is not a figure to trust, rerun the group.
#: Not warned about: rows without a baseline (memory, import milliseconds: their
#: targets are absolute and far from the noise) and rows whose every round meets
#: the target (the verdict holds whatever the spread).
SPREAD_WARNING: float = 0.15

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


async def bench_publish_many(libs: Libraries, url: str, count: int, rounds: int) -> list[Row]:
    """``publish_many`` of ``count`` 128-byte messages against the bare-socket publisher.

    Both publish into the same memory stream, purged before every round (not
    timed), with the same window (the library's default
    ``publish_async_max_pending``) over one connection; every round checks
    that the stream stored all of them.
    """
    js = libs.js
    subject = PUBLISH_MANY_SUBJECT
    window = js._publisher.max_pending
    if window != DEFAULT_MAX_PENDING:
        raise RuntimeError(f"the context's publish window is {window}, not the default")
    await js.create_stream(
        StreamConfig(name=PUBLISH_MANY_STREAM, subjects=[subject], storage=StorageType.MEMORY)
    )
    payloads = [PAYLOAD] * count
    stream = await js.stream(PUBLISH_MANY_STREAM)

    async def stored(n: int, what: str) -> None:
        if (got := (await stream.info()).state.messages) != n:
            raise RuntimeError(f"{what} stored {got} of {n} messages")

    async def ours(n: int) -> float:
        await stream.purge()
        batch = payloads[:n]
        start = time.perf_counter()
        await js.publish_many(subject, batch)
        value = rate(n, start)
        await stored(n, "publish_many")
        return value

    async def socket(n: int) -> float:
        await stream.purge()
        value = await bare_publisher.publish(url, subject, n, window=window)
        await stored(n, "the bare-socket publisher")
        return value

    try:
        figures = await compare(ours, socket, count, rounds)
    finally:
        await js.delete_stream(PUBLISH_MANY_STREAM)
    return [Row("publish_many_vs_socket", *figures, "msgs/s")]


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


async def bench_consume(libs: Libraries, url: str, count: int, rounds: int) -> list[Row]:
    """messages() without and with acks, consume(), fetch() and the ordered consumer.

    One round measures every side once: ours, nats-py's, the core
    subscription's (the baseline of the ``*_vs_core`` rows) and the
    bare-socket reader's through one AckNone consumer (``messages_vs_socket``),
    so each row pairs figures taken in the same round.
    """
    js, theirs = libs.js, libs.theirs
    consumers = Consumers(libs)

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

    async def core(n: int) -> float:
        return await core_subscription_rate(libs, n)

    async def socket(n: int) -> float:
        return await bare_reader.read(url, CONSUME_STREAM, n, consumers=1)

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

    f = await measure_rounds(
        {
            "base_none": base_none,
            "ours_none": ours_none,
            "core": core,
            "socket": socket,
            "ours_explicit": ours_explicit,
            "base_explicit": base_explicit,
            "ours_consume": ours_consume,
            "base_consume": base_consume,
            "ours_fetch": ours_fetch,
            "ours_ordered": ours_ordered,
            "base_ordered": base_ordered,
        },
        count,
        rounds,
    )
    unit = "msgs/s"
    return [
        Row("messages_ack_none", f["ours_none"], f["base_none"], unit),
        Row("messages_ack_explicit", f["ours_explicit"], f["base_explicit"], unit),
        Row("messages_ack_none_vs_core", f["ours_none"], f["core"], unit),
        Row("messages_ack_explicit_vs_core", f["ours_explicit"], f["core"], unit),
        Row("messages_vs_socket", f["ours_none"], f["socket"], unit),
        Row("consume_callback", f["ours_consume"], f["base_consume"], unit),
        Row("consume_vs_core", f["ours_consume"], f["core"], unit),
        Row("fetch_loop", f["ours_fetch"], f["base_none"], unit),
        Row("ordered", f["ours_ordered"], f["base_ordered"], unit),
    ]


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


async def bench_kv(libs: Libraries, url: str, count: int, rounds: int) -> list[Row]:
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

    floor_get, floor_close = await raw_direct_get(url, KV_BUCKET, keys)

    # Each round's latencies of each side, as in measure_rounds (which takes one figure).
    samples: dict[str, list[list[float]]] = {"baseline": [], "ours": [], "floor": []}
    sides = {"baseline": base_get, "ours": ours_get, "floor": floor_get}
    try:
        for get in sides.values():
            await get(count // 10)
        for i in range(rounds):
            for name in sides if i % 2 == 0 else reversed(list(sides)):
                samples[name].append(await sides[name](count))
    finally:
        floor_close()

    def quantile(name: str, q: float) -> list[float]:
        return [percentile(latencies, q) * 1e6 for latencies in samples[name]]

    rows.append(Row("kv_get_p50", quantile("ours", 0.5), quantile("baseline", 0.5), "µs"))
    rows.append(Row("kv_get_p99", quantile("ours", 0.99), quantile("baseline", 0.99), "µs"))
    # For information: a bare asyncio socket sending the same direct gets (no client).
    rows.append(
        Row("kv_get_p50_raw_socket", quantile("floor", 0.5), quantile("baseline", 0.5), "µs")
    )
    await js.delete_key_value(KV_BUCKET)
    return rows


_PING: Final = b"PING\r\n"
_PONG: Final = b"PONG\r\n"


async def raw_direct_get(
    url: str, bucket: str, keys: list[str]
) -> tuple[Callable[[int], Awaitable[list[float]]], Callable[[], None]]:
    """The floor of a KV get on this machine: one asyncio stream, write, read to the reply's end.

    No client at all: a ``PUB`` of the direct get written straight to the
    socket and the reply read until its payload arrived (the payload is known).
    """
    host, _, port = url.removeprefix("nats://").rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    await reader.readline()  # INFO
    writer.write(
        b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true,'
        b'"protocol":1}\r\nSUB _RAW.* 1\r\nPING\r\n'
    )
    await reader.readuntil(b"PONG\r\n")
    requests = [
        b"PUB $JS.API.DIRECT.GET.KV_%b.$KV.%b.%b _RAW.1 0\r\n\r\n"
        % (bucket.encode(), bucket.encode(), key.encode())
        for key in keys
    ]
    tail = PAYLOAD + b"\r\n"

    async def get(n: int) -> list[float]:
        out: list[float] = []
        clock = time.perf_counter
        for i in range(n):
            t = clock()
            writer.write(requests[i % len(requests)])
            data = await reader.read(65536)
            while True:
                if _PING in data:
                    # The server's keep-alive, around the reply: answer it, or the
                    # server closes the connection as stale. (Unanswered, the read
                    # waited for a reply already read, then spun on EOF for good.)
                    writer.write(_PONG * data.count(_PING))
                    data = data.replace(_PING, b"")
                if data.endswith(tail):
                    break
                more = await reader.read(65536)
                if not more:
                    raise ConnectionError("the server closed the raw connection")
                data += more
            out.append(clock() - t)
        return out

    return get, writer.close


# --------------------------------------------------------------------------- memory, import


def child(mode: str, url: str, count: int, *extra: str, timeout: float = 300) -> dict[str, Any]:
    """Run a measurement in a fresh interpreter and return its JSON result."""
    cmd = [sys.executable, __file__, "--child", mode, "--url", url, "--child-count", str(count)]
    out = subprocess.run(
        [*cmd, *extra], check=False, capture_output=True, text=True, timeout=timeout
    )
    if out.returncode:
        raise RuntimeError(f"{mode} measurement failed:\n{out.stderr[-5000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
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


#: The names the README's first program imports: what ``import_ratio_over_nats`` times.
IMPORT_NAMES: Final = "connect, StreamConfig, ConsumerConfig, Msg"

#: The baseline's interpreter: ``import nats`` (timed), then a bare ``import
#: aiojetstream`` after it (``import_ms_over_nats``; it loads the package's
#: ``__init__`` only). Wall and CPU milliseconds.
NATS_SNIPPET: Final = (
    "import time\n"
    "w0, c0 = time.perf_counter(), time.process_time()\n"
    "import nats\n"
    "w1, c1 = time.perf_counter(), time.process_time()\n"
    "import aiojetstream\n"
    "w2 = time.perf_counter()\n"
    "print((w1 - w0) * 1000, (c1 - c0) * 1000, (w2 - w1) * 1000)\n"
)

#: Our interpreter: only ``from aiojetstream import <IMPORT_NAMES>`` (timed).
IMPORT_SNIPPET: Final = (
    "import time\n"
    "w0, c0 = time.perf_counter(), time.process_time()\n"
    f"from aiojetstream import {IMPORT_NAMES}\n"
    "w1, c1 = time.perf_counter(), time.process_time()\n"
    "print((w1 - w0) * 1000, (c1 - c0) * 1000)\n"
)

#: Fresh interpreters of the import cases (at least; more with more --rounds).
IMPORT_ROUNDS = 10


def import_times(rounds: int) -> dict[str, list[float]]:
    """Milliseconds of ``import nats`` and of our first program's import, in fresh interpreters.

    Each round runs two interpreters back to back, in the opposite order every
    other round: one times ``import nats`` (and then a bare ``import
    aiojetstream``), the other only ``from aiojetstream import`` the names of
    :data:`IMPORT_NAMES` (which loads nats too). Returns each round's figures:
    ``nats`` and ``first`` (wall ms), ``nats_cpu`` and ``first_cpu`` (CPU ms of
    the same imports, for --verbose) and ``bare`` (the bare import's wall ms).
    """
    # Measured as installed packages are used: with bytecode caches (the warm-up
    # run writes them even where PYTHONDONTWRITEBYTECODE is set).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

    def once(snippet: str) -> list[float]:
        out = subprocess.run(
            [sys.executable, "-c", snippet],
            check=True,
            capture_output=True,
            text=True,
            env=env,
        )
        return [float(x) for x in out.stdout.split()]

    figures: dict[str, list[float]] = {
        "nats": [],
        "nats_cpu": [],
        "bare": [],
        "first": [],
        "first_cpu": [],
    }

    def nats_side() -> None:
        wall, cpu, bare = once(NATS_SNIPPET)
        figures["nats"].append(wall)
        figures["nats_cpu"].append(cpu)
        figures["bare"].append(bare)

    def ours_side() -> None:
        wall, cpu = once(IMPORT_SNIPPET)
        figures["first"].append(wall)
        figures["first_cpu"].append(cpu)

    once(NATS_SNIPPET)  # warm the file system cache and the bytecode caches
    once(IMPORT_SNIPPET)
    for i in range(max(rounds, IMPORT_ROUNDS)):
        for side in (nats_side, ours_side) if i % 2 == 0 else (ours_side, nats_side):
            side()
    return figures


def extra(ours: list[float], baseline: list[float]) -> list[float]:
    """Each round's ``ours - baseline`` (what our import adds to ``import nats``)."""
    return [o - b for o, b in zip(ours, baseline, strict=True)]


#: The command line's start-up cases: row name -> arguments of ``python -m aiojetstream``.
CLI_STARTUP: Final = {"cli_version_ms": ("--version",), "cli_help_ms": ("--help",)}


def cli_startup_times(rounds: int) -> dict[str, list[float]]:
    """Milliseconds from starting ``python -m aiojetstream --version`` (``--help``) to its exit.

    Wall time of a fresh process, interpreter start-up included (bytecode
    cached, as :func:`import_times`); the cases alternate, one of each a round.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

    def once(args: tuple[str, ...]) -> float:
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "aiojetstream", *args],
            check=True,
            capture_output=True,
            env=env,
        )
        return (time.perf_counter() - start) * 1000

    for args in CLI_STARTUP.values():
        once(args)  # warm the file system cache and the bytecode caches
    times: dict[str, list[float]] = {name: [] for name in CLI_STARTUP}
    for _ in range(max(rounds, IMPORT_ROUNDS)):
        for name, args in CLI_STARTUP.items():
            times[name].append(once(args))
    return times


# --------------------------------------------------------------------------- spark


def spark_missing() -> str | None:
    """Why the Spark cases cannot run here (None when they can)."""
    if importlib.util.find_spec("pyspark") is None or importlib.util.find_spec("pyarrow") is None:
        return "pyspark and pyarrow are not installed (pip install 'aiojetstream[spark]')"
    java_home = os.environ.get("JAVA_HOME")
    if shutil.which("java") is None and not (java_home and Path(java_home, "bin", "java").exists()):
        return "no Java runtime (java on PATH or JAVA_HOME)"
    return None


def spark_cases(url: str, args: argparse.Namespace) -> list[Row]:
    """The Spark cases, measured in a subprocess (its JVM ends with it)."""
    extra = ("--spark-rounds", str(args.spark_rounds))
    result = child("spark", url, args.spark_rows, *extra, timeout=1800)
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
            if args.verbose:
                print(
                    f"  {name} rounds: ours {spread(ours)}, {level} {spread(base)}", file=sys.stderr
                )
    return rows


def spread(values: list[float]) -> str:
    """``median [min..max] (n rounds)`` of a side's figures (for --verbose)."""
    return (
        f"{_number(statistics.median(values))} [{_number(min(values))}..{_number(max(values))}] "
        f"({len(values)} rounds)"
    )


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


# --------------------------------------------------------------------------- report


def relative_iqr(values: list[float]) -> float | None:
    """The interquartile range of ``values`` over their median (None for fewer than 3)."""
    if len(values) < 3:
        return None
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    middle = statistics.median(values)
    return (q3 - q1) / middle if middle else None


class Row:
    """One line of the table: every round's figure of ours and of the baseline.

    ``ours`` and ``baseline`` are the medians of the sides' rounds; ``ratio``
    is the median of the per-round ratios (round i of ours over round i of the
    baseline, measured back to back); ``spread`` is :func:`relative_iqr` of
    those ratios, or of ours' rounds in a row without a baseline.
    """

    def __init__(
        self, name: str, ours: list[float], baseline: list[float] | None, unit: str
    ) -> None:
        if baseline is not None and len(baseline) != len(ours):
            raise ValueError(f"{name}: {len(ours)} rounds of ours, {len(baseline)} of the baseline")
        self.name = name
        self.rounds = ours
        self.baseline_rounds = baseline
        self.unit = unit
        self.ours = statistics.median(ours)
        self.baseline = None if baseline is None else statistics.median(baseline)
        self.ratios = (
            None if baseline is None else [o / b for o, b in zip(ours, baseline, strict=True) if b]
        )

    @property
    def ratio(self) -> float | None:
        """The median of the per-round ratios (None without a baseline)."""
        return statistics.median(self.ratios) if self.ratios else None

    @property
    def spread(self) -> float | None:
        """How much the rounds disagree (None for a single measurement)."""
        return relative_iqr(self.rounds if self.ratios is None else self.ratios)

    def as_json(self) -> dict[str, Any]:
        ratio = self.ratio
        spread = self.spread
        text, holds = self.target()
        return {
            "name": self.name,
            "ours": round(self.ours, 1),
            "baseline": None if self.baseline is None else round(self.baseline, 1),
            "ratio": None if ratio is None else round(ratio, 3),
            "unit": self.unit,
            "spread": None if spread is None else round(spread, 3),
            "rounds": len(self.rounds),
            "target": text or None,
            "target_met": holds,
        }

    def target(self) -> tuple[str, bool | None]:
        """The target as text and whether it holds (None without a target)."""
        spec = TARGETS.get(self.name)
        if spec is None:
            return "", None
        op, limit = spec
        value = self.ours if self.baseline is None else self.ratio
        assert value is not None
        suffix = "x" if self.baseline is not None else f" {self.unit}"
        return f"{op} {limit:g}{suffix}", _holds(value, op, limit)

    def noisy(self) -> bool:
        """Whether to warn about the row's spread (see :data:`SPREAD_WARNING`)."""
        if self.ratios is None or (self.spread or 0) <= SPREAD_WARNING:
            return False
        spec = TARGETS.get(self.name)
        return spec is None or not all(_holds(r, *spec) for r in self.ratios)

    def unsure(self) -> bool:
        """Whether the target lies between the first and third quartile of the rounds.

        The rounds then fall on both sides of it: the verdict is the median's,
        but another run may well give the other one.
        """
        spec = TARGETS.get(self.name)
        values = self.rounds if self.ratios is None else self.ratios
        if spec is None or len(values) < 3:
            return False
        op, limit = spec
        q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
        return _holds(q1, op, limit) != _holds(q3, op, limit)


def _holds(value: float, op: str, limit: float) -> bool:
    return value >= limit if op == ">=" else value <= limit if op == "<=" else value < limit


def _ratio(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if value >= 0.1 else f"{value:.3f}"


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"


def print_table(machine_text: str, rows: list[Row]) -> None:
    """The table, then a warning for every row whose rounds disagree too much."""
    print(f"machine: {machine_text}")
    print(
        f"{'case':<30}{'ours':>12}{'baseline':>12}{'ratio':>8}{'spread':>8}  "
        f"{'unit':<11}{'target':<15}"
    )
    for r in rows:
        ratio = r.ratio
        spread = r.spread
        text, holds = r.target()
        mark = "" if holds is None else ("ok" if holds else "MISSED")
        if mark and r.unsure():
            mark += "?"
        print(
            f"{r.name:<30}{_number(r.ours):>12}{_number(r.baseline):>12}"
            f"{_ratio(ratio):>8}"
            f"{'-' if spread is None else f'{spread:.0%}':>8}  {r.unit:<11}{text:<15}{mark}"
        )
    noisy = [r for r in rows if r.noisy()]
    for r in noisy:
        print(
            f"warning: {r.name}: the rounds disagree too much to trust the figure "
            f"(spread {r.spread:.0%} > {SPREAD_WARNING:.0%}); rerun its group "
            f"(--only {group_of(r.name)}) on a quieter machine"
        )
    if any(r.unsure() for r in rows):
        print("?: the target lies between the rounds' quartiles: another run may say otherwise")


def group_of(case: str) -> str:
    """The ``--only`` group that measures ``case``."""
    for prefix, group in (
        ("publish", "publish"),
        ("kv_", "kv"),
        ("rss_", "memory"),
        ("import_", "import"),
        ("cli_", "import"),
        ("spark_", "spark"),
    ):
        if case.startswith(prefix):
            return group
    return "consume"


# --------------------------------------------------------------------------- main


GROUPS = ("publish", "consume", "kv", "memory", "spark", "import")


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
        js = libs.js
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
                await js.create_stream(
                    StreamConfig(
                        name=CONSUME_STREAM, subjects=[CONSUME_SUBJECT], storage=StorageType.MEMORY
                    )
                )
                await fill(js, CONSUME_SUBJECT, args.messages)
            if "consume" in groups:
                rows += await bench_consume(libs, server.url, args.messages, args.rounds)
                progress(args, rows)
                rows += await typed_rows.bench_typed(
                    server.url, min(args.messages, 100_000), args.rounds, compare, Row
                )
                progress(args, rows)
            if groups & {"publish", "consume"} and otel_rows.available():
                rows += await otel_rows.bench_otel(
                    server.url, args.count, args.messages, args.rounds, compare, Row, groups
                )
                progress(args, rows)
            if "kv" in groups:
                rows += await bench_kv(libs, server.url, args.kv_count, args.rounds)
                progress(args, rows)
            if "memory" in groups:
                buffered = child("buffer", server.url, min(args.buffer, args.messages))
                rows.append(Row("rss_bytes_per_buffered_msg", [buffered["value"]], None, "bytes"))
                await js.delete_stream(CONSUME_STREAM)
                await js.create_stream(
                    StreamConfig(
                        name=GROWTH_STREAM, subjects=[GROWTH_SUBJECT], storage=StorageType.MEMORY
                    )
                )
                await fill(js, GROWTH_SUBJECT, args.growth)
                grown = child("growth", server.url, args.growth)
                rows.append(Row("rss_growth_1m_msgs_mib", [grown["value"]], None, "MiB"))
                await js.delete_stream(GROWTH_STREAM)
                progress(args, rows)
        finally:
            await libs.close()
        if "spark" in groups:  # no client of this process is connected meanwhile
            rows += spark_cases(server.url, args)
            progress(args, rows)
    if "import" in groups:
        f = import_times(args.rounds)
        if args.verbose:
            cpu = Row("cpu", extra(f["first_cpu"], f["nats_cpu"]), f["nats_cpu"], "ms")
            print(
                f"  import nats {spread(f['nats'])} ms, then import aiojetstream "
                f"{spread(f['bare'])} ms; from aiojetstream import {IMPORT_NAMES} "
                f"{spread(f['first'])} ms; CPU: import nats {spread(f['nats_cpu'])} ms, "
                f"ours {spread(f['first_cpu'])} ms, extra ratio {_ratio(cpu.ratio)}",
                file=sys.stderr,
            )
        rows.append(Row("import_ms_over_nats", f["bare"], None, "ms"))
        # (ours - nats) / nats per round: the extra ratio (0.5: half again import nats).
        rows.append(Row("import_ratio_over_nats", extra(f["first"], f["nats"]), f["nats"], "ms"))
        for name, times in cli_startup_times(args.rounds).items():
            rows.append(Row(name, times, None, "ms"))
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
