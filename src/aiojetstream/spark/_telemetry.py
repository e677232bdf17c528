"""Row and batch counts of the Spark data sources as OpenTelemetry metrics (issue 28).

Off unless the ``telemetry`` option is given. Nothing travels per row (no trace
context in the messages, no span per row): each Arrow batch a task reads or
writes adds its row count and one batch to two counters, in the executor's
Python worker:

* ``aiojetstream.spark.rows`` and ``aiojetstream.spark.batches``, labelled
  ``messaging.system`` = ``nats``, ``aiojetstream.spark.operation`` (``read``
  or ``write``), ``aiojetstream.spark.format`` (``jetstream`` or
  ``jetstream_kv``) and ``aiojetstream.spark.target`` (the stream read, the
  subject written (empty: the ``subject`` column), or the bucket).

The counters come from the worker's global ``MeterProvider``. A worker has
none unless something sets it up: ``telemetry=true`` takes what the worker
already has, ``telemetry=<module>:<function>`` first calls that function once
per worker process (it sets the global providers, for example an OTLP
exporter), and at the end of each task the provider is flushed
(``force_flush``), since Spark may end a worker without running its exit
handlers.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Final

from aiojetstream import InvalidOptionError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["check_telemetry", "counted"]

_FLUSH_MILLIS: Final = 10_000
_lock = threading.Lock()
_set_up: set[str] = set()
_instruments: tuple[Any, Any] | None = None


def check_telemetry(value: str | None) -> str | None:
    """The ``telemetry`` option: None (off), ``"true"``, or ``"module:function"``."""
    if value is None:
        return None
    text = value.strip()
    if text.lower() in ("", "false", "off", "none"):
        return None
    if text.lower() in ("true", "on"):
        return "true"
    module, sep, function = text.partition(":")
    if (
        not sep
        or not all(p.isidentifier() for p in module.split("."))
        or not function.isidentifier()
    ):
        raise InvalidOptionError(
            f"option 'telemetry': expected true, false or <module>:<function> (a function "
            f"that sets up the worker's OpenTelemetry providers), got {value!r}"
        )
    return text


def _setup(telemetry: str) -> tuple[Any, Any]:
    """Call the set-up function once per process; the two counters (made once)."""
    global _instruments
    with _lock:
        if telemetry != "true" and telemetry not in _set_up:
            module, _, function = telemetry.partition(":")
            getattr(importlib.import_module(module), function)()
            _set_up.add(telemetry)
        if _instruments is None:
            from opentelemetry import metrics

            from aiojetstream import __version__

            meter = metrics.get_meter("aiojetstream.spark", __version__)
            _instruments = (
                meter.create_counter(
                    "aiojetstream.spark.rows", unit="{row}", description="Rows read or written"
                ),
                meter.create_counter(
                    "aiojetstream.spark.batches",
                    unit="{batch}",
                    description="Arrow batches read or written",
                ),
            )
        return _instruments


def _flush() -> None:
    from opentelemetry import metrics

    flush = getattr(metrics.get_meter_provider(), "force_flush", None)
    if flush is not None:
        flush(timeout_millis=_FLUSH_MILLIS)


def counted(
    batches: Iterable[pa.RecordBatch],
    telemetry: str | None,
    operation: str,
    fmt: str,
    target: str | None,
) -> Iterator[pa.RecordBatch]:
    """``batches`` as they are; with ``telemetry``, each one counted (rows, one batch)."""
    if telemetry is None:
        yield from batches
        return
    rows, count = _setup(telemetry)
    labels = {
        "messaging.system": "nats",
        "aiojetstream.spark.operation": operation,
        "aiojetstream.spark.format": fmt,
        "aiojetstream.spark.target": target or "",
    }
    try:
        for batch in batches:
            yield batch  # counted once taken: by Spark (a read), by the publisher (a write)
            rows.add(batch.num_rows, labels)
            count.add(1, labels)
    finally:
        _flush()
