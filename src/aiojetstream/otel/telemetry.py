"""The tracer, the instruments, the counters and the shared helpers of an instrumented context."""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.trace import (
    Status,
    StatusCode,
)

from .._version import __version__
from .propagation import Propagation

#: Where a failing span (a span processor, sampler or propagator raising: the SDK
#: does not catch them) is logged; telemetry never fails the operation it traces.
logger = logging.getLogger("aiojetstream")

SYSTEM = "nats"
MAX_OPEN = 10_000  # process spans never settled are ended past this many

# The consumer label of ordered consumers (their server-side name changes with each reset).
ORDERED = "(ordered)"
# The consumer label of key-value and object-store watches.
WATCH = "(watch)"
# The consumer label of ephemeral consumers (no durable name: the server often names them).
EPHEMERAL = "(ephemeral)"
CACHE = 4096  # attribute dicts cached per subject (and size): cleared past this many
#: The label sets a meter provider's counts keep (the SDK's default cardinality
#: limit per instrument). Past it, the sets no consumer handle counts into are
#: dropped, the oldest first, unless counted into again (see :meth:`Metrics._make_room`).
MAX_COUNTS = 2000


#: The buckets of ``messaging.client.operation.duration`` (seconds), as the
#: messaging semantic conventions advise (the SDK's default ones start at 5 s).
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10)


def _histogram(meter: metrics.Meter, name: str, *, unit: str, description: str) -> Any:
    """A duration histogram with :data:`DURATION_BUCKETS` as advice (a view may override).

    ``explicit_bucket_boundaries_advisory`` came with opentelemetry-api 1.30;
    an older API (or a meter of another implementation without it) gets the
    histogram without the advice.
    """
    try:
        return meter.create_histogram(
            name,
            unit=unit,
            description=description,
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
    except TypeError:
        return meter.create_histogram(name, unit=unit, description=description)


#: The observable instruments: (name, Counts field, unit, the Counts attribute
#: holding its labels, description); seven counters, three gauges. The
#: messaging conventions' counters carry ``messaging.operation.name`` (required
#: there): ``send`` for the messages sent, ``receive`` for those consumed (all
#: pulled from the server).
_COUNTERS = (
    (
        "messaging.client.sent.messages",
        "sent",
        "{message}",
        "send_labels",
        "Messages published",
    ),
    (
        "messaging.client.consumed.messages",
        "consumed",
        "{message}",
        "receive_labels",
        "Messages taken from consumers",
    ),
    ("aiojetstream.acks", "acks", "{message}", "labels", "Messages acknowledged"),
    ("aiojetstream.naks", "naks", "{message}", "labels", "Messages negatively acknowledged"),
    ("aiojetstream.terms", "terms", "{message}", "labels", "Messages terminated"),
    (
        "aiojetstream.redeliveries",
        "redeliveries",
        "{message}",
        "labels",
        "Messages delivered more than once",
    ),
    (
        "aiojetstream.reconnects",
        "reconnects",
        "{reconnect}",
        "labels",
        "Reconnects of the connection",
    ),
)
_GAUGES = (
    (
        "aiojetstream.consumer.pending",
        "pending",
        "{message}",
        "labels",
        "Messages left for the consumer on the server, from the last message's metadata",
    ),
    (
        "aiojetstream.consumer.pull.pending",
        "pull_pending",
        "{message}",
        "labels",
        "Messages the last pull request still waited for, from the server's status",
    ),
    (
        "aiojetstream.consumer.pull.pending_bytes",
        "pull_pending_bytes",
        "By",
        "labels",
        "Bytes the last pull request still waited for, from the server's status",
    ),
)
_FIELDS = len(_COUNTERS) + len(_GAUGES)


class Counts:
    """Counters of one set of labels, read by the observable instruments at collection.

    Counting is an integer increment per message; the SDK's synchronous
    instruments would hash the labels on every call.
    """

    __slots__ = (
        "acks",
        "consumed",
        "gone",
        "handles",
        "key",
        "labels",
        "naks",
        "pending",
        "pull_pending",
        "pull_pending_bytes",
        "receive_labels",
        "reconnects",
        "redeliveries",
        "send_labels",
        "sent",
        "terms",
    )

    def __init__(self, key: tuple[str, str | None], labels: dict[str, str]) -> None:
        self.key = key
        self.labels = labels
        # The messaging.client.* metrics carry the operation: the publish duration's
        # and the sent messages', and the consumed messages'.
        self.send_labels = {**labels, "messaging.operation.name": "send"}
        self.receive_labels = {**labels, "messaging.operation.name": "receive"}
        self.sent = self.consumed = self.acks = self.naks = self.terms = 0
        self.redeliveries = self.reconnects = 0
        self.pending: int | None = None
        self.pull_pending: int | None = None
        self.pull_pending_bytes: int | None = None
        self.handles = 0  # the live consumer handles counting here
        # None while in use; once its consumer or stream is deleted (or the cap
        # is reached), the instruments that reported it since no handle counts
        # here: when all have, it is dropped.
        self.gone: set[str] | None = None

    def drop_gauges(self) -> None:
        """Stop reporting the pending gauges (the consumer is gone): until set again."""
        self.pending = self.pull_pending = self.pull_pending_bytes = None

    def release(self) -> None:
        """A consumer handle counting here went away: the last one drops the gauges."""
        self.handles -= 1
        if self.handles <= 0:
            self.handles = 0
            self.drop_gauges()


class Metrics:
    """The instruments of one meter provider and the counts they report.

    The SDK keeps one instrument per name and meter: a second
    ``create_observable_counter`` returns the first one and drops the new
    callbacks. So the instruments are made once per meter provider (see
    :func:`metrics_for`) and every instrumented context on that provider counts
    into the same :class:`Counts` (two connections publishing to one stream
    add up under its labels). The callbacks hold no context: a closed context
    is freed as usual.

    The counts of a consumer deleted through a context (or of every consumer
    and of the publishes of a deleted stream) are reported by the next
    collection, then dropped once no consumer handle counts into them any
    more; counting there again (the consumer made again, a publish to the
    stream) keeps them, or starts new ones from zero once dropped.
    """

    def __init__(self, meter: metrics.Meter) -> None:
        self.counts: dict[tuple[str, str | None], Counts] = {}
        #: The reconnect counter of each connection counting here (``stores.Reconnects``).
        self.reconnects: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
        # Creating and dropping counts: collections may run in another thread
        # (a periodic reader's).
        self.lock = threading.Lock()
        self.publish_duration = _histogram(
            meter,
            "messaging.client.operation.duration",
            unit="s",
            description="Duration of a publish until its acknowledgement",
        )
        for name, field, unit, labels, description in _COUNTERS:
            meter.create_observable_counter(
                name,
                callbacks=[self._observe(field, labels, False)],
                unit=unit,
                description=description,
            )
        for name, field, unit, labels, description in _GAUGES:
            meter.create_observable_gauge(
                name,
                callbacks=[self._observe(field, labels, True)],
                unit=unit,
                description=description,
            )

    def _observe(
        self, field: str, labels: str, gauge: bool
    ) -> Callable[[Any], list[metrics.Observation]]:
        def observe(options: Any) -> list[metrics.Observation]:
            found = []
            done = []
            for counts in list(self.counts.values()):
                value = getattr(counts, field)
                if value is not None if gauge else value:
                    found.append(metrics.Observation(value, getattr(counts, labels)))
                gone = counts.gone
                if gone is not None and not counts.handles:
                    gone.add(field)
                    if len(gone) >= _FIELDS:  # every instrument reported its last values
                        done.append(counts)
            if done:
                self._drop(done)
            return found

        return observe

    def _drop(self, done: list[Counts]) -> None:
        with self.lock:
            for counts in done:
                gone = counts.gone
                if gone is None or len(gone) < _FIELDS or counts.handles:
                    continue  # counted again meanwhile
                if self.counts.get(counts.key) is counts:
                    del self.counts[counts.key]

    def of(self, stream: str | None, consumer: str | None = None) -> Counts:
        """The counts of a stream (publishing) or of one of its consumers."""
        key = (stream or "", consumer)
        counts = self.counts.get(key)
        if counts is None or counts.gone is not None:
            return self._made(key)
        return counts

    def _made(self, key: tuple[str, str | None]) -> Counts:
        with self.lock:
            counts = self.counts.pop(key, None)
            if counts is None:
                if len(self.counts) >= MAX_COUNTS:
                    self._make_room()
                labels = {"messaging.system": SYSTEM, "messaging.nats.stream": key[0]}
                if key[1] is not None:
                    labels["messaging.consumer.group.name"] = key[1]
                counts = Counts(key, labels)
            counts.gone = None  # in use again
            self.counts[key] = counts  # (last: the most recently used)
            return counts

    def _make_room(self) -> None:
        """Past :data:`MAX_COUNTS` label sets: drop the idle ones already going, or mark some.

        Called with the lock held. Those already going (their consumer or
        stream deleted) are dropped now, even before a collection reported
        their last values; otherwise the oldest quarter of those no handle
        counts into go after the next collection, unless counted into again.
        """
        idle = [counts for counts in self.counts.values() if not counts.handles]
        going = [counts for counts in idle if counts.gone is not None]
        for counts in going:
            del self.counts[counts.key]
        if not going:
            # (not the reconnects' and failed publishes' set: the context's own)
            for counts in [counts for counts in idle if counts.key != ("", None)][
                : MAX_COUNTS // 4
            ]:
                counts.gone = set()

    def retire(self, stream: str, consumer: str | None = None) -> None:
        """The consumer ``consumer`` of ``stream`` (None: the whole stream) was deleted.

        Its pending gauges are dropped; its counts go after the next collection
        once no handle counts there.
        """
        with self.lock:
            for key, counts in self.counts.items():
                if key[0] == stream and (consumer is None or key[1] == consumer):
                    counts.drop_gauges()
                    if counts.gone is None:
                        counts.gone = set()


#: The metrics of each meter provider (the instruments are made once per meter).
_METRICS: weakref.WeakKeyDictionary[Any, Metrics] = weakref.WeakKeyDictionary()
#: The metrics of the global meter provider, once a context used it: when it was
#: still the API's proxy, its instruments were made on the proxy's meter, which
#: creates them on the real provider's meter once one is set.
_GLOBAL: list[Metrics] = []
_METRICS_LOCK = threading.Lock()


def metrics_for(meter_provider: Any) -> Metrics:
    """The :class:`Metrics` of ``meter_provider`` (None: the global one), made once."""
    provider = meter_provider if meter_provider is not None else metrics.get_meter_provider()
    with _METRICS_LOCK:
        try:
            found = _METRICS.get(provider)
        except TypeError:  # a provider without weak references: not shared
            found = None
        is_global = provider is metrics.get_meter_provider()
        if found is None and is_global and _GLOBAL:
            found = _GLOBAL[0]
        if found is None:
            found = Metrics(metrics.get_meter("aiojetstream", __version__, meter_provider=provider))
            if is_global:
                _GLOBAL.append(found)
        with contextlib.suppress(TypeError):
            _METRICS[provider] = found
        return found


class Telemetry:
    """The tracer, the instruments and the options of one instrumented context."""

    def __init__(self, tracer_provider: Any, meter_provider: Any, parent: bool) -> None:
        self.tracer = trace.get_tracer("aiojetstream", __version__, tracer_provider=tracer_provider)
        self.parent = parent
        self.propagation = Propagation()
        self.metrics = metrics_for(meter_provider)
        # The counts of every context on this meter provider.
        self.counts = self.metrics.counts
        self.of = self.metrics.of
        # The states of the consumers traced (ConsumerState), for close() to end their spans.
        self.states: weakref.WeakSet[Any] = weakref.WeakSet()
        self.publish_duration = self.metrics.publish_duration

    def end_open(self) -> None:
        """End the receive and process spans still open on every traced consumer (at close)."""
        for state in list(self.states):
            try:
                state.end_all()
            except Exception:
                failed("ending the open spans")

    def deleted(self, stream: str, name: str | None = None) -> None:
        """The consumer ``name`` of ``stream`` (None: the stream) was deleted.

        Its pending gauges are dropped; its counts are reported by the next
        collection, then dropped (see :class:`Metrics`).
        """
        self.metrics.retire(stream, name)
        for state in list(self.states):
            if state.stream == stream and (name is None or state.name == name):
                state.counts.drop_gauges()


def body_size(payload: object) -> int | None:
    """The size of a bytes-like payload; None for anything else (encoded later)."""
    if isinstance(payload, bytes | bytearray):
        return len(payload)
    if isinstance(payload, memoryview):
        return payload.nbytes
    return None


def record_error(span: trace.Span, exc: BaseException) -> None:
    """Record ``exc`` on ``span``: the exception, status ERROR, its type and server error code."""
    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, str(exc)))
    span.set_attribute("error.type", type(exc).__name__)
    code = getattr(exc, "err_code", None)
    if code is not None:
        span.set_attribute("messaging.nats.error_code", int(code))


#: The telemetry failures logged with their traceback once (later ones at debug level).
_REPORTED: set[str] = set()


def failed(what: str) -> None:
    """Log that ``what`` failed (inside an ``except``): with its traceback the first time.

    A span processor that fails on every span would otherwise log a traceback
    per message or acknowledgement.
    """
    if what in _REPORTED:
        logger.debug("aiojetstream.otel: %s failed", what, exc_info=True)
        return
    _REPORTED.add(what)
    logger.exception(
        "aiojetstream.otel: %s failed (further failures of it are logged at debug level)", what
    )


def start_span(
    tel: Telemetry, name: str, kind: trace.SpanKind, attrs: dict[str, Any]
) -> trace.Span:
    """Start a span; a failing span processor or sampler is logged (then: a non-recording span)."""
    try:
        return tel.tracer.start_span(name, kind=kind, attributes=attrs)
    except Exception:
        failed("starting a span")
        return trace.INVALID_SPAN


def end_span(span: trace.Span) -> None:
    """End ``span``; a failing span processor is logged, not raised."""
    try:
        span.end()
    except Exception:
        failed("ending a span")


def send_attrs(subject: object) -> dict[str, Any]:
    """The attributes of a send span to ``subject`` (its name when it is a string)."""
    attrs: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.operation.name": "send",
        "messaging.operation.type": "send",
    }
    if isinstance(subject, str):
        attrs["messaging.destination.name"] = subject
    return attrs


#: The send span of the object-store put publishing in this task (set around
#: the store's own publishes only, see ``stores.PUTTING``): its chunks are
#: published without a span of their own, its info (the meta message) carries
#: the put's trace context.
OBJECT_PUT: contextvars.ContextVar[trace.Span | None] = contextvars.ContextVar(
    "aiojetstream_otel_object_put", default=None
)
#: Where a traced read (key-value or object-store get) collects the headers of
#: the stored messages it reads.
READ: contextvars.ContextVar[list[Mapping[str, str] | None] | None] = contextvars.ContextVar(
    "aiojetstream_otel_read", default=None
)
