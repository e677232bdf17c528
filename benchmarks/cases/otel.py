"""Groups ``publish`` and ``consume``: an instrumented context against a plain one (issue 28).

* ``publish_async_otel_vs_plain``: pipelined ``publish_async`` plus the
  completion barrier, instrumented (a send span, the trace context injected
  into the headers, the publish metrics per message) over plain. Target >= 0.7.
* ``messages_otel_vs_plain``: ``messages()`` with an explicit ack per message,
  instrumented (a process span linked to the send span, the consume and ack
  metrics) over plain, both reading the same stream of messages that carry a
  ``traceparent``. Target >= 0.7.

* ``publish_async_otel_floor`` and ``messages_otel_floor`` (informational, no
  target): the best ratio any instrumentation could reach on this machine.
  After each round of the plain side, the SDK alone starts and ends as many
  spans as that round handled messages (up to 20,000), with the attributes
  the instrumented spans end up with (and, for process spans, a link), on the
  same TracerProvider; no client is involved. The row's figure is the plain
  rate with that span cost added to every message: ``1 / (1 / plain + span)``,
  its ratio ``plain per-message time / (plain time + span time)``.

The instrumented side uses the OpenTelemetry SDK with recording spans and
metrics (a TracerProvider without a processor: what an exporter costs is the
application's choice, not the library's) and the global W3C propagator.
Without the SDK installed the rows are skipped.

Alone, on a fresh server: ``cd benchmarks && python -m cases.otel [--count N]
[--messages N] [--rounds R]``.
"""

from __future__ import annotations

import importlib.util
import time

import aiojetstream
from aiojetstream import AckPolicy, ConsumerConfig, StorageType, StreamConfig

from .measure import PAYLOAD, Measure, compare, rate
from .report import Row

STREAM = "BOTEL"
SUBJECT = "botel.data"


def available() -> bool:
    """Whether the OpenTelemetry SDK is installed (the rows need it)."""
    return importlib.util.find_spec("opentelemetry.sdk") is not None


async def bench_otel(
    url: str, count: int, messages: int, rounds: int, groups: set[str]
) -> list[Row]:
    """The rows of the selected groups (``publish``, ``consume``)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags

    from aiojetstream.otel import instrument

    provider = TracerProvider()
    plain = await aiojetstream.connect(url)
    traced = await aiojetstream.connect(url)
    instrument(
        traced,
        tracer_provider=provider,
        meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()]),
    )
    tracer = provider.get_tracer("floor")
    common = {"messaging.system": "nats", "messaging.destination.name": SUBJECT}
    send_attrs = {
        **common,
        "messaging.operation.name": "send",
        "messaging.operation.type": "send",
        "messaging.message.body.size": len(PAYLOAD),
        "messaging.nats.stream": STREAM,
        "messaging.message.id": "1",
    }
    process_attrs = {
        **common,
        "messaging.operation.name": "process",
        "messaging.operation.type": "process",
        "messaging.consumer.group.name": "c",
        "messaging.destination.subscription.name": "c",
        "messaging.nats.stream": STREAM,
        "messaging.message.body.size": len(PAYLOAD),
        "messaging.message.id": "1",
        "messaging.nats.message.sequence": 1,
        "messaging.nats.delivery_count": 1,
    }
    sent = SpanContext(1, 1, is_remote=True, trace_flags=TraceFlags(1))

    def span_cost(name: str, kind: SpanKind, attrs: dict[str, object], link: bool, n: int) -> float:
        """Seconds per span of the SDK alone: start (same attributes, link), end."""
        links = [Link(sent)] if link else None
        start = time.perf_counter()
        for _ in range(n):
            tracer.start_span(name, kind=kind, attributes=attrs, links=links).end()  # type: ignore[arg-type]
        return (time.perf_counter() - start) / n

    def with_floor(
        measure: Measure,
        floors: list[float],
        name: str,
        kind: SpanKind,
        attrs: dict[str, object],
        link: bool,
    ) -> Measure:
        """The plain side, and after it (outside its timing) the floor of the same round."""

        async def both(n: int) -> float:
            figure = await measure(n)
            cost = span_cost(name, kind, attrs, link, min(n, 20_000))
            floors.append(1 / (1 / figure + cost))
            return figure

        return both

    rows: list[Row] = []
    try:
        await plain.create_stream(
            StreamConfig(
                name=STREAM,
                subjects=[SUBJECT],
                storage=StorageType.MEMORY,
                max_msgs=max(100_000, messages),
            )
        )

        def publisher(js: aiojetstream.JetStreamContext) -> Measure:
            async def measure(n: int) -> float:
                start = time.perf_counter()
                for _ in range(n):
                    await js.publish_async(SUBJECT, PAYLOAD)
                await js.publish_async_complete(timeout=120)
                return rate(n, start)

            return measure

        if "publish" in groups:
            floors: list[float] = []
            baseline = with_floor(
                publisher(plain), floors, f"send {SUBJECT}", SpanKind.PRODUCER, send_attrs, False
            )
            ours, base = await compare(publisher(traced), baseline, count * 10, rounds)
            rows.append(Row("publish_async_otel_vs_plain", ours, base, "msgs/s"))
            rows.append(Row("publish_async_otel_floor", floors[-rounds:], base, "msgs/s"))
        if "consume" in groups:
            await (await plain.stream(STREAM)).purge()
            await publisher(traced)(messages)  # every message carries a traceparent

            def reader(js: aiojetstream.JetStreamContext) -> Measure:
                async def measure(n: int) -> float:
                    consumer = await js.create_consumer(
                        STREAM, ConsumerConfig(ack_policy=AckPolicy.EXPLICIT)
                    )
                    n = min(n, messages)
                    start = time.perf_counter()
                    got = 0
                    async with consumer.messages() as it:
                        async for msg in it:
                            await msg.ack()
                            got += 1
                            if got == n:
                                break
                    figure = rate(n, start)
                    await js.delete_consumer(STREAM, consumer.name)
                    return figure

                return measure

            floors = []
            baseline = with_floor(
                reader(plain), floors, f"process {SUBJECT}", SpanKind.CONSUMER, process_attrs, True
            )
            ours, base = await compare(reader(traced), baseline, messages, rounds)
            rows.append(Row("messages_otel_vs_plain", ours, base, "msgs/s"))
            rows.append(Row("messages_otel_floor", floors[-rounds:], base, "msgs/s"))
    finally:
        try:
            await plain.delete_stream(STREAM)
        finally:
            await traced.close()
            await plain.close()
    return rows


async def _main(count: int, messages: int, rounds: int) -> None:
    """Run the telemetry rows alone on a fresh server and print them."""
    from aiojetstream.testing import NatsServer

    async with NatsServer() as server:
        rows = await bench_otel(server.url, count, messages, rounds, {"publish", "consume"})
    for r in rows:
        ratio = "" if r.ratio is None else f"{r.ratio:.3f}"
        print(f"{r.name:40s} ours {r.ours:12.1f}  base {r.baseline or 0:12.1f}  ratio {ratio}")


if __name__ == "__main__":
    import argparse
    import asyncio

    parser = argparse.ArgumentParser(description="The telemetry rows of make bench, alone.")
    parser.add_argument("--count", type=int, default=10_000, help="publish_async a round / 10")
    parser.add_argument("--messages", type=int, default=100_000, help="messages a consume round")
    parser.add_argument("--rounds", type=int, default=5)
    ns = parser.parse_args()
    asyncio.run(_main(ns.count, ns.messages, ns.rounds))
