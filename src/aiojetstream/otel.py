"""OpenTelemetry traces and metrics for a :class:`JetStreamContext` (extra ``otel``).

Off by default. :func:`instrument` (or ``connect(..., telemetry=True)``) turns
it on for one context: it replaces, on that instance only, the publish methods
and the methods that hand out consumers with traced versions. Nothing else
changes, so a context that is not instrumented pays nothing, and
``opentelemetry`` is imported only here (``import aiojetstream`` never does).

Spans follow OpenTelemetry's messaging semantic conventions
(``messaging.system`` = ``nats``):

* ``send <subject>`` (PRODUCER) per ``publish`` / ``publish_async`` and per
  ``publish_many`` batch (``messaging.batch.message_count``);
* ``receive <stream>`` (CLIENT) per ``fetch`` / ``fetch_bytes`` /
  ``fetch_no_wait`` / ``next``, ended when the batch ends;
* ``process <subject>`` (CONSUMER) per message taken from ``messages()`` or a
  fetched batch, or handed to a ``consume()`` handler; ended by its ack, nak or
  term, when the next message is taken, or when the handler returns.

The trace context travels in the ``traceparent`` / ``tracestate`` headers
through the globally configured propagator; a process span is linked to the
send span (or its child with ``parent=True``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, propagate, trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from ._message import ACK, NAK, TERM
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
# The consumer label of ordered consumers (their server-side name changes with each reset).
_ORDERED = "(ordered)"


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


class _Telemetry:
    """The tracer, the instruments and the options of one instrumented context."""

    def __init__(self, tracer_provider: Any, meter_provider: Any, parent: bool) -> None:
        self.tracer = trace.get_tracer("aiojetstream", __version__, tracer_provider=tracer_provider)
        meter = metrics.get_meter("aiojetstream", __version__, meter_provider=meter_provider)
        self.parent = parent
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
        meter.create_observable_gauge(
            "aiojetstream.consumer.pending",
            callbacks=[self._observe("pending")],
            unit="{message}",
            description="Messages left for the consumer, from the last message's metadata",
        )

    def _observe(self, field: str) -> Callable[[Any], list[metrics.Observation]]:
        def observe(options: Any) -> list[metrics.Observation]:
            found = []
            for counts in list(self.counts.values()):
                value = getattr(counts, field)
                if value if field != "pending" else value is not None:
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


def _with_context(headers: Mapping[str, str] | None, ctx: otel_context.Context) -> dict[str, str]:
    carrier = dict(headers) if headers else {}
    propagate.inject(carrier, context=ctx)
    return carrier


class _Publishing:
    """The traced publish methods of one context (bound over the originals)."""

    def __init__(self, js: JetStreamContext, tel: _Telemetry) -> None:
        self.tel = tel
        self.publish = js.publish
        self.publish_async = js.publish_async
        self.publish_many = js.publish_many

    def _start(self, subject: object, payload: object) -> trace.Span:
        name = f"send {subject}" if isinstance(subject, str) else "send"
        span = self.tel.tracer.start_span(
            name, kind=SpanKind.PRODUCER, attributes=_send_attrs(subject)
        )
        size = _body_size(payload)
        if size is not None:
            span.set_attribute("messaging.message.body.size", size)
        return span

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

    async def traced_publish(
        self, subject: str, payload: Any = b"", *args: Any, **kwargs: Any
    ) -> Any:
        span = self._start(subject, payload)
        ctx = trace.set_span_in_context(span)
        kwargs["headers"] = _with_context(kwargs.get("headers"), ctx)
        start = time.perf_counter()
        try:
            ack = await self.publish(subject, payload, *args, **kwargs)
        except BaseException as exc:
            self._failed(span, start, exc)
            raise
        self._acked(span, start, ack)
        return ack

    async def traced_publish_async(
        self, subject: str, payload: Any = b"", *args: Any, **kwargs: Any
    ) -> Any:
        span = self._start(subject, payload)
        ctx = trace.set_span_in_context(span)
        kwargs["headers"] = _with_context(kwargs.get("headers"), ctx)
        start = time.perf_counter()
        try:
            future = await self.publish_async(subject, payload, *args, **kwargs)
        except BaseException as exc:
            self._failed(span, start, exc)
            raise

        def done(fut: Any) -> None:
            if fut.cancelled():
                span.set_attribute("error.type", "cancelled")
                span.end()
            elif fut.exception() is not None:
                self._failed(span, start, fut.exception())
            else:
                self._acked(span, start, fut.result())

        future.add_done_callback(done)
        return future

    async def traced_publish_many(
        self, subject: Any, payloads: Any, *args: Any, **kwargs: Any
    ) -> Any:
        count = len(payloads)
        span = self._start(subject, None)
        span.set_attribute("messaging.batch.message_count", count)
        ctx = trace.set_span_in_context(span)
        carrier = _with_context(None, ctx)
        if carrier:
            given = kwargs.get("headers")
            if given is None:
                kwargs["headers"] = [carrier] * count
            else:
                kwargs["headers"] = [{**h, **carrier} if h else carrier for h in given]
        start = time.perf_counter()
        try:
            summary = await self.publish_many(subject, payloads, *args, **kwargs)
        except BaseException as exc:
            self._failed(span, start, exc)
            raise
        counts = self.tel.of(getattr(summary, "stream", None))
        self.tel.publish_duration.record(time.perf_counter() - start, counts.labels)
        counts.sent += count
        span.end()
        return summary


class _ConsumerState:
    """The open process spans and the labels of one instrumented consumer."""

    def __init__(self, tel: _Telemetry, stream: str, consumer: str) -> None:
        self.tel = tel
        self.stream = stream
        self.consumer = consumer
        self.counts = tel.of(stream, consumer)
        self.open: dict[bytes, trace.Span] = {}

    def start_process(self, msg: Msg) -> trace.Span:
        tel = self.tel
        subject = msg.subject
        attrs: dict[str, Any] = {
            "messaging.system": _SYSTEM,
            "messaging.destination.name": subject,
            "messaging.operation.name": "process",
            "messaging.operation.type": "process",
            "messaging.consumer.group.name": self.consumer,
            "messaging.destination.subscription.name": self.consumer,
            "messaging.nats.stream": self.stream,
            "messaging.message.body.size": len(msg.data),
        }
        counts = self.counts
        counts.consumed += 1
        if msg._reply:
            try:
                meta = msg.metadata
            except Exception:  # not a $JS.ACK reply: no metadata
                meta = None
            if meta is not None:
                attrs["messaging.message.id"] = str(meta.sequence.stream)
                attrs["messaging.nats.message.sequence"] = meta.sequence.stream
                attrs["messaging.nats.delivery_count"] = meta.num_delivered
                if meta.num_delivered > 1:
                    counts.redeliveries += 1
                counts.pending = meta.num_pending
        headers = msg.headers
        links = None
        parent: otel_context.Context | None = None
        if headers:
            extracted = propagate.extract(headers)
            sent = trace.get_current_span(extracted).get_span_context()
            if sent.is_valid:
                if tel.parent:
                    parent = extracted
                else:
                    links = [Link(sent)]
        span = tel.tracer.start_span(
            f"process {subject}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=attrs,
            links=links,
        )
        if msg._reply:
            open_spans = self.open
            if len(open_spans) >= _MAX_OPEN:
                open_spans.pop(next(iter(open_spans))).end()
            open_spans[msg._reply] = span
        return span

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
    if not ordered:  # an ordered consumer acknowledges nothing
        make_driver = consumer._driver

        def driver(settings: Any, error_handler: Any = None) -> Any:
            made = make_driver(settings, error_handler)
            made._acker = _TracedAcker(made._acker, state)
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

    def traced_getter(method: Callable[..., Any]) -> Callable[..., Any]:
        async def get(*args: Any, **kwargs: Any) -> Any:
            return _instrument_consumer(await method(*args, **kwargs), tel)

        return get

    def traced_stream(method: Callable[..., Any]) -> Callable[..., Any]:
        async def get(*args: Any, **kwargs: Any) -> Any:
            stream = await method(*args, **kwargs)
            for name in _CONSUMER_METHODS:
                setattr(stream, name, traced_getter(getattr(stream, name)))
            return stream

        return get

    for name in _CONSUMER_METHODS:
        setattr(js, name, traced_getter(getattr(js, name)))
    for name in _STREAM_METHODS:
        setattr(js, name, traced_stream(getattr(js, name)))
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
