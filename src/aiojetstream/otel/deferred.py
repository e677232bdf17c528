"""Send spans of ``publish_async`` started when the acknowledgement arrives (OpenTelemetry SDK).

A live SDK span per message, held open until its acknowledgement, costs
little to start but a lot to keep: thousands of them in flight (a dozen
objects each) are walked by the cyclic GC at every collection. With the SDK's
own tracer, the span's identity (trace id, span id, sampling decision and
trace state) is decided when the message is published, as the tracer decides
it (its id generator, its sampler, the current context as parent), and
written into the message's headers; the publish keeps only a tuple. When the
acknowledgement arrives, the span is started through a copy of the tracer
(same processors, resource and limits) with the publish time as its start
time, the copy's id generator and sampler handing it the identity decided
before (:class:`PresetIds`, :class:`PresetSampler`), and ended at once. Span processors see the span
start then, not at publish time.

Imported only when the tracer is the SDK's (the SDK is then loaded already).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import Tracer
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind, TraceState
from opentelemetry.util.types import Attributes

_SAMPLED = 0x01  # W3C trace flags
_RANDOM = 0x02  # W3C level 2: the trace id is random (set by newer SDKs)

#: What a deferred send keeps in flight: (start time ns, span name, parent
#: context, trace id, span id, and the sampler's decision, attributes and trace
#: state; not its result object: fewer objects for the GC to walk).
Slot = tuple[int, str, Context, int, int, Decision, Any, TraceState | None]


class PresetIds(IdGenerator):
    """The tracer's id generator, handing out ids decided earlier once when given."""

    def __init__(self, inner: IdGenerator) -> None:
        self.inner = inner
        self.trace_id = 0
        self.span_id = 0

    def generate_span_id(self) -> int:
        """The preset span id (once), else a new one from the inner generator."""
        preset = self.span_id
        if preset:
            self.span_id = 0
            return preset
        return self.inner.generate_span_id()

    def generate_trace_id(self) -> int:
        """The preset trace id (once), else a new one from the inner generator."""
        preset = self.trace_id
        if preset:
            self.trace_id = 0
            return preset
        return self.inner.generate_trace_id()

    def is_trace_id_random(self) -> bool:
        """As the inner generator."""
        method = getattr(self.inner, "is_trace_id_random", None)
        return bool(method()) if method is not None else False


class PresetSampler(Sampler):
    """The tracer's sampler, returning a decision taken earlier once when given."""

    def __init__(self, inner: Sampler) -> None:
        self.inner = inner
        self.result: SamplingResult | None = None

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        """The preset result (once), else the inner sampler's."""
        preset = self.result
        if preset is not None:
            self.result = None
            return preset
        return self.inner.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )

    def get_description(self) -> str:
        """As the inner sampler."""
        return self.inner.get_description()


class DeferredSends:
    """Send spans decided at publish time and started at acknowledgement time."""

    def __init__(self, tracer: Tracer) -> None:
        """Wrap the id generator and sampler of ``tracer`` (a copy of the context's)."""
        self.tracer = tracer
        self.ids = PresetIds(tracer.id_generator)
        self.sampler = PresetSampler(tracer.sampler)
        tracer.id_generator = self.ids
        tracer.sampler = self.sampler

    @classmethod
    def of(cls, tracer: Any) -> DeferredSends | None:
        """For the SDK's own tracer, and only if it builds span contexts as :meth:`decide` does.

        Works on a copy of ``tracer`` (the SDK hands out one tracer per name
        and version, shared by every context of a provider): the tracer
        itself is left as it is.
        """
        if type(tracer) is not Tracer:
            return None
        try:
            found = cls(copy.copy(tracer))
            # A dropped probe (no processor sees it): the trace flags the tracer
            # writes for a root span must be the ones decide() computes.
            found.ids.trace_id, found.ids.span_id = 1, 1
            found.sampler.result = SamplingResult(Decision.DROP)
            probe = found.tracer.start_span("probe", context=Context())
            flags = _RANDOM if found.ids.is_trace_id_random() else 0
            sc = probe.get_span_context()
            found.ids.trace_id = found.ids.span_id = 0
            found.sampler.result = None
            if (sc.trace_id, sc.span_id, int(sc.trace_flags)) == (1, 1, flags):
                return found
        except Exception:  # an SDK this does not know: live spans
            pass
        return None

    def decide(
        self, start: int, name: str, attrs: dict[str, Any], ctx: Context
    ) -> tuple[Slot, int]:
        """The slot of a send span and its trace flags: its identity, as the tracer decides it."""
        parent = trace.get_current_span(ctx).get_span_context()
        inner = self.ids.inner
        if parent is not None and parent.is_valid:
            trace_id = parent.trace_id
            random = parent.trace_flags & _RANDOM
        else:
            trace_id = inner.generate_trace_id()
            random = _RANDOM if self.ids.is_trace_id_random() else 0
        result = self.sampler.inner.should_sample(ctx, trace_id, name, SpanKind.PRODUCER, attrs, ())
        decision = result.decision
        flags = (_SAMPLED if decision is Decision.RECORD_AND_SAMPLE else 0) | random
        span_id = inner.generate_span_id()
        slot = (
            start,
            name,
            ctx,
            trace_id,
            span_id,
            decision,
            result.attributes,
            result.trace_state,
        )
        return slot, flags

    def start(self, slot: Slot, extra: dict[str, Any] | None) -> trace.Span:
        """The span of ``slot`` (and ``extra`` attributes), started now as of its publish time."""
        start, name, ctx, trace_id, span_id, decision, attributes, trace_state = slot
        ids = self.ids
        ids.trace_id, ids.span_id = trace_id, span_id
        self.sampler.result = SamplingResult(
            decision, {**attributes, **extra} if extra else attributes, trace_state
        )
        try:
            return self.tracer.start_span(
                name, context=ctx, kind=SpanKind.PRODUCER, start_time=start
            )
        finally:
            ids.trace_id = ids.span_id = 0
            self.sampler.result = None
