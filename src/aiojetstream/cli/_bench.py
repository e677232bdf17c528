"""``aiojetstream bench``: publish and consume benchmarks with a result table."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Annotated, Any

import typer
from rich.progress import Progress, TaskID

from aiojetstream import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    JetStreamContext,
    PubAck,
    StorageType,
    StreamConfig,
    StreamNotFoundError,
)

from ._common import CliError, JsonFlag, Output, kv_table, options, output, run
from ._messages import AckWindow, progress_bar
from ._units import format_bytes, format_rate, parse_payload_size

__all__ = ["BenchResult", "LatencySample", "app", "percentile"]

app = typer.Typer(
    help="Benchmarks: publish and consume rates, latency percentiles.",
    no_args_is_help=True,
    rich_markup_mode=None,
    add_completion=False,
)

_STAMP = 8  # bytes of send time (perf_counter_ns) at the start of a consume-bench payload
#: Latencies kept for the percentiles: every one up to this many messages, then
#: a uniform sample of this many (``--msgs`` does not grow the memory used).
SAMPLE_SIZE = 100_000

StreamOpt = Annotated[
    str, typer.Option("--stream", help="The stream (created if missing, deleted after).")
]
SubjectOpt = Annotated[
    str | None, typer.Option("--subject", help="The subject (default: bench.<stream>).")
]
Msgs = Annotated[int, typer.Option("--msgs", "-n", min=1, help="How many messages.")]
Size = Annotated[
    int,
    typer.Option(
        parser=parse_payload_size, metavar="SIZE", help="Payload size (128, 1KiB, 64KiB)."
    ),
]
Storage = Annotated[StorageType, typer.Option(case_sensitive=False, help="file or memory.")]
Keep = Annotated[bool, typer.Option("--keep", help="Keep a stream the benchmark created.")]


class LatencySample:
    """Latencies (ms) for percentiles, in bounded memory: all of them, or a uniform sample.

    The first ``size`` are kept; after that each new one replaces a random
    kept one with the probability that keeps the sample uniform (reservoir
    sampling, Algorithm R). The largest is tracked exactly.
    """

    def __init__(self, size: int = SAMPLE_SIZE, rng: random.Random | None = None) -> None:
        self.size = size
        self.values: list[float] = []
        self.seen = 0
        self.largest: float | None = None
        self._rng = rng or random.Random()

    def add(self, value: float) -> None:
        """Take one latency."""
        self.seen += 1
        if self.largest is None or value > self.largest:
            self.largest = value
        if len(self.values) < self.size:
            self.values.append(value)
            return
        slot = self._rng.randrange(self.seen)
        if slot < self.size:
            self.values[slot] = value


def percentile(sorted_values: list[float], fraction: float) -> float:
    """The nearest-rank percentile of already sorted values (``fraction`` in 0..1)."""
    if not sorted_values:
        raise ValueError("no values")
    index = min(len(sorted_values) - 1, max(0, round(fraction * len(sorted_values)) - 1))
    return sorted_values[index]


@dataclass
class BenchResult:
    """The outcome of one benchmark."""

    kind: str
    messages: int
    size: int
    seconds: float
    latencies_ms: list[float] = field(default_factory=list)
    latency_name: str = "latency"
    """Names the latency in the table; in JSON it is ``<name>_ms`` with ``_`` for spaces."""
    latency_max_ms: float | None = None
    """The largest latency, when ``latencies_ms`` is a sample (default: their largest)."""

    @classmethod
    def sampled(
        cls, kind: str, messages: int, size: int, seconds: float, sample: LatencySample, name: str
    ) -> BenchResult:
        """A result whose latencies are ``sample``'s."""
        return cls(kind, messages, size, seconds, sample.values, name, sample.largest)

    def _largest(self, values: list[float]) -> float:
        return values[-1] if self.latency_max_ms is None else self.latency_max_ms

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (rates per second, latencies in milliseconds)."""
        data: dict[str, Any] = {
            "benchmark": self.kind,
            "messages": self.messages,
            "payload_bytes": self.size,
            "seconds": round(self.seconds, 6),
            "msgs_per_second": round(self.messages / self.seconds, 1) if self.seconds else None,
            "bytes_per_second": round(self.messages * self.size / self.seconds)
            if self.seconds
            else None,
        }
        values = sorted(self.latencies_ms)
        if values:
            key = self.latency_name.replace(" ", "_").replace("-", "_")
            data[f"{key}_ms"] = {
                "p50": round(percentile(values, 0.50), 3),
                "p90": round(percentile(values, 0.90), 3),
                "p99": round(percentile(values, 0.99), 3),
                "max": round(self._largest(values), 3),
            }
        return data

    def show(self, out: Output) -> None:
        """Print the result table (or JSON)."""
        if out.json:
            out.emit_json(self.as_dict())
            return
        rows: list[tuple[str, Any]] = [
            ("Messages", f"{self.messages:,}"),
            ("Payload", f"{self.size:,} bytes"),
            ("Time", f"{self.seconds:.3f} s"),
            ("Rate", format_rate(self.messages, self.seconds)),
            (
                "Throughput",
                format_bytes(self.messages * self.size / self.seconds) + "/s"
                if self.seconds > 0
                else None,
            ),
        ]
        values = sorted(self.latencies_ms)
        if values:
            for label, fraction in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
                rows.append(
                    (f"{self.latency_name} {label}", f"{percentile(values, fraction):.3f} ms")
                )
            rows.append((f"{self.latency_name} max", f"{self._largest(values):.3f} ms"))
        out.table(kv_table(f"bench {self.kind}", rows))


def _stores(pattern: str, subject: str) -> bool:
    """Whether a stream subject ``pattern`` (``*``, ``>``) takes every message on ``subject``.

    NATS rules: ``*`` is one token, ``>`` one or more at the end; a wildcard
    in ``subject`` (``bench consume``'s filter) is covered only by one as wide.
    (The library's own check is private: the command line uses the public API.)
    """
    wide, narrow = pattern.split("."), subject.split(".")
    for i, token in enumerate(wide):
        if token == ">":
            return len(narrow) > i
        if i >= len(narrow) or narrow[i] == ">" or (token != "*" and token != narrow[i]):
            return False
    return len(wide) == len(narrow)


async def _ensure_stream(
    js: JetStreamContext, name: str, subject: str, storage: StorageType
) -> bool:
    """Create the stream unless it exists; True when it was created here."""
    try:
        info = (await js.stream(name)).cached_info
    except StreamNotFoundError:
        await js.create_stream(StreamConfig(name=name, subjects=[subject], storage=storage))
        return True
    subjects = info.config.subjects or [name]
    if not any(_stores(pattern, subject) for pattern in subjects):
        raise CliError(
            f"stream {name} exists but does not store {subject} (its subjects: "
            f"{', '.join(subjects)}); pick --subject or another --stream"
        )
    return False


async def _publish_all(
    js: JetStreamContext,
    progress: Progress,
    task: TaskID,
    subject: str,
    count: int,
    payload: bytes,
    *,
    sync: bool,
    stamp: bool,
) -> tuple[float, LatencySample]:
    """Publish ``count`` messages; return the seconds taken and the ack latencies (ms).

    With ``stamp``, each payload starts with its send time (``perf_counter_ns``).
    Asynchronous publishes go through the library's window and keep no future
    each; the first failed acknowledgement stops the sending with its error.
    """
    latencies = LatencySample()
    start = time.perf_counter()
    if sync:
        for _ in range(count):
            t0 = time.perf_counter_ns()
            body = t0.to_bytes(_STAMP, "big") + payload[_STAMP:] if stamp else payload
            await js.publish(subject, body)
            latencies.add((time.perf_counter_ns() - t0) / 1e6)
            progress.advance(task)
        return time.perf_counter() - start, latencies

    window = AckWindow()

    def acked(t0: int, ack: PubAck) -> None:
        latencies.add((time.perf_counter_ns() - t0) / 1e6)
        progress.advance(task)

    for _ in range(count):
        window.check()
        t0 = time.perf_counter_ns()
        body = t0.to_bytes(_STAMP, "big") + payload[_STAMP:] if stamp else payload
        fut = await js.publish_async(subject, body)
        window.track(fut, functools.partial(acked, t0))
    await window.wait()  # raises the first failed publish's error
    return time.perf_counter() - start, latencies


@app.command("pub")
def bench_pub(
    ctx: typer.Context,
    stream: StreamOpt = "BENCH",
    subject: SubjectOpt = None,
    msgs: Msgs = 10_000,
    size: Size = 128,
    storage: Storage = StorageType.MEMORY,
    sync: Annotated[
        bool, typer.Option("--sync", help="Wait for each ack (round-trip latency).")
    ] = False,
    keep: Keep = False,
    json_flag: JsonFlag = False,
) -> None:
    """Publish --msgs messages of --size bytes; rate and ack latency percentiles."""
    out = output(ctx, json_flag)
    subj = subject or f"bench.{stream.lower()}"
    payload = os.urandom(size)

    async def work(js: JetStreamContext) -> BenchResult:
        created = await _ensure_stream(js, stream, subj, storage)
        try:
            with progress_bar(out, "bench") as progress:
                task = progress.add_task("Publishing", total=msgs)
                seconds, latencies = await _publish_all(
                    js, progress, task, subj, msgs, payload, sync=sync, stamp=False
                )
        finally:
            if created and not keep:
                await js.delete_stream(stream)
        kind = "pub (sync)" if sync else "pub (async)"
        return BenchResult.sampled(kind, msgs, size, seconds, latencies, "ack latency")

    run(ctx, work).show(out)


@app.command("consume")
def bench_consume(
    ctx: typer.Context,
    stream: StreamOpt = "BENCH",
    subject: SubjectOpt = None,
    msgs: Msgs = 10_000,
    size: Size = 128,
    storage: Storage = StorageType.MEMORY,
    ack: Annotated[bool, typer.Option("--ack/--no-ack", help="Acknowledge each message.")] = True,
    backlog: Annotated[
        bool,
        typer.Option(
            "--backlog",
            help="Store the messages first, then consume them (rate only); default: "
            "consume while publishing (end-to-end latency).",
        ),
    ] = False,
    keep: Keep = False,
    json_flag: JsonFlag = False,
) -> None:
    """Consume --msgs messages through a pull consumer; rate and end-to-end latency."""
    out = output(ctx, json_flag)
    if size < _STAMP and not backlog:
        raise typer.BadParameter(f"--size must be at least {_STAMP} bytes (the send time)")
    subj = subject or f"bench.{stream.lower()}"
    payload = os.urandom(size)
    idle = max(10.0, 2 * options(ctx).timeout)

    async def work(js: JetStreamContext) -> BenchResult:
        created = await _ensure_stream(js, stream, subj, storage)
        try:
            return await _consume(js, created)
        finally:
            if created and not keep:
                await js.delete_stream(stream)

    async def _consume(js: JetStreamContext, created: bool) -> BenchResult:
        name = f"bench_{uuid.uuid4().hex[:10]}"
        with progress_bar(out, "bench") as progress:
            if backlog:
                filling = progress.add_task("Storing", total=msgs)
                await _publish_all(
                    js, progress, filling, subj, msgs, payload, sync=False, stamp=False
                )
            consumer = await js.create_consumer(
                stream,
                ConsumerConfig(
                    durable_name=name,
                    filter_subject=subj,
                    deliver_policy=DeliverPolicy.ALL if backlog else DeliverPolicy.NEW,
                    ack_policy=AckPolicy.EXPLICIT if ack else AckPolicy.NONE,
                ),
            )
            try:
                latencies = LatencySample()
                received = 0
                reading = progress.add_task("Consuming", total=msgs)
                start = time.perf_counter()
                publisher: asyncio.Task[tuple[float, LatencySample]] | None = None
                async with consumer.messages() as it:
                    if not backlog:
                        sending = progress.add_task("Publishing", total=msgs)
                        publisher = asyncio.create_task(
                            _publish_all(
                                js, progress, sending, subj, msgs, payload, sync=False, stamp=True
                            )
                        )
                    try:
                        while received < msgs:
                            try:
                                async with asyncio.timeout(idle):
                                    msg = await anext(it)
                            except TimeoutError:
                                if publisher is not None and publisher.done():
                                    await publisher  # raises why publishing failed
                                raise CliError(
                                    f"no message for {idle:g} s after {received} of {msgs}"
                                ) from None
                            if not backlog:
                                sent = int.from_bytes(msg.data[:_STAMP], "big")
                                latencies.add((time.perf_counter_ns() - sent) / 1e6)
                            if ack:
                                await msg.ack()
                            received += 1
                            progress.advance(reading)
                        seconds = time.perf_counter() - start
                        if publisher is not None:
                            await publisher
                    finally:
                        if publisher is not None and not publisher.done():
                            publisher.cancel()
                            with contextlib.suppress(asyncio.CancelledError):
                                await publisher
            finally:
                await js.delete_consumer(stream, name)
        kind = "consume (backlog)" if backlog else "consume (live)"
        return BenchResult.sampled(kind, msgs, size, seconds, latencies, "end-to-end")

    run(ctx, work).show(out)
