"""The trace context written and read by aiojetstream.otel's fast path (issue 28).

With the default global propagator (W3C trace context and baggage) the
headers are written and read without going through ``opentelemetry.propagate``;
they must be exactly what the propagator writes and reads. Any other
propagator, and any baggage, go through the propagator.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import baggage, propagate, trace
from opentelemetry import context as otel_context
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.propagators.textmap import TextMapPropagator
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from aiojetstream.otel.propagation import Propagation


class Custom(TextMapPropagator):
    """A propagator of its own header only (as B3 or Jaeger would be)."""

    def inject(self, carrier, context=None, setter=None):  # type: ignore[no-untyped-def]
        sc = trace.get_current_span(context).get_span_context()
        carrier["x-custom"] = f"{sc.trace_id:x}:{sc.span_id:x}"

    def extract(self, carrier, context=None, getter=None):  # type: ignore[no-untyped-def]
        value = carrier.get("x-custom")
        if not value:
            return context or otel_context.Context()
        trace_id, span_id = (int(v, 16) for v in value.split(":"))
        sc = SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(1))
        return trace.set_span_in_context(NonRecordingSpan(sc), context)

    @property
    def fields(self) -> set[str]:
        return {"x-custom"}


@pytest.fixture
def default_propagator() -> Iterator[None]:
    saved = propagate.get_global_textmap()
    propagate.set_global_textmap(
        CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])
    )
    try:
        yield
    finally:
        propagate.set_global_textmap(saved)


def _span(state: TraceState | None = None, flags: int = 1) -> trace.Span:
    sc = SpanContext(
        0x0AF7651916CD43DD8448EB211C80319C,
        0xB7AD6B7169203331,
        is_remote=False,
        trace_flags=TraceFlags(flags),
        trace_state=state,
    )
    return NonRecordingSpan(sc)


@pytest.mark.parametrize("state", [None, TraceState([("congo", "t61rcWkgMzE"), ("rojo", "00f0")])])
@pytest.mark.parametrize("flags", [0, 1])
def test_the_fast_path_writes_and_reads_what_the_propagator_does(
    default_propagator: None, state: TraceState | None, flags: int
) -> None:
    p = Propagation()
    assert p.fast()
    span = _span(state, flags)
    expected: dict[str, str] = {"X-Mine": "1"}
    propagate.inject(expected, context=trace.set_span_in_context(span))
    assert p.inject({"X-Mine": "1"}, span) == expected
    sc, ctx = p.extract(expected, parent=False)
    assert ctx is None
    reference = trace.get_current_span(propagate.extract(expected)).get_span_context()
    assert sc == reference
    assert sc is not None
    assert sc.trace_state == reference.trace_state
    _, parent = p.extract(expected, parent=True)
    assert parent is not None
    assert trace.get_current_span(parent).get_span_context() == reference


@pytest.mark.parametrize(
    "value",
    [
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",  # invalid trace id
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",  # invalid span id
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b71692033zz-01",  # not hex
        "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",  # forbidden version
        "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-more",  # a future version
        "garbage",
        # Fields int(x, 16) takes but the W3C format (lowercase hex) does not.
        "00-+0000000000000000000000000000001-+0f067aa0ba902b7-+1",
        "00--0000000000000000000000000000001-00f067aa0ba902b7-01",
        "00-0x000000000000000000000000000001-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0_",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7- 1",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",
        "00-4bf92f3577b3_da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        # Flags ff and blanks around the value: the propagator takes them.
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff",
        " 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\t",
    ],
)
def test_odd_traceparents_are_read_as_the_propagator_reads_them(
    default_propagator: None, value: str
) -> None:
    headers = {"traceparent": value}
    sc, _ = Propagation().extract(headers, parent=False)
    reference = trace.get_current_span(propagate.extract(headers)).get_span_context()
    assert sc == (reference if reference.is_valid else None)


def test_baggage_and_other_propagators_go_through_opentelemetry(default_propagator: None) -> None:
    p = Propagation()
    span = TracerProvider().get_tracer("t").start_span("s")
    token = otel_context.attach(baggage.set_baggage("tenant", "acme"))
    try:
        carrier = p.inject(None, span)
    finally:
        otel_context.detach(token)
    assert carrier["baggage"] == "tenant=acme"
    assert "traceparent" in carrier

    propagate.set_global_textmap(Custom())
    assert not p.fast()
    carrier = p.inject(None, span)
    assert set(carrier) == {"x-custom"}
    sc, _ = p.extract(carrier, parent=False)
    assert sc is not None
    assert (sc.trace_id, sc.span_id) == (
        span.get_span_context().trace_id,
        span.get_span_context().span_id,
    )


@pytest.mark.parametrize("baggage_header", [None, "Baggage"])
def test_a_go_publishers_canonical_header_case_is_read(
    default_propagator: None, baggage_header: str | None
) -> None:
    """OTel Go's HeaderCarrier writes ``Traceparent`` (http.Header's canonical case)
    into a nats.Header; the headers keep the case they came in."""
    span = _span(TraceState([("rojo", "00f0")]))
    written: dict[str, str] = {}
    propagate.inject(written, context=trace.set_span_in_context(span))
    headers = {key.title(): value for key, value in written.items()}
    assert "Traceparent" in headers
    if baggage_header:  # with parent=True, baggage goes through the propagator
        headers[baggage_header] = "k=v"
    sc, parent = Propagation().extract(headers, parent=True)
    assert sc is not None
    assert sc.trace_id == span.get_span_context().trace_id
    assert sc.span_id == span.get_span_context().span_id
    assert sc.trace_state == span.get_span_context().trace_state
    assert parent is not None
    if baggage_header:
        assert baggage.get_all(parent) == {"k": "v"}


def test_a_trace_context_of_another_case_is_replaced_only_by_a_new_one(
    default_propagator: None,
) -> None:
    old = {"Traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01", "Tracestate": "a=b", "K": "v"}
    p = Propagation()
    span = _span()
    for carrier in (p.inject(old, span), p.inject_ids(old, 1, 2, 1, None)):  # the fast path
        assert set(carrier) == {"traceparent", "K"}
    token = otel_context.attach(baggage.set_baggage("tenant", "acme"))
    try:
        carrier = p.inject(old, span)  # through the propagator
    finally:
        otel_context.detach(token)
    assert set(carrier) == {"traceparent", "baggage", "K"}
    propagate.set_global_textmap(Custom())  # writes no traceparent: the old one stays
    assert set(p.inject(old, span)) == {"Traceparent", "Tracestate", "K", "x-custom"}
    assert old["Traceparent"].startswith("00-1111")  # (the caller's headers untouched)
