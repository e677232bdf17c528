"""A traced two-stage pipeline: one trace from the order to its invoice.

An order is published to ``pipeline.orders``; a billing worker (``consume()``)
handles it and publishes an invoice to ``pipeline.invoices`` from inside its
handler; a reader fetches the invoice and acknowledges it. With telemetry on
(``aiojetstream.otel.instrument``), every step is a span and the trace context
travels in the message headers, so the whole exchange is one trace
(``parent=True``: each process span is the child of the send span of its
message; by default it is only linked to it).

Spans are kept in memory here and printed as a tree; a real service would
export them (OTLP, console: docs/observability.md).

Run it against any server: ``NATS_URL=nats://127.0.0.1:4222 python examples/traced_pipeline.py``.
"""

from __future__ import annotations

import asyncio
import os

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import aiojetstream
from aiojetstream import AckPolicy, ConsumerConfig, Msg, StorageType, StreamConfig
from aiojetstream.otel import instrument

STREAM = "TRACED_PIPELINE"


def print_tree(spans: list[ReadableSpan]) -> None:
    """Print the spans of each trace as a tree, children under their parent."""
    children: dict[int | None, list[ReadableSpan]] = {}
    for span in sorted(spans, key=lambda s: s.start_time or 0):
        children.setdefault(span.parent.span_id if span.parent else None, []).append(span)

    def show(span: ReadableSpan, depth: int) -> None:
        print(f"  {'  ' * depth}{span.name}  ({span.kind.name.lower()})")
        for child in children.get(span.context.span_id, []):
            show(child, depth + 1)

    for root in children.get(None, []):
        print(f"trace {root.context.trace_id:032x}")
        show(root, 0)


async def run_pipeline(url: str, provider: TracerProvider) -> None:
    """Run the pipeline once against the server at ``url``, traced by ``provider``.

    ``tools/trace_picture.py`` runs it too, to draw the trace of
    docs/observability.md.
    """
    tracer = provider.get_tracer("traced_pipeline")

    async with await aiojetstream.connect(url) as js:
        instrument(js, tracer_provider=provider, parent=True)
        await js.create_or_update_stream(
            StreamConfig(name=STREAM, subjects=["pipeline.>"], storage=StorageType.MEMORY)
        )
        billing = await js.create_consumer(
            STREAM,
            ConsumerConfig(
                durable_name="billing",
                filter_subject="pipeline.orders",
                ack_policy=AckPolicy.EXPLICIT,
            ),
        )
        invoices = await js.create_consumer(
            STREAM,
            ConsumerConfig(
                durable_name="invoices",
                filter_subject="pipeline.invoices",
                ack_policy=AckPolicy.EXPLICIT,
            ),
        )
        billed = asyncio.Event()

        async def bill(msg: Msg) -> None:
            # The process span is current here: spans started now are its children.
            with tracer.start_as_current_span("compute invoice"):
                invoice = b"invoice for " + msg.data
            await js.publish("pipeline.invoices", invoice)
            await msg.ack()
            billed.set()

        with tracer.start_as_current_span("checkout"):
            await js.publish("pipeline.orders", b"order 42")
        print("Published order 42")

        worker = await billing.consume(bill)
        await asyncio.wait_for(billed.wait(), 10)
        worker.stop()
        await worker.closed()
        print("Billing published its invoice")

        msg = await invoices.next(expires=5)
        print(f"Reader got: {msg.data.decode()}")
        await msg.ack()

        await js.delete_stream(STREAM)


async def main() -> None:
    url = os.environ.get("NATS_URL", "nats://127.0.0.1:4222")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    await run_pipeline(url, provider)
    print_tree(list(exporter.get_finished_spans()))
    print("Done.")


if __name__ == "__main__":
    asyncio.run(main())
