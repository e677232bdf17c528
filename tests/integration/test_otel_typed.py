"""Typed messages that do not validate get a process span, status ERROR (issue 28).

Against a real nats-server, with the OTel SDK's in-memory exporter: whichever
typed path refuses the message (``consume``, ``messages``, ``fetch``, ``next``,
the ordered consumer) and whatever ``on_invalid`` does with it, its process
span exists, is linked to the publisher's send span, records the
:class:`PayloadValidationError` and carries the term / nak settlement as a
valid message's span does.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from pydantic import BaseModel

import aiojetstream
from aiojetstream import (
    AckPolicy,
    ConsumerConfig,
    JetStreamContext,
    PayloadValidationError,
    StreamConfig,
    TypedMsg,
)
from aiojetstream.otel import instrument
from aiojetstream.testing import NatsServer
from helpers import unique_name, wait_until

INVALID = b'{"id": "not a number", "item": "x"}'


class Order(BaseModel):
    id: int
    item: str


class Recorded:
    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def processes(self, seq: int, delivered: int = 1) -> list[ReadableSpan]:
        """The finished process spans of stream sequence ``seq``, delivery ``delivered``."""
        return [
            s
            for s in self.exporter.get_finished_spans()
            if s.name.startswith("process ")
            and (s.attributes or {}).get("messaging.nats.message.sequence") == seq
            and (s.attributes or {}).get("messaging.nats.delivery_count") == delivered
        ]

    def send(self, seq: int) -> ReadableSpan:
        """The send span of stream sequence ``seq``."""
        [span] = [
            s
            for s in self.exporter.get_finished_spans()
            if s.name.startswith("send ")
            and (s.attributes or {}).get("messaging.message.id") == str(seq)
        ]
        return span

    def total(self, name: str, **labels: str) -> float:
        data = self.reader.get_metrics_data()
        assert data is not None
        points: list[Any] = [
            p
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == name
            for p in metric.data.data_points
        ]
        return float(
            sum(p.value for p in points if all(p.attributes.get(k) == v for k, v in labels.items()))
        )


@pytest.fixture
def rec() -> Recorded:
    return Recorded()


@pytest.fixture
async def tjs(nats_server: NatsServer, rec: Recorded) -> AsyncIterator[JetStreamContext]:
    js = await aiojetstream.connect(nats_server.url)
    instrument(js, tracer_provider=rec.tracer_provider, meter_provider=rec.meter_provider)
    try:
        yield js
    finally:
        await js.close()


async def setup(js: JetStreamContext, **cfg: Any) -> tuple[str, str, list[int]]:
    """A stream with a valid, an invalid and a valid message; their sequences."""
    stream = unique_name("OTT")
    await js.create_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"]))
    consumer = await js.create_consumer(
        stream, ConsumerConfig(durable_name="c", ack_policy=AckPolicy.EXPLICIT, **cfg)
    )
    seqs = [
        (await js.publish(f"{stream}.o", Order(id=1, item="a"))).seq,
        (await js.publish(f"{stream}.o", INVALID)).seq,
        (await js.publish(f"{stream}.o", Order(id=3, item="c"))).seq,
    ]
    return stream, consumer.name, seqs


async def invalid_span(rec: Recorded, seq: int) -> ReadableSpan:
    """The one process span of the first delivery of invalid message ``seq`` (waited for)."""
    await wait_until(lambda: bool(rec.processes(seq)), message=f"no process span for seq {seq}")
    [span] = rec.processes(seq)
    return span


def check_invalid(rec: Recorded, span: ReadableSpan, seq: int, settlement: str | None) -> None:
    """Linked to the send span, status ERROR, the error recorded, the settlement set."""
    send = rec.send(seq)
    assert [link.context.span_id for link in span.links] == [send.context.span_id]
    assert span.status.status_code is StatusCode.ERROR
    attrs = span.attributes or {}
    assert attrs["error.type"] == "PayloadValidationError"
    assert attrs["messaging.operation.type"] == "process"
    assert attrs["messaging.message.body.size"] == len(INVALID)
    assert attrs.get("messaging.nats.settlement") == settlement
    assert attrs["messaging.nats.on_invalid"] == (settlement or "raise")
    [event] = [e for e in span.events if e.name == "exception"]
    assert str((event.attributes or {})["exception.type"]).endswith("PayloadValidationError")
    assert "is not a valid Order" in str((event.attributes or {})["exception.message"])


def settled_total(rec: Recorded, stream: str, name: str, settlement: str) -> float:
    labels = {"messaging.nats.stream": stream, "messaging.consumer.group.name": name}
    return rec.total(f"aiojetstream.{settlement}s", **labels)


@pytest.mark.parametrize("on_invalid", ["term", "nak"])
async def test_consume_settles_an_invalid_message_in_an_error_span(
    tjs: JetStreamContext, rec: Recorded, on_invalid: str
) -> None:
    stream, name, seqs = await setup(tjs, max_deliver=2)
    consumer = await tjs.consumer(stream, name)
    values: list[int] = []
    both = asyncio.Event()

    async def handler(msg: TypedMsg[Order]) -> None:
        values.append(msg.value.id)
        await msg.ack()
        if len(values) == 2:
            both.set()

    ctx = await consumer.consume(handler, model=Order, on_invalid=on_invalid, expires=2)  # type: ignore[call-overload]
    await asyncio.wait_for(both.wait(), 10)
    span = await invalid_span(rec, seqs[1])
    ctx.stop()
    await ctx.closed()
    assert values == [1, 3]
    check_invalid(rec, span, seqs[1], on_invalid)
    assert settled_total(rec, stream, name, on_invalid) >= 1


async def test_consume_raise_ends_the_error_span_at_once(
    tjs: JetStreamContext, rec: Recorded
) -> None:
    stream, name, seqs = await setup(tjs)
    consumer = await tjs.consumer(stream, name)

    async def handler(msg: TypedMsg[Order]) -> None:
        await msg.ack()

    ctx = await consumer.consume(handler, model=Order, on_invalid="raise", expires=2)
    error = await asyncio.wait_for(ctx.closed(), 10)
    assert isinstance(error, PayloadValidationError)
    check_invalid(rec, await invalid_span(rec, seqs[1]), seqs[1], None)


@pytest.mark.parametrize("on_invalid", ["term", "nak"])
async def test_messages_settles_an_invalid_message_in_an_error_span(
    tjs: JetStreamContext, rec: Recorded, on_invalid: str
) -> None:
    stream, name, seqs = await setup(tjs, max_deliver=2)
    consumer = await tjs.consumer(stream, name)
    values: list[int] = []
    async with consumer.messages(model=Order, on_invalid=on_invalid, expires=2) as it:  # type: ignore[call-overload]
        async for msg in it:
            values.append(msg.value.id)
            await msg.ack()
            if len(values) == 2:
                break
    assert values == [1, 3]
    check_invalid(rec, await invalid_span(rec, seqs[1]), seqs[1], on_invalid)
    assert settled_total(rec, stream, name, on_invalid) >= 1


async def test_messages_raise_ends_the_error_span_at_once(
    tjs: JetStreamContext, rec: Recorded
) -> None:
    stream, name, seqs = await setup(tjs)
    consumer = await tjs.consumer(stream, name)
    values: list[int] = []
    async with consumer.messages(model=Order, on_invalid="raise", expires=2) as it:
        assert (await it.next()).value.id == 1
        with pytest.raises(PayloadValidationError):
            await it.next()
        check_invalid(rec, await invalid_span(rec, seqs[1]), seqs[1], None)
        values.append((await it.next()).value.id)
    assert values == [3]


@pytest.mark.parametrize("how", ["iterate-term", "iterate-nak", "collect-term", "collect-raise"])
async def test_fetch_refuses_an_invalid_message_in_an_error_span(
    tjs: JetStreamContext, rec: Recorded, how: str
) -> None:
    stream, name, seqs = await setup(tjs, max_deliver=2)
    consumer = await tjs.consumer(stream, name)
    mode, on_invalid = how.split("-")
    batch = await consumer.fetch(3, model=Order, on_invalid=on_invalid, expires=2)  # type: ignore[call-overload]
    values: list[int] = []
    if mode == "iterate":
        async for msg in batch:
            values.append(msg.value.id)
            await msg.ack()
    else:
        for msg in await batch.collect():
            values.append(msg.value.id)
        if on_invalid == "raise":
            with pytest.raises(PayloadValidationError):
                await batch.collect()
            values.extend(msg.value.id for msg in await batch.collect())
    assert values == [1, 3]
    settlement = None if on_invalid == "raise" else on_invalid
    check_invalid(rec, await invalid_span(rec, seqs[1]), seqs[1], settlement)


@pytest.mark.parametrize("mode", ["iterate", "collect"])
async def test_a_raised_invalid_message_does_not_end_the_receive_span(
    tjs: JetStreamContext, rec: Recorded, mode: str
) -> None:
    """on_invalid="raise": the batch goes on after the PayloadValidationError, and so
    does its receive span, ended once the batch is done with every valid message
    counted (it ended as an ERROR at the first invalid message, or at a collect()
    that held messages back for the next call)."""
    stream, name, _ = await setup(tjs)  # valid, invalid, valid
    consumer = await tjs.consumer(stream, name)
    batch = await consumer.fetch(3, model=Order, on_invalid="raise", expires=2)

    def receives() -> list[ReadableSpan]:
        return [s for s in rec.exporter.get_finished_spans() if s.name.startswith("receive ")]

    values: list[int] = []
    if mode == "iterate":
        while True:
            try:
                msg = await batch.__anext__()
            except PayloadValidationError:
                assert receives() == []  # the batch goes on
                continue
            except StopAsyncIteration:
                break
            values.append(msg.value.id)
    else:
        values.extend(msg.value.id for msg in await batch.collect())  # the rest held back
        assert receives() == []
        with pytest.raises(PayloadValidationError):
            await batch.collect()
        assert receives() == []
        values.extend(msg.value.id for msg in await batch.collect())
    assert values == [1, 3]
    [receive] = receives()
    assert receive.status.status_code is not StatusCode.ERROR
    assert (receive.attributes or {})["messaging.batch.message_count"] == 2


async def test_next_refuses_in_the_span_its_fetch_opened(
    tjs: JetStreamContext, rec: Recorded
) -> None:
    stream, name, seqs = await setup(tjs)
    consumer = await tjs.consumer(stream, name)
    assert (await consumer.next(model=Order, expires=2)).value.id == 1
    msg = await consumer.next(model=Order, expires=2)  # the invalid one is terminated
    assert msg.value.id == 3
    check_invalid(rec, await invalid_span(rec, seqs[1]), seqs[1], "term")


async def test_ordered_consumer_raise_is_an_error_span(
    tjs: JetStreamContext, rec: Recorded
) -> None:
    stream, _, seqs = await setup(tjs)
    oc = await tjs.ordered_consumer(stream)
    async with oc.messages(model=Order) as it:
        assert (await it.next()).value.id == 1
        with pytest.raises(PayloadValidationError):
            await it.next()
        assert (await it.next()).value.id == 3
    check_invalid(rec, await invalid_span(rec, seqs[1]), seqs[1], None)

    oc = await tjs.ordered_consumer(stream)  # a fetch-mode one: next()
    assert (await oc.next(model=Order, expires=2)).value.id == 1
    with pytest.raises(PayloadValidationError):
        await oc.next(model=Order, expires=2)
    await wait_until(lambda: len(rec.processes(seqs[1])) == 2)
    check_invalid(rec, rec.processes(seqs[1])[1], seqs[1], None)
