"""The counts behind the observable instruments stay bounded (pure: the SDK's in-memory reader).

The counts of a deleted consumer or stream are reported by the next
collection, then dropped; past ``MAX_COUNTS`` label sets the idle ones go.
"""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from aiojetstream.otel import telemetry
from aiojetstream.otel.telemetry import Metrics, metrics_for


def sent(reader: InMemoryMetricReader) -> dict[str, int]:
    """One collection: ``messaging.client.sent.messages`` by stream."""
    data = reader.get_metrics_data()
    assert data is not None
    return {
        str((p.attributes or {})["messaging.nats.stream"]): int(getattr(p, "value", 0))
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "messaging.client.sent.messages"
        for p in metric.data.data_points
    }


@pytest.fixture
def reader() -> InMemoryMetricReader:
    return InMemoryMetricReader()


@pytest.fixture
def made(reader: InMemoryMetricReader) -> Metrics:
    return metrics_for(MeterProvider(metric_readers=[reader]))


def test_one_metrics_per_meter_provider(made: Metrics, reader: InMemoryMetricReader) -> None:
    provider: Any = MeterProvider(metric_readers=[InMemoryMetricReader()])
    assert metrics_for(provider) is metrics_for(provider)
    assert metrics_for(provider) is not made


def test_a_retired_label_set_is_reported_once_more_then_dropped(
    made: Metrics, reader: InMemoryMetricReader
) -> None:
    made.of("A").sent += 2
    made.of("A", "job").consumed += 1
    made.of("B").sent += 1
    made.retire("A")
    assert sent(reader) == {"A": 2, "B": 1}  # the last values
    assert set(made.counts) == {("B", None)}
    assert sent(reader) == {"B": 1}


def test_a_label_set_counted_again_before_the_collection_stays(
    made: Metrics, reader: InMemoryMetricReader
) -> None:
    made.of("A").sent += 2
    made.retire("A")
    made.of("A").sent += 1  # a publish to the stream made again
    assert sent(reader) == {"A": 3}
    assert sent(reader) == {"A": 3}


def test_a_retired_label_set_with_a_live_handle_stays_until_it_goes(
    made: Metrics, reader: InMemoryMetricReader
) -> None:
    counts = made.of("A", "job")
    counts.handles += 1
    made.retire("A", "job")
    counts.consumed += 1  # the handle still counts
    reader.collect()
    assert ("A", "job") in made.counts
    counts.release()
    reader.collect()  # the last values
    assert ("A", "job") not in made.counts


def test_past_the_cap_idle_label_sets_go(
    made: Metrics, reader: InMemoryMetricReader, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(telemetry, "MAX_COUNTS", 8)
    live = made.of("L", "live")
    live.handles += 1  # a consumer handle counts here: never dropped
    for i in range(7):
        made.of(f"S{i}").sent += 1
    made.of("S7").sent += 1  # the 9th: the oldest idle quarter (2) go after the next collection
    made.of("S1").sent += 1  # counted into again: stays
    assert len(made.counts) == 9
    assert sent(reader) == {"S1": 2} | {f"S{i}": 1 for i in range(8) if i != 1}
    assert set(made.counts) == {("L", "live")} | {(f"S{i}", None) for i in range(1, 8)}

    made.retire("S3")  # deleted: going at once when the cap is reached again
    made.of("S8")
    made.of("S9")
    assert ("S3", None) not in made.counts
    assert ("L", "live") in made.counts


def test_the_global_provider_set_after_a_context_used_its_proxy_shares_its_metrics() -> None:
    """Contexts instrumented before the application set the global MeterProvider (through
    the API's proxy) and after it: one set of instruments, every context reported."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        """
        from opentelemetry import metrics
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from aiojetstream.otel.telemetry import Telemetry

        before = Telemetry(None, None, False)  # the proxy provider
        reader = InMemoryMetricReader()
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        after = Telemetry(None, None, False)
        explicit = Telemetry(None, metrics.get_meter_provider(), False)
        assert before.metrics is after.metrics is explicit.metrics
        before.of("A").sent += 1
        after.of("B").sent += 2
        points = {
            p.attributes["messaging.nats.stream"]: p.value
            for r in reader.get_metrics_data().resource_metrics
            for s in r.scope_metrics
            for m in s.metrics
            if m.name == "messaging.client.sent.messages"
            for p in m.data.data_points
        }
        assert points == {"A": 1, "B": 2}, points
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout.strip() == "ok", done.stderr
