"""The ``jetstream`` data source: batch and streaming reads, batch and streaming writes."""

from __future__ import annotations

import warnings
from collections.abc import Awaitable, Callable, Iterator, Sequence
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

from aiojetstream import (
    ConnectionClosedError,
    DisconnectedError,
    InvalidOptionError,
    JetStreamContext,
    JetStreamTimeoutError,
    StreamNotFoundError,
)

from ._options import (
    JetStreamSparkWarning,
    SinkOptions,
    SourceOptions,
    lower_keys,
    parse_sink_options,
    parse_source_options,
)
from ._read import (
    DDL,
    Bounds,
    DataLossError,
    check_loss,
    plan_range,
    read_range,
    split,
    stream_bounds,
)
from ._runtime import Session, run_once
from ._write import StreamWriter, Writer, check_sink_schema

try:  # Spark >= 4.2: admission control and Trigger.AvailableNow
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
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
    """A partition: the stream sequences ``[start, end)``."""

    def __init__(self, start: int, end: int) -> None:
        super().__init__((start, end))
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"SequenceRange({self.start}, {self.end})"


def _partitions(opts: SourceOptions, start: int, end: int) -> list[SequenceRange]:
    return [SequenceRange(lo, hi) for lo, hi in split(start, end, opts.num_partitions)]


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

    def schema(self) -> str:
        """The fixed read schema.

        Spark asks for it at ``load()`` (and for writes too): when a ``stream``
        option is present the read options are validated here, so a malformed
        one fails at ``load()``; otherwise the reader checks them at planning.
        """
        if "stream" in lower_keys(self.options):
            parse_source_options(self.options, streaming=False)
        return DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        """A batch reader."""
        check_read_schema(schema, READ_SCHEMA, "jetstream")
        return BatchReader(parse_source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """A streaming reader (offsets ``{"stream": name, "seq": next}``)."""
        check_read_schema(schema, READ_SCHEMA, "jetstream")
        return StreamReader(parse_source_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """A batch writer (``mode("append")``)."""
        if overwrite:
            raise InvalidOptionError(
                "format('jetstream') supports mode('append') only: a stream cannot be overwritten"
            )
        opts = parse_sink_options(self.options)
        columns = check_sink_schema(schema, opts)
        _check_sink_subject(opts)
        return Writer(opts, columns)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """A streaming writer (``outputMode("append")`` or ``"update"``)."""
        if overwrite:
            raise InvalidOptionError(
                "writeStream.format('jetstream') cannot take outputMode('complete'): "
                "use append or update"
            )
        opts = parse_sink_options(self.options)
        columns = check_sink_schema(schema, opts)
        _check_sink_subject(opts)
        return StreamWriter(opts, columns)


def _check_sink_subject(opts: SinkOptions) -> None:
    """Before the job: the server is reachable and a stream captures ``option('subject')``."""

    async def check(js: JetStreamContext) -> None:
        if opts.subject is None:
            await js.account_info()
            return
        try:
            await js.stream_name_by_subject(opts.subject)
        except StreamNotFoundError as exc:
            raise InvalidOptionError(
                f"option 'subject': no stream at {opts.connect.describe()} captures "
                f"{opts.subject!r}"
            ) from exc

    run_once(opts.connect, check)


class BatchReader(DataSourceReader):
    """Plans contiguous sequence ranges and reads each with an ephemeral consumer."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        """Resolve the offsets against the stream now and cut the range."""
        opts = self.opts

        async def plan(js: JetStreamContext) -> list[SequenceRange]:
            start, end, bounds = await plan_range(js, opts, streaming=False)
            start = check_loss(opts, start, bounds.first, "startingOffsets")
            return _partitions(opts, start, end) or [SequenceRange(start, start)]

        return run_once(opts.connect, plan)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one range (on an executor)."""
        assert isinstance(partition, SequenceRange)
        return read_range(self.opts, partition.start, partition.end)


def _offset(opts: SourceOptions, seq: int, created: str) -> dict[str, Any]:
    # "created" tells a stream deleted and created again from the one the offset is of
    # (offsets checkpointed before it was added have none and are taken as they are).
    return {"stream": opts.stream, "seq": seq, "created": created}


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of sequence ranges; the checkpointed offsets are the whole state.

    Nothing depends on ``commit()`` or ``stop()`` being called: reads are
    ``AckNone`` and each partition deletes its own consumer.
    """

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._available_now: int | None = None
        # One connection for the offset calls of the query's driver-side process
        # (Spark asks for the latest offset many times a second when idle).
        self._session: Session | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_session"] = None  # connections do not travel
        return state

    def _run(self, work: Callable[[JetStreamContext], Awaitable[T]]) -> T:
        session = self._session
        if session is None:
            session = self._session = Session(self.opts.connect)
        try:
            return session.run(work(session.js))
        except (ConnectionClosedError, DisconnectedError, JetStreamTimeoutError):
            self._session = None  # reconnect on the next call
            session.close()
            raise

    def _seq(self, offset: dict[str, Any] | None) -> int | None:
        if offset is None:
            return None
        if offset.get("stream") != self.opts.stream:
            raise InvalidOptionError(
                f"option 'stream' is {self.opts.stream!r} but the checkpoint holds offsets of "
                f"stream {offset.get('stream')!r}: use a new checkpoint location"
            )
        return int(offset["seq"])

    def _bounds(self) -> Bounds:
        opts = self.opts

        async def bounds(js: JetStreamContext) -> Bounds:
            return await stream_bounds(js, opts)

        return self._run(bounds)

    def initialOffset(self) -> dict[str, Any]:
        """Where a new query starts (``startingOffsets``, default ``latest``)."""
        opts = self.opts

        async def initial(js: JetStreamContext) -> tuple[int, Bounds]:
            start, _end, bounds = await plan_range(js, opts, streaming=True)
            return start, bounds

        start, bounds = self._run(initial)
        return _offset(opts, start, bounds.created)

    def getDefaultReadLimit(self) -> ReadLimit:
        """``maxRecordsPerTrigger`` as a read limit (Spark >= 4.2)."""
        if self.opts.max_records_per_trigger is not None:
            return ReadMaxRows(self.opts.max_records_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the end of an ``availableNow`` run: what the stream holds now."""
        self._available_now = self._bounds().next

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, Any]:
        """The end of the next micro-batch: the stream's last sequence + 1, capped by limits."""
        bounds = self._bounds()
        stream_next = latest = bounds.next
        if self._available_now is not None:
            latest = min(latest, self._available_now)
        begin = self._seq(start)
        if begin is not None and self._recreated(start, bounds):
            begin = bounds.first  # failOnDataLoss=false: the new stream from its start
        elif begin is not None and begin > stream_next:
            self._behind(begin, stream_next)
        if begin is not None:
            if ADMISSION_CONTROL and isinstance(limit, ReadMaxRows):
                # Counted from what the stream still holds: a lost gap costs no batches.
                latest = min(latest, max(begin, bounds.first) + limit.max_rows)
            latest = max(latest, begin)
        return _offset(self.opts, latest, bounds.created)

    def _recreated(self, offset: dict[str, Any] | None, bounds: Bounds) -> bool:
        """Whether ``offset`` is of an earlier stream of the same name (data loss allowed).

        Raises :class:`DataLossError` for such an offset with ``failOnDataLoss=true``.

        Without this, a query restarted after the stream was deleted and created
        again read on from the old offset once the new stream had grown past it,
        and never read the new stream's first messages.
        """
        created = None if offset is None else offset.get("created")
        if created is None or created == bounds.created:
            return False
        text = (
            f"stream {self.opts.stream!r} was deleted and created again: the offset is of the "
            f"stream created at {created}, the stream now was created at {bounds.created}"
        )
        if self.opts.fail_on_data_loss:
            raise DataLossError(
                text + ". Use a new checkpoint location (or failOnDataLoss=false to read the "
                "new stream from its first sequence)."
            )
        warnings.warn(
            text + "; reading it from its first sequence (failOnDataLoss=false).",
            JetStreamSparkWarning,
            stacklevel=3,
        )
        return True

    def _behind(self, begin: int, stream_next: int) -> None:
        """The stream ends before the offset: deleted and created again, as Kafka reports it."""
        text = (
            f"stream {self.opts.stream!r} ends at sequence {stream_next - 1} but the offset is "
            f"{begin}: was the stream deleted and created again? Use a new checkpoint location"
        )
        if self.opts.fail_on_data_loss:
            raise DataLossError(text + " (or failOnDataLoss=false to wait for the sequence).")
        warnings.warn(
            text + "; waiting for that sequence (failOnDataLoss=false).",
            JetStreamSparkWarning,
            stacklevel=2,
        )

    def reportLatestOffset(self) -> dict[str, Any]:
        """The stream's last sequence + 1 (for the query's progress)."""
        bounds = self._bounds()
        return _offset(self.opts, bounds.next, bounds.created)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """Ranges of ``[start, end)``; checks the start is still in the stream."""
        begin, stop = self._seq(start), self._seq(end)
        assert begin is not None
        assert stop is not None
        bounds = self._bounds()
        if self._recreated(start, bounds):
            begin = bounds.first
            if self._recreated(end, bounds):
                return []  # recreated again since the end was chosen: the next batch
        if stop < begin:
            # Offsets went backwards (Spark < 4.2 asks latestOffset() without a start).
            self._behind(begin, stop)
            return []
        if stop == begin:
            return []
        begin = check_loss(self.opts, begin, bounds.first, "offset")
        return _partitions(self.opts, begin, stop)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one range (on an executor)."""
        assert isinstance(partition, SequenceRange)
        return read_range(self.opts, partition.start, partition.end)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: reads do not acknowledge, the offsets are in the checkpoint."""

    def stop(self) -> None:
        """Close the offset calls' connection (Spark may never call this; nothing depends on it)."""
        session, self._session = self._session, None
        if session is not None:
            session.close()
