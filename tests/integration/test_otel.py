"""OpenTelemetry traces and metrics against a real server (issue 28).

The OTel SDK's in-memory span exporter and metric reader record what an
instrumented context emits; the global propagator (W3C trace context) carries
the context in the message headers.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import aiojetstream
from aiojetstream import (
    AckPolicy,
    Consumer,
    ConsumerConfig,
    JetStreamContext,
    StreamConfig,
    WrongLastSequenceError,
)
from aiojetstream.otel import instrument
from aiojetstream.testing import NatsServer
from helpers import unique_name, wait_until


class Recorded:
    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def spans(self, prefix: str = "") -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name.startswith(prefix)]

    def metrics(self) -> dict[str, list[Any]]:
        found: dict[str, list[Any]] = {}
        data = self.reader.get_metrics_data()
        assert data is not None
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    found.setdefault(metric.name, []).extend(metric.data.data_points)
        return found

    def total(self, name: str, **labels: str) -> float:
        points = self.metrics().get(name, [])
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


async def setup(js: JetStreamContext, **cfg: Any) -> tuple[str, str]:
    stream = unique_name("OT")
    await js.create_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"]))
    consumer = await js.create_consumer(
        stream, ConsumerConfig(durable_name="c", ack_policy=AckPolicy.EXPLICIT, **cfg)
    )
    return stream, consumer.name


async def test_publish_fetch_ack_trace_and_metrics(tjs: JetStreamContext, rec: Recorded) -> None:
    stream, name = await setup(tjs)
    ack = await tjs.publish(f"{stream}.a", b"hello", headers={"X-Mine": "1"})
    [send] = rec.spans("send ")
    assert send.name == f"send {stream}.a"
    assert send.kind is SpanKind.PRODUCER
    assert send.attributes is not None
    assert send.attributes["messaging.system"] == "nats"
    assert send.attributes["messaging.destination.name"] == f"{stream}.a"
    assert send.attributes["messaging.operation.type"] == "send"
    assert send.attributes["messaging.message.body.size"] == 5
    assert send.attributes["messaging.nats.stream"] == stream
    assert send.attributes["messaging.message.id"] == str(ack.seq)

    consumer = await tjs.consumer(stream, name)
    batch = await consumer.fetch(1, expires=2)
    async for msg in batch:
        assert msg.headers is not None
        assert msg.headers["X-Mine"] == "1"
        assert msg.headers["traceparent"].split("-")[1] == format(send.context.trace_id, "032x")
        assert rec.spans("process ") == []  # open until settled
        await msg.ack()
    [receive] = rec.spans("receive ")
    assert receive.kind is SpanKind.CLIENT
    assert receive.attributes is not None
    assert receive.attributes["messaging.batch.message_count"] == 1
    assert receive.attributes["messaging.consumer.group.name"] == name
    [process] = rec.spans("process ")
    assert process.kind is SpanKind.CONSUMER
    assert process.attributes is not None
    assert process.attributes["messaging.operation.type"] == "process"
    assert process.attributes["messaging.nats.stream"] == stream
    assert process.attributes["messaging.consumer.group.name"] == name
    assert process.attributes["messaging.nats.message.sequence"] == ack.seq
    assert process.attributes["messaging.nats.delivery_count"] == 1
    assert process.attributes["messaging.message.body.size"] == 5
    assert process.attributes["messaging.nats.settlement"] == "ack"
    # Linked to the send span, not its child (the default).
    assert [link.context.span_id for link in process.links] == [send.context.span_id]
    assert process.context.trace_id != send.context.trace_id

    assert rec.total("messaging.client.sent.messages", **{"messaging.nats.stream": stream}) == 1
    labels = {"messaging.nats.stream": stream, "messaging.consumer.group.name": name}
    assert rec.total("messaging.client.consumed.messages", **labels) == 1
    assert rec.total("aiojetstream.acks", **labels) == 1
    assert rec.total("aiojetstream.consumer.pending", **labels) == 0
    [duration] = rec.metrics()["messaging.client.operation.duration"]
    assert duration.count == 1


async def test_messages_nak_term_redelivery_and_next_ends_the_span(
    tjs: JetStreamContext, rec: Recorded
) -> None:
    stream, name = await setup(tjs)
    for i in range(3):
        await (await tjs.publish_async(f"{stream}.m", str(i).encode()))
    assert len(rec.spans("send ")) == 3
    consumer = await tjs.consumer(stream, name)
    seen: list[tuple[bytes, int]] = []
    async with consumer.messages(expires=2) as it:
        async for msg in it:
            seen.append((msg.data, msg.metadata.num_delivered))
            if msg.data == b"0":
                pass  # not settled: ended when the next is taken
            elif msg.data == b"1" and msg.metadata.num_delivered == 1:
                await msg.nak()
            elif msg.data == b"1":
                await msg.term()
            else:
                await msg.ack()
            if len(seen) == 4:
                break
    assert sorted(seen) == [(b"0", 1), (b"1", 1), (b"1", 2), (b"2", 1)]
    processes = rec.spans("process ")
    assert len(processes) == 4
    settlements = sorted(
        str((s.attributes or {}).get("messaging.nats.settlement")) for s in processes
    )
    assert settlements == ["None", "ack", "nak", "term"]
    labels = {"messaging.nats.stream": stream, "messaging.consumer.group.name": name}
    assert rec.total("aiojetstream.naks", **labels) == 1
    assert rec.total("aiojetstream.terms", **labels) == 1
    assert rec.total("aiojetstream.acks", **labels) == 1
    assert rec.total("aiojetstream.redeliveries", **labels) == 1
    assert rec.total("messaging.client.consumed.messages", **labels) == 4


async def test_consume_with_parent_option(nats_server: NatsServer, rec: Recorded) -> None:
    js = await aiojetstream.connect(nats_server.url)
    instrument(
        js, tracer_provider=rec.tracer_provider, meter_provider=rec.meter_provider, parent=True
    )
    try:
        stream, name = await setup(js)
        await js.publish(f"{stream}.c", b"x")
        [send] = rec.spans("send ")
        consumer = await js.consumer(stream, name)
        tracer = rec.tracer_provider.get_tracer("handler")
        done = asyncio.Event()

        async def handler(msg: aiojetstream.Msg) -> None:
            with tracer.start_as_current_span("work"):
                pass
            await msg.ack()
            done.set()

        ctx = await consumer.consume(handler, expires=2)
        await asyncio.wait_for(done.wait(), 10)
        ctx.stop()
        await ctx.closed()
    finally:
        await js.close()
    [process] = rec.spans("process ")
    [work] = rec.spans("work")
    assert process.parent is not None
    assert process.parent.span_id == send.context.span_id
    assert process.context.trace_id == send.context.trace_id
    assert work.parent is not None
    assert work.parent.span_id == process.context.span_id


async def test_consume_process_spans_are_not_children_of_the_span_consume_was_called_in(
    tjs: JetStreamContext, rec: Recorded
) -> None:
    """A consume() task copies its caller's context: its process spans are their own
    traces all the same (linked to the send span), a refused typed message's too."""
    from pydantic import BaseModel

    class Order(BaseModel):
        id: int

    stream, name = await setup(tjs)
    tracer = rec.tracer_provider.get_tracer("app")
    consumer = await tjs.consumer(stream, name)
    done = asyncio.Event()
    taken: list[int] = []

    async def handler(msg: Any) -> None:
        taken.append(msg.value.id)
        await msg.ack()
        if len(taken) == 2:
            done.set()

    with tracer.start_as_current_span("startup") as startup:
        ctx = await consumer.consume(handler, model=Order, expires=2)
    for payload in (b'{"id": 1}', b"not json", b'{"id": 2}'):
        await tjs.publish(f"{stream}.c", payload)
    await asyncio.wait_for(done.wait(), 10)
    ctx.stop()
    await ctx.closed()
    sends = {s.context.span_id for s in rec.spans("send ")}
    processes = rec.spans("process ")
    assert len(processes) == 3
    for process in processes:
        assert process.parent is None
        assert process.context.trace_id != startup.get_span_context().trace_id
        [link] = process.links
        assert link.context.span_id in sends


async def test_publish_many_is_one_span_with_the_count(
    tjs: JetStreamContext, rec: Recorded
) -> None:
    stream, name = await setup(tjs)
    await tjs.publish_many(f"{stream}.b", [b"a", b"b", b"c"], headers=[{"K": "v"}, None, None])
    [send] = rec.spans("send ")
    assert send.attributes is not None
    assert send.attributes["messaging.batch.message_count"] == 3
    consumer = await tjs.consumer(stream, name)
    batch = await consumer.fetch(3, expires=2)
    parents = []
    async for msg in batch:
        assert msg.headers is not None
        parents.append(msg.headers["traceparent"].split("-")[2])
        await msg.ack()
    assert parents == [format(send.context.span_id, "016x")] * 3
    assert rec.total("messaging.client.sent.messages") == 3


async def test_publish_many_async_is_one_span_ended_by_the_last_ack(
    tjs: JetStreamContext, rec: Recorded
) -> None:
    stream, name = await setup(tjs)
    done = await tjs.publish_many_async(f"{stream}.b", [b"a", b"b"], msg_ids=["1", "2"])
    summary = await done
    assert summary.stored == 2
    await wait_until(lambda: len(rec.spans("send ")) == 1)
    [send] = rec.spans("send ")
    assert send.name == f"send {stream}.b"
    assert send.kind is SpanKind.PRODUCER
    assert send.attributes is not None
    assert send.attributes["messaging.batch.message_count"] == 2
    consumer = await tjs.consumer(stream, name)
    batch = await consumer.fetch(2, expires=2)
    parents = []
    async for msg in batch:
        assert msg.headers is not None
        parents.append(msg.headers["traceparent"].split("-")[2])
        await msg.ack()
    assert parents == [format(send.context.span_id, "016x")] * 2
    assert rec.total("messaging.client.sent.messages") == 2
    [duration] = rec.metrics()["messaging.client.operation.duration"]
    assert duration.count == 1

    # A batch nobody stores (no stream listens): the span ends with the error.
    failed = await tjs.publish_many_async(unique_name("nowhere"), [b"x"], timeout=2)
    with pytest.raises(aiojetstream.JetStreamError):
        await failed
    await wait_until(lambda: len(rec.spans("send ")) == 2)
    error = rec.spans("send ")[1]
    assert error.status.status_code is StatusCode.ERROR
    assert error.attributes is not None
    assert error.attributes["messaging.batch.message_count"] == 1


async def test_next_is_a_receive_span(tjs: JetStreamContext, rec: Recorded) -> None:
    stream, name = await setup(tjs)
    await tjs.publish(f"{stream}.n", b"1")
    consumer = await tjs.consumer(stream, name)
    msg = await consumer.next(expires=2)
    [receive] = rec.spans("receive ")
    assert receive.attributes is not None
    assert receive.attributes["messaging.batch.message_count"] == 1
    await msg.double_ack()
    [process] = rec.spans("process ")
    assert (process.attributes or {})["messaging.nats.settlement"] == "ack"


async def test_a_next_message_not_settled_ends_its_span_at_the_next_take(
    tjs: JetStreamContext, rec: Recorded
) -> None:
    """As with messages(): a message taken by next() and not settled keeps its process
    span open until the consumer's next take (next(), fetch, messages()), not until
    the context's close (one span per unsettled next() stayed open, up to 10,000)."""
    stream, name = await setup(tjs)
    for i in range(5):
        await tjs.publish(f"{stream}.x", str(i).encode())
    consumer = await tjs.consumer(stream, name)

    def settlements() -> list[tuple[Any, Any]]:
        return [
            (
                (s.attributes or {})["messaging.nats.message.sequence"],
                (s.attributes or {}).get("messaging.nats.settlement"),
            )
            for s in rec.spans("process ")
        ]

    first = await consumer.next(expires=2)
    assert settlements() == []  # open until settled or the next take
    second = await consumer.next(expires=2)
    assert settlements() == [(1, None)]
    await first.ack()  # after its span ended: no second end
    assert settlements() == [(1, None)]
    await second.ack()
    assert settlements() == [(1, None), (2, "ack")]
    await consumer.next(expires=2)  # not settled
    batch = await consumer.fetch(1, expires=2)  # the next take: a fetch
    assert settlements() == [(1, None), (2, "ack"), (3, None)]
    await (await batch.collect())[0].ack()
    await consumer.next(expires=2)
    async with consumer.messages(expires=2):  # or messages()
        assert settlements() == [(1, None), (2, "ack"), (3, None), (4, "ack"), (5, None)]
    labels = {"messaging.nats.stream": stream, "messaging.consumer.group.name": name}
    assert rec.total("aiojetstream.acks", **labels) == 3


async def test_a_refused_publish_records_the_error_code(
    tjs: JetStreamContext, rec: Recorded
) -> None:
    stream, _ = await setup(tjs)
    with pytest.raises(WrongLastSequenceError):
        await tjs.publish(f"{stream}.e", b"x", expected_last_sequence=5)
    [send] = rec.spans("send ")
    assert send.status.status_code is StatusCode.ERROR
    assert send.attributes is not None
    assert send.attributes["error.type"] == "WrongLastSequenceError"
    assert send.attributes["messaging.nats.error_code"] == 10071


async def test_connect_telemetry_true_instruments(nats_server: NatsServer) -> None:
    js = await aiojetstream.connect(nats_server.url, telemetry=True)
    try:
        assert getattr(js, "_telemetry", None) is not None
    finally:
        await js.close()
    assert js._conn.listener_count() == 0


def test_without_telemetry_opentelemetry_is_never_imported(nats_server: NatsServer) -> None:
    script = textwrap.dedent(
        f"""
        import asyncio, json, sys
        import aiojetstream
        from aiojetstream import StreamConfig, ConsumerConfig, AckPolicy

        async def main():
            js = await aiojetstream.connect({nats_server.url!r})
            await js.create_stream(StreamConfig(name="NOOTEL", subjects=["nootel.>"]))
            await js.publish("nootel.a", b"x")
            await (await js.publish_async("nootel.a", b"y"))
            c = await js.create_consumer("NOOTEL", ConsumerConfig(ack_policy=AckPolicy.EXPLICIT))
            batch = await c.fetch(2, expires=2)
            async for msg in batch:
                await msg.ack()
            await js.delete_stream("NOOTEL")
            await js.close()

        asyncio.run(main())
        print(json.dumps(sorted(m for m in sys.modules if m.startswith("opentelemetry"))))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


async def test_consumers_of_stream_handles_are_traced(tjs: JetStreamContext, rec: Recorded) -> None:
    stream_name = unique_name("OT")
    stream = await tjs.create_stream(StreamConfig(name=stream_name, subjects=[f"{stream_name}.>"]))
    consumer = await stream.create_consumer(ConsumerConfig(ack_policy=AckPolicy.EXPLICIT))
    await tjs.publish(f"{stream_name}.s", b"1")
    msg = await consumer.next(expires=2)
    await msg.term()
    [process] = rec.spans("process ")
    assert (process.attributes or {})["messaging.nats.settlement"] == "term"
    again = await (await tjs.stream(stream_name)).consumer(consumer.name)
    assert getattr(again, "_telemetry_state", None) is not None
    # The handle's ordered consumer too (it was not: no span, no count).
    ordered = await (await tjs.stream(stream_name)).ordered_consumer()
    assert (await ordered.next(expires=2)).data == b"1"
    assert len(rec.spans("process ")) == 2
    labels = {"messaging.nats.stream": stream_name, "messaging.consumer.group.name": "(ordered)"}
    assert rec.total("messaging.client.consumed.messages", **labels) == 1
    # js.ordered_consumer takes the traced handle's: instrumented once, counted once.
    assert (await (await tjs.ordered_consumer(stream_name)).next(expires=2)).data == b"1"
    assert len(rec.spans("process ")) == 3
    assert rec.total("messaging.client.consumed.messages", **labels) == 2


async def test_reconnects_are_counted(rec: Recorded) -> None:
    server = NatsServer()
    await server.start()
    try:
        js = await aiojetstream.connect(server.url, reconnect_time_wait=0.1)
        instrument(js, tracer_provider=rec.tracer_provider, meter_provider=rec.meter_provider)
        reconnected = asyncio.Event()

        class Watch:
            def on_disconnected(self) -> None:
                pass

            def on_reconnected(self) -> None:
                reconnected.set()

            def on_closed(self) -> None:
                pass

        watch = Watch()
        js._conn.add_listener(watch)
        try:
            await server.restart()
            await asyncio.wait_for(reconnected.wait(), 30)
            assert rec.total("aiojetstream.reconnects") == 1
        finally:
            js._conn.remove_listener(watch)
            await js.close()
    finally:
        await server.stop()


async def test_ordered_consumer_and_collect(tjs: JetStreamContext, rec: Recorded) -> None:
    stream, name = await setup(tjs)
    for i in range(3):
        await tjs.publish(f"{stream}.o", str(i).encode())
    sends = {s.context.span_id for s in rec.spans("send ")}
    oc = await tjs.ordered_consumer(stream)
    first = await oc.next(expires=2)
    assert first.data == b"0"
    oc = await tjs.ordered_consumer(stream)  # a fetch-mode one can not also loop
    async with oc.messages() as it:
        async for msg in it:
            if msg.data == b"1":
                break
    processes = rec.spans("process ")
    assert len(processes) == 3  # next() marks its delivery; the loop ended its last on exit
    assert all(s.links and s.links[0].context.span_id in sends for s in processes)
    labels = {"messaging.nats.stream": stream, "messaging.consumer.group.name": "(ordered)"}
    assert rec.total("messaging.client.consumed.messages", **labels) == 3
    assert len(rec.spans("receive ")) == 1

    consumer = await tjs.consumer(stream, name)
    batch = await consumer.fetch(3, expires=2)
    msgs = await batch.collect()
    assert [m.data for m in msgs] == [b"0", b"1", b"2"]
    for m in msgs:
        await m.ack()
    assert len(rec.spans("process ")) == 6
    assert (rec.spans("receive ")[-1].attributes or {})["messaging.batch.message_count"] == 3


async def test_key_value_and_object_store_work_and_send_spans(
    tjs: JetStreamContext, rec: Recorded
) -> None:
    from aiojetstream import KeyValueConfig, ObjectStoreConfig

    bucket = unique_name("KV")
    kv = await tjs.create_key_value(KeyValueConfig(bucket=bucket, history=2))
    seen = []
    async with kv.watch("k") as watcher:
        await kv.put("k", b"v1")
        revision = await kv.update("k", b"v2", 1)
        entry = await kv.get("k")
        assert (entry.value, entry.revision) == (b"v2", revision)
        async for update in watcher:
            if update is None:
                continue
            seen.append(update.value)
            if len(seen) == 2:
                break
    assert seen == [b"v1", b"v2"]
    assert [s.name for s in rec.spans("send ")] == [f"send $KV.{bucket}.k"] * 2

    store = await tjs.create_object_store(ObjectStoreConfig(bucket=unique_name("OB")))
    await store.put("o", b"x" * 1000)
    assert await (await store.get("o")).read() == b"x" * 1000
    assert any(s.name.startswith("send $O.") for s in rec.spans("send "))


async def test_off_by_default_the_context_runs_its_own_methods(js: JetStreamContext) -> None:
    # Nothing is replaced on a context that was not instrumented: the hot paths are the class's.
    assert getattr(js, "_telemetry", None) is None
    swapped = {"publish", "publish_async", "publish_many", "consumer", "create_consumer", "close"}
    assert swapped.isdisjoint(vars(js))


def _link_ids(span: ReadableSpan) -> list[int]:
    return [link.context.span_id for link in span.links]


async def test_key_value_get_and_watch_are_process_spans_linked_to_the_put(
    tjs: JetStreamContext, rec: Recorded
) -> None:
    from aiojetstream import KeyValueConfig

    bucket = unique_name("KV")
    kv = await tjs.create_key_value(KeyValueConfig(bucket=bucket))
    async with kv.watch("k", updates_only=True) as watcher:
        revision = await kv.put("k", b"v1")
        [send] = rec.spans("send ")
        entry = await kv.get("k")
        assert entry.value == b"v1"
        update = await watcher.__anext__()
        assert update is not None
        assert update.value == b"v1"
    subject = f"$KV.{bucket}.k"
    get_span, watched = sorted(
        rec.spans(f"process {subject}"),
        key=lambda s: str((s.attributes or {}).get("messaging.consumer.group.name", "")),
    )
    for span in (get_span, watched):
        assert span.kind is SpanKind.CONSUMER
        assert _link_ids(span) == [send.context.span_id]
        assert span.attributes is not None
        assert span.attributes["messaging.nats.message.sequence"] == revision
        assert span.attributes["messaging.nats.stream"] == f"KV_{bucket}"
        assert span.attributes["messaging.message.body.size"] == 2
    assert (watched.attributes or {})["messaging.consumer.group.name"] == "(watch)"
    assert "messaging.consumer.group.name" not in (get_span.attributes or {})


async def test_object_put_is_one_send_span_carried_by_its_info_and_get_watch_link_to_it(
    tjs: JetStreamContext, rec: Recorded
) -> None:
    from aiojetstream import ObjectStoreConfig

    bucket = unique_name("OB")
    store = await tjs.create_object_store(ObjectStoreConfig(bucket=bucket))
    data = bytes(range(256)) * 10  # 2560 bytes: 10 chunks of 256
    async with store.watch(updates_only=True) as watcher:
        info = await store.put("o", data, chunk_size=256)
        assert info.chunks == 10
        [send] = rec.spans("send ")  # one for the whole put: no span per chunk
        watched_info = await watcher.__anext__()
        assert watched_info is not None
        assert watched_info.name == "o"
    meta_subject = store._meta_subject("o")
    assert send.name == f"send {meta_subject}"
    assert send.kind is SpanKind.PRODUCER
    assert send.attributes is not None
    assert send.attributes["messaging.batch.message_count"] == 10
    assert send.attributes["messaging.message.body.size"] == 2560
    assert send.attributes["messaging.destination.name"] == meta_subject
    # The info (meta message) carries the put's trace context; chunks carry none.
    stored = await store.stream.get_last_msg_for_subject(meta_subject)
    assert stored.headers is not None
    assert stored.headers["traceparent"].split("-")[2] == format(send.context.span_id, "016x")
    chunk = await store.stream.get_last_msg_for_subject(f"$O.{bucket}.C.{info.nuid}")
    assert "traceparent" not in (chunk.headers or {})

    assert await (await store.get("o")).read() == data
    processes = rec.spans(f"process {meta_subject}")
    assert len(processes) == 2  # the watch's and the get's
    for span in processes:
        assert _link_ids(span) == [send.context.span_id]
    assert (
        sum(
            s.attributes.get("messaging.message.body.size") == 2560
            for s in processes
            if s.attributes
        )
        >= 1
    )


async def test_object_get_through_a_link_to_another_bucket_names_the_target(
    tjs: JetStreamContext, rec: Recorded
) -> None:
    """The process span of a get through a cross-bucket link names the info read:
    the target's subject and stream, not the link's bucket."""
    from aiojetstream import ObjectStoreConfig

    a = await tjs.create_object_store(ObjectStoreConfig(bucket=unique_name("OA")))
    b = await tjs.create_object_store(ObjectStoreConfig(bucket=unique_name("OB")))
    info = await a.put("target", b"hello")
    [send] = rec.spans("send ")
    await b.add_link("lnk", info)
    rec.exporter.clear()
    assert await b.get_bytes("lnk") == b"hello"
    [span] = rec.spans("process ")
    assert span.name == f"process {a._meta_subject('target')}"
    assert span.attributes is not None
    assert span.attributes["messaging.nats.stream"] == a.stream.name
    assert _link_ids(span) == [send.context.span_id]


class FailingReads(SpanProcessor):
    """A span processor raising at the start or the end of read spans (the SDK does not
    catch what a processor raises)."""

    def __init__(self, when: str) -> None:
        self.when = when
        self.on = False

    def _fail(self, name: str) -> None:
        if self.on and name.split(" ")[0] in ("process", "receive"):
            raise RuntimeError("processor failed")

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        if self.when == "start":
            self._fail(span.name)

    def on_end(self, span: ReadableSpan) -> None:
        if self.when == "end":
            self._fail(span.name)


@pytest.mark.parametrize("when", ["start", "end"])
async def test_a_failing_span_processor_loses_no_message(
    nats_server: NatsServer, caplog: pytest.LogCaptureFixture, when: str
) -> None:
    """A telemetry error after a message was taken is logged: the message (entry, info,
    value) still reaches the caller; raised, it was lost (a watch's entry, an ordered
    consumer's message)."""
    from aiojetstream import KeyValueConfig, ObjectStoreConfig

    caplog.set_level("DEBUG", logger="aiojetstream")  # (a failure is logged in full once)
    failing = FailingReads(when)
    provider = TracerProvider()
    provider.add_span_processor(failing)
    js = instrument(await aiojetstream.connect(nats_server.url), tracer_provider=provider)
    try:
        kv = await js.create_key_value(KeyValueConfig(bucket=unique_name("KV")))
        await kv.put("a", b"1")
        await kv.put("b", b"2")
        store = await js.create_object_store(ObjectStoreConfig(bucket=unique_name("OB")))
        await store.put("o", b"data")
        stream, name = await setup(js)
        for i in range(4):
            await js.publish(f"{stream}.x", str(i).encode())
        failing.on = True

        async with kv.watch() as w:
            entries = [await asyncio.wait_for(anext(w), 10) for _ in range(3)]
        assert [e.key if e else None for e in entries] == ["a", "b", None]
        assert (await kv.get("a")).value == b"1"
        assert [k async for k in kv.keys()] == ["a", "b"]  # noqa: SIM118
        assert len(await kv.history("a")) == 1
        async with store.watch() as ow:
            watched = await asyncio.wait_for(anext(ow), 10)
        assert watched is not None
        assert watched.name == "o"
        assert await store.get_bytes("o") == b"data"
        assert [i.name async for i in store.list()] == ["o"]

        oc = await js.ordered_consumer(stream)
        assert (await oc.next(expires=2)).data == b"0"
        consumer = await js.consumer(stream, name)
        batch = await consumer.fetch(2, expires=2)
        taken = [m async for m in batch]
        assert [m.data for m in taken] == [b"0", b"1"]
        for m in taken:
            await m.ack()
        assert [m.data for m in await (await consumer.fetch(1, expires=2)).collect()] == [b"2"]
        async with consumer.messages() as it:
            msg = await asyncio.wait_for(anext(it), 10)
        assert msg.data == b"3"
    finally:
        await js.close()
    assert "aiojetstream.otel:" in caplog.text
    assert "processor failed" in caplog.text


async def test_a_model_payload_send_span_has_its_body_size(
    tjs: JetStreamContext, rec: Recorded
) -> None:
    from pydantic import BaseModel

    class Order(BaseModel):
        id: int
        item: str

    stream, name = await setup(tjs)
    order = Order(id=7, item="book")
    body = order.model_dump_json().encode()
    await tjs.publish(f"{stream}.m", order)
    await (await tjs.publish_async(f"{stream}.m", order))
    sizes = [(s.attributes or {}).get("messaging.message.body.size") for s in rec.spans("send ")]
    assert sizes == [len(body), len(body)]
    consumer = await tjs.consumer(stream, name)
    batch = await consumer.fetch(2, expires=2)
    async for msg in batch:
        assert msg.data == body
        assert msg.headers is not None
        assert msg.headers["Content-Type"] == "application/json"
        assert "traceparent" in msg.headers
        await msg.ack()


async def test_pull_statuses_feed_the_pull_pending_gauges(
    tjs: JetStreamContext, rec: Recorded
) -> None:
    stream, name = await setup(tjs)
    consumer = await tjs.consumer(stream, name)
    labels = {"messaging.nats.stream": stream, "messaging.consumer.group.name": name}

    def pulled() -> bool:
        if rec.reader.get_metrics_data() is None:  # nothing recorded yet
            return False
        points = rec.metrics().get("aiojetstream.consumer.pull.pending", [])
        return any(all(p.attributes.get(k) == v for k, v in labels.items()) for p in points)

    async with consumer.messages(max_messages=50, expires=1):
        # The expired pull's 408 Request Timeout says it still waited for all 50.
        await wait_until(pulled, timeout=10, message="no pull status reached the gauge")
        assert rec.total("aiojetstream.consumer.pull.pending", **labels) == 50
        assert rec.total("aiojetstream.consumer.pull.pending_bytes", **labels) == 0
        assert "aiojetstream.consumer.pending" not in rec.metrics()  # no message yet
    for i in range(3):
        await tjs.publish(f"{stream}.p", str(i).encode())
    msg = await consumer.next(expires=2)
    await msg.ack()
    # Message metadata: two more messages were left on the server when the first came.
    assert rec.total("aiojetstream.consumer.pending", **labels) == 2


async def test_key_value_history_and_keys_are_receive_spans_linked_to_the_puts(
    tjs: JetStreamContext, rec: Recorded
) -> None:
    from aiojetstream import KeyNotFoundError, KeyValueConfig

    bucket = unique_name("KV")
    kv = await tjs.create_key_value(KeyValueConfig(bucket=bucket, history=5))
    await kv.put("a", b"1")
    await kv.put("a", b"2")
    await kv.put("b", b"3")
    sends = rec.spans("send ")
    assert len(sends) == 3

    history = await kv.history("a")
    assert [e.value for e in history] == [b"1", b"2"]
    [read] = rec.spans(f"receive $KV.{bucket}.a")
    assert read.kind is SpanKind.CLIENT  # a receive span, as the consumers' (semconv)
    assert read.attributes is not None
    assert read.attributes["messaging.batch.message_count"] == 2
    assert read.attributes["messaging.operation.type"] == "receive"
    assert read.attributes["messaging.nats.stream"] == f"KV_{bucket}"
    assert _link_ids(read) == [sends[0].context.span_id, sends[1].context.span_id]

    from aiojetstream.otel.stores import BATCH

    listed_keys = []
    async for key in kv.keys():
        # Only the read itself is collected: not the loop's body, nor a watch made in it.
        assert BATCH.get() is None
        async with kv.watch(key) as watcher:
            assert "next" not in vars(watcher._reader)
        listed_keys.append(key)
    assert sorted(listed_keys) == ["a", "b"]
    [listed] = rec.spans(f"receive $KV.{bucket}.>")
    assert listed.kind is SpanKind.CLIENT
    assert (listed.attributes or {})["messaging.batch.message_count"] == 2
    # The latest revision of each key: the second put of a, the put of b.
    assert sorted(_link_ids(listed)) == sorted([sends[1].context.span_id, sends[2].context.span_id])
    assert listed.status.status_code is not StatusCode.ERROR

    # Stopping early ends the span without an error.
    keys = kv.keys()
    assert await keys.__anext__() in ("a", "b")
    await keys.aclose()
    early = rec.spans(f"receive $KV.{bucket}.>")
    assert len(early) == 2
    assert early[-1].status.status_code is not StatusCode.ERROR

    # A failed read is a span with the error.
    with pytest.raises(KeyNotFoundError):
        await kv.history("missing")
    [failed] = rec.spans(f"receive $KV.{bucket}.missing")
    assert failed.status.status_code is StatusCode.ERROR
    assert (failed.attributes or {})["messaging.batch.message_count"] == 0

    # A get is its own process span, in no batch.
    await kv.get("a")
    assert len(rec.spans("receive ")) == 4


async def test_a_batch_read_holds_at_most_the_span_link_limit(
    nats_server: NatsServer, rec: Recorded
) -> None:
    from opentelemetry.sdk.trace import SpanLimits

    from aiojetstream import KeyValueConfig

    provider = TracerProvider(span_limits=SpanLimits(max_links=2))
    provider.add_span_processor(SimpleSpanProcessor(rec.exporter))
    js = await aiojetstream.connect(nats_server.url)
    instrument(js, tracer_provider=provider, meter_provider=rec.meter_provider)
    try:
        bucket = unique_name("KV")
        kv = await js.create_key_value(KeyValueConfig(bucket=bucket))
        for key in ("a", "b", "c"):
            await kv.put(key, b"v")
        assert len([k async for k in kv.keys()]) == 3  # noqa: SIM118
        [listed] = rec.spans(f"receive $KV.{bucket}.>")
        assert (listed.attributes or {})["messaging.batch.message_count"] == 3
        assert len(listed.links) == 2
    finally:
        await js.close()


async def test_object_list_is_a_receive_span_linked_to_the_puts(
    tjs: JetStreamContext, rec: Recorded
) -> None:
    from aiojetstream import ObjectStoreConfig

    bucket = unique_name("OB")
    store = await tjs.create_object_store(ObjectStoreConfig(bucket=bucket))
    await store.put("o1", b"x" * 10)
    await store.put("o2", b"y" * 10)
    sends = rec.spans("send ")
    assert len(sends) == 2
    assert sorted([info.name async for info in store.list()]) == ["o1", "o2"]
    [listed] = rec.spans(f"receive $O.{bucket}.M.>")
    assert listed.kind is SpanKind.CLIENT
    assert (listed.attributes or {})["messaging.batch.message_count"] == 2
    assert sorted(_link_ids(listed)) == sorted(s.context.span_id for s in sends)


def test_a_telemetry_failure_is_logged_in_full_once(caplog: pytest.LogCaptureFixture) -> None:
    """A span processor failing on every span logged a traceback per message."""
    from aiojetstream.otel.telemetry import failed

    what = unique_name("doing something")
    caplog.set_level("DEBUG", logger="aiojetstream")
    for _ in range(3):
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            failed(what)
    records = [r for r in caplog.records if what in r.getMessage()]
    assert [r.levelname for r in records] == ["ERROR", "DEBUG", "DEBUG"]
    assert all(r.exc_info for r in records)


async def test_process_spans_end_where_nothing_can_settle_them(
    tjs: JetStreamContext, rec: Recorded
) -> None:
    """Ordered and AckNone consumers: a message no next one follows (collect(), a
    fetch left early, next()) is a mark of its delivery; its span ends at once."""
    stream, _ = await setup(tjs)
    for i in range(3):
        await tjs.publish(f"{stream}.x", str(i).encode())
    oc = await tjs.ordered_consumer(stream)
    assert len(await (await oc.fetch(3, expires=2)).collect()) == 3
    assert len(rec.spans("process ")) == 3
    oc = await tjs.ordered_consumer(stream)
    async with await oc.fetch(3, expires=2) as batch:
        async for _ in batch:
            break
    assert len(rec.spans("process ")) == 4
    none = await tjs.create_consumer(
        stream, ConsumerConfig(durable_name="none", ack_policy=AckPolicy.NONE)
    )
    for _ in range(3):
        await none.next(expires=2)
    assert len(rec.spans("process ")) == 7
    assert all(
        "messaging.nats.settlement" not in (s.attributes or {}) for s in rec.spans("process ")
    )


async def test_an_ack_all_ack_settles_the_earlier_messages(
    tjs: JetStreamContext, rec: Recorded
) -> None:
    stream = unique_name("OT")
    await tjs.create_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"]))
    for i in range(4):
        await tjs.publish(f"{stream}.x", str(i).encode())
    consumer = await tjs.create_consumer(
        stream, ConsumerConfig(durable_name="all", ack_policy=AckPolicy.ALL)
    )
    msgs = await (await consumer.fetch(4, expires=2)).collect()
    await msgs[2].ack()  # settles 0, 1 and 2; 3 stays open
    processes = rec.spans("process ")
    seqs = [(s.attributes or {}).get("messaging.nats.message.sequence") for s in processes]
    assert sorted(seqs) == [1, 2, 3]  # type: ignore[type-var]
    assert {(s.attributes or {}).get("messaging.nats.settlement") for s in processes} == {"ack"}
    labels = {"messaging.nats.stream": stream, "messaging.consumer.group.name": "all"}
    assert rec.total("aiojetstream.acks", **labels) == 1  # one ack sent
    await msgs[3].ack()
    assert len(rec.spans("process ")) == 4


async def test_an_ack_all_ack_settles_by_stream_sequence_as_the_server_does(
    tjs: JetStreamContext, rec: Recorded
) -> None:
    """The server's AckAll acks every pending message up to the acked one's *stream*
    sequence. A redelivery of an earlier message taken after a later one (one
    batch: B = stream seq 2, then A = stream seq 1 again): acking A settles A only
    (B stays pending), acking B settles A too. The spans were settled by consumer
    sequence, in the order taken: the first case ended B's span as acked, the
    second left A's open."""
    stream = unique_name("OT")
    await tjs.create_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"]))
    await tjs.publish(f"{stream}.x", b"A")

    async def interleaved(durable: str) -> tuple[Consumer, aiojetstream.Msg, aiojetstream.Msg]:
        consumer = await tjs.create_consumer(
            stream, ConsumerConfig(durable_name=durable, ack_policy=AckPolicy.ALL, ack_wait=1)
        )
        first = await consumer.next(expires=5)  # A, not acked: redelivered after ack_wait
        assert first.data == b"A"
        if durable == "one":
            await tjs.publish(f"{stream}.x", b"B")
        # B comes at once, A again once its ack_wait is over (1 s): in that order.
        b, a = await (await consumer.fetch(2, expires=10)).collect()
        assert (b.data, b.metadata.sequence.stream, b.metadata.sequence.consumer) == (b"B", 2, 2)
        assert (a.data, a.metadata.sequence.stream, a.metadata.sequence.consumer) == (b"A", 1, 3)
        return consumer, b, a

    def settled(durable: str) -> dict[int, str | None]:
        """Stream seq -> settlement of the durable's finished spans of the batch [B, A]."""
        found: dict[int, str | None] = {}
        for span in rec.spans("process "):
            attrs = span.attributes or {}
            seq, delivered = (
                attrs["messaging.nats.message.sequence"],
                attrs["messaging.nats.delivery_count"],
            )
            if attrs["messaging.consumer.group.name"] == durable and (seq, delivered) in (
                (2, 1),
                (1, 2),
            ):
                found[int(seq)] = attrs.get("messaging.nats.settlement")  # type: ignore
        return found

    # Case 1: ack A's redelivery: only stream seq 1 is acked on the server.
    consumer, b, a = await interleaved("one")
    await a.double_ack()
    assert (await consumer.info()).num_ack_pending == 1  # B is still pending
    assert settled("one") == {1: "ack"}  # B's span stays open
    await b.double_ack()
    assert settled("one") == {1: "ack", 2: "ack"}

    # Case 2: ack B: the server acks A's redelivery too, and so does its span.
    consumer, b, a = await interleaved("two")
    await b.double_ack()
    assert (await consumer.info()).num_ack_pending == 0
    assert settled("two") == {1: "ack", 2: "ack"}


async def test_collected_spans_end_at_the_next_fetch(tjs: JetStreamContext, rec: Recorded) -> None:
    stream, name = await setup(tjs)
    for i in range(5):
        await tjs.publish(f"{stream}.x", str(i).encode())
    consumer = await tjs.consumer(stream, name)
    msgs = await (await consumer.fetch(3, expires=2)).collect()
    await msgs[0].ack()
    assert len(rec.spans("process ")) == 1  # the others are not settled yet
    batch = await consumer.fetch(2, expires=2)  # the next messages are taken
    processes = rec.spans("process ")
    assert len(processes) == 3
    assert sorted(
        str((s.attributes or {}).get("messaging.nats.settlement")) for s in processes
    ) == [
        "None",
        "None",
        "ack",
    ]
    assert len(await batch.collect()) == 2
    await tjs.close()  # and the context's close
    assert len(rec.spans("process ")) == 5


async def test_closing_the_context_ends_the_open_process_spans(
    nats_server: NatsServer, rec: Recorded
) -> None:
    js = instrument(
        await aiojetstream.connect(nats_server.url),
        tracer_provider=rec.tracer_provider,
        meter_provider=rec.meter_provider,
    )
    try:
        stream, name = await setup(js)
        await js.publish(f"{stream}.x", b"1")
        consumer = await js.consumer(stream, name)
        msg = await consumer.next(expires=2)
        assert msg.data == b"1"
        assert rec.spans("process ") == []  # open until settled
    finally:
        await js.close()
    [process] = rec.spans("process ")
    assert "messaging.nats.settlement" not in (process.attributes or {})


async def test_batch_aclose_and_collect_columns_end_the_receive_span(
    tjs: JetStreamContext, rec: Recorded
) -> None:
    pytest.importorskip("pyarrow")
    stream, name = await setup(tjs)
    for i in range(5):
        await tjs.publish(f"{stream}.x", str(i).encode())
    consumer = await tjs.consumer(stream, name)
    batch = await consumer.fetch(2, expires=2)
    async for msg in batch:
        await msg.ack()
        break
    await batch.aclose()
    [receive] = rec.spans("receive ")
    assert (receive.attributes or {})["messaging.batch.message_count"] == 1

    batch = await consumer.fetch(3, expires=2)
    msgs = await batch.collect()
    await batch.aclose()  # the collected messages nothing settled: their spans end
    assert len(msgs) == 3
    assert len(rec.spans("process ")) == 4

    none = await tjs.create_consumer(
        stream, ConsumerConfig(durable_name="none", ack_policy=AckPolicy.NONE)
    )
    columns = await (await none.fetch(5, expires=2)).collect_columns()
    assert columns.num_rows == 5
    receive = rec.spans("receive ")[-1]
    assert (receive.attributes or {})["messaging.batch.message_count"] == 5
    labels = {"messaging.nats.stream": stream, "messaging.consumer.group.name": "none"}
    assert rec.total("messaging.client.consumed.messages", **labels) == 5


async def test_a_batch_left_with_break_ends_its_receive_span(
    tjs: JetStreamContext, rec: Recorded
) -> None:
    """A fetch left with ``break`` and no ``aclose()``: its receive span ends once the
    batch is collected, or at the context's close if it never is (it never ended);
    the message taken last, if not settled, ends its span at the consumer's next
    take, as a ``next()``'s (it stayed open until the close)."""
    import gc

    stream, name = await setup(tjs)
    for i in range(9):
        await tjs.publish(f"{stream}.x", str(i).encode())
    consumer = await tjs.consumer(stream, name)

    async def take_first() -> aiojetstream.Msg:
        batch = await consumer.fetch(3, expires=2)
        return await anext(batch)  # not settled; the batch left unfinished

    first = await take_first()  # the batch is dropped unfinished
    gc.collect()
    [receive] = rec.spans("receive ")
    assert (receive.attributes or {})["messaging.batch.message_count"] == 1
    assert receive.status.status_code is not StatusCode.ERROR
    assert rec.spans("process ") == []  # it may still be settled

    closed = await consumer.fetch(3, expires=2)  # the next take
    [process] = rec.spans("process ")
    assert (process.attributes or {})[
        "messaging.nats.message.sequence"
    ] == first.metadata.sequence.stream
    assert "messaging.nats.settlement" not in (process.attributes or {})
    msg = await anext(closed)
    await closed.aclose()
    await msg.ack()  # settled after the close: its span says so
    assert (rec.spans("process ")[-1].attributes or {})["messaging.nats.settlement"] == "ack"

    kept = await consumer.fetch(3, expires=2)  # still referenced when the context closes
    async for msg in kept:
        await msg.ack()
        break
    assert len(rec.spans("receive ")) == 2
    await tjs.close()
    assert len(rec.spans("receive ")) == 3
    assert (rec.spans("receive ")[2].attributes or {})["messaging.batch.message_count"] == 1


async def test_a_cancelled_wait_on_a_batch_does_not_end_its_receive_span(
    tjs: JetStreamContext, rec: Recorded
) -> None:
    """``asyncio.wait_for(batch.__anext__(), t)`` timing out cancels the wait, not the
    batch: the messages come later through the same batch, and its receive span ends
    with them counted, not as a CancelledError with 0 messages."""
    stream, name = await setup(tjs)
    consumer = await tjs.consumer(stream, name)
    batch = await consumer.fetch(3, expires=10)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(batch.__anext__(), 0.2)  # nothing published yet
    assert rec.spans("receive ") == []
    for i in range(3):
        await tjs.publish(f"{stream}.x", str(i).encode())
    got = []
    async for msg in batch:
        got.append(msg.data)
        await msg.ack()
    assert got == [b"0", b"1", b"2"]
    [receive] = rec.spans("receive ")
    assert receive.status.status_code is not StatusCode.ERROR
    assert (receive.attributes or {})["messaging.batch.message_count"] == 3


async def test_ephemeral_consumers_share_one_label_and_gone_consumers_drop_their_gauges(
    tjs: JetStreamContext, rec: Recorded
) -> None:
    import gc

    stream, name = await setup(tjs)
    await tjs.publish(f"{stream}.x", b"1")
    for _ in range(4):
        ephemeral = await tjs.create_consumer(stream, ConsumerConfig(inactive_threshold=30))
        await (await ephemeral.next(expires=2)).ack()
        await tjs.delete_consumer(stream, ephemeral.name)
    [consumed] = [
        p
        for p in rec.metrics()["messaging.client.consumed.messages"]
        if p.attributes.get("messaging.nats.stream") == stream
    ]
    assert consumed.attributes["messaging.consumer.group.name"] == "(ephemeral)"
    assert consumed.value == 4
    assert "aiojetstream.consumer.pending" not in rec.metrics()  # all deleted

    durable = await tjs.consumer(stream, name)
    await (await durable.next(expires=2)).ack()
    labels = {"messaging.nats.stream": stream, "messaging.consumer.group.name": name}
    assert len(rec.metrics()["aiojetstream.consumer.pending"]) == 1
    stream_handle = await tjs.stream(stream)
    await stream_handle.delete_consumer(name)
    assert "aiojetstream.consumer.pending" not in rec.metrics()
    assert rec.total("aiojetstream.acks", **labels) == 1  # the counters stay

    other = await tjs.create_consumer(
        stream, ConsumerConfig(durable_name="other", ack_policy=AckPolicy.EXPLICIT)
    )
    await (await other.next(expires=2)).ack()
    assert len(rec.metrics()["aiojetstream.consumer.pending"]) == 1
    del other  # the handle goes away: nothing updates its gauge any more

    def collected() -> bool:  # once next()'s pull closed (in the background)
        gc.collect()
        return "aiojetstream.consumer.pending" not in rec.metrics()

    await wait_until(collected, 5)


def series(rec: Recorded, stream: str) -> dict[str, dict[str | None, float]]:
    """The counters' points for ``stream`` (one collection), by name and consumer label."""
    return {
        name: found
        for name, points in rec.metrics().items()
        if name != "messaging.client.operation.duration"
        and (
            found := {
                p.attributes.get("messaging.consumer.group.name"): p.value
                for p in points
                if p.attributes.get("messaging.nats.stream") == stream
            }
        )
    }


async def test_deleted_consumers_and_streams_leave_the_counts_after_a_collection(
    tjs: JetStreamContext, rec: Recorded
) -> None:
    """Each durable ever used kept its counts, and a series per instrument, for ever."""
    import gc

    tel = tjs._telemetry  # type: ignore[attr-defined]
    stream = unique_name("OT")
    await tjs.create_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"]))
    await tjs.publish(f"{stream}.x", b"1")
    for i in range(6):
        name = f"job-{i}"
        consumer = await tjs.create_consumer(
            stream, ConsumerConfig(durable_name=name, ack_policy=AckPolicy.EXPLICIT)
        )
        async for msg in await consumer.fetch(1, expires=2):
            await msg.ack()
        counts = tel.counts[(stream, name)]
        await tjs.delete_consumer(stream, name)
        del consumer, msg

        def released(counts: Any = counts) -> bool:  # the handle went away
            gc.collect()
            return bool(counts.handles == 0)

        await wait_until(released, 5)
        # The next collection reports its last values ...
        found = series(rec, stream)
        assert found["aiojetstream.acks"][name] == 1
        assert found["messaging.client.consumed.messages"][name] == 1
        # ... the ones after it no longer (the first one dropped it).
        assert (stream, name) not in tel.counts
        assert all(name not in points for points in series(rec, stream).values())
    assert [key for key in tel.counts if key[0] == stream] == [(stream, None)]

    # A consumer deleted while a handle still counts there keeps its counts.
    kept = await tjs.create_consumer(
        stream, ConsumerConfig(durable_name="kept", ack_policy=AckPolicy.EXPLICIT)
    )
    async for msg in await kept.fetch(1, expires=2):
        await msg.ack()
    await tjs.delete_consumer(stream, "kept")
    rec.metrics()
    assert series(rec, stream)["aiojetstream.acks"]["kept"] == 1

    # A deleted stream takes its publishes' counts and its consumers' along.
    await tjs.delete_stream(stream)
    del kept, msg
    gc.collect()
    found = series(rec, stream)
    assert found["messaging.client.sent.messages"] == {None: 1}
    assert found["aiojetstream.acks"] == {"kept": 1}
    assert [key for key in tel.counts if key[0] == stream] == []
    assert series(rec, stream) == {}


async def first_context(url: str, rec: Recorded, stream: str) -> Any:
    """A context on ``rec``'s providers that publishes 3 messages to ``stream`` and closes."""
    import weakref

    js = instrument(
        await aiojetstream.connect(url),
        tracer_provider=rec.tracer_provider,
        meter_provider=rec.meter_provider,
    )
    for _ in range(3):
        await js.publish(f"{stream}.x", b"x")
    assert rec.total("messaging.client.sent.messages", **{"messaging.nats.stream": stream}) == 3
    tel = weakref.ref(js._telemetry)  # type: ignore[attr-defined]
    await js.close()
    return tel


async def test_contexts_on_one_meter_provider_all_report_and_a_closed_one_is_freed(
    nats_server: NatsServer, tjs: JetStreamContext, rec: Recorded
) -> None:
    """The SDK kept the first context's observable instruments and ignored the next ones'."""
    import gc

    a, b = unique_name("OTA"), unique_name("OTB")
    for stream in (a, b):
        await tjs.create_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"]))
    closed = await first_context(nats_server.url, rec, a)  # instrumented before tjs's first use
    for _ in range(5):
        await tjs.publish(f"{b}.x", b"x")
    await tjs.publish(f"{a}.x", b"x")  # the same stream from both contexts: one series, summed
    assert rec.total("messaging.client.sent.messages", **{"messaging.nats.stream": b}) == 5
    assert rec.total("messaging.client.sent.messages", **{"messaging.nats.stream": a}) == 4

    other = instrument(
        await aiojetstream.connect(nats_server.url),
        tracer_provider=rec.tracer_provider,
        meter_provider=rec.meter_provider,
    )
    try:
        await other.publish(f"{b}.x", b"x")
        assert rec.total("messaging.client.sent.messages", **{"messaging.nats.stream": b}) == 6
    finally:
        await other.close()
    gc.collect()
    assert closed() is None  # no instrument's callback holds it
    await tjs.publish(f"{b}.x", b"x")
    assert rec.total("messaging.client.sent.messages", **{"messaging.nats.stream": b}) == 7


async def test_the_publish_duration_has_the_semconv_buckets_and_operation(
    tjs: JetStreamContext, rec: Recorded
) -> None:
    stream, _ = await setup(tjs)
    await tjs.publish(f"{stream}.d", b"x")
    with pytest.raises(aiojetstream.JetStreamError):
        await tjs.publish(unique_name("nowhere"), b"x", timeout=0.5)
    ok, failed = sorted(
        rec.metrics()["messaging.client.operation.duration"],
        key=lambda p: "error.type" in p.attributes,
    )
    assert ok.explicit_bounds == (
        0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10
    )  # fmt: skip
    assert ok.bucket_counts[0] + ok.bucket_counts[1] == 1  # (a local ack: under 10 ms)
    assert ok.attributes["messaging.operation.name"] == "send"
    assert ok.attributes["messaging.nats.stream"] == stream
    assert failed.attributes["messaging.operation.name"] == "send"
    # The sent messages carry it too (required by the conventions).
    [sent] = rec.metrics()["messaging.client.sent.messages"]
    assert sent.attributes["messaging.operation.name"] == "send"


async def test_the_message_counters_have_the_semconv_unit_and_operation(
    tjs: JetStreamContext, rec: Recorded
) -> None:
    """messaging.client.sent / consumed.messages: unit {message}, messaging.operation.name
    (required there: send, receive); they had unit 1 and no operation."""
    stream, name = await setup(tjs)
    await tjs.publish(f"{stream}.u", b"x")
    consumer = await tjs.consumer(stream, name)
    await (await consumer.next(expires=2)).ack()
    data = rec.reader.get_metrics_data()
    assert data is not None
    found = {
        metric.name: metric
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }
    units = {metric_name: metric.unit for metric_name, metric in found.items()}
    for counter in (
        "messaging.client.sent.messages",
        "messaging.client.consumed.messages",
        "aiojetstream.acks",
    ):
        assert units[counter] == "{message}", counter
    [sent] = found["messaging.client.sent.messages"].data.data_points
    assert sent.attributes is not None
    assert sent.attributes["messaging.operation.name"] == "send"
    [consumed] = found["messaging.client.consumed.messages"].data.data_points
    assert consumed.attributes is not None
    assert consumed.attributes["messaging.operation.name"] == "receive"
    assert consumed.attributes["messaging.consumer.group.name"] == name
    [acks] = found["aiojetstream.acks"].data.data_points
    assert acks.attributes is not None
    assert "messaging.operation.name" not in acks.attributes  # not a messaging.client.* metric


def test_a_meter_without_bucket_advice_gets_a_plain_histogram() -> None:
    """opentelemetry-api before 1.30 has no ``explicit_bucket_boundaries_advisory``."""
    from aiojetstream.otel.telemetry import Telemetry

    made: list[dict[str, Any]] = []

    class OldMeter:
        def create_histogram(self, name: str, unit: str = "", description: str = "") -> str:
            made.append({"name": name, "unit": unit})
            return "histogram"

        def create_observable_counter(self, *args: Any, **kwargs: Any) -> None:
            pass

        create_observable_gauge = create_observable_counter

    class OldProvider:
        def get_meter(self, *args: Any, **kwargs: Any) -> OldMeter:
            return OldMeter()

    tel = Telemetry(None, OldProvider(), False)
    assert tel.publish_duration == "histogram"
    assert made == [{"name": "messaging.client.operation.duration", "unit": "s"}]


BAD_HEADERS = [
    ("publish", {"headers": "a=b"}),
    ("publish", {"headers": [("K", "v")]}),
    ("publish_async", {"headers": "a=b"}),
    ("publish_many", {"headers": {"K": "v"}}),
    ("publish_many", {"headers": ["K"]}),
    ("publish_many_async", {"headers": [("K", "v")]}),
]


@pytest.mark.parametrize(("method", "options"), BAD_HEADERS)
async def test_bad_headers_raise_the_errors_they_raise_without_telemetry(
    nats_server: NatsServer, tjs: JetStreamContext, method: str, options: dict[str, Any]
) -> None:
    stream, _ = await setup(tjs)
    plain = await aiojetstream.connect(nats_server.url)
    raised: list[type[BaseException]] = []
    try:
        for js in (plain, tjs):
            payload: Any = [b"a", b"b"] if method.startswith("publish_many") else b"a"
            # (the async forms fail too before returning a future)
            with pytest.raises(aiojetstream.JetStreamError) as caught:
                await getattr(js, method)(f"{stream}.h", payload, **options)
            raised.append(type(caught.value))
    finally:
        await plain.close()
    assert raised[0] is raised[1]
    assert raised[0].__name__ in ("InvalidHeaderError", "InvalidOptionError")


class Column:
    """A column of headers that is not a ``Sequence`` but reads as one (a pandas Series)."""

    def __init__(self, items: list[dict[str, str] | None]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, str] | None:
        return self.items[i]

    def __iter__(self) -> Iterator[dict[str, str] | None]:
        return iter(self.items)


async def test_publish_many_headers_of_any_column_carry_the_trace_context(
    tjs: JetStreamContext, rec: Recorded
) -> None:
    """Headers given as a column that publish_many reads (``len`` and ``[i]``) but that is
    no ``Sequence`` were passed on without the batch's ``traceparent``."""
    stream, _ = await setup(tjs)
    await tjs.publish_many(f"{stream}.c", [b"a", b"b"], headers=Column([{"X": "1"}, None]))  # type: ignore[arg-type]
    [send] = rec.spans("send ")
    st = await tjs.stream(stream)
    for seq, mine in ((1, {"X": "1"}), (2, {})):
        stored = await st.get_msg(seq)
        assert stored.headers is not None
        assert stored.headers["traceparent"].split("-")[2] == format(send.context.span_id, "016x")
        assert {k: v for k, v in stored.headers.items() if k == "X"} == mine


class FailingSends(SpanProcessor):
    """A span processor raising at the end of send spans."""

    def on_end(self, span: ReadableSpan) -> None:
        if span.name.startswith("send"):
            raise RuntimeError("processor failed")


class FailingHistogram:
    def record(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("histogram failed")


@pytest.mark.parametrize("failing", ["span", "metric"])
async def test_a_failing_span_processor_or_metric_never_fails_a_stored_publish(
    nats_server: NatsServer,
    rec: Recorded,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    failing: str,
) -> None:
    """Raised after the stream stored the message, the caller would publish it again."""
    from aiojetstream import KeyValueConfig, NoRespondersError
    from aiojetstream.otel import telemetry

    # (the failures logged in full once: not these, for the tests after this one)
    monkeypatch.setattr(telemetry, "_REPORTED", set())
    caplog.set_level("DEBUG", logger="aiojetstream")  # (a failure is logged in full once)
    provider = rec.tracer_provider
    if failing == "span":
        provider.add_span_processor(FailingSends())
    js = instrument(
        await aiojetstream.connect(nats_server.url),
        tracer_provider=provider,
        meter_provider=rec.meter_provider,
    )
    if failing == "metric":
        js._telemetry.publish_duration = FailingHistogram()  # type: ignore[attr-defined]
    try:
        stream = unique_name("OT")
        await js.create_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"]))
        assert (await js.publish(f"{stream}.a", b"1")).seq == 1
        assert (await js.publish_many(f"{stream}.a", [b"2", b"3"])).stored == 2
        assert (await (await js.publish_many_async(f"{stream}.a", [b"4"]))).stored == 1
        assert (await (await js.publish_async(f"{stream}.a", b"5"))).seq == 5
        kv = await js.create_key_value(KeyValueConfig(bucket=unique_name("KV")))
        assert await kv.put("k", b"v") == 1
        with pytest.raises(NoRespondersError):  # the publish's own error, not the telemetry's
            await js.publish(f"{unique_name('NONE')}.a", b"x", timeout=2)
        with pytest.raises(NoRespondersError):
            await js.publish_many(f"{unique_name('NONE')}.a", [b"x"], timeout=2)
        assert (await (await js.stream(stream)).info()).state.messages == 5
        await wait_until(lambda: len(rec.spans("send ")) == 7)  # every span still ended
        assert [s.status.status_code for s in rec.spans("send NONE")] == [StatusCode.ERROR] * 2
    finally:
        await js.close()
    assert "failed" in caplog.text


async def test_the_users_publishes_while_an_object_put_reads_its_data_are_traced_as_theirs(
    tjs: JetStreamContext, rec: Recorded
) -> None:
    """The put's span belongs to the store's own chunks and info, not to what the user's data
    iterator publishes meanwhile (progress events): those get their own send spans."""
    from aiojetstream import ObjectStoreConfig

    events = unique_name("EV")
    await tjs.create_stream(StreamConfig(name=events, subjects=[f"{events}.>"]))
    store = await tjs.create_object_store(ObjectStoreConfig(bucket=unique_name("OB")))

    async def pieces() -> AsyncIterator[bytes]:
        for i in range(3):
            yield b"x" * 100
            await tjs.publish(f"{events}.progress", str(i).encode())
            await (await tjs.publish_async(f"{events}.async", str(i).encode()))

    info = await store.put("dump", pieces(), chunk_size=100)
    assert info.chunks == 3
    meta_subject = store._meta_subject("dump")
    await wait_until(lambda: len(rec.spans("send ")) == 7)
    [put] = rec.spans(f"send {meta_subject}")
    assert (put.attributes or {})["messaging.destination.name"] == meta_subject
    assert len(rec.spans(f"send {events}.progress")) == 3
    assert len(rec.spans(f"send {events}.async")) == 3
    stream = await tjs.stream(events)
    for seq in range(1, 7):
        headers = (await stream.get_msg(seq)).headers or {}
        assert headers["traceparent"].split("-")[2] != format(put.context.span_id, "016x")
    stored = await store.stream.get_last_msg_for_subject(meta_subject)
    assert (stored.headers or {})["traceparent"].split("-")[2] == format(
        put.context.span_id, "016x"
    )
    assert rec.total("messaging.client.sent.messages", **{"messaging.nats.stream": events}) == 6
    assert (
        rec.total("messaging.client.sent.messages", **{"messaging.nats.stream": store.stream.name})
        == 4
    )


async def test_contexts_sharing_a_connection_count_each_reconnect_once(rec: Recorded) -> None:
    """Two contexts on one nats-py connection (another API prefix, a domain) and one meter
    provider: the connection's reconnect is one, until the last context closes."""
    import nats

    server = NatsServer()
    await server.start()
    try:
        nc = await nats.connect(server.url, reconnect_time_wait=0.1, max_reconnect_attempts=-1)
        first = instrument(
            JetStreamContext(nc),
            tracer_provider=rec.tracer_provider,
            meter_provider=rec.meter_provider,
        )
        second = instrument(
            JetStreamContext(nc, api_prefix="$JS.other.API"),
            tracer_provider=rec.tracer_provider,
            meter_provider=rec.meter_provider,
        )
        reconnects = 0

        class Watch:
            def on_disconnected(self) -> None:
                pass

            def on_reconnected(self) -> None:
                nonlocal reconnects
                reconnects += 1

            def on_closed(self) -> None:
                pass

        watch = Watch()
        first._conn.add_listener(watch)
        try:
            await server.restart()
            await wait_until(lambda: reconnects == 1, timeout=30)
            assert rec.total("aiojetstream.reconnects") == 1
            await first.close()  # the other context still counts the connection's
            await server.restart()
            await wait_until(lambda: reconnects == 2, timeout=30)
            assert rec.total("aiojetstream.reconnects") == 2
            await second.close()
        finally:
            first._conn.remove_listener(watch)
            await first.close()
            await second.close()
            assert first._conn.listener_count() == 0  # the last close removed it
            await nc.close()
    finally:
        await server.stop()


async def test_a_forwarded_trace_context_of_another_case_is_replaced(
    tjs: JetStreamContext, rec: Recorded
) -> None:
    """Headers forwarded from a Go service (``Traceparent``, ``Tracestate``): the publish's own
    trace context replaces them; kept next to it, a Go reader (which canonicalises the
    key) continued the old trace."""
    stream = unique_name("OT")
    await tjs.create_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"]))
    old = {
        "Traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "Tracestate": "go=old",
        "tracestate": "py=old",
        "Keep": "1",
    }
    await tjs.publish(f"{stream}.a", b"1", headers=old)
    await (await tjs.publish_async(f"{stream}.a", b"2", headers=old))
    await tjs.publish_many(f"{stream}.a", [b"3", b"4"], headers=[old, None])
    await wait_until(lambda: len(rec.spans("send ")) == 3)
    sends = {format(s.context.span_id, "016x") for s in rec.spans("send ")}
    handle = await tjs.stream(stream)
    for seq in range(1, 5):
        headers = (await handle.get_msg(seq)).headers or {}
        assert {k for k in headers if k.lower() in ("traceparent", "tracestate")} == {"traceparent"}
        assert headers["traceparent"].split("-")[2] in sends
        if seq != 4:
            assert headers["Keep"] == "1"
