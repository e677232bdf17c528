"""publish_async's send spans with the OpenTelemetry SDK: no live span per message in flight.

The span's identity is decided (and written into the headers) at publish
time; the span itself is started when the acknowledgement arrives, with the
publish time as its start time (issue 28). Checked against a real server
with the SDK's in-memory exporter.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased
from opentelemetry.trace import SpanKind, StatusCode

import aiojetstream
from aiojetstream import AckPolicy, ConsumerConfig, JetStreamContext, StreamConfig
from aiojetstream.otel import instrument
from aiojetstream.testing import NatsServer
from helpers import unique_name, wait_until


class Started(SpanProcessor):
    """Counts the spans started (a live span per message in flight would show here)."""

    def __init__(self) -> None:
        self.started = 0

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.started += 1


class Traced:
    def __init__(self, sampler: Any = None) -> None:
        self.exporter = InMemorySpanExporter()
        self.started = Started()
        self.provider = TracerProvider(sampler=sampler) if sampler else TracerProvider()
        self.provider.add_span_processor(self.started)
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meters = MeterProvider(metric_readers=[self.reader])

    def sends(self) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name.startswith("send ")]


async def connected(url: str, traced: Traced) -> JetStreamContext:
    js = await aiojetstream.connect(url)
    return instrument(js, tracer_provider=traced.provider, meter_provider=traced.meters)


@pytest.fixture
async def traced_js(nats_server: NatsServer) -> AsyncIterator[tuple[JetStreamContext, Traced]]:
    traced = Traced()
    js = await connected(nats_server.url, traced)
    try:
        yield js, traced
    finally:
        await js.close()


async def headers_of(js: JetStreamContext, stream: str, count: int) -> list[dict[str, str]]:
    consumer = await js.create_consumer(stream, ConsumerConfig(ack_policy=AckPolicy.NONE))
    found = []
    async for msg in await consumer.fetch(count, expires=2):
        assert msg.headers is not None
        found.append(dict(msg.headers))
    return found


async def test_no_span_is_live_while_the_ack_is_outstanding(
    traced_js: tuple[JetStreamContext, Traced],
) -> None:
    js, traced = traced_js
    stream = unique_name("OD")
    await js.create_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"]))
    parent = traced.provider.get_tracer("app").start_span("request")
    started = traced.started.started  # the parent

    before = time.time_ns()
    with trace.use_span(parent, end_on_exit=True):
        futures = [await js.publish_async(f"{stream}.a", b"%d" % i) for i in range(3)]
        # Written, not acknowledged yet (the loop has not run): no span started.
        assert not any(f.done() for f in futures)
        assert traced.started.started == started
        published = time.time_ns()
    acks = [await f for f in futures]
    sends = traced.sends()
    assert len(sends) == 3
    for send, ack in zip(sends, acks, strict=True):
        assert send.kind is SpanKind.PRODUCER
        assert send.parent is not None
        assert send.parent.span_id == parent.get_span_context().span_id
        assert send.context.trace_id == parent.get_span_context().trace_id
        assert send.start_time is not None
        assert send.end_time is not None
        assert before <= send.start_time <= published <= send.end_time
        assert send.attributes is not None
        assert send.attributes["messaging.message.id"] == str(ack.seq)
        assert send.attributes["messaging.nats.stream"] == stream
        assert send.attributes["messaging.message.body.size"] == 1
    # Each message carries the trace context of its own send span.
    headers = await headers_of(js, stream, 3)
    expected = [
        f"00-{s.context.trace_id:032x}-{s.context.span_id:016x}-{s.context.trace_flags:02x}"
        for s in sends
    ]
    assert [h["traceparent"] for h in headers] == expected


async def test_a_failed_publish_async_is_an_error_span(
    traced_js: tuple[JetStreamContext, Traced],
) -> None:
    js, traced = traced_js
    future = await js.publish_async(unique_name("nowhere"), b"x", timeout=2)
    with pytest.raises(aiojetstream.JetStreamError):
        await future
    [send] = traced.sends()
    assert send.status.status_code is StatusCode.ERROR
    assert send.attributes is not None
    assert send.attributes["error.type"] == type(future.exception()).__name__


@pytest.mark.parametrize("tracer", ["sdk", "other"])
async def test_a_slow_publish_async_does_not_hold_back_the_later_spans(
    nats_server: NatsServer, tracer: str
) -> None:
    """Acknowledged out of order (here: the first waits for its timeout, the later
    ones go to a stream), each send span ends with its own acknowledgement."""
    import asyncio

    import nats

    traced = Traced()
    provider: Any = traced.provider if tracer == "sdk" else Wrapped(traced.provider)
    js = instrument(
        await aiojetstream.connect(nats_server.url),
        tracer_provider=provider,
        meter_provider=traced.meters,
    )
    nc = await nats.connect(nats_server.url)
    try:
        stream = unique_name("OD")
        await js.create_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"]))
        silent = unique_name("silent")

        async def silent_but_probes(msg: Any) -> None:  # takes the publish, never answers
            if msg.data == b"probe":
                await msg.respond(b"here")

        await nc.subscribe(silent, cb=silent_but_probes)
        await nc.flush()

        async def reached() -> bool:
            """Whether the context's connection reaches the subscriber yet (a loaded
            server answered the first publish with no responders now and then)."""
            try:
                await js.nc.request(silent, b"probe", timeout=0.5)
            except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
                return False
            return True

        await wait_until(reached, timeout=10)
        slow = await js.publish_async(silent, b"x", timeout=3)
        fast = [await js.publish_async(f"{stream}.x", b"y") for _ in range(10)]
        await asyncio.gather(*fast)
        # Ended before the slow one times out, each with its own duration.
        await wait_until(lambda: len(traced.sends()) == 10, timeout=2)
        assert all((s.end_time or 0) - (s.start_time or 0) < 1e9 for s in traced.sends())
        with pytest.raises(aiojetstream.JetStreamError):
            await slow
        await wait_until(lambda: len(traced.sends()) == 11)
        late = traced.sends()[-1]
        assert late.status.status_code is StatusCode.ERROR
        assert (late.end_time or 0) - (late.start_time or 0) >= 2.9e9
        data = traced.reader.get_metrics_data()
        assert data is not None
        [stored] = [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == "messaging.client.operation.duration"
            for point in metric.data.data_points
            if (point.attributes or {}).get("messaging.nats.stream") == stream
        ]
        assert isinstance(stored, HistogramDataPoint)
        assert stored.count == 10
        assert stored.sum < 10
    finally:
        await nc.close()
        await js.close()


async def test_a_sampler_that_drops_gives_unsampled_headers(nats_server: NatsServer) -> None:
    traced = Traced(sampler=ParentBased(ALWAYS_OFF))
    js = await connected(nats_server.url, traced)
    try:
        stream = unique_name("OD")
        await js.create_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"]))
        await (await js.publish_async(f"{stream}.a", b"x"))
        assert traced.sends() == []
        [headers] = await headers_of(js, stream, 1)
        _, trace_id, span_id, flags = headers["traceparent"].split("-")
        assert int(flags, 16) & 0x01 == 0  # not sampled
        assert int(trace_id, 16)
        assert int(span_id, 16)
    finally:
        await js.close()


class Wrapped(trace.TracerProvider):
    """A provider of another tracer type (the SDK's, behind a wrapper): live spans."""

    def __init__(self, inner: TracerProvider) -> None:
        self.inner = inner

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        sdk = self.inner.get_tracer(*args, **kwargs)

        class Tracer(trace.Tracer):
            def start_span(self, *a: Any, **k: Any) -> trace.Span:
                return sdk.start_span(*a, **k)

            def start_as_current_span(self, *a: Any, **k: Any) -> Any:
                return sdk.start_as_current_span(*a, **k)

        return Tracer()


async def test_another_tracer_keeps_a_live_span_per_publish(nats_server: NatsServer) -> None:
    traced = Traced()
    js = instrument(
        await aiojetstream.connect(nats_server.url),
        tracer_provider=Wrapped(traced.provider),
        meter_provider=traced.meters,
    )
    try:
        stream = unique_name("OD")
        await js.create_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"]))
        futures = [await js.publish_async(f"{stream}.a", b"x") for _ in range(3)]
        assert traced.started.started == 3  # started at publish time
        acks = [await f for f in futures]
        sends = traced.sends()
        assert [(s.attributes or {})["messaging.message.id"] for s in sends] == [
            str(a.seq) for a in acks
        ]
        headers = await headers_of(js, stream, 3)
        assert [h["traceparent"].split("-")[2] for h in headers] == [
            f"{s.context.span_id:016x}" for s in sends
        ]
    finally:
        await js.close()


class FailsOnce(SpanProcessor):
    def __init__(self) -> None:
        self.failed = False

    def on_end(self, span: ReadableSpan) -> None:
        if not self.failed:
            self.failed = True
            raise RuntimeError("exporter down")


async def test_a_failing_processor_does_not_stop_the_other_spans(
    nats_server: NatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    traced = Traced()
    traced.provider = TracerProvider()
    traced.provider.add_span_processor(FailsOnce())
    traced.provider.add_span_processor(SimpleSpanProcessor(traced.exporter))
    js = await connected(nats_server.url, traced)
    try:
        stream = unique_name("OD")
        await js.create_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"]))
        futures = [await js.publish_async(f"{stream}.a", b"x") for _ in range(3)]
        acks = [await f for f in futures]
        await wait_until(lambda: len(traced.sends()) == 2)
        assert [(s.attributes or {})["messaging.message.id"] for s in traced.sends()] == [
            str(a.seq) for a in acks[1:]
        ]
        assert "ending a send span failed" in caplog.text
        # Later publishes are still traced.
        await (await js.publish_async(f"{stream}.a", b"x"))
        await wait_until(lambda: len(traced.sends()) == 3)
    finally:
        await js.close()


async def test_contexts_sharing_a_provider_leave_its_tracer_alone(
    nats_server: NatsServer,
) -> None:
    traced = Traced()
    shared = traced.provider.get_tracer("aiojetstream", aiojetstream.__version__)
    sampler, ids = shared.sampler, shared.id_generator  # type: ignore[attr-defined]
    first = await connected(nats_server.url, traced)
    second = await connected(nats_server.url, traced)
    try:
        assert shared.sampler is sampler  # type: ignore[attr-defined]
        assert shared.id_generator is ids  # type: ignore[attr-defined]
        stream = unique_name("OD")
        await first.create_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"]))
        futures = []
        for _ in range(2):
            futures.append(await first.publish_async(f"{stream}.a", b"1"))
            futures.append(await second.publish_async(f"{stream}.a", b"2"))
        acks = sorted([(await f).seq for f in futures])
        await wait_until(lambda: len(traced.sends()) == 4)
        sends = {int(str((s.attributes or {})["messaging.message.id"])): s for s in traced.sends()}
        assert sorted(sends) == acks
        headers = await headers_of(first, stream, 4)
        assert [h["traceparent"].split("-")[2] for h in headers] == [
            f"{sends[seq].context.span_id:016x}" for seq in acks
        ]
    finally:
        await second.close()
        await first.close()
