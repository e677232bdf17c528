"""OpenTelemetry traces and metrics for a :class:`JetStreamContext` (extra ``otel``).

Off by default. :func:`instrument` (or ``connect(..., telemetry=True)``) turns
it on for one context: it replaces, on that instance only, the publish methods
and the methods that hand out consumers with traced versions. Nothing else
changes, so a context that is not instrumented pays nothing, and
``opentelemetry`` is imported only here (``import aiojetstream`` never does).

Spans follow OpenTelemetry's messaging semantic conventions
(``messaging.system`` = ``nats``):

* ``send <subject>`` (PRODUCER) per ``publish`` / ``publish_async`` and per
  ``publish_many`` / ``publish_many_async`` batch
  (``messaging.batch.message_count``; ended when the whole batch is acknowledged);
* ``receive <stream>`` (CLIENT) per ``fetch`` / ``fetch_bytes`` /
  ``fetch_no_wait`` / ``next``, ended when the batch ends;
* ``process <subject>`` (CONSUMER) per message taken from ``messages()`` or a
  fetched batch, or handed to a ``consume()`` handler; ended by its ack, nak or
  term, when the next message is taken, or when the handler returns.

* key-value: ``process <subject>`` per ``get`` and per entry a ``watch``
  yields (writes are publishes: send spans);
* object store: one ``send`` span per ``put`` (chunk count and size; its
  context in the object's info, no span per chunk), ``process`` per ``get``
  and per info a ``watch`` yields.

The trace context travels in the ``traceparent`` / ``tracestate`` headers
through the globally configured propagator (written and read directly when
it is the default W3C one and there is no baggage); a process span is linked
to the send span (or its child with ``parent=True``).
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

from opentelemetry import baggage, metrics, propagate, trace
from opentelemetry import context as otel_context
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
)

from ._message import ACK, NAK, TERM
from ._status import parse_status
from ._version import __version__

if TYPE_CHECKING:
    from ._context import JetStreamContext
    from ._message import Msg

__all__ = ["instrument"]

_SYSTEM = "nats"
_MAX_OPEN = 10_000  # process spans never settled are ended past this many

# Methods of JetStreamContext and Stream that return a Consumer.
_CONSUMER_METHODS = ("consumer", "create_consumer", "update_consumer", "create_or_update_consumer")
# Methods of JetStreamContext that return a Stream (whose consumers are traced too).
_STREAM_METHODS = ("stream", "create_stream", "update_stream", "create_or_update_stream")
# Methods of JetStreamContext that return a KeyValue, and an ObjectStore.
_KV_METHODS = ("key_value", "create_key_value", "update_key_value", "create_or_update_key_value")
_OBJECT_METHODS = ("object_store", "create_object_store", "update_object_store")
# The consumer label of ordered consumers (their server-side name changes with each reset).
_ORDERED = "(ordered)"
# The consumer label of key-value and object-store watches.
_WATCH = "(watch)"


class _Counts:
    """Counters of one set of labels, read by the observable instruments at collection.

    Counting is an integer increment per message; the SDK's synchronous
    instruments would hash the labels on every call.
    """

    __slots__ = (
        "acks",
        "consumed",
        "labels",
        "naks",
        "pending",
        "pull_pending",
        "pull_pending_bytes",
        "reconnects",
        "redeliveries",
        "sent",
        "terms",
    )

    def __init__(self, labels: dict[str, str]) -> None:
        self.labels = labels
        self.sent = self.consumed = self.acks = self.naks = self.terms = 0
        self.redeliveries = self.reconnects = 0
        self.pending: int | None = None
        self.pull_pending: int | None = None
        self.pull_pending_bytes: int | None = None


#: The traceparent of a W3C trace context (version 00).
_TRACEPARENT = "traceparent"
_TRACESTATE = "tracestate"
_CACHE = 4096  # attribute dicts cached per subject (and size): cleared past this many


def _is_default_propagator(propagator: object) -> bool:
    """Whether ``propagator`` is W3C trace context, alone or with W3C baggage (the default)."""
    from opentelemetry.baggage.propagation import W3CBaggagePropagator
    from opentelemetry.propagators.composite import CompositePropagator
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    if type(propagator) is TraceContextTextMapPropagator:
        return True
    if type(propagator) is not CompositePropagator:
        return False
    inner = getattr(propagator, "_propagators", None)
    if not isinstance(inner, list | tuple):
        return False
    kinds = {type(p) for p in inner}
    return TraceContextTextMapPropagator in kinds and kinds <= {
        TraceContextTextMapPropagator,
        W3CBaggagePropagator,
    }


class _Propagation:
    """The trace context in and out of headers, through the global propagator.

    When the global propagator is the default one (W3C trace context, with or
    without W3C baggage) and there is no baggage to carry, the ``traceparent``
    and ``tracestate`` headers are written and read here directly: the same
    bytes the propagator would write, for a fraction of its cost. Any other
    propagator (B3, Jaeger, a custom one) or any baggage goes through
    ``opentelemetry.propagate`` as it is.
    """

    __slots__ = ("_fast", "_seen")

    def __init__(self) -> None:
        self._seen: object = None
        self._fast = False

    def fast(self) -> bool:
        propagator = propagate.get_global_textmap()
        if propagator is not self._seen:
            self._seen = propagator
            self._fast = _is_default_propagator(propagator)
        return self._fast

    def inject(self, headers: Mapping[str, str] | None, span: trace.Span) -> dict[str, str]:
        """``headers`` (copied) with the trace context of ``span``."""
        carrier = dict(headers) if headers else {}
        if self.fast() and not baggage.get_all():
            sc = span.get_span_context()
            if sc.is_valid:
                carrier[_TRACEPARENT] = (
                    f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{sc.trace_flags:02x}"
                )
                if sc.trace_state:
                    carrier[_TRACESTATE] = sc.trace_state.to_header()
            return carrier
        propagate.inject(carrier, context=trace.set_span_in_context(span))
        return carrier

    def extract(
        self, headers: Mapping[str, str], parent: bool
    ) -> tuple[SpanContext | None, otel_context.Context | None]:
        """The remote span context in ``headers`` (None: none valid), and a parent context.

        The context (to start a child span in) comes only with ``parent``.
        """
        if self.fast() and not (parent and "baggage" in headers):
            value = headers.get(_TRACEPARENT)
            if value is None:
                return None, None
            parts = value.split("-")
            if (
                len(parts) == 4
                and parts[0] == "00"
                and len(parts[1]) == 32
                and len(parts[2]) == 16
                and len(parts[3]) == 2
            ):
                try:
                    trace_id, span_id = int(parts[1], 16), int(parts[2], 16)
                    flags = int(parts[3], 16)
                except ValueError:
                    return None, None
                if not trace_id or not span_id:
                    return None, None
                state = headers.get(_TRACESTATE)
                sc = SpanContext(
                    trace_id,
                    span_id,
                    is_remote=True,
                    trace_flags=TraceFlags(flags),
                    trace_state=TraceState.from_header([state]) if state else None,
                )
                ctx = trace.set_span_in_context(NonRecordingSpan(sc)) if parent else None
                return sc, ctx
            # another version or a malformed value: the propagator decides
        extracted = propagate.extract(headers)
        sc = trace.get_current_span(extracted).get_span_context()
        if not sc.is_valid:
            return None, None
        return sc, extracted if parent else None


class _Telemetry:
    """The tracer, the instruments and the options of one instrumented context."""

    def __init__(self, tracer_provider: Any, meter_provider: Any, parent: bool) -> None:
        self.tracer = trace.get_tracer("aiojetstream", __version__, tracer_provider=tracer_provider)
        meter = metrics.get_meter("aiojetstream", __version__, meter_provider=meter_provider)
        self.parent = parent
        self.propagation = _Propagation()
        self.counts: dict[tuple[str, str | None], _Counts] = {}
        self.publish_duration = meter.create_histogram(
            "messaging.client.operation.duration",
            unit="s",
            description="Duration of a publish until its acknowledgement",
        )
        for name, field, description in (
            ("messaging.client.sent.messages", "sent", "Messages published"),
            ("messaging.client.consumed.messages", "consumed", "Messages taken from consumers"),
            ("aiojetstream.acks", "acks", "Messages acknowledged"),
            ("aiojetstream.naks", "naks", "Messages negatively acknowledged"),
            ("aiojetstream.terms", "terms", "Messages terminated"),
            ("aiojetstream.redeliveries", "redeliveries", "Messages delivered more than once"),
            ("aiojetstream.reconnects", "reconnects", "Reconnects of the connection"),
        ):
            meter.create_observable_counter(
                name, callbacks=[self._observe(field)], unit="1", description=description
            )
        for name, field, unit, description in (
            (
                "aiojetstream.consumer.pending",
                "pending",
                "{message}",
                "Messages left for the consumer on the server, from the last message's metadata",
            ),
            (
                "aiojetstream.consumer.pull.pending",
                "pull_pending",
                "{message}",
                "Messages the last pull request still waited for, from the server's status",
            ),
            (
                "aiojetstream.consumer.pull.pending_bytes",
                "pull_pending_bytes",
                "By",
                "Bytes the last pull request still waited for, from the server's status",
            ),
        ):
            meter.create_observable_gauge(
                name, callbacks=[self._observe(field)], unit=unit, description=description
            )

    def _observe(self, field: str) -> Callable[[Any], list[metrics.Observation]]:
        gauge = field.startswith(("pending", "pull_"))

        def observe(options: Any) -> list[metrics.Observation]:
            found = []
            for counts in list(self.counts.values()):
                value = getattr(counts, field)
                if value is not None if gauge else value:
                    found.append(metrics.Observation(value, counts.labels))
            return found

        return observe

    def of(self, stream: str | None, consumer: str | None = None) -> _Counts:
        """The counts of a stream (publishing) or of one of its consumers."""
        key = (stream or "", consumer)
        counts = self.counts.get(key)
        if counts is None:
            labels = {"messaging.system": _SYSTEM, "messaging.nats.stream": stream or ""}
            if consumer is not None:
                labels["messaging.consumer.group.name"] = consumer
            counts = self.counts[key] = _Counts(labels)
        return counts


def _body_size(payload: object) -> int | None:
    if isinstance(payload, bytes | bytearray):
        return len(payload)
    if isinstance(payload, memoryview):
        return payload.nbytes
    return None


def _error(span: trace.Span, exc: BaseException) -> None:
    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, str(exc)))
    span.set_attribute("error.type", type(exc).__name__)
    code = getattr(exc, "err_code", None)
    if code is not None:
        span.set_attribute("messaging.nats.error_code", int(code))


def _send_attrs(subject: object) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "messaging.system": _SYSTEM,
        "messaging.operation.name": "send",
        "messaging.operation.type": "send",
    }
    if isinstance(subject, str):
        attrs["messaging.destination.name"] = subject
    return attrs


#: The send span of the object-store put running in this task: its chunks are
#: published without a span of their own, its info (the meta message) carries
#: the put's trace context.
_OBJECT_PUT: contextvars.ContextVar[trace.Span | None] = contextvars.ContextVar(
    "aiojetstream_otel_object_put", default=None
)
#: Where a traced read (key-value or object-store get) collects the headers of
#: the stored messages it reads.
_READ: contextvars.ContextVar[list[Mapping[str, str] | None] | None] = contextvars.ContextVar(
    "aiojetstream_otel_read", default=None
)


class _Publishing:
    """The traced publish methods of one context (bound over the originals)."""

    def __init__(self, js: JetStreamContext, tel: _Telemetry) -> None:
        self.tel = tel
        self.publish = js.publish
        self.publish_async = js.publish_async
        self.publish_many_async = js.publish_many_async
        # (subject, body size) -> (span name, attributes): no dict built per message.
        self._sends: dict[tuple[str, int | None], tuple[str, dict[str, Any]]] = {}

    def _start(self, subject: object, size: int | None) -> trace.Span:
        if type(subject) is str:
            key = (subject, size)
            cached = self._sends.get(key)
            if cached is None:
                attrs = _send_attrs(subject)
                if size is not None:
                    attrs["messaging.message.body.size"] = size
                if len(self._sends) >= _CACHE:
                    self._sends.clear()
                cached = self._sends[key] = (f"send {subject}", attrs)
            name, attrs = cached
        else:
            name, attrs = "send", _send_attrs(subject)
        return self.tel.tracer.start_span(name, kind=SpanKind.PRODUCER, attributes=attrs)

    def _acked(self, span: trace.Span, start: float, ack: Any, count: int = 1) -> None:
        stream = getattr(ack, "stream", None)
        seq = getattr(ack, "seq", None)
        if stream is not None and seq is not None:
            span.set_attributes({"messaging.nats.stream": stream, "messaging.message.id": str(seq)})
        counts = self.tel.of(stream)
        self.tel.publish_duration.record(time.perf_counter() - start, counts.labels)
        counts.sent += count
        span.end()

    def _failed(self, span: trace.Span, start: float, exc: BaseException) -> None:
        _error(span, exc)
        labels = {**self.tel.of(None).labels, "error.type": type(exc).__name__}
        self.tel.publish_duration.record(time.perf_counter() - start, labels)
        span.end()

    def _encoded(self, payload: Any, kwargs: dict[str, Any]) -> tuple[Any, int | None]:
        """The payload as bytes (a model or a ``codec=`` value encoded here, once) and its size.

        The body size is known only once encoded: encoding here (as ``publish``
        would, headers included) gives the send span its size without a second
        encoding.
        """
        if type(payload) is bytes and kwargs.get("codec") is None:
            return payload, len(payload)
        size = _body_size(payload)
        if size is not None and kwargs.get("codec") is None:
            return payload, size
        from ._codec import encode

        data, headers = encode(payload, kwargs.pop("codec", None), kwargs.get("headers"))
        kwargs["headers"] = headers
        return data, len(data)

    async def traced_publish(
        self, subject: str, payload: Any = b"", *args: Any, **kwargs: Any
    ) -> Any:
        put = _OBJECT_PUT.get()
        if put is not None:  # an object's info: the put's span is its send span
            if isinstance(subject, str):
                put.update_name(f"send {subject}")
                put.set_attribute("messaging.destination.name", subject)
            kwargs["headers"] = self.tel.propagation.inject(kwargs.get("headers"), put)
            return await self.publish(subject, payload, *args, **kwargs)
        span = self._start(subject, _body_size(payload))
        start = time.perf_counter()
        try:
            if type(payload) is not bytes or kwargs.get("codec") is not None:
                payload, size = self._encoded(payload, kwargs)
                span.set_attribute("messaging.message.body.size", size)
            kwargs["headers"] = self.tel.propagation.inject(kwargs.get("headers"), span)
            ack = await self.publish(subject, payload, *args, **kwargs)
        except BaseException as exc:
            self._failed(span, start, exc)
            raise
        self._acked(span, start, ack)
        return ack

    async def traced_publish_async(
        self, subject: str, payload: Any = b"", *args: Any, **kwargs: Any
    ) -> Any:
        if _OBJECT_PUT.get() is not None:  # an object's chunk: no span of its own
            return await self.publish_async(subject, payload, *args, **kwargs)
        span = self._start(subject, _body_size(payload))
        start = time.perf_counter()
        try:
            if type(payload) is not bytes or kwargs.get("codec") is not None:
                payload, size = self._encoded(payload, kwargs)
                span.set_attribute("messaging.message.body.size", size)
            kwargs["headers"] = self.tel.propagation.inject(kwargs.get("headers"), span)
            future = await self.publish_async(subject, payload, *args, **kwargs)
        except BaseException as exc:
            self._failed(span, start, exc)
            raise

        # A partial, not a closure: fewer objects per message for the cyclic GC
        # to traverse while the acknowledgement is outstanding.
        future.add_done_callback(partial(self._done, span, start))
        return future

    def _done(self, span: trace.Span, start: float, fut: Any) -> None:
        if fut.cancelled():
            span.set_attribute("error.type", "cancelled")
            span.end()
        elif fut.exception() is not None:
            self._failed(span, start, fut.exception())
        else:
            self._acked(span, start, fut.result())

    def _start_many(self, subject: Any, payloads: Any, kwargs: dict[str, Any]) -> trace.Span:
        """The send span of a batch, its trace context added to every message's headers."""
        count = len(payloads)
        span = self._start(subject, None)
        span.set_attribute("messaging.batch.message_count", count)
        carrier = self.tel.propagation.inject(None, span)
        if carrier:
            given = kwargs.get("headers")
            if given is None:
                kwargs["headers"] = [carrier] * count
            else:
                kwargs["headers"] = [{**h, **carrier} if h else carrier for h in given]
        return span

    def _summed(self, span: trace.Span, start: float, count: int, summary: Any) -> None:
        counts = self.tel.of(getattr(summary, "stream", None))
        self.tel.publish_duration.record(time.perf_counter() - start, counts.labels)
        counts.sent += count
        span.end()

    async def traced_publish_many(
        self, subject: Any, payloads: Any, *args: Any, **kwargs: Any
    ) -> Any:
        span = self._start_many(subject, payloads, kwargs)
        start = time.perf_counter()
        try:
            # The original publish_many_async, not this context's (traced) one: one span.
            summary = await (await self.publish_many_async(subject, payloads, *args, **kwargs))
        except BaseException as exc:
            self._failed(span, start, exc)
            raise
        self._summed(span, start, len(payloads), summary)
        return summary

    async def traced_publish_many_async(
        self, subject: Any, payloads: Any, *args: Any, **kwargs: Any
    ) -> Any:
        span = self._start_many(subject, payloads, kwargs)
        start = time.perf_counter()
        try:
            future = await self.publish_many_async(subject, payloads, *args, **kwargs)
        except BaseException as exc:
            self._failed(span, start, exc)
            raise
        future.add_done_callback(partial(self._many_done, span, start, len(payloads)))
        return future

    def _many_done(self, span: trace.Span, start: float, count: int, fut: Any) -> None:
        if fut.cancelled():
            span.set_attribute("error.type", "cancelled")
            span.end()
        elif fut.exception() is not None:
            self._failed(span, start, fut.exception())
        else:
            self._summed(span, start, count, fut.result())


def _ack_numbers(reply: bytes) -> tuple[int, int, int] | None:
    """Delivery count, stream sequence and pending of a v1 ``$JS.ACK`` reply; None otherwise.

    The v1 form (9 tokens, what nats-server writes without a domain) is read
    here without building a ``MsgMetadata``; any other goes to ``msg.metadata``.
    """
    tokens = reply.split(b".")
    if len(tokens) != 9 or tokens[0] != b"$JS" or tokens[1] != b"ACK":
        return None
    delivered, seq, pending = tokens[4], tokens[5], tokens[8]
    if not (delivered.isdigit() and seq.isdigit() and pending.isdigit()):
        return None
    return int(delivered), int(seq), int(pending)


class _ConsumerState:
    """The open process spans and the labels of one instrumented consumer."""

    def __init__(self, tel: _Telemetry, stream: str, consumer: str) -> None:
        self.tel = tel
        self.stream = stream
        self.consumer = consumer
        self.counts = tel.of(stream, consumer)
        self.open: dict[bytes, trace.Span] = {}
        # subject -> (span name, the attributes every message on it shares)
        self._subjects: dict[str, tuple[str, dict[str, Any]]] = {}

    def _base(self, subject: str) -> tuple[str, dict[str, Any]]:
        cached = self._subjects.get(subject)
        if cached is None:
            if len(self._subjects) >= _CACHE:
                self._subjects.clear()
            cached = self._subjects[subject] = (
                f"process {subject}",
                {
                    "messaging.system": _SYSTEM,
                    "messaging.destination.name": subject,
                    "messaging.operation.name": "process",
                    "messaging.operation.type": "process",
                    "messaging.consumer.group.name": self.consumer,
                    "messaging.destination.subscription.name": self.consumer,
                    "messaging.nats.stream": self.stream,
                },
            )
        return cached

    def start_process(self, msg: Msg) -> trace.Span:
        tel = self.tel
        name, attrs = self._base(msg.subject)
        attrs = attrs.copy()
        attrs["messaging.message.body.size"] = len(msg.data)
        counts = self.counts
        counts.consumed += 1
        reply = msg._reply
        if reply:
            numbers = _ack_numbers(reply)
            if numbers is None:  # not the v1 form: parsed in full (None: not a $JS.ACK reply)
                try:
                    meta = msg.metadata
                    numbers = meta.num_delivered, meta.sequence.stream, meta.num_pending
                except Exception:
                    numbers = None
            if numbers is not None:
                delivered, seq, pending = numbers
                attrs["messaging.message.id"] = str(seq)
                attrs["messaging.nats.message.sequence"] = seq
                attrs["messaging.nats.delivery_count"] = delivered
                if delivered > 1:
                    counts.redeliveries += 1
                counts.pending = pending
        headers = msg.headers
        links = None
        parent: otel_context.Context | None = None
        if headers:
            sent, parent = tel.propagation.extract(headers, tel.parent)
            if sent is not None and parent is None:
                links = [Link(sent)]
        span = tel.tracer.start_span(
            name, context=parent, kind=SpanKind.CONSUMER, attributes=attrs, links=links
        )
        if msg._reply:
            open_spans = self.open
            if len(open_spans) >= _MAX_OPEN:
                open_spans.pop(next(iter(open_spans))).end()
            open_spans[msg._reply] = span
        return span

    def on_status(self, hdr: bytes) -> None:
        """A status message of a pull: its pending messages and bytes feed the pull gauges.

        The server reports in ``Nats-Pending-Messages`` / ``Nats-Pending-Bytes``
        what a pull request still waited for when it ended (408 Request
        Timeout, 409 statuses) or, when a server adds them, at an idle
        heartbeat. nats-server's idle heartbeats (2.10 to 2.15) carry
        ``Nats-Last-Consumer`` / ``Nats-Last-Stream`` only, so they leave the
        gauges as they are. Status messages are rare: no message pays for this.
        """
        if b"pending-messages" not in hdr.lower():
            return
        status = parse_status(hdr)
        if status is not None:
            counts = self.counts
            counts.pull_pending = status.pending_messages
            counts.pull_pending_bytes = status.pending_bytes

    def end(self, msg: Msg | None) -> None:
        """End the process span of ``msg`` if it is still open (taken over, not settled)."""
        if msg is not None:
            span = self.open.pop(msg._reply, None)
            if span is not None:
                span.end()

    def settled(self, reply: bytes, payload: bytes) -> None:
        counts = self.counts
        if payload == ACK:
            counts.acks += 1
            kind = "ack"
        elif payload.startswith(NAK):
            counts.naks += 1
            kind = "nak"
        elif payload.startswith(TERM):
            counts.terms += 1
            kind = "term"
        else:  # +WPI (in progress), +NXT: the message is not settled
            return
        span = self.open.pop(reply, None)
        if span is not None:
            span.set_attribute("messaging.nats.settlement", kind)
            span.end()


class _TracedAcker:
    """Wraps a driver's acker: counts acks, naks and terms and ends their process spans."""

    __slots__ = ("_inner", "_state")

    def __init__(self, inner: Any, state: _ConsumerState) -> None:
        self._inner = inner
        self._state = state

    @property
    def timeout(self) -> float:
        return float(self._inner.timeout)

    def send_nowait(self, subject: bytes, payload: bytes) -> bool:
        if self._inner.send_nowait(subject, payload):
            self._state.settled(subject, payload)
            return True
        return False

    async def send(self, subject: bytes, payload: bytes) -> None:
        await self._inner.send(subject, payload)
        self._state.settled(subject, payload)

    async def request(self, subject: bytes, payload: bytes, timeout: float) -> bytes:
        data: bytes = await self._inner.request(subject, payload, timeout)
        self._state.settled(subject, payload)
        return data


class _TracedBatch:
    """A fetched batch: its ``receive`` span, a ``process`` span per message."""

    def __init__(self, inner: Any, state: _ConsumerState, span: trace.Span) -> None:
        self._inner = inner
        self._state = state
        self._span: trace.Span | None = span
        self._count = 0
        self._last: Msg | None = None

    def _finish(self, exc: BaseException | None = None) -> None:
        span = self._span
        if span is not None:
            self._span = None
            if exc is not None:
                _error(span, exc)
            span.set_attribute("messaging.batch.message_count", self._count)
            span.end()

    def __aiter__(self) -> _TracedBatch:
        return self

    async def __anext__(self) -> Msg:
        self._state.end(self._last)
        self._last = None
        try:
            msg: Msg = await self._inner.__anext__()
        except StopAsyncIteration:
            self._finish()
            raise
        except BaseException as exc:
            self._finish(exc)
            raise
        self._count += 1
        self._state.start_process(msg)
        self._last = msg
        return msg

    async def __aenter__(self) -> _TracedBatch:
        await self._inner.__aenter__()
        return self

    async def collect(self) -> list[Msg]:
        """Every message of the batch (a process span each, open until settled)."""
        try:
            msgs: list[Msg] = await self._inner.collect()
        except BaseException as exc:
            self._finish(exc)
            raise
        for msg in msgs:
            self._state.start_process(msg)
        self._count += len(msgs)
        self._finish()
        return msgs

    async def __aexit__(self, *exc_info: Any) -> None:
        self._finish()
        await self._inner.__aexit__(*exc_info)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _TracedMessages:
    """``messages()``: a ``process`` span per message taken."""

    def __init__(self, inner: Any, state: _ConsumerState) -> None:
        self._inner = inner
        self._state = state
        self._last: Msg | None = None

    async def __aenter__(self) -> _TracedMessages:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        self._state.end(self._last)
        self._last = None
        await self._inner.__aexit__(*exc_info)

    def __aiter__(self) -> _TracedMessages:
        return self

    async def __anext__(self) -> Msg:
        self._state.end(self._last)
        self._last = None
        msg: Msg = await self._inner.__anext__()
        self._state.start_process(msg)
        self._last = msg
        return msg

    async def next(self) -> Msg:
        """The next message (StopAsyncIteration once stopped or drained)."""
        return await self.__anext__()

    async def aclose(self) -> None:
        """Stop and release the subscription (idempotent)."""
        self._state.end(self._last)
        self._last = None
        await self._inner.aclose()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _instrument_consumer(consumer: Any, tel: _Telemetry, *, ordered: bool = False) -> Any:
    """Trace ``consumer`` (a :class:`Consumer`, or an ``OrderedConsumer`` when ``ordered``)."""
    if getattr(consumer, "_telemetry_state", None) is not None:
        return consumer
    # An ordered consumer's server-side name changes with every reset: one label for all.
    name = _ORDERED if ordered else consumer.name
    state = _ConsumerState(tel, consumer.stream_name, name)
    consumer._telemetry_state = state
    make_driver = consumer._driver

    def driver(settings: Any, error_handler: Any = None) -> Any:
        made = make_driver(settings, error_handler)
        if not ordered:  # an ordered consumer acknowledges nothing
            made._acker = _TracedAcker(made._acker, state)
        on_status = made._on_status

        def traced_status(hdr: bytes) -> None:  # status messages only: no message pays
            state.on_status(hdr)
            on_status(hdr)

        made._on_status = traced_status
        return made

    consumer._driver = driver

    def receive_span() -> trace.Span:
        return tel.tracer.start_span(
            f"receive {consumer.stream_name}",
            kind=SpanKind.CLIENT,
            attributes={
                "messaging.system": _SYSTEM,
                "messaging.operation.name": "receive",
                "messaging.operation.type": "receive",
                "messaging.consumer.group.name": name,
                "messaging.destination.subscription.name": name,
                "messaging.nats.stream": consumer.stream_name,
            },
        )

    def traced_fetch(method: Callable[..., Any]) -> Callable[..., Any]:
        async def fetch(*args: Any, **kwargs: Any) -> Any:
            span = receive_span()
            try:
                batch = await method(*args, **kwargs)
            except BaseException as exc:
                _error(span, exc)
                span.end()
                raise
            return _TracedBatch(batch, state, span)

        return fetch

    for method in ("fetch", "fetch_bytes", "fetch_no_wait"):
        setattr(consumer, method, traced_fetch(getattr(consumer, method)))

    if ordered:  # its next() pulls by itself, not through fetch()
        take_next = consumer.next

        async def traced_next(*args: Any, **kwargs: Any) -> Msg:
            span = receive_span()
            try:
                msg: Msg = await take_next(*args, **kwargs)
            except BaseException as exc:
                _error(span, exc)
                span.end()
                raise
            span.set_attribute("messaging.batch.message_count", 1)
            span.end()
            state.start_process(msg)
            state.end(msg)  # nothing settles it: a mark of the delivery
            return msg

        consumer.next = traced_next

    messages = consumer.messages

    def traced_messages(*args: Any, **kwargs: Any) -> Any:
        return _TracedMessages(messages(*args, **kwargs), state)

    consumer.messages = traced_messages

    consume = consumer.consume

    async def traced_consume(handler: Callable[[Msg], Any], *args: Any, **kwargs: Any) -> Any:
        import inspect

        async def traced_handler(msg: Msg) -> None:
            span = state.start_process(msg)
            token = otel_context.attach(trace.set_span_in_context(span))
            try:
                result = handler(msg)
                if inspect.isawaitable(result):
                    await result
            except Exception as exc:
                _error(span, exc)
                raise
            finally:
                otel_context.detach(token)
                state.end(msg)
                if not msg._reply:
                    span.end()

        if not callable(handler):
            return await consume(handler, *args, **kwargs)  # the library's own error
        return await consume(traced_handler, *args, **kwargs)

    consumer.consume = traced_consume
    return consumer


class _Stores:
    """Key-value buckets and object stores of an instrumented context.

    * A key-value write is a publish: its send span and trace context come from
      the traced ``publish``.
    * A key-value ``get`` is a ``process <subject>`` span, linked to (or, with
      ``parent=True``, the child of) the send span of the revision it returns.
    * An object-store ``put`` is one ``send`` span: its chunks are published
      without spans of their own, and its info (the meta message) carries the
      put's trace context. ``messaging.batch.message_count`` is the number of
      chunks, ``messaging.message.body.size`` the object's size.
    * An object-store ``get`` is a ``process`` span linked to the put that
      stored the object's info.
    * Every entry or info a ``watch`` yields is a ``process`` span linked to its
      write (consumer label ``(watch)``).
    """

    def __init__(self, tel: _Telemetry) -> None:
        self.tel = tel

    def _read_span(
        self,
        subject: str,
        stream: str,
        started: int,
        headers: Mapping[str, str] | None,
        attrs: dict[str, Any],
    ) -> trace.Span:
        tel = self.tel
        links = None
        parent = None
        if headers:
            sent, parent = tel.propagation.extract(headers, tel.parent)
            if sent is not None and parent is None:
                links = [Link(sent)]
        return tel.tracer.start_span(
            f"process {subject}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes={
                "messaging.system": _SYSTEM,
                "messaging.destination.name": subject,
                "messaging.operation.name": "process",
                "messaging.operation.type": "process",
                "messaging.nats.stream": stream,
                **attrs,
            },
            links=links,
            start_time=started,
        )

    def _watched(self, watcher: Any, stream: str) -> Any:
        state = _ConsumerState(self.tel, stream, _WATCH)
        item = watcher._item

        def traced_item(msg: Msg) -> Any:
            made = item(msg)
            if made is not None:
                state.start_process(msg)
                state.end(msg)  # nothing settles it: a mark of the delivery
            return made

        watcher._item = traced_item
        return watcher

    def key_value(self, kv: Any) -> Any:
        """Trace the reads of the key-value handle ``kv`` (its writes are publishes)."""
        if getattr(kv, "_telemetry", None) is not None:
            return kv
        kv._telemetry = self.tel
        stream = kv.stream.name
        get, found, watch = kv.get, kv._found, kv.watch

        def traced_found(
            key: str,
            subject: str,
            revision: Any,
            found_subject: str,
            seq: int,
            headers: Mapping[str, str] | None,
            *rest: Any,
        ) -> Any:
            reads = _READ.get()
            if reads is not None:
                reads.append(headers)
            return found(key, subject, revision, found_subject, seq, headers, *rest)

        async def traced_get(key: str, *args: Any, **kwargs: Any) -> Any:
            started = time.time_ns()
            reads: list[Mapping[str, str] | None] = []
            token = _READ.set(reads)
            try:
                entry = await get(key, *args, **kwargs)
            except BaseException as exc:
                span = self._read_span(kv._prefix + str(key), stream, started, None, {})
                _error(span, exc)
                span.end()
                raise
            finally:
                _READ.reset(token)
            span = self._read_span(
                kv._prefix + entry.key,
                stream,
                started,
                reads[-1] if reads else None,
                {
                    "messaging.message.id": str(entry.revision),
                    "messaging.nats.message.sequence": entry.revision,
                    "messaging.message.body.size": len(entry.value),
                },
            )
            span.end()
            return entry

        def traced_watch(*args: Any, **kwargs: Any) -> Any:
            return self._watched(watch(*args, **kwargs), stream)

        kv._found = traced_found
        kv.get = traced_get
        kv.watch = traced_watch
        return kv

    def object_store(self, store: Any) -> Any:
        """Trace the puts, gets and watches of the object store ``store``."""
        if getattr(store, "_telemetry", None) is not None:
            return store
        store._telemetry = self.tel
        tel = self.tel
        put, get, watch = store.put, store.get, store.watch

        async def traced_put(name: Any, *args: Any, **kwargs: Any) -> Any:
            stream = store.stream.name
            span = tel.tracer.start_span(
                f"send {stream}",
                kind=SpanKind.PRODUCER,
                attributes={
                    "messaging.system": _SYSTEM,
                    "messaging.operation.name": "send",
                    "messaging.operation.type": "send",
                    "messaging.nats.stream": stream,
                },
            )
            token = _OBJECT_PUT.set(span)
            try:
                info = await put(name, *args, **kwargs)
            except BaseException as exc:
                _error(span, exc)
                span.end()
                raise
            finally:
                _OBJECT_PUT.reset(token)
            span.set_attributes(
                {
                    "messaging.batch.message_count": info.chunks,
                    "messaging.message.body.size": info.size,
                }
            )
            tel.of(stream).sent += info.chunks + 1
            span.end()
            return info

        async def traced_get(name: Any, *args: Any, **kwargs: Any) -> Any:
            stream = store.stream.name
            started = time.time_ns()
            reads: list[Mapping[str, str] | None] = []
            token = _READ.set(reads)
            try:
                result = await get(name, *args, **kwargs)
            except BaseException as exc:
                span = self._read_span(f"$O.{store.bucket}.M", stream, started, None, {})
                _error(span, exc)
                span.end()
                raise
            finally:
                _READ.reset(token)
            info = result.info
            span = self._read_span(
                store._meta_subject(info.name),
                stream,
                started,
                reads[-1] if reads else None,
                {
                    "messaging.batch.message_count": info.chunks,
                    "messaging.message.body.size": info.size,
                },
            )
            span.end()
            return result

        def traced_watch(*args: Any, **kwargs: Any) -> Any:
            return self._watched(watch(*args, **kwargs), store.stream.name)

        store.put = traced_put
        store.get = traced_get
        store.watch = traced_watch
        return store


class _Reconnects:
    """A connection listener counting reconnects."""

    def __init__(self, tel: _Telemetry) -> None:
        self.tel = tel

    def on_disconnected(self) -> None:
        pass

    def on_reconnected(self) -> None:
        self.tel.of(None).reconnects += 1

    def on_closed(self) -> None:
        pass


def instrument(
    js: JetStreamContext,
    *,
    tracer_provider: Any = None,
    meter_provider: Any = None,
    parent: bool = False,
) -> JetStreamContext:
    """Turn on OpenTelemetry traces and metrics for ``js``; return it.

    Args:
        js: the context to instrument (idempotent: a second call does nothing).
        tracer_provider: the ``TracerProvider`` (default: the global one).
        meter_provider: the ``MeterProvider`` (default: the global one).
        parent: make a process span the child of the send span it continues
            (default: linked to it, as the messaging conventions recommend).

    Consumers obtained from ``js`` afterwards (``consumer``, ``create_consumer``,
    ``update_consumer``, ``create_or_update_consumer``, and the same methods of
    the :class:`Stream` handles ``js`` returns) are traced too.

    """
    if getattr(js, "_telemetry", None) is not None:
        return js
    tel = _Telemetry(tracer_provider, meter_provider, parent)
    js._telemetry = tel  # type: ignore[attr-defined]
    publishing = _Publishing(js, tel)
    js.publish = publishing.traced_publish  # type: ignore[method-assign]
    js.publish_async = publishing.traced_publish_async  # type: ignore[method-assign]
    js.publish_many = publishing.traced_publish_many  # type: ignore[method-assign]
    js.publish_many_async = publishing.traced_publish_many_async  # type: ignore[method-assign]

    def traced_getter(method: Callable[..., Any]) -> Callable[..., Any]:
        async def get(*args: Any, **kwargs: Any) -> Any:
            return _instrument_consumer(await method(*args, **kwargs), tel)

        return get

    def traced_stream(method: Callable[..., Any]) -> Callable[..., Any]:
        async def get(*args: Any, **kwargs: Any) -> Any:
            stream = await method(*args, **kwargs)
            for name in _CONSUMER_METHODS:
                setattr(stream, name, traced_getter(getattr(stream, name)))
            last_msg = stream.get_last_msg_for_subject

            async def traced_last_msg(*args: Any, **kwargs: Any) -> Any:
                msg = await last_msg(*args, **kwargs)
                reads = _READ.get()
                if reads is not None:  # an object-store get: the info's headers
                    reads.append(msg.headers)
                return msg

            stream.get_last_msg_for_subject = traced_last_msg
            return stream

        return get

    stores = _Stores(tel)

    def traced_store(method: Callable[..., Any], wrap: Callable[[Any], Any]) -> Callable[..., Any]:
        async def get(*args: Any, **kwargs: Any) -> Any:
            return wrap(await method(*args, **kwargs))

        return get

    for name in _CONSUMER_METHODS:
        setattr(js, name, traced_getter(getattr(js, name)))
    for name in _STREAM_METHODS:
        setattr(js, name, traced_stream(getattr(js, name)))
    for name in _KV_METHODS:
        setattr(js, name, traced_store(getattr(js, name), stores.key_value))
    for name in _OBJECT_METHODS:
        setattr(js, name, traced_store(getattr(js, name), stores.object_store))
    ordered_consumer = js.ordered_consumer

    async def traced_ordered(*args: Any, **kwargs: Any) -> Any:
        return _instrument_consumer(await ordered_consumer(*args, **kwargs), tel, ordered=True)

    js.ordered_consumer = traced_ordered  # type: ignore[method-assign]

    listener = _Reconnects(tel)
    conn = js._conn
    conn.add_listener(listener)
    close = js.close

    async def traced_close() -> None:
        try:
            await close()
        finally:
            conn.remove_listener(listener)

    js.close = traced_close  # type: ignore[method-assign]
    return js
