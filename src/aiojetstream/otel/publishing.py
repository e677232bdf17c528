"""Send spans and publish metrics: the traced publish methods of a context."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sized
from functools import partial
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from .propagation import without_stale
from .telemetry import (
    CACHE,
    OBJECT_PUT,
    Telemetry,
    body_size,
    end_span,
    failed,
    record_error,
    send_attrs,
)

if TYPE_CHECKING:
    import asyncio

    from .._context import JetStreamContext
    from .deferred import DeferredSends, Slot

    #: A publish_async in flight: its start time (ns) and its live span
    #: (tracers other than the SDK's), or a deferred send's slot.
    InFlight = tuple[int, trace.Span] | Slot

logger = logging.getLogger("aiojetstream")


def _header_list(headers: object) -> list[Any] | None:
    """``headers`` as a list when it holds mappings or None (one per message), else None.

    What ``publish_many`` reads (``len`` and ``headers[i]``: a list, a tuple,
    a pandas Series) but a string or a mapping; anything else (a generator
    too) is left for ``publish_many`` to refuse, unread.
    """
    if (
        not isinstance(headers, Sized)
        or not isinstance(headers, Iterable)
        or not hasattr(type(headers), "__getitem__")
        or isinstance(headers, str | bytes | bytearray | Mapping)
    ):
        return None
    items = list(headers)
    if all(h is None or isinstance(h, Mapping) for h in items):
        return items
    return None


class Publishing:
    """The traced publish methods of one context (bound over the originals)."""

    def __init__(self, js: JetStreamContext, tel: Telemetry) -> None:
        self.tel = tel
        self.publish = js.publish
        self.publish_async = js.publish_async
        self.publish_many_async = js.publish_many_async
        # (subject, body size) -> (span name, attributes): no dict built per message.
        self._sends: dict[tuple[str, int | None], tuple[str, dict[str, Any]]] = {}
        self.deferred: DeferredSends | None = None
        if type(tel.tracer).__module__ == "opentelemetry.sdk.trace":
            from .deferred import DeferredSends

            self.deferred = DeferredSends.of(tel.tracer)
        # publish_async futures not yet seen done, in publish order; the first
        # holds the done callback _drain, the second _overtaken, the last _newest.
        self._in_flight: deque[tuple[asyncio.Future[Any], InFlight]] = deque()
        self._head: asyncio.Future[Any] | None = None
        self._second: asyncio.Future[Any] | None = None
        self._tail: asyncio.Future[Any] | None = None

    def _named(self, subject: object, size: int | None) -> tuple[str, dict[str, Any]]:
        """The name and attributes of a send span (cached per subject and size)."""
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
            return cached
        return "send", send_attrs(subject)

    def _start(self, subject: object, size: int | None) -> trace.Span:
        name, attrs = self._named(subject, size)
        return self.tel.tracer.start_span(name, kind=SpanKind.PRODUCER, attributes=attrs)

    def _acked(self, span: trace.Span, start: float, ack: Any, count: int = 1) -> None:
        """End the span of a publish acknowledged: a failing reader or processor is logged.

        The message was stored: raising would have the caller publish it again.
        """
        try:
            stream = getattr(ack, "stream", None)
            seq = getattr(ack, "seq", None)
            if stream is not None and seq is not None:
                span.set_attributes(
                    {"messaging.nats.stream": stream, "messaging.message.id": str(seq)}
                )
            counts = self.tel.of(stream)
            self.tel.publish_duration.record(time.perf_counter() - start, counts.send_labels)
            counts.sent += count
        except Exception:
            failed("recording a publish")
        end_span(span)

    def _failed(self, span: trace.Span, start: float, exc: BaseException) -> None:
        """End the span of a publish that failed: the error raised is the publish's."""
        try:
            record_error(span, exc)
            labels = {**self.tel.of(None).send_labels, "error.type": type(exc).__name__}
            self.tel.publish_duration.record(time.perf_counter() - start, labels)
        except Exception:
            failed("recording a publish")
        end_span(span)

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
        deferred = self.deferred
        if deferred is None:
            return await self._live_publish_async(subject, payload, *args, **kwargs)
        name, attrs = self._named(subject, body_size(payload))
        start = time.time_ns()
        slot: Slot | None = None
        try:
            if type(payload) is not bytes or kwargs.get("codec") is not None:
                payload, size = self._encoded(payload, kwargs)
                attrs = {**attrs, "messaging.message.body.size": size}
            slot, flags = deferred.decide(start, name, attrs, otel_context.get_current())
            kwargs["headers"] = self.tel.propagation.inject_ids(
                kwargs.get("headers"), slot[3], slot[4], flags, slot[7]
            )
            future = await self.publish_async(subject, payload, *args, **kwargs)
        except BaseException as exc:
            if slot is None:  # refused before its identity was decided
                slot, _ = deferred.decide(start, name, attrs, otel_context.get_current())
            self._end(slot, time.time_ns(), None, exc)
            raise
        self._track(future, slot)
        return future

    async def _live_publish_async(
        self, subject: str, payload: Any, *args: Any, **kwargs: Any
    ) -> Any:
        """``publish_async`` with a span held open (any tracer but the SDK's)."""
        span = self._start(subject, body_size(payload))
        start = time.time_ns()
        try:
            if type(payload) is not bytes or kwargs.get("codec") is not None:
                payload, size = self._encoded(payload, kwargs)
                span.set_attribute("messaging.message.body.size", size)
            kwargs["headers"] = self.tel.propagation.inject(kwargs.get("headers"), span)
            future = await self.publish_async(subject, payload, *args, **kwargs)
        except BaseException as exc:
            self._end((start, span), time.time_ns(), None, exc)
            raise
        self._track(future, (start, span))
        return future

    def _track(self, future: asyncio.Future[Any], slot: InFlight) -> None:
        """Keep ``future`` until done; done callbacks on the oldest two and the newest only."""
        in_flight = self._in_flight
        in_flight.append((future, slot))
        count = len(in_flight)
        if count == 1:
            self._head = future
            future.add_done_callback(self._drain)
        elif count == 2:
            self._second = future
            future.add_done_callback(self._overtaken)
        tail = self._tail
        if tail is not None:
            tail.remove_done_callback(self._newest)
        self._tail = future
        future.add_done_callback(self._newest)

    def _drain(self, future: asyncio.Future[Any]) -> None:
        """The oldest publish in flight is done: end it and the ones done after it."""
        if future is self._head:  # (else a callback left on a future ended since)
            self._settle()

    def _overtaken(self, future: asyncio.Future[Any]) -> None:
        """The second oldest is done: when the oldest is not, it was overtaken."""
        if future is self._second:
            self._settle()

    def _newest(self, future: asyncio.Future[Any]) -> None:
        """The newest is done: every older one not done was overtaken (several slow in a row)."""
        if future is self._tail:
            self._settle()

    def _settle(self) -> None:
        """End the spans of the publishes done, oldest first, up to the first not done.

        Acknowledgements come in publish order on one stream: one callback
        ends the spans of all the publishes a read of replies completed,
        instead of one callback (a loop handle and a call) per publish. A
        publish overtaken by a later one (acknowledged first: another stream,
        or it waits for its timeout) leaves the queue for a done callback of
        its own, so it does not hold back the end of the later spans: each
        ends when its own acknowledgement came (when the next one overtook
        it), or at the latest when the newest publish in flight is done.
        """
        now = time.time_ns()
        in_flight = self._in_flight
        while in_flight:
            future, slot = in_flight[0]
            if future.done():
                in_flight.popleft()
                self._done(future, slot, now)
            elif (len(in_flight) > 1 and in_flight[1][0].done()) or in_flight[-1][0].done():
                in_flight.popleft()  # overtaken: ended by its own callback
                if future is self._head:
                    future.remove_done_callback(self._drain)
                    self._head = None
                future.add_done_callback(partial(self._alone, slot))
            else:
                break
        head = in_flight[0][0] if in_flight else None
        if head is not self._head:
            self._head = head
            if head is not None:
                head.add_done_callback(self._drain)
        second = in_flight[1][0] if len(in_flight) > 1 else None
        if second is not self._second:
            self._second = second
            if second is not None:
                second.add_done_callback(self._overtaken)
        if not in_flight:
            self._tail = None

    def _alone(self, slot: InFlight, future: asyncio.Future[Any]) -> None:
        """An overtaken publish is done: its span ends now."""
        self._done(future, slot, time.time_ns())

    def _done(self, future: asyncio.Future[Any], slot: InFlight, now: int) -> None:
        """End the span of the publish of ``future`` (done) at ``now``."""
        try:
            if future.cancelled():
                self._end(slot, now, None, None)
            else:
                exc = future.exception()
                self._end(slot, now, None if exc is not None else future.result(), exc)
        except Exception:  # a failing exporter or processor: the other spans still end
            failed("ending a send span")

    def _end(self, slot: InFlight, now: int, ack: Any, exc: BaseException | None) -> None:
        """End the span of a publish_async: acknowledged (``ack``), failed or cancelled."""
        start = slot[0]
        tel = self.tel
        stream = seq = None
        if ack is not None:
            stream = getattr(ack, "stream", None)
            seq = getattr(ack, "seq", None)
        extra = (
            {"messaging.nats.stream": stream, "messaging.message.id": str(seq)}
            if stream is not None and seq is not None
            else None
        )
        if len(slot) == 2:
            span = slot[1]
            if extra:
                span.set_attributes(extra)
        else:
            assert self.deferred is not None
            span = self.deferred.start(slot, extra)
        try:
            if ack is None and exc is None:  # cancelled
                span.set_attribute("error.type", "cancelled")
            elif exc is not None:
                record_error(span, exc)
                labels = {**tel.of(None).send_labels, "error.type": type(exc).__name__}
                tel.publish_duration.record(max(now - start, 0) / 1e9, labels)
            else:
                counts = tel.of(stream)
                tel.publish_duration.record(max(now - start, 0) / 1e9, counts.send_labels)
                counts.sent += 1
        except Exception:  # the span still ends (its processor failing: see _done)
            failed("recording a publish")
        span.end(end_time=now)

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
            elif (items := _header_list(given)) is not None:
                kwargs["headers"] = [without_stale(h, carrier) if h else carrier for h in items]
            # else: left as given, for publish_many to refuse as without telemetry
        return span

    def _summed(self, span: trace.Span, start: float, count: int, summary: Any) -> None:
        """End the span of a batch acknowledged (stored: a failing processor is logged)."""
        try:
            counts = self.tel.of(getattr(summary, "stream", None))
            self.tel.publish_duration.record(time.perf_counter() - start, counts.send_labels)
            counts.sent += count
        except Exception:
            failed("recording a publish")
        end_span(span)

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
            end_span(span)
        elif fut.exception() is not None:
            self._failed(span, start, fut.exception())
        else:
            self._summed(span, start, count, fut.result())
