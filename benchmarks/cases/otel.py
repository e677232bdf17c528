"""Groups ``publish`` and ``consume``: an instrumented context against a plain one (issue 28).

* ``publish_async_otel_vs_plain``: pipelined ``publish_async`` plus the
  completion barrier, instrumented (a send span, the trace context injected
  into the headers, the publish metrics per message) over plain. Target >= 0.7.
* ``messages_otel_vs_plain``: ``messages()`` with an explicit ack per message,
  instrumented (a process span linked to the send span, the consume and ack
  metrics) over plain, both reading the same stream of messages that carry a
  ``traceparent``. Target >= 0.7.

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

    from aiojetstream.otel import instrument

    plain = await aiojetstream.connect(url)
    traced = await aiojetstream.connect(url)
    instrument(
        traced,
        tracer_provider=TracerProvider(),
        meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()]),
    )
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
            ours, base = await compare(publisher(traced), publisher(plain), count * 10, rounds)
            rows.append(Row("publish_async_otel_vs_plain", ours, base, "msgs/s"))
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

            ours, base = await compare(reader(traced), reader(plain), messages, rounds)
            rows.append(Row("messages_otel_vs_plain", ours, base, "msgs/s"))
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
