"""AckPolicy.ALL: an ack settles the open process spans up to its stream sequence (pure).

The server side of it is in tests/integration/test_otel.py; here the order the
spans were opened in does not matter, and the index of stream sequences kept
for it stays bounded when the spans end otherwise (nak, term, the next take).
"""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from aiojetstream._message import ACK, NAK, Msg
from aiojetstream.otel.consuming import ConsumerState
from aiojetstream.otel.telemetry import Telemetry


def reply(stream_seq: int, consumer_seq: int, delivered: int = 1) -> bytes:
    return f"$JS.ACK.S.c.{delivered}.{stream_seq}.{consumer_seq}.1700000000000000000.0".encode()


def setup() -> tuple[ConsumerState, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    meter_provider: Any = MeterProvider(metric_readers=[InMemoryMetricReader()])
    tel = Telemetry(tracer_provider, meter_provider, False)
    return ConsumerState(tel, "S", "c", ack_all=True), exporter


def take(state: ConsumerState, subject_reply: bytes) -> None:
    state.start_process(Msg(b"S.x", subject_reply, b"", None, None))  # type: ignore[arg-type]


def settled(exporter: InMemorySpanExporter) -> list[tuple[Any, Any]]:
    return sorted(
        (
            (s.attributes or {})["messaging.nats.message.sequence"],
            (s.attributes or {}).get("messaging.nats.settlement"),
        )
        for s in exporter.get_finished_spans()
    )


def test_an_ack_settles_by_stream_sequence_whatever_the_order_taken() -> None:
    state, exporter = setup()
    # Taken in this order (a redelivery of 1, consumer seq 3, before 2's delivery).
    take(state, reply(3, 4))
    take(state, reply(1, 3, delivered=2))
    take(state, reply(2, 2))
    state.settled(reply(2, 2), ACK)  # the server acks stream seqs 1 and 2
    assert settled(exporter) == [(1, "ack"), (2, "ack")]
    assert list(state.open) == [reply(3, 4)]
    state.settled(reply(3, 4), ACK)
    assert settled(exporter) == [(1, "ack"), (2, "ack"), (3, "ack")]
    assert not state.open


def test_the_stream_sequence_index_stays_bounded() -> None:
    state, exporter = setup()
    for seq in range(1, 1001):  # each nak'ed: nothing acks past them
        take(state, reply(seq, seq))
        state.settled(reply(seq, seq), NAK)
    assert not state.open
    assert len(state.by_seq) <= 64 + 1
    take(state, reply(1001, 1001))
    take(state, reply(1002, 1002))
    state.settled(reply(1001, 1001), ACK)
    assert list(state.open) == [reply(1002, 1002)]
    assert len(exporter.get_finished_spans()) == 1001
