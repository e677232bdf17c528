"""The ``jetstream`` data source: batch and streaming reads, batch and streaming writes."""

from __future__ import annotations

import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, Final, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.types import StructType

from aiojetstream import InvalidOptionError, JetStreamContext

from ._filters import Narrowing, push
from ._offsets import Position, allot, decode, encode
from ._options import (
    SinkOptions,
    SourceOptions,
    lower_keys,
    parse_sink_options,
    parse_source_options,
    warn_loss,
)
from ._read import (
    DDL,
    Bounds,
    DataLossError,
    check_loss,
    check_offsets_found,
    plan_range,
    read_range,
    resolve_streams,
    sequence_at,
    split_ranges,
    stream_bounds,
)
from ._runtime import run_shared
from ._surface import surfaced, surfaced_iter
from ._telemetry import counted
from ._write import StreamWriter, Writer, check_sink_schema

try:  # Spark >= 4.2: admission control and Trigger.AvailableNow
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxBytes,
        ReadMaxRows,
        ReadMinRows,
        SupportsTriggerAvailableNow,
    )

    ADMISSION_CONTROL: Final = True
except ImportError:  # pragma: no cover - Spark 4.0 / 4.1
    ADMISSION_CONTROL = False  # type: ignore[misc]

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in on Spark < 4.2, where the engine wraps the source itself."""

    ReadLimit = object  # type: ignore[misc,assignment]

__all__ = ["ADMISSION_CONTROL", "JetStreamDataSource", "SequenceRange"]

T = TypeVar("T")


class SequenceRange(InputPartition):
    """A partition: the sequences ``[start, end)`` of one stream.

    ``created``: when that stream was created, as planned (``Bounds.created``):
    a stream deleted and created again before the task reads is not read as
    the range planned on the old one.
    """

    def __init__(
        self, start: int, end: int, stream: str | None = None, created: str | None = None
    ) -> None:
        super().__init__((stream, start, end))
        self.start = start
        self.end = end
        self.stream = stream
        self.created = created

    def __repr__(self) -> str:
        return f"SequenceRange({self.start}, {self.end}, {self.stream!r})"


def _partitions(
    opts: SourceOptions, ranges: list[tuple[str, int, int]], created: Mapping[str, str]
) -> list[SequenceRange]:
    return [
        SequenceRange(lo, hi, name, created.get(name) or None)
        for name, lo, hi in split_ranges(ranges, opts.num_partitions, opts.min_partitions)
    ]


#: The read schema as Spark prints it (``StructType.simpleString()``).
READ_SCHEMA: Final = (
    "struct<stream:string,subject:string,seq:bigint,timestamp:timestamp,"
    "headers:map<string,string>,data:binary>"
)


def check_read_schema(schema: StructType, expected: str, fmt: str) -> None:
    """Refuse a schema given with ``.schema(...)`` that is not the format's own."""
    if schema.simpleString() != expected:
        raise InvalidOptionError(
            f"format({fmt!r}) has a fixed schema {expected}; got {schema.simpleString()} "
            "(leave out .schema(...))"
        )


class JetStreamDataSource(DataSource):
    """``format("jetstream")``: a JetStream stream as a Spark table (see docs/spark.md)."""

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return "jetstream"

    @surfaced
    def schema(self) -> str:
        """The fixed read schema.

        Spark asks for it at ``load()`` (and for writes too): when a ``stream``
        option is present the read options are validated here, so a malformed
        one fails at ``load()``; otherwise the reader checks them at planning.
        """
        if "stream" in lower_keys(self.options):
            parse_source_options(self.options, streaming=False)
        return DDL

    @surfaced
    def reader(self, schema: StructType) -> DataSourceReader:
        """A batch reader (one that takes pushed filters when Spark pushes them)."""
        check_read_schema(schema, READ_SCHEMA, "jetstream")
        opts = parse_source_options(self.options, streaming=False)
        return FilteringBatchReader(opts) if _pushing_filters() else BatchReader(opts)

    @surfaced
    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """A streaming reader (offsets ``{"stream": name, "seq": next}``)."""
        check_read_schema(schema, READ_SCHEMA, "jetstream")
        return StreamReader(parse_source_options(self.options, streaming=True))

    @surfaced
    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """A batch writer (``mode("append")``)."""
        if overwrite:
            raise InvalidOptionError(
                "format('jetstream') supports mode('append') only: a stream cannot be overwritten"
            )
        opts = parse_sink_options(self.options)
        columns = check_sink_schema(schema, opts)
        _check_sink_server(opts)
        return Writer(opts, columns)

    @surfaced
    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """A streaming writer (``outputMode("append")`` or ``"update"``)."""
        if overwrite:
            raise InvalidOptionError(
                "writeStream.format('jetstream') cannot take outputMode('complete'): "
                "use append or update"
            )
        opts = parse_sink_options(self.options)
        columns = check_sink_schema(schema, opts)
        _check_sink_server(opts)
        return StreamWriter(opts, columns)


def _check_sink_server(opts: SinkOptions) -> None:
    """Before the job: the server is reachable with the options (a connect, shared).

    Nothing more. Whether a stream captures a subject is the publish's to
    tell (``NoRespondersError``, which says so, fails the task): the account's
    subject mappings and service imports (a stream of another account, an
    account without JetStream of its own) reach streams that neither the
    account's stream subjects nor its ``account_info`` show, and a check of
    those refused writes that work (docs/counters.md decided the same).
    """

    async def connected(js: JetStreamContext) -> None:
        return None

    run_shared(opts.connect, connected, timeout=opts.retry_timeout, what="connecting")


def _pushing_filters() -> bool:
    """Whether ``reader()`` is called by Spark's filter push-down step (Spark >= 4.1).

    Spark refuses a reader that defines ``pushFilters`` unless
    ``spark.sql.python.filterPushdown.enabled`` is true (so that filters are not
    ignored silently), and does not tell the source which it is. It calls
    ``reader()`` from its push-down worker module only when the setting is on,
    so the reader with ``pushFilters`` is returned there and the plain one
    everywhere else: reads work with the setting off (Spark filters every row)
    and are narrowed with it on.
    """
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__", "").endswith(".data_source_pushdown_filters"):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


class BatchReader(DataSourceReader):
    """Plans contiguous sequence ranges of each stream and reads each with an ephemeral consumer."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.narrowing = Narrowing()

    @surfaced
    def partitions(self) -> Sequence[InputPartition]:
        """Resolve the offsets against the streams now and cut the ranges."""
        opts, narrow = self.opts, self.narrowing
        if narrow.empty:
            return [SequenceRange(1, 1, opts.stream)]

        created: dict[str, str] = {}

        async def plan(js: JetStreamContext) -> list[tuple[str, int, int]]:
            ranges = []
            found = await resolve_streams(js, opts)
            check_offsets_found(opts, found)
            for name in found:
                if narrow.streams is not None and name not in narrow.streams:
                    continue
                start, end, bounds = await plan_range(js, opts, streaming=False, stream=name)
                created[name] = bounds.created
                start = check_loss(opts, start, bounds.first, "startingOffsets", name)
                if narrow.lo is not None:
                    start = max(start, narrow.lo)
                if narrow.hi is not None:
                    end = min(end, narrow.hi)
                if narrow.after is not None and start < end:
                    start = max(start, await sequence_at(js, opts, narrow.after, name))
                ranges.append((name, start, end))
            return ranges

        ranges = run_shared(
            opts.connect, plan, timeout=opts.retry_timeout, what="planning the read"
        )
        return _partitions(opts, ranges, created) or [SequenceRange(1, 1, opts.stream)]

    @surfaced_iter
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one range (on an executor)."""
        assert isinstance(partition, SequenceRange)
        batches = read_range(
            self.opts, partition.start, partition.end, partition.stream, partition.created
        )
        return counted(batches, self.opts.connect.telemetry, "read", "jetstream", partition.stream)


class FilteringBatchReader(BatchReader):
    """:class:`BatchReader` taking the filters that narrow the read (see ``_filters``)."""

    def pushFilters(self, filters: list[Any]) -> Iterator[Any]:
        """Take the filters that narrow the read; yield the ones Spark must still evaluate.

        Only with the option ``pushDownPredicate=true``; else every filter is
        Spark's and the read stays whole. Spark 4.1 to 4.3 keep the read
        planned for the filters last pushed on the relation and use it for
        every scan of it: a union or self-join of one DataFrame, a temporary
        view read twice in one query, or the DataFrame used again with filters
        Spark cannot push, read the narrowed range for each (rows missing or
        repeated, without an error). A read that does not narrow is the same
        for every scan.
        """
        if not self.opts.push_down_predicate:
            yield from filters
            return
        narrowing, left = push(filters, self.opts.subjects)
        self.narrowing = narrowing
        if narrowing.subjects is not None:
            self.opts = replace(self.opts, subjects=narrowing.subjects)
        yield from left


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of sequence ranges of one or more streams; the offsets are the whole state.

    Nothing depends on ``commit()`` or ``stop()`` being called: reads are
    ``AckNone`` and each partition deletes its own consumer. The per-trigger
    limits are enforced here on every Spark version: Spark >= 4.2 passes the
    batch's start to :meth:`latestOffset`; before, the reader keeps the last
    end it planned (the initial offset first, which Spark 4.0/4.1 ask for only
    after the first batch's end, and at a restart the offset Spark hands over
    through ``partitions(latest, latest)``). Each end offset holds its batch's
    start (``"from"``), so a replayed batch reads the same range.
    """

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._available_now: dict[str, int] | None = None
        #: Where a new query starts, once asked (``initialOffset``, or the first
        #: ``latestOffset`` of Spark 4.0/4.1, which comes before it).
        self._initial: dict[str, Position] | None = None
        #: The end of the last batch planned (the start of the next on Spark < 4.2).
        self._cursor: dict[str, Position] | None = None
        #: When the last batch was planned (monotonic; ``maxTriggerDelay``).
        self._last_batch: float | None = None
        #: Streams the offsets hold that were found deleted (reported once each).
        self._gone: set[str] = set()
        #: The last offset found behind its stream, or of an earlier stream of
        #: that name, reported per stream (each trigger finds it again until a
        #: batch moves on).
        self._behind_at: dict[str, int] = {}
        self._recreated_at: dict[str, tuple[str | None, str | None]] = {}

    def _run(self, work: Callable[[JetStreamContext], Awaitable[T]], what: str) -> T:
        # The driver-side process's shared connection; a leader election is retried.
        return run_shared(self.opts.connect, work, timeout=self.opts.retry_timeout, what=what)

    def _all_bounds(self, names: Sequence[str] = ()) -> dict[str, Bounds]:
        """The bounds of ``names`` and of every stream the read selects now.

        ``names``: the streams the query's offsets hold. One of them that is
        gone is left out (the caller reports it as data loss); a stream named
        in the options that the offsets do not hold must exist.
        """
        opts = self.opts
        held = set(names) | set(self._cursor or ())

        async def bounds(js: JetStreamContext) -> dict[str, Bounds]:
            found = {}
            selected = await resolve_streams(js, opts)
            for name in dict.fromkeys([*selected, *names]):
                try:
                    found[name] = await stream_bounds(js, opts, name)
                except InvalidOptionError:
                    if name in selected and opts.stream_pattern is None and name not in held:
                        # Never read by this query (a deleted one keeps its offset).
                        raise
            for name in found:
                self._gone.discard(name)
            return found

        return self._run(bounds, f"reading the info of {opts.selection()}")

    def _initial_positions(self) -> dict[str, Position]:
        """Where a new query starts (asked once: ``latest`` moves with every call)."""
        if self._initial is None:
            opts = self.opts

            async def initial(js: JetStreamContext) -> dict[str, Position]:
                positions = {}
                found = await resolve_streams(js, opts)
                check_offsets_found(opts, found)
                for name in found:
                    start, _end, bounds = await plan_range(js, opts, streaming=True, stream=name)
                    # "from": a first batch with nothing new ends at this very offset, and
                    # its replay (stopped before its commit) starts at a new initial
                    # offset, past it when "latest": the batch's own start says so.
                    positions[name] = Position(start, bounds.created, start)
                return positions

            self._initial = self._run(initial, f"planning the start of {opts.selection()}")
        return self._initial

    @surfaced
    def initialOffset(self) -> dict[str, Any]:
        """Where a new query starts (``startingOffsets``, default ``latest``)."""
        positions = self._initial_positions()
        if self._cursor is None:
            self._cursor = positions
        return encode(self.opts, positions)

    @surfaced
    def getDefaultReadLimit(self) -> ReadLimit:
        """The per-trigger option as Spark's read limit (Spark >= 4.2).

        ``maxOffsetsPerTrigger`` / ``maxRecordsPerTrigger`` as ``ReadMaxRows``,
        else ``minOffsetsPerTrigger`` as ``ReadMinRows``, else
        ``maxBytesPerTrigger`` as ``ReadMaxBytes``. Every option given is
        enforced by :meth:`latestOffset` whichever of them Spark passes back.
        """
        opts = self.opts
        if opts.max_records_per_trigger is not None:
            return ReadMaxRows(opts.max_records_per_trigger)
        if opts.min_records_per_trigger is not None:
            return ReadMinRows(opts.min_records_per_trigger)
        if opts.max_bytes_per_trigger is not None:
            return ReadMaxBytes(opts.max_bytes_per_trigger)
        return ReadAllAvailable()

    @surfaced
    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the end of an ``availableNow`` run: what the streams hold now."""
        self._available_now = {name: b.next for name, b in self._all_bounds().items()}

    @surfaced
    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, Any]:
        """The end of the next micro-batch: each stream's last sequence + 1, within the limits.

        Returns ``start`` itself when there is nothing to read yet, so Spark
        plans no batch.
        """
        opts = self.opts
        if start is not None:
            begin = decode(opts, start)
        else:  # Spark 4.0 / 4.1: the last end planned, or where a new query starts
            begin = self._cursor if self._cursor is not None else self._initial_positions()
        bounds = self._all_bounds(list(begin))
        los: dict[str, int] = {}  # where each stream's next batch starts
        his: dict[str, int] = {}  # the most it may read to
        for name, b in bounds.items():
            position = begin.get(name)
            lo = position.seq if position is not None else 1  # a new stream: from its start
            if position is not None and self._recreated(name, position, b):
                lo = b.first  # failOnDataLoss=false: the new stream from its start
            elif lo > b.next:
                self._behind(name, lo, b.next)
            hi = b.next
            if self._available_now is not None:
                if name not in self._available_now:
                    continue  # created after the availableNow run started
                hi = min(hi, self._available_now[name])
            los[name], his[name] = lo, max(lo, hi)
        for name in begin:
            if name not in bounds:
                self._deleted(name)
        waiting = {n: (max(lo, bounds[n].first), his[n]) for n, lo in los.items()}
        ends = his
        if not (ADMISSION_CONTROL and isinstance(limit, ReadAllAvailable)):
            if self._wait_for_more(waiting):
                # No rows yet: each stream ends where it starts (a stream created
                # again starts at its new first sequence, not at the old offset).
                ends = {n: los[n] for n in begin if n in los}
            else:
                ends = allot(
                    waiting,
                    max_rows=_max_rows(opts, limit),
                    max_bytes=opts.max_bytes_per_trigger,
                    sizes={n: b.size for n, b in bounds.items()},
                )
        positions = {
            n: Position(max(los[n], end), bounds[n].created, los[n]) for n, end in ends.items()
        }
        if opts.stream_pattern is None:
            # A listed stream deleted keeps its offset: reported again after a restart
            # (data loss, as while running), and one created again under that name is
            # told apart by its creation time. (A pattern's streams come and go.)
            for name, position in begin.items():
                if name not in bounds:
                    positions[name] = Position(position.seq, position.created)
        if positions.keys() == begin.keys() and all(
            p.same_place(begin[n]) for n, p in positions.items()
        ):
            positions = begin  # nothing new: the very same offset
        else:
            self._last_batch = time.monotonic()
        self._cursor = positions
        return encode(opts, positions)

    def _wait_for_more(self, ranges: dict[str, tuple[int, int]]) -> bool:
        """``minOffsetsPerTrigger``: too few waiting and ``maxTriggerDelay`` not yet passed.

        As with Kafka's source, the first trigger of a (re)started query does not wait.
        """
        opts = self.opts
        if (
            opts.min_records_per_trigger is None
            or self._available_now is not None
            or self._last_batch is None
        ):
            return False
        if sum(hi - lo for lo, hi in ranges.values()) >= opts.min_records_per_trigger:
            return False
        return time.monotonic() - self._last_batch < opts.max_trigger_delay

    def _recreated(self, name: str, position: Position, bounds: Bounds) -> bool:
        """Whether ``position`` is of an earlier stream of the same name (data loss allowed).

        Raises :class:`DataLossError` for such an offset with ``failOnDataLoss=true``.

        Without this, a query restarted after the stream was deleted and created
        again read on from the old offset once the new stream had grown past it,
        and never read the new stream's first messages.
        """
        if position.created is None or position.created == bounds.created:
            return False
        text = (
            f"stream {name!r} was deleted and created again: the offset is of the "
            f"stream created at {position.created}, the stream now was created at "
            f"{bounds.created}"
        )
        if self.opts.fail_on_data_loss:
            raise DataLossError(
                text + ". Use a new checkpoint location (or failOnDataLoss=false to read the "
                "new stream from its first sequence)."
            )
        seen = (position.created, bounds.created)
        if self._recreated_at.get(name) != seen:
            self._recreated_at[name] = seen
            warn_loss(
                text + "; reading it from its first sequence (failOnDataLoss=false).",
                stacklevel=3,
            )
        return True

    def _deleted(self, name: str) -> None:
        """A stream the offsets hold is gone (reported once while it stays gone)."""
        opts = self.opts
        if name in self._gone:
            return
        where = "" if opts.stream is not None else f" ({opts.selection()})"
        text = f"stream {name!r}{where} was deleted"
        if opts.fail_on_data_loss:
            raise DataLossError(
                text + ": its unread messages are lost. Set failOnDataLoss=false to go on "
                "without it (with a warning)."
            )
        self._gone.add(name)
        again = " (a stream of that name created again is read from its start)"
        warn_loss(
            text + f"; going on without it{'' if opts.stream_pattern else again} "
            "(failOnDataLoss=false).",
            stacklevel=3,
        )

    def _behind(self, name: str, begin: int, stream_next: int) -> None:
        """The stream ends before the offset: deleted and created again, as Kafka reports it."""
        text = (
            f"stream {name!r} ends at sequence {stream_next - 1} but the offset is "
            f"{begin}: was the stream deleted and created again? Use a new checkpoint location"
        )
        if self.opts.fail_on_data_loss:
            raise DataLossError(text + " (or failOnDataLoss=false to wait for the sequence).")
        if self._behind_at.get(name) != begin:  # not again at every trigger while it waits
            self._behind_at[name] = begin
            warn_loss(text + "; waiting for that sequence (failOnDataLoss=false).", stacklevel=2)

    @surfaced
    def reportLatestOffset(self) -> dict[str, Any]:
        """Each stream's last sequence + 1 (the query progress's ``latestOffset``: lag)."""
        bounds = self._all_bounds()
        return encode(self.opts, {n: Position(b.next, b.created) for n, b in bounds.items()})

    @surfaced
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """Ranges of ``[start, end)`` per stream; checks each start is still in its stream.

        Each stream's range starts where ``end`` says its batch starts
        (``"from"``), else at ``start``'s position. Spark calls
        ``partitions(latest, latest)`` at a restart to hand over the offset it
        last planned: it becomes the start of the next batch.
        """
        opts = self.opts
        begin, stop = decode(opts, start), decode(opts, end)
        self._cursor = stop
        wanted: dict[str, int] = {}
        for name, p in stop.items():
            if begin.get(name) == p:
                continue  # the restart hand-over, partitions(latest, latest): nothing to read
            if p.start is not None:
                lo = p.start
            elif name in begin:  # an end offset written before "from" existed
                same = begin[name].created in (None, p.created)
                lo = begin[name].seq if same else 0
            else:
                lo = 1  # a stream new in this batch: from its start
            if lo != p.seq:
                wanted[name] = lo
        if not wanted:
            return []
        bounds = self._all_bounds(list(wanted))
        ranges: list[tuple[str, int, int]] = []
        for name, lo in wanted.items():
            b = bounds.get(name)
            if b is None:
                continue  # deleted since the batch was planned: reported by latestOffset
            if self._recreated(name, stop[name], b):
                continue  # created again since the batch was planned: the next batch
            if lo == 0:  # created again before this batch (an old end offset)
                self._recreated(name, begin[name], b)  # raises, or warns (failOnDataLoss)
                lo = b.first
            hi = stop[name].seq
            if hi < lo:
                self._behind(name, lo, hi)  # offsets went backwards (an old end offset)
                continue
            if name not in begin:
                lo = max(lo, b.first)  # a new stream: from what it holds
            ranges.append((name, check_loss(opts, lo, b.first, "offset", name), hi))
        return _partitions(opts, ranges, {name: b.created for name, b in bounds.items()})

    @surfaced_iter
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one range (on an executor)."""
        assert isinstance(partition, SequenceRange)
        batches = read_range(
            self.opts, partition.start, partition.end, partition.stream, partition.created
        )
        return counted(batches, self.opts.connect.telemetry, "read", "jetstream", partition.stream)

    @surfaced
    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: reads do not acknowledge, the offsets are in the checkpoint."""

    def stop(self) -> None:
        """Nothing to release: the connection is the process's (closed when it exits)."""


def _max_rows(opts: SourceOptions, limit: ReadLimit | None) -> int | None:
    """The row cap: what Spark passed (>= 4.2), else ``maxOffsetsPerTrigger``."""
    if ADMISSION_CONTROL and isinstance(limit, ReadMaxRows):
        return int(limit.max_rows)
    return opts.max_records_per_trigger
