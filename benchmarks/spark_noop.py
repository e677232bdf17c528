"""The baselines of the Spark cases: a Python Data Source that does no I/O at all.

``format("bench_noop")`` reads ``rows`` rows (option, in ``numPartitions``
ranges) of the ``jetstream`` read schema, and writes by taking the rows of the
Arrow batches Spark hands it. Two levels of "no-op" (option ``level``):

* ``python`` (the default, the baseline of ``spark_*_vs_noop``): what any
  Python source or sink does at the least, without I/O. The reader makes each
  row's values in Python (subject, sequence, timestamp, headers, payload) and
  builds every Arrow batch from them; the writer turns every batch's columns
  into Python values, as a sink must before it can send them anywhere.
* ``ceiling`` (the baseline of ``spark_*_vs_ceiling``): Spark's own transport
  and nothing else. The reader yields Arrow batches built up front; the writer
  only counts rows.
* ``rows`` (the baseline of ``spark_*_vs_row_noop``, for information): the
  row-at-a-time API instead of Arrow. The reader yields a tuple per row, the
  writer (a plain ``DataSourceWriter``) takes Spark's ``Row`` objects. The
  issue's prototype figures (421k rows/s read, 161k write) are of this order;
  ``jetstream`` itself reads and writes Arrow batches.

Spark pickles the data source classes by reference, so this module must be
importable by the Python workers: ``run.py``'s Spark cases (``cases/spark.py``)
put ``benchmarks/`` on their ``PYTHONPATH`` before they start the session.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import pairwise
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

#: The read schema of ``format("jetstream")`` (cases/spark.py checks that it is the same).
DDL = (
    "stream string, subject string, seq long, timestamp timestamp_ltz, "
    "headers map<string,string>, data binary"
)
SCHEMA = pa.schema(
    [
        pa.field("stream", pa.string()),
        pa.field("subject", pa.string()),
        pa.field("seq", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("headers", pa.map_(pa.string(), pa.string())),
        pa.field("data", pa.binary()),
    ]
)
STREAM = "BSPARK"
SUBJECT = "bspark.data"
PAYLOAD = b"x" * 128
BATCH_ROWS = 10_000


class NoopDataSource(DataSource):
    """``format("bench_noop")``: ``option("rows", n)``, ``option("numPartitions", p)``."""

    @classmethod
    def name(cls) -> str:
        return "bench_noop"

    def schema(self) -> str:
        return DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        rows = int(self.options.get("rows", "0"))
        level = self.options.get("level", "python")
        return NoopReader(rows, int(self.options.get("numPartitions", "2")), level)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        expect = self.options.get("expect")
        level = self.options.get("level", "python")
        if level == "rows":
            return NoopRowWriter(None if expect is None else int(expect))
        return NoopWriter(None if expect is None else int(expect), level)


class NoopReader(DataSourceReader):
    def __init__(self, rows: int, partitions: int, level: str) -> None:
        self.rows = rows
        self.partitions_wanted = partitions
        self.level = level

    def partitions(self) -> Sequence[InputPartition]:
        # Contiguous ranges of "sequences" from 1, as format("jetstream") cuts them.
        n = self.partitions_wanted
        bounds = [1 + self.rows * i // n for i in range(n + 1)]
        return [InputPartition((lo, hi)) for lo, hi in pairwise(bounds)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        lo, hi = partition.value
        if self.level == "ceiling":
            batches = _batches(lo, hi)  # built before the first one leaves
            yield from batches
        elif self.level == "rows":
            yield from _rows(lo, hi)
        else:
            yield from _python_batches(lo, hi)


def _rows(lo: int, hi: int) -> Iterator[tuple[Any, ...]]:
    """A tuple per row (the row-at-a-time API), values as ``_python_batches`` makes them."""
    stamp0 = datetime(2026, 1, 1, tzinfo=UTC)
    for seq in range(lo, hi):
        yield (STREAM, SUBJECT, seq, stamp0, None, PAYLOAD)


def _python_batches(lo: int, hi: int) -> Iterator[pa.RecordBatch]:
    """Each row's values made in Python, then an Arrow batch built from them (no I/O)."""
    stamp0 = 1_767_225_600_000_000  # 2026-01-01 in microseconds
    for start in range(lo, hi, BATCH_ROWS):
        subjects: list[str] = []
        seqs: list[int] = []
        stamps: list[int] = []
        headers: list[dict[str, str] | None] = []
        data: list[bytes] = []
        for seq in range(start, min(hi, start + BATCH_ROWS)):
            subjects.append(SUBJECT)
            seqs.append(seq)
            stamps.append(stamp0 + seq)
            headers.append(None)
            data.append(PAYLOAD)
        n = len(seqs)
        yield pa.RecordBatch.from_arrays(
            [
                pa.repeat(STREAM, n).cast(pa.string()),
                pa.array(subjects, pa.string()),
                pa.array(seqs, pa.int64()),
                pa.array(stamps, pa.timestamp("us", tz="UTC")),
                pa.array(headers, pa.map_(pa.string(), pa.string())),
                pa.array(data, pa.binary()),
            ],
            schema=SCHEMA,
        )


def _batches(lo: int, hi: int) -> list[pa.RecordBatch]:
    """Record batches of ``[lo, hi)`` as ``format("jetstream")`` yields them (no headers)."""
    n = BATCH_ROWS
    stamp = datetime(2026, 1, 1, tzinfo=UTC)
    full = [
        pa.repeat(STREAM, n).cast(pa.string()),
        pa.array([SUBJECT] * n, pa.string()),
        None,
        pa.array([stamp] * n, pa.timestamp("us", tz="UTC")),
        pa.nulls(n, pa.map_(pa.string(), pa.string())),
        pa.array([PAYLOAD] * n, pa.binary()),
    ]
    out: list[pa.RecordBatch] = []
    for start in range(lo, hi, n):
        size = min(n, hi - start)
        columns = [c.slice(0, size) if c is not None else None for c in full]
        columns[2] = pa.array(range(start, start + size), pa.int64())
        out.append(pa.RecordBatch.from_arrays(columns, schema=SCHEMA))
    return out


@dataclass
class Counted(WriterCommitMessage):
    rows: int = 0


class NoopWriter(DataSourceArrowWriter):
    """Takes the rows of every Arrow batch (as Python values, or just counted); checks the total."""

    def __init__(self, expect: int | None, level: str) -> None:
        self.expect = expect
        self.level = level

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Counted:
        rows = 0
        for batch in iterator:
            if self.level != "ceiling":
                for column in batch.columns:
                    for _value in column.to_pylist():
                        pass
            rows += batch.num_rows
        return Counted(rows)

    def commit(self, messages: list[Any]) -> None:
        rows = sum(m.rows for m in messages if m is not None)
        if self.expect is not None and rows != self.expect:
            raise RuntimeError(f"bench_noop wrote {rows} rows, expected {self.expect}")


class NoopRowWriter(DataSourceWriter):
    """Takes Spark's ``Row`` objects one by one (the row-at-a-time writer API); checks the total."""

    def __init__(self, expect: int | None) -> None:
        self.expect = expect

    def write(self, iterator: Iterator[Any]) -> Counted:
        rows = 0
        for _row in iterator:
            rows += 1
        return Counted(rows)

    def commit(self, messages: list[Any]) -> None:
        rows = sum(m.rows for m in messages if m is not None)
        if self.expect is not None and rows != self.expect:
            raise RuntimeError(f"bench_noop wrote {rows} rows, expected {self.expect}")
