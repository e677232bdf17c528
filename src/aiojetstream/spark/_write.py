"""Writing DataFrames into JetStream: every row is one acknowledged publish.

Rows arrive as Arrow record batches (``DataSourceArrowWriter`` /
``DataSourceStreamArrowWriter``, Spark >= 4.0 / 4.1) or, on older versions of
the streaming writer, as ``Row`` objects; both become plain column lists and go
out through ``publish_many_async``: the publish window, each batch checked as a
whole before any of it is sent, no future per row, and the next batch sent
while the acknowledgements of the previous ones arrive. The task returns only
when every acknowledgement has arrived; the first failed one fails the task
(Spark then retries it). ``dedupe=auto`` gives each row a ``Nats-Msg-Id``
derived from the write (or streaming query and batch) and the message the row
was read from (its ``stream`` and ``seq``), or else the partition and the row's
position, so a retried task or a replayed micro-batch stores nothing twice
within the stream's ``duplicate_window``.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import (
    BinaryType,
    ByteType,
    DataType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
)

from aiojetstream import InvalidOptionError, JetStreamContext, PublishSummary

from ._options import ConnectOptions, JetStreamSparkWarning, SinkOptions, warn_loss
from ._runtime import TRANSIENT, discard, shared_session
from ._surface import surfaced
from ._telemetry import counted

try:
    from pyspark.sql.datasource import DataSourceArrowWriter as BatchWriterBase
except ImportError:  # pragma: no cover - very old 4.0 builds
    BatchWriterBase = DataSourceWriter  # type: ignore[misc,assignment]
try:
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as StreamWriterBase
except ImportError:  # pragma: no cover - Spark 4.0: rows
    StreamWriterBase = DataSourceStreamWriter  # type: ignore[misc,assignment]

__all__ = [
    "BatchWriterBase",
    "IdPrefix",
    "SinkColumns",
    "StreamWriter",
    "WriteResult",
    "Writer",
    "arrow_schema",
    "check_sink_schema",
    "record_batches",
]

logger = logging.getLogger("aiojetstream.spark")

_SINK_COLUMNS: Final = ("data", "subject", "headers", "msg_id", "ttl")
#: A ``jetstream`` read's columns naming each row's message: with ``dedupe=auto``
#: the generated ids are made of them (see :func:`_msg_ids`).
_SOURCE_ID_COLUMNS: Final = ("stream", "seq")
_NUMERIC: Final = (ByteType, ShortType, IntegerType, LongType, FloatType, DoubleType, DecimalType)
#: Rows converted per step when the writer receives Row objects.
_ROW_CHUNK: Final = 10_000


@dataclass(frozen=True, slots=True)
class SinkColumns:
    """Which of the sink's columns the write uses, and their Arrow types."""

    subject: bool
    headers: bool
    msg_id: bool
    ttl: bool
    #: The sink columns the DataFrame has, typed as Spark's Arrow batches type
    #: them: ``Row`` objects are converted with these types (see :func:`record_batches`).
    arrow: pa.Schema


_ARROW_TYPES: Final[dict[type[DataType], pa.DataType]] = {
    BinaryType: pa.binary(),
    StringType: pa.string(),
    ByteType: pa.int8(),
    ShortType: pa.int16(),
    IntegerType: pa.int32(),
    LongType: pa.int64(),
    FloatType: pa.float32(),
    DoubleType: pa.float64(),
}


def _arrow_type(data_type: DataType) -> pa.DataType:
    if isinstance(data_type, DecimalType):
        return pa.decimal128(data_type.precision, data_type.scale)
    if isinstance(data_type, MapType):
        return pa.map_(_arrow_type(data_type.keyType), _arrow_type(data_type.valueType))
    arrow = _ARROW_TYPES.get(type(data_type))
    if arrow is None:  # pragma: no cover - the schema checks refuse other types first
        raise InvalidOptionError(f"unsupported column type {data_type.simpleString()}")
    return arrow


def arrow_schema(schema: StructType, columns: Iterable[str]) -> pa.Schema:
    """The Arrow schema of ``columns`` (those ``schema`` has, in that order).

    Only types the sinks accept (checked before): binary, string, numbers and
    ``map<string,string>``.
    """
    fields = {f.name: f.dataType for f in schema.fields}
    return pa.schema([pa.field(c, _arrow_type(fields[c])) for c in columns if c in fields])


def refuse_repeated(schema: StructType, columns: Iterable[str], fmt: str) -> None:
    """Refuse a DataFrame holding one of the sink's ``columns`` twice (before the job).

    A join leaves two ``headers`` or ``msg_id`` columns, say: the write failed in
    every task with Spark's ``DUPLICATED_FIELD_NAME_IN_ARROW_STRUCT``.

    Raises:
        InvalidOptionError: naming the column.

    """
    wanted = set(columns)
    seen: set[str] = set()
    for column in schema.fields:
        if column.name in wanted:
            if column.name in seen:
                raise InvalidOptionError(
                    f"format({fmt!r}) writes: the DataFrame has column {column.name!r} twice "
                    "(a join?): select or rename one of them first"
                )
            seen.add(column.name)


def check_sink_schema(schema: StructType, opts: SinkOptions) -> SinkColumns:
    """Check the DataFrame's columns for a ``jetstream`` write (on the driver, before the job).

    Raises:
        InvalidOptionError: no ``data`` column, no subject (column or option), or
            a column of the wrong type.

    """
    refuse_repeated(schema, (*_SINK_COLUMNS, *_SOURCE_ID_COLUMNS), "jetstream")
    fields = {f.name: f.dataType for f in schema.fields}
    data = fields.get("data")
    if data is None:
        raise InvalidOptionError(
            "format('jetstream') writes need a 'data' column (binary or string); "
            f"the DataFrame has {sorted(fields)}"
        )
    if not isinstance(data, BinaryType | StringType):
        raise InvalidOptionError(
            f"column 'data' must be binary or string, not {data.simpleString()}"
        )
    subject = fields.get("subject")
    if subject is None and opts.subject is None:
        raise InvalidOptionError(
            "format('jetstream') writes need a subject: "
            "a 'subject' column or option('subject', ...)"
        )
    if subject is not None and not isinstance(subject, StringType):
        raise InvalidOptionError(f"column 'subject' must be a string, not {subject.simpleString()}")
    headers = fields.get("headers")
    if headers is not None and not (
        isinstance(headers, MapType)
        and isinstance(headers.keyType, StringType)
        and isinstance(headers.valueType, StringType)
    ):
        raise InvalidOptionError(
            f"column 'headers' must be map<string,string>, not {headers.simpleString()}"
        )
    msg_id = fields.get("msg_id")
    if msg_id is not None and not isinstance(msg_id, StringType):
        raise InvalidOptionError(f"column 'msg_id' must be a string, not {msg_id.simpleString()}")
    ttl = fields.get("ttl")
    if ttl is not None and not isinstance(ttl, (*_NUMERIC, StringType)):
        raise InvalidOptionError(
            "column 'ttl' must be seconds (a number) or a duration string, "
            f"not {ttl.simpleString()}"
        )
    source_ids = (
        opts.dedupe == "auto"
        and isinstance(fields.get("stream"), StringType)
        and isinstance(fields.get("seq"), ByteType | ShortType | IntegerType | LongType)
    )
    used: tuple[str, ...] = (*_SINK_COLUMNS, *_SOURCE_ID_COLUMNS) if source_ids else _SINK_COLUMNS
    overridden = subject is not None and opts.subject is not None
    if overridden:  # the option is every row's subject (as Kafka's topic option)
        used = tuple(c for c in used if c != "subject")
    extra = sorted(set(fields) - set(used))
    if extra:
        note = "; option('subject') overrides the 'subject' column" if overridden else ""
        warnings.warn(
            f"aiojetstream.spark: columns {extra} are not written (the sink writes "
            f"{', '.join(_SINK_COLUMNS)}{note})",
            JetStreamSparkWarning,
            stacklevel=2,
        )
    return SinkColumns(
        subject=subject is not None and not overridden,
        headers=headers is not None,
        msg_id=msg_id is not None,
        ttl=ttl is not None,
        arrow=arrow_schema(schema, used),
    )


@dataclass(frozen=True, slots=True)
class IdPrefix:
    """The prefixes of a task's ``dedupe=auto`` ids."""

    #: The write's id (a batch write) or ``<queryId>-<batchId>`` (a micro-batch):
    #: the prefix of the ids made of a row's ``stream`` and ``seq``. Those leave
    #: the partition out: a replayed micro-batch may cut its partitions
    #: elsewhere (the source's first sequence moved, other ``numPartitions``),
    #: and a message must keep its id wherever it lands.
    write: str
    #: The task's partition: a row's position is its own only within its task.
    partition: int

    @property
    def positions(self) -> str:
        """The prefix of the ids made of a row's position: ``<write>-<partition>``."""
        return f"{self.write}-{self.partition}"


@dataclass
class WriteResult(WriterCommitMessage):
    """What one task wrote: rows published and how many the stream reported as duplicates."""

    rows: int = 0
    duplicates: int = 0


def _column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    index = batch.schema.get_field_index(name)
    return None if index < 0 else batch.column(index).to_pylist()


def _rows_batch(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array([row.get(f.name) for row in rows], f.type) for f in schema], schema=schema
    )


def record_batches(items: Iterable[Any], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Record batches from Arrow batches or ``Row`` objects (Spark 4.0 streaming writes).

    Rows are converted with the column types of ``schema`` (the columns the
    sink writes), not types inferred from the values: a ``headers`` map stays
    a map whatever keys each row has, a ``ttl`` keeps its column's type.
    Arrow batches pass through unchanged.
    """
    rows: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, pa.RecordBatch):
            yield item
            continue
        rows.append(item.asDict())
        if len(rows) >= _ROW_CHUNK:
            yield _rows_batch(rows, schema)
            rows = []
    if rows:
        yield _rows_batch(rows, schema)


class _Publisher:
    """Publishes record batches with ``publish_many_async`` and counts what was stored."""

    def __init__(
        self,
        js: JetStreamContext,
        opts: SinkOptions,
        id_prefix: IdPrefix | None,
        source_ids: bool = False,
    ) -> None:
        self._js = js
        self._default = opts.subject
        self._id_prefix = id_prefix
        #: ``dedupe=auto`` ids from the rows' ``stream`` and ``seq`` (a read's columns).
        self._run = _Run() if source_ids else None
        self._pending: list[asyncio.Future[PublishSummary]] = []
        self.result = WriteResult()

    async def publish(self, batch: pa.RecordBatch) -> None:
        n = batch.num_rows
        if not n:
            return
        first_row = self.result.rows
        # The option is every row's subject, a 'subject' column or not (Kafka's rule for
        # its topic option): a copy of a read (which has the column) goes where it says.
        subject: str | list[str] | None = self._default
        if subject is None:
            subjects = _column(batch, "subject")
            if subjects is None or None in subjects:
                row = first_row + (0 if subjects is None else subjects.index(None))
                raise InvalidOptionError(
                    f"row {row} has a null 'subject' and no option('subject') is set"
                )
            subject = subjects
        headers = _column(batch, "headers")
        header_ids = None
        if headers is not None and self._id_prefix is not None:
            header_ids = _header_ids(batch.column(batch.schema.get_field_index("headers")))
        msg_ids, moved = _msg_ids(batch, self._id_prefix, first_row, header_ids, self._run)
        row_headers = None if headers is None else [dict(h) if h else None for h in headers]
        if moved is not None and row_headers is not None:
            for i in pc.indices_nonzero(moved).to_pylist():
                own = row_headers[i]
                assert own is not None  # it has the id
                own.setdefault(SOURCE_MSG_ID_HEADER, own.pop(MSG_ID_HEADER))
        if row_headers is not None:
            _drop_source_controls(batch, row_headers)
        ttls = _column(batch, "ttl")
        if ttls is not None:
            ttls = [t if t is None or type(t) is str else float(t) for t in ttls]
        # Sent now, acknowledged later: the next batch goes out meanwhile (in order).
        self._pending.append(
            await self._js.publish_many_async(
                subject,
                _payloads(batch),
                headers=row_headers,
                msg_ids=msg_ids,
                ttls=ttls,
            )
        )
        self.result.rows += n
        self._collect()

    def _collect(self) -> None:
        """Count the batches acknowledged so far; raise the first failure (the task fails)."""
        keep = []
        failure: BaseException | None = None
        for done in self._pending:
            if not done.done():
                keep.append(done)
            elif (error := done.exception()) is not None:
                failure = failure or error
            else:
                self.result.duplicates += done.result().duplicates
        self._pending = keep
        if failure is not None:
            for rest in keep:  # their outcome no longer matters: not logged as unretrieved
                rest.add_done_callback(_retrieve)
            raise failure

    async def finish(self) -> WriteResult:
        """Wait for every acknowledgement; the first failure raises as soon as it is known."""
        if self._pending:
            await asyncio.wait(self._pending, return_when=asyncio.FIRST_EXCEPTION)
        self._collect()
        return self.result


def _retrieve(done: asyncio.Future[PublishSummary]) -> None:
    if not done.cancelled():
        done.exception()


#: The headers a copied row leaves out (lower case): those that make nats-server act
#: on a publish, or that it refuses from a client, where the source stored them as
#: facts: a publish's expectations (the target would check them against itself), an
#: atomic batch's, a schedule's (it would schedule again), a rollup (a KV purge
#: entry's: it would delete the copies before it), a counter's increment and
#: sources, a sourced message's origin, a per-message TTL (a stream without TTLs
#: refuses it: a copy failed part-way; the ``ttl`` column sets one on purpose).
_SOURCE_CONTROL_PREFIXES: Final = ("nats-expected-", "nats-batch-", "nats-schedule")
_SOURCE_CONTROLS: Final = frozenset(
    ("nats-rollup", "nats-incr", "nats-counter-sources", "nats-stream-source", "nats-ttl")
)


def _drop_source_controls(batch: pa.RecordBatch, row_headers: list[dict[str, str] | None]) -> None:
    """Leave the source's control headers out of the rows copied from a read (in place).

    A row with ``stream`` and ``seq`` (a ``jetstream`` read's) carries the
    headers the source message was stored with: a ``kv.create`` /
    ``kv.update``'s ``Nats-Expected-Last-Subject-Sequence``, an atomic batch's
    ``Nats-Batch-Id``, a KV purge entry's ``Nats-Rollup``, a counter's
    ``Nats-Incr``, a sourced message's ``Nats-Stream-Source``. Sent again, the
    target checked the expectation against itself (a second copy failed: wrong
    last sequence), took the message as part of a batch (no acknowledgement: a
    task failed after storing, and each retry stored the rows again), rolled up
    (deleting the copies stored before it) or refused the header. They are
    left out (:data:`_SOURCE_CONTROLS`): a copy stores the message, it does
    not act again. Other rows keep their headers (the user's own).
    """
    names = batch.schema.names
    if "stream" not in names or "seq" not in names:
        return
    copied = pc.and_(pc.is_valid(batch.column("stream")), pc.is_valid(batch.column("seq")))
    for i in pc.indices_nonzero(copied).to_pylist():
        own = row_headers[i]
        if own:
            for name in [k for k in own if _control(k.lower())]:
                del own[name]


def _control(name: str) -> bool:
    """Whether a (lower-case) header name is one a copy leaves out."""
    return name in _SOURCE_CONTROLS or name.startswith(_SOURCE_CONTROL_PREFIXES)


#: The header the server deduplicates by (the name exactly as it reads it).
MSG_ID_HEADER: Final = "Nats-Msg-Id"
#: Where a copy keeps the ``Nats-Msg-Id`` its ``headers`` carried when ``dedupe=auto``
#: sends it with the id of the message it was read from instead (see :func:`_msg_ids`).
SOURCE_MSG_ID_HEADER: Final = "Source-Nats-Msg-Id"


def _header_ids(headers: pa.Array) -> pa.Array | None:
    """The ``Nats-Msg-Id`` of each row's ``headers`` (null where none); None if no row has one.

    The name as the server reads it (exactly ``Nats-Msg-Id``); the value as it
    goes out (stripped; an empty one is none).
    """
    key = pa.scalar(MSG_ID_HEADER, headers.type.key_type)  # string or large_string
    ids = pc.map_lookup(headers, key, "last")
    if ids.null_count == len(ids):
        return None
    ids = pc.utf8_trim_whitespace(ids.cast(pa.string()))
    return pc.if_else(pc.equal(ids, ""), pa.scalar(None, pa.string()), ids)


@dataclass(slots=True)
class _Run:
    """A task's ``dedupe=auto`` ids so far (see :func:`_source_ids`)."""

    #: The message of the task's last row with ``stream`` and ``seq``, and how
    #: many rows before it in a row came from it too.
    stream: str | None = None
    seq: int | None = None
    index: int = 0
    #: The last sequence of each stream so far: a message's rows come once, in a row.
    last: dict[str, int] = field(default_factory=dict)
    #: The rows are not in message order: positions for the rest of the task.
    positions: bool = False


#: The most streams a task's ids from ``stream`` and ``seq`` keep track of.
_MAX_SOURCE_STREAMS: Final = 1024


class MsgIds(NamedTuple):
    """A batch's ``msg_ids`` for ``publish_many_async`` (None: none)."""

    ids: pa.Array | None
    #: The rows whose ``headers`` carry a ``Nats-Msg-Id`` that their copy's id
    #: replaces (booleans; None when there is none).
    moved: pa.Array | None = None


def _msg_ids(
    batch: pa.RecordBatch,
    prefix: IdPrefix | None,
    first_row: int,
    header_ids: pa.Array | None = None,
    run: _Run | None = None,
) -> MsgIds:
    """The ``msg_id`` column; with ``dedupe=auto`` a generated id where it is null.

    A row's ``msg_id`` is always kept. With ``dedupe=auto`` the others get, in
    this order: ``<write>-<stream>:<seq>`` for a row with the ``stream`` and
    ``seq`` of a ``jetstream`` read (the message it came from, whichever task
    it is in; the k-th further row in a row from one message, as an
    ``explode`` makes, ``.k`` added); else the ``Nats-Msg-Id`` of its
    ``headers`` (``header_ids``), an id of the user's; else
    ``<write>-<partition>-<row>`` (its position in the task).

    A copy's id wins over the header a copy of a read carries: the source
    stream stored messages of one id apart (beyond its ``duplicate_window``),
    and the copy must store each of them; the header's value is kept under
    :data:`SOURCE_MSG_ID_HEADER` (``moved``). A position shifts when a retried
    task reads one message fewer (removed from the source meanwhile: a
    per-subject limit, a TTL, a delete): every later row then took the id of
    the row before it, and the first one the first attempt had not stored was
    dropped as a duplicate.

    As Arrow: ``publish_many_async`` takes plain ids as a column (HPUB
    commands built a batch at a time) and checks any other one by one.
    """
    index = batch.schema.get_field_index("msg_id")
    given = None if index < 0 else batch.column(index)
    if given is not None and not pa.types.is_string(given.type):
        given = given.cast(pa.string())
    if prefix is None or (given is not None and not given.null_count):
        return MsgIds(given)
    rows = pa.array(range(first_row, first_row + batch.num_rows), pa.int64())
    ids = pc.binary_join_element_wise(
        pa.scalar(f"{prefix.positions}-"), pc.cast(rows, pa.string()), pa.scalar("")
    )
    if header_ids is not None:
        ids = pc.coalesce(header_ids, ids)
    moved = None
    copied = None if run is None else _source_ids(batch, prefix.write, run)
    if copied is not None:
        ids = pc.coalesce(copied, ids)
        if header_ids is not None:
            moved = pc.and_(pc.is_valid(copied), pc.is_valid(header_ids))
            if given is not None:
                moved = pc.and_(moved, pc.is_null(given))
            if not pc.any(moved).as_py():
                moved = None
    if given is not None:
        ids = pc.coalesce(given, ids)
    return MsgIds(ids, moved)


def _source_ids(batch: pa.RecordBatch, prefix: str, run: _Run) -> pa.Array | None:
    """``<prefix>-<stream>:<seq>[.k]`` where a row has both, else null (None: no row).

    The ``:`` keeps them apart from the position ids ``<prefix>-<partition>-<row>``
    (with ``-`` a stream named ``1`` gave the id of partition 1's row).

    ``prefix``: the write's or micro-batch's, without the partition (the same
    message has the same id in any task, as a replay cutting its partitions
    elsewhere needs; rows of one message in two tasks share it too).

    ``k``: how many rows before it in a row came from the same message (none
    for the first), counted on from the task's previous batch (``run``).
    Unique only while each message's rows come once and in a row, as a read
    (and an ``explode`` of it) delivers them: each stream's sequences rising
    from one run of rows to the next. Rows out of that order (a shuffle, or
    ``stream`` / ``seq`` columns of another meaning) would repeat an id and
    the stream would drop the row as a duplicate: from the batch where that
    is seen on, the task's ids are positions again (None).
    """
    n = batch.num_rows
    if run.positions or not n:
        return None
    streams = batch.column(batch.schema.get_field_index("stream")).cast(pa.string())
    seqs = batch.column(batch.schema.get_field_index("seq")).cast(pa.int64())
    before_streams = pa.concat_arrays([pa.array([run.stream], pa.string()), streams[: n - 1]])
    before_seqs = pa.concat_arrays([pa.array([run.seq], pa.int64()), seqs[: n - 1]])
    same = pc.fill_null(
        pc.and_(pc.equal(streams, before_streams), pc.equal(seqs, before_seqs)), False
    )
    valid = pc.and_(pc.is_valid(streams), pc.is_valid(seqs))
    if not _in_message_order(
        pc.filter(streams, pc.and_(valid, pc.invert(same))),
        pc.filter(seqs, pc.and_(valid, pc.invert(same))),
        run,
    ):
        run.positions = True
        return None
    at = pa.array(range(n), pa.int64())
    # Each row's distance from the first row of its message's rows in a row.
    k = pc.subtract(at, pc.cumulative_max(pc.if_else(same, 0, at)))
    carried = pc.index(same, False).as_py()  # the rows continuing the last batch's run
    carried = n if carried < 0 else carried
    if carried:
        k = pc.add(k, pc.if_else(pc.less(at, carried), run.index + 1, 0))
    base = pc.binary_join_element_wise(
        pa.scalar(f"{prefix}-"), streams, pa.scalar(":"), pc.cast(seqs, pa.string()), ""
    )
    ids = pc.if_else(
        pc.greater(k, 0),
        pc.binary_join_element_wise(base, pa.scalar("."), pc.cast(k, pa.string()), ""),
        base,
    )
    last_stream, last_seq = streams[n - 1].as_py(), seqs[n - 1].as_py()
    if last_stream is None or last_seq is None:
        run.stream = run.seq = None
        run.index = 0
    else:
        run.stream, run.seq, run.index = last_stream, last_seq, k[n - 1].as_py()
    return pc.if_else(valid, ids, pa.scalar(None, pa.string()))


def _in_message_order(streams: pa.Array, seqs: pa.Array, run: _Run) -> bool:
    """Whether the first rows of messages (``streams``, ``seqs``) rise per stream.

    Each stream's sequences must rise strictly within the batch and from the
    task's last one (``run.last``, updated). False too past
    :data:`_MAX_SOURCE_STREAMS` streams (what the task keeps stays bounded).
    """
    if not len(streams):
        return True
    names = pc.unique(streams)
    if len(run.last) + len(names) > _MAX_SOURCE_STREAMS:
        return False
    for name in names.to_pylist():
        ours = seqs if len(names) == 1 else pc.filter(seqs, pc.equal(streams, name))
        if len(ours) > 1 and not pc.all(pc.greater(ours[1:], ours[:-1])).as_py():
            return False
        before = run.last.get(name)
        if before is not None and ours[0].as_py() <= before:
            return False
        run.last[name] = ours[-1].as_py()
    return True


def _payloads(batch: pa.RecordBatch) -> pa.Array:
    """The ``data`` column as binary (strings in UTF-8, a null as an empty payload).

    Handed to ``publish_many_async`` as Arrow: without headers its publishes
    are built a batch at a time, with no Python object per row.
    """
    data = batch.column(batch.schema.get_field_index("data"))
    if pa.types.is_string(data.type):
        data = data.cast(pa.binary())
    elif pa.types.is_large_string(data.type):
        data = data.cast(pa.large_binary())
    if data.null_count:
        data = pc.fill_null(data, pa.scalar(b"", data.type))
    return data


def _write(
    connect: ConnectOptions,
    opts: SinkOptions,
    id_prefix: IdPrefix | None,
    iterator: Iterable[Any],
    schema: pa.Schema,
) -> WriteResult:
    # The worker process's connection for these options, shared by its tasks.
    session = shared_session(connect, max_pending=opts.max_pending)
    try:
        source_ids = all(name in schema.names for name in _SOURCE_ID_COLUMNS)
        publisher = _Publisher(session.js, opts, id_prefix, source_ids)
        batches = record_batches(iterator, schema)
        for batch in counted(batches, connect.telemetry, "write", "jetstream", opts.subject):
            session.run(publisher.publish(batch))
        return session.run(publisher.finish())
    except TRANSIENT:
        discard(session)  # the next task (Spark's retry) starts on a new connection
        raise


def _totals(messages: list[WriterCommitMessage | None]) -> tuple[int, int]:
    """Rows published and rows the stream reported as duplicates, over the tasks."""
    results = [m for m in messages if isinstance(m, WriteResult)]
    return sum(m.rows for m in results), sum(m.duplicates for m in results)


def _warn_duplicates(what: str, rows: int, dups: int) -> None:
    """A :class:`JetStreamSparkWarning` at the commit: visible at Spark's default log level."""
    warn_loss(
        f"aiojetstream.spark: {what} published {rows} rows; the stream dropped {dups} of them "
        "as duplicates (a Nats-Msg-Id it had stored within its duplicate_window). Expected "
        "after a retried task or a replayed micro-batch; otherwise rows shared an id (a "
        "msg_id column or Nats-Msg-Id header that repeats, or the rows of one message in "
        "two tasks with dedupe=auto) and were not stored: see 'Delivery guarantees' in "
        "docs/spark.md",
        stacklevel=2,
    )


def _partition() -> TaskContext | None:
    return TaskContext.get()


class Writer(BatchWriterBase):
    """Batch ``df.write.format("jetstream").mode("append")``."""

    def __init__(self, opts: SinkOptions, columns: SinkColumns) -> None:
        self.opts = opts
        self.columns = columns
        # Fixed on the driver and shipped to every task: a retried task derives
        # the same message ids as the attempt it replaces.
        self.write_id = uuid.uuid4().hex

    @surfaced
    def write(self, iterator: Iterator[Any]) -> WriteResult:
        """Publish a partition's rows; return once every ack arrived."""
        prefix = None
        if self.opts.dedupe == "auto":
            ctx = _partition()
            prefix = IdPrefix(self.write_id, ctx.partitionId() if ctx is not None else 0)
        return _write(self.opts.connect, self.opts, prefix, iterator, self.columns.arrow)

    @surfaced
    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Log what the write stored; warn of rows the stream dropped as duplicates."""
        rows, dups = _totals(messages)
        logger.info("jetstream write: %d rows published, %d duplicates", rows, dups)
        if dups:
            _warn_duplicates("the write", rows, dups)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Published messages cannot be withdrawn; a re-run with msg ids stores no copies."""
        logger.warning("jetstream write aborted; messages already acknowledged stay stored")


class StreamWriter(StreamWriterBase):
    """Streaming ``writeStream.format("jetstream")``."""

    def __init__(self, opts: SinkOptions, columns: SinkColumns) -> None:
        self.opts = opts
        self.columns = columns

    @surfaced
    def write(self, iterator: Iterator[Any]) -> WriteResult:
        """Publish a micro-batch partition; ``dedupe=auto`` ids start with query-batch."""
        prefix = None
        if self.opts.dedupe == "auto":
            ctx = _partition()
            if ctx is None:
                raise InvalidOptionError("dedupe=auto needs a Spark task context")
            query = ctx.getLocalProperty("sql.streaming.queryId")
            batch = ctx.getLocalProperty("streaming.sql.batchId")
            if not query or batch is None:
                # Ids without them would repeat across batches and drop real rows.
                raise InvalidOptionError(
                    "dedupe=auto: Spark gave this task no streaming query or batch id"
                )
            prefix = IdPrefix(f"{query}-{batch}", ctx.partitionId())
        return _write(self.opts.connect, self.opts, prefix, iterator, self.columns.arrow)

    @surfaced
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Log what the micro-batch stored; warn of rows the stream dropped as duplicates."""
        rows, dups = _totals(messages)
        logger.info("jetstream stream write: batch %d, %d rows, %d duplicates", batchId, rows, dups)
        if dups:
            _warn_duplicates(f"micro-batch {batchId}", rows, dups)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Published messages cannot be withdrawn; ``dedupe=auto`` makes the replay harmless."""
        logger.warning("jetstream stream write: batch %d aborted", batchId)
