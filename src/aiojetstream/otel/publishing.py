"""Send spans and publish metrics: the traced publish methods of a context."""

from __future__ import annotations

import time
from functools import partial
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.trace import (
    SpanKind,
)

from .telemetry import CACHE, OBJECT_PUT, Telemetry, body_size, record_error, send_attrs

if TYPE_CHECKING:
    from .._context import JetStreamContext


class Publishing:
    """The traced publish methods of one context (bound over the originals)."""

    def __init__(self, js: JetStreamContext, tel: Telemetry) -> None:
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
                attrs = send_attrs(subject)
                if size is not None:
                    attrs["messaging.message.body.size"] = size
                if len(self._sends) >= CACHE:
                    self._sends.clear()
                cached = self._sends[key] = (f"send {subject}", attrs)
            name, attrs = cached
        else:
            name, attrs = "send", send_attrs(subject)
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
        record_error(span, exc)
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
        size = body_size(payload)
        if size is not None and kwargs.get("codec") is None:
            return payload, size
        from .._codec import encode

        data, headers = encode(payload, kwargs.pop("codec", None), kwargs.get("headers"))
        kwargs["headers"] = headers
        return data, len(data)

    async def traced_publish(
        self, subject: str, payload: Any = b"", *args: Any, **kwargs: Any
    ) -> Any:
        """``publish`` with a send span ended by the acknowledgement."""
        put = OBJECT_PUT.get()
        if put is not None:  # an object's info: the put's span is its send span
            if isinstance(subject, str):
                put.update_name(f"send {subject}")
                put.set_attribute("messaging.destination.name", subject)
            kwargs["headers"] = self.tel.propagation.inject(kwargs.get("headers"), put)
            return await self.publish(subject, payload, *args, **kwargs)
        span = self._start(subject, body_size(payload))
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
        """``publish_async`` with a send span ended by the acknowledgement."""
        if OBJECT_PUT.get() is not None:  # an object's chunk: no span of its own
            return await self.publish_async(subject, payload, *args, **kwargs)
        span = self._start(subject, body_size(payload))
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
        """``publish_many`` with one send span for the batch."""
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
        """``publish_many_async`` with one send span for the batch."""
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
