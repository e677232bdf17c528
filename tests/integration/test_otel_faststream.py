"""Trace context across FastStream's NATS broker and aiojetstream (issue 28).

FastStream's ``NatsTelemetryMiddleware`` and ``aiojetstream.otel`` both carry
the W3C trace context in the message headers: a message published by one and
consumed by the other continues the same trace.
"""

from __future__ import annotations

import asyncio
from typing import Any

from faststream.nats import JStream, NatsBroker, NatsMessage
from faststream.nats.opentelemetry import NatsTelemetryMiddleware
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind

import aiojetstream
from aiojetstream import AckPolicy, ConsumerConfig, StreamConfig
from aiojetstream.otel import instrument
from aiojetstream.testing import NatsServer
from helpers import unique_name


def provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    return tracer_provider, exporter


async def test_faststream_publish_continues_in_our_process_span(nats_server: NatsServer) -> None:
    ours_provider, ours = provider()
    theirs_provider, theirs = provider()
    js = await aiojetstream.connect(nats_server.url)
    instrument(js, tracer_provider=ours_provider, parent=True)
    broker = NatsBroker(
        nats_server.url, middlewares=(NatsTelemetryMiddleware(tracer_provider=theirs_provider),)
    )
    stream = unique_name("FS")
    try:
        await js.create_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"]))
        await broker.connect()
        await broker.publish(b"from faststream", f"{stream}.in", stream=stream)
        sent = [s for s in theirs.get_finished_spans() if s.kind is SpanKind.PRODUCER]
        [trace_id] = {s.context.trace_id for s in sent}
        consumer = await js.create_consumer(stream, ConsumerConfig(ack_policy=AckPolicy.EXPLICIT))
        msg = await consumer.next(expires=5)
        assert msg.data == b"from faststream"
        await msg.ack()
    finally:
        await broker.stop()
        await js.close()
    [process] = [s for s in ours.get_finished_spans() if s.name.startswith("process ")]
    assert process.context.trace_id == trace_id
    assert process.parent is not None
    assert process.parent.span_id in {s.context.span_id for s in sent}


async def test_our_publish_continues_in_faststream_handler(nats_server: NatsServer) -> None:
    ours_provider, ours = provider()
    theirs_provider, theirs = provider()
    js = await aiojetstream.connect(nats_server.url)
    instrument(js, tracer_provider=ours_provider)
    broker = NatsBroker(
        nats_server.url, middlewares=(NatsTelemetryMiddleware(tracer_provider=theirs_provider),)
    )
    stream = unique_name("FS")
    got = asyncio.Event()
    seen: list[Any] = []

    @broker.subscriber(f"{stream}.out", stream=JStream(stream, declare=False))
    async def handler(body: bytes, msg: NatsMessage) -> None:
        seen.append(body)
        got.set()

    try:
        await js.create_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"]))
        await broker.start()
        await js.publish(f"{stream}.out", b"from aiojetstream")
        await asyncio.wait_for(got.wait(), 15)
    finally:
        await broker.stop()
        await js.close()
    assert seen == [b"from aiojetstream"]
    [send] = [s for s in ours.get_finished_spans() if s.name.startswith("send ")]
    consumed = [s for s in theirs.get_finished_spans() if s.kind is SpanKind.CONSUMER]
    assert consumed
    assert all(s.context.trace_id == send.context.trace_id for s in consumed)
