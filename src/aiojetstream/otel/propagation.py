"""The trace context in and out of message headers (W3C ``traceparent`` / ``tracestate``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from opentelemetry import baggage, propagate, trace
from opentelemetry import context as otel_context
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    TraceFlags,
    TraceState,
)

#: The traceparent of a W3C trace context (version 00).
TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
#: The same, in the canonical case of Go's ``http.Header`` (what OTel Go's
#: ``propagation.HeaderCarrier`` writes into a ``nats.Header``): header names
#: are case-insensitive, and the message headers keep the case they came in.
CANONICAL_TRACEPARENT = "Traceparent"
CANONICAL_TRACESTATE = "Tracestate"
#: A version 00 traceparent as the fast path reads it: lowercase hex fields of
#: their exact lengths, nothing around (W3C trace context, as the propagator's
#: own pattern). ``int(x, 16)`` alone takes a sign, ``0x``, ``_`` and capitals.
_TRACEPARENT_00 = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})").fullmatch


def is_default_propagator(propagator: object) -> bool:
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


class _Headers(Getter[Mapping[str, str]]):
    """Reads a header as written, else in its canonical case (``Traceparent``, ``X-B3-Traceid``)."""

    def get(self, carrier: Mapping[str, str], key: str) -> list[str] | None:
        value = carrier.get(key)
        if value is None:
            value = carrier.get(key.title())
            if value is None:
                return None
        return [value]

    def keys(self, carrier: Mapping[str, str]) -> list[str]:
        return list(carrier)


_GETTER = _Headers()


_TRACE_KEYS = frozenset((TRACEPARENT, TRACESTATE))


def _stale(headers: Mapping[Any, Any]) -> list[Any]:
    """The keys of ``headers`` a new trace context replaces: its two, in any case.

    ``traceparent`` and ``tracestate`` as any writer spelled them: Go's
    ``Traceparent``, kept next to the new one, was what a Go reader took.
    """
    return [key for key in headers if type(key) is str and key.lower() in _TRACE_KEYS]


def without_stale(headers: Mapping[Any, Any], carrier: Mapping[str, str]) -> dict[Any, Any]:
    """``headers`` with ``carrier`` (a trace context) added, replacing the one they carried.

    The old ``traceparent`` / ``tracestate`` go (any case) when ``carrier`` has a
    ``traceparent``.
    """
    if TRACEPARENT in carrier:
        stale = _stale(headers)
        if stale:
            headers = {k: v for k, v in headers.items() if k not in stale}
    return {**headers, **carrier}


def _copied(headers: object) -> dict[str, str] | None:
    """A copy of ``headers`` to add the trace context to; None when they are not a mapping.

    None and empty headers give an empty dict. Anything else (a string, a list
    of pairs) is no mapping: the caller leaves it as it is, so that the
    publish refuses it with the error it raises without telemetry.
    """
    if headers is None:
        return {}
    if type(headers) is dict or isinstance(headers, Mapping):
        return dict(headers) if headers else {}
    return None


class Propagation:
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
        """Whether the global propagator is the default W3C one (checked when it changes)."""
        propagator = propagate.get_global_textmap()
        if propagator is not self._seen:
            self._seen = propagator
            self._fast = is_default_propagator(propagator)
        return self._fast

    def inject(self, headers: Any, span: trace.Span) -> Any:
        """``headers`` (copied) with the trace context of ``span``.

        Headers that are neither a mapping nor None are returned as they are,
        for the publish to refuse them as it does without telemetry.
        """
        carrier = _copied(headers)
        if carrier is None:
            return headers
        if self.fast() and not baggage.get_all():
            sc = span.get_span_context()
            if sc.is_valid:
                if carrier:
                    for key in _stale(carrier):
                        del carrier[key]
                carrier[TRACEPARENT] = (
                    f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{sc.trace_flags:02x}"
                )
                if sc.trace_state:
                    carrier[TRACESTATE] = sc.trace_state.to_header()
            return carrier
        return self._propagated(carrier, span)

    def inject_ids(
        self,
        headers: Any,
        trace_id: int,
        span_id: int,
        flags: int,
        trace_state: TraceState | None,
    ) -> Any:
        """``headers`` (copied) with the trace context of a span not started yet.

        Headers that are neither a mapping nor None are returned as they are.
        """
        carrier = _copied(headers)
        if carrier is None:
            return headers
        if self.fast() and not baggage.get_all():
            if carrier:
                for key in _stale(carrier):
                    del carrier[key]
            carrier[TRACEPARENT] = f"00-{trace_id:032x}-{span_id:016x}-{flags:02x}"
            if trace_state:
                carrier[TRACESTATE] = trace_state.to_header()
            return carrier
        sc = SpanContext(trace_id, span_id, False, TraceFlags(flags), trace_state)
        return self._propagated(carrier, NonRecordingSpan(sc))

    @staticmethod
    def _propagated(carrier: dict[str, str], span: trace.Span) -> dict[str, str]:
        stale = {key: carrier.pop(key) for key in _stale(carrier)} if carrier else None
        propagate.inject(carrier, context=trace.set_span_in_context(span))
        if stale and TRACEPARENT not in carrier:  # (another propagator: left as they were)
            carrier.update(stale)
        return carrier

    def extract(
        self, headers: Mapping[str, str], parent: bool
    ) -> tuple[SpanContext | None, otel_context.Context | None]:
        """The remote span context in ``headers`` (None: none valid), and a parent context.

        The context (to start a child span in) comes only with ``parent``.
        """
        if self.fast() and not (parent and ("baggage" in headers or "Baggage" in headers)):
            value = headers.get(TRACEPARENT)
            state_key = TRACESTATE
            if value is None:
                value = headers.get(CANONICAL_TRACEPARENT)
                if value is None:
                    return None, None
                state_key = CANONICAL_TRACESTATE
            match = _TRACEPARENT_00(value)
            if match is not None:
                hex_trace, hex_span, hex_flags = match.groups()
                trace_id, span_id = int(hex_trace, 16), int(hex_span, 16)
                flags = int(hex_flags, 16)
                if not trace_id or not span_id:
                    return None, None
                state = headers.get(state_key)
                sc = SpanContext(
                    trace_id,
                    span_id,
                    is_remote=True,
                    trace_flags=TraceFlags(flags),
                    trace_state=TraceState.from_header([state]) if state else None,
                )
                ctx = trace.set_span_in_context(NonRecordingSpan(sc)) if parent else None
                return sc, ctx
            # another version, blanks around it or a malformed value: the propagator decides
        extracted = propagate.extract(headers, getter=_GETTER)
        sc = trace.get_current_span(extracted).get_span_context()
        if not sc.is_valid:
            return None, None
        return sc, extracted if parent else None
