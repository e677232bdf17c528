"""The ``jetstream_kv`` data source: a key-value bucket's live keys as a table, and puts."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, Final, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import BinaryType, StringType, StructType

from aiojetstream import (
    AuthorizationError,
    BucketNotFoundError,
    FeatureNotSupportedError,
    InvalidOptionError,
    JetStreamContext,
    KeyValue,
    MessageNotFoundError,
    RawStreamMessage,
    Stream,
    StreamInfo,
    StreamNotFoundError,
)

from ._options import DEFAULT_RETRY_TIMEOUT, KVOptions, lower_keys, parse_kv_options
from ._read import DataLossError
from ._runtime import (
    TRANSIENT,
    Refusals,
    Session,
    discard,
    led,
    retrying,
    run_shared,
    shared_session,
)
from ._source import check_read_schema
from ._surface import surfaced, surfaced_iter
from ._telemetry import counted
from ._write import (
    BatchWriterBase,
    WriteResult,
    arrow_schema,
    record_batches,
    refuse_repeated,
)

__all__ = ["JetStreamKVDataSource"]

KV_DDL: Final = "bucket string, key string, value binary, revision long, created timestamp_ltz"
KV_SCHEMA: Final = pa.schema(
    [
        pa.field("bucket", pa.string()),
        pa.field("key", pa.string()),
        pa.field("value", pa.binary()),
        pa.field("revision", pa.int64()),
        pa.field("created", pa.timestamp("us", tz="UTC")),
    ]
)
_BATCH_ROWS: Final = 10_000
#: The format name, the label of its row and batch metrics.
_FORMAT: Final = "jetstream_kv"
#: The JetStream API level of nats-server 2.11: batch direct gets.
_BATCH_GET_LEVEL: Final = 1
#: Keys a batch direct get asks for (the server answers at most 1,024 subjects).
_MULTI_LAST: Final = 1_024
#: Bytes a batch direct get returns at most (then it continues from where it stopped).
#: The server sends a reply at once, without flow control: a large one can exceed
#: the client's allowance in the server (``max_pending``) and cost the connection.
_PAGE_BYTES: Final = 1024 * 1024
#: Bytes of subjects a batch direct get's request names at most (1,024 long keys
#: went over the server's max_payload of 1 MiB); half of max_payload when smaller.
_REQUEST_BYTES: Final = 256 * 1024

T = TypeVar("T")


async def _bucket(js: JetStreamContext, opts: KVOptions) -> KeyValue:
    try:
        return await js.key_value(opts.bucket)
    except BucketNotFoundError as exc:
        raise InvalidOptionError(
            f"option 'bucket': bucket {opts.bucket!r} does not exist at {opts.connect.describe()}"
        ) from exc


def _arrow(bucket: str, prefix: str, values: list[RawStreamMessage]) -> pa.RecordBatch:
    """The rows of keys' last messages (their subjects start with ``prefix``)."""
    cut = len(prefix)
    return pa.RecordBatch.from_arrays(
        [
            pa.repeat(bucket, len(values)).cast(pa.string()),
            pa.array([m.subject[cut:] for m in values], pa.string()),
            pa.array([m.data for m in values], pa.binary()),
            pa.array([m.seq for m in values], pa.int64()),
            pa.array([m.time for m in values], pa.timestamp("us", tz="UTC")),
        ],
        schema=KV_SCHEMA,
    )


class JetStreamKVDataSource(DataSource):
    """``format("jetstream_kv")``: the live value of every key; writes put or delete keys."""

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return "jetstream_kv"

    @surfaced
    def schema(self) -> str:
        """The fixed read schema.

        Spark asks for it at ``load()`` (and for writes too): when a ``bucket``
        option is present the options are validated here, so a malformed one
        fails at ``load()``; otherwise the reader or writer checks them.
        """
        if "bucket" in lower_keys(self.options):
            parse_kv_options(self.options)
        return KV_DDL

    @surfaced
    def reader(self, schema: StructType) -> DataSourceReader:
        """A batch reader of the bucket's live keys (one partition)."""
        check_read_schema(
            schema,
            "struct<bucket:string,key:string,value:binary,revision:bigint,created:timestamp>",
            "jetstream_kv",
        )
        return KVReader(parse_kv_options(self.options))

    @surfaced
    def writer(self, schema: StructType, overwrite: bool) -> KVWriter:
        """A batch writer: ``key``, ``value`` (null deletes the key)."""
        if overwrite:
            raise InvalidOptionError("format('jetstream_kv') supports mode('append') only")
        refuse_repeated(schema, ("key", "value"), "jetstream_kv")
        fields = {f.name: f.dataType for f in schema.fields}
        for column in ("key", "value"):
            if column not in fields:
                raise InvalidOptionError(
                    f"format('jetstream_kv') writes need columns 'key' and 'value'; "
                    f"the DataFrame has {sorted(fields)}"
                )
        if not isinstance(fields["key"], StringType):
            raise InvalidOptionError("column 'key' must be a string")
        if not isinstance(fields["value"], BinaryType | StringType):
            raise InvalidOptionError("column 'value' must be binary or string")
        opts = parse_kv_options(self.options)

        async def check(js: JetStreamContext) -> None:
            await _bucket(js, opts)

        # Before the job: the bucket exists (a leader election is ridden out).
        run_shared(
            opts.connect,
            check,
            timeout=opts.retry_timeout,
            what=f"looking up bucket {opts.bucket!r}",
        )
        return KVWriter(opts, arrow_schema(schema, ("key", "value")))


class KVPartition(InputPartition):
    """The one partition of a bucket read.

    ``created``: when the bucket's stream was created, as planned: a bucket
    deleted and created again before or while the task reads is not read as
    one snapshot of both.
    """

    def __init__(self, bucket: str, created: str | None = None) -> None:
        super().__init__(bucket)
        self.bucket = bucket
        self.created = created

    def __repr__(self) -> str:
        return f"KVPartition({self.bucket!r})"


class KVReader(DataSourceReader):
    """Reads the bucket's live keys as of one stream sequence (batch direct gets)."""

    def __init__(self, opts: KVOptions) -> None:
        self.opts = opts

    @surfaced
    def partitions(self) -> Sequence[InputPartition]:
        """One partition; checks the bucket and the server can be read (before the job)."""
        opts = self.opts

        async def check(js: JetStreamContext) -> str:
            kv = await _bucket(js, opts)
            if not kv.stream.cached_info.config.allow_direct:
                raise InvalidOptionError(
                    f"option 'bucket': bucket {opts.bucket!r} does not allow direct gets "
                    "(allow_direct, on unless an old client created it), which "
                    "format('jetstream_kv') reads need"
                )
            level = await js.api_level()
            if level < _BATCH_GET_LEVEL:
                raise FeatureNotSupportedError(
                    "format('jetstream_kv') reads (batch direct get)",
                    _BATCH_GET_LEVEL,
                    level,
                    "2.11",
                )
            return kv.stream.cached_info.created.isoformat()

        created = run_shared(
            opts.connect,
            check,
            timeout=opts.retry_timeout,
            what=f"planning the read of bucket {opts.bucket!r}",
        )
        return [KVPartition(opts.bucket, created)]

    @surfaced_iter
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Yield the live entries in Arrow batches, each key once (see :class:`_Snapshot`).

        Every request retries what a leader election causes within ``retryTimeout``.
        """
        opts = self.opts
        session = shared_session(opts.connect)  # the worker process's connection
        try:
            kv = session.run(_looked_up(session, opts))
            # A bucket created again since the read was planned fails the task.
            created = partition.created if isinstance(partition, KVPartition) else None
            snapshot = _Snapshot(
                kv,
                opts.retry_timeout,
                session.refusals,
                created,
                request_bytes=session.js.nc.max_payload // 2,
            )
            session.run(snapshot.start())
            yield from counted(
                self._batches(session, snapshot),
                opts.connect.telemetry,
                "read",
                _FORMAT,
                opts.bucket,
            )
        except TRANSIENT:
            discard(session)  # gave up after retryTimeout: do not hand it to the next task
            raise

    def _batches(self, session: Session, snapshot: _Snapshot) -> Iterator[pa.RecordBatch]:
        while not snapshot.ended:
            entries = session.run(snapshot.next_entries())
            if entries:
                yield _arrow(self.opts.bucket, snapshot.prefix, entries)


def _retried(
    session: Session, opts: KVOptions, work: Callable[[], Awaitable[T]], what: str
) -> Awaitable[T]:
    """``work()`` retried through a leader election within ``retryTimeout``."""
    return retrying(work, opts.retry_timeout, what, refusals=session.refusals)


def _looked_up(session: Session, opts: KVOptions) -> Awaitable[KeyValue]:
    """The bucket's handle, its look-up retried through a leader election (a task's)."""
    return _retried(
        session, opts, lambda: _bucket(session.js, opts), f"looking up bucket {opts.bucket!r}"
    )


class _Snapshot:
    """The live keys of a bucket as of one stream sequence, each key once.

    At the start: every key that has a message (its subjects, from the
    stream's info), then the stream's last sequence ``L``, so every key listed
    had a message at or below ``L`` and a key created after the listing began
    is not read. Then, 1,024 keys a request, the last message of each key at
    or below ``L`` (a batch direct get with ``multi_last`` and ``up_to_seq``):
    the bucket as it was at ``L``, keys whose last message is a delete or
    purge marker left out. A key whose revisions up to ``L`` were all replaced
    since (the bucket's ``history`` keeps fewer: one by default) is read as it
    is now, if it still exists. A bucket deleted during the read fails it with
    :class:`~aiojetstream.BucketNotFoundError`, one deleted and created again
    (its stream's creation time differs) with :class:`DataLossError`: a
    stream info after each batch's pages checks. No consumer: nothing to reset
    or clean up.
    Each request retries what a leader election causes within
    ``retry_timeout`` seconds.
    """

    def __init__(
        self,
        kv: KeyValue,
        retry_timeout: float = DEFAULT_RETRY_TIMEOUT,
        refusals: Refusals | None = None,
        created: str | None = None,
        request_bytes: int = _REQUEST_BYTES,
    ) -> None:
        self._kv = kv
        #: The most subjects' bytes one batch get may name (its request is one message).
        self._request_bytes = min(request_bytes, _REQUEST_BYTES)
        self._retry_timeout = retry_timeout
        self._refusals = refusals
        #: When the bucket's stream was created: the snapshot reads that stream only.
        self._created = created or kv.stream.cached_info.created.isoformat()
        # The subjects the bucket's stream holds, as the handle reads them (a mirror
        # holds its origin's, renamed by its subject transforms).
        self.prefix = kv._prefix
        self._subjects: list[str] = []
        self._next = 0
        self._last = 0
        self.ended = False

    async def _retrying(self, work: Callable[[], Awaitable[T]], what: str) -> T:
        return await retrying(
            work,
            self._retry_timeout,
            f"{what} of bucket {self._kv.bucket!r}",
            refusals=self._refusals,
        )

    async def start(self) -> None:
        """List the keys, then take ``L`` (retried as a whole)."""
        await self._retrying(self._start, "listing the keys")

    async def _start(self) -> None:
        # The keys first, then L: every key listed existed at L, so one without a
        # message at or below L now had it replaced since (not created after L,
        # which a listing made after L would name; it would be read as it is now).
        info = await self._info(subjects_filter=self.prefix + ">")
        # A subject with a wildcard token is no key (puts refuse it) but a server
        # may hold one: as a multi_last filter it would match other keys.
        self._subjects = sorted(
            subject
            for subject in info.state.subjects or ()
            if not _WILDCARD_TOKENS.intersection(subject.split("."))
        )
        self._last = (await self._info()).state.last_seq
        self.ended = not self._subjects

    async def _info(self, subjects_filter: str | None = None) -> StreamInfo:
        """The bucket stream's info, checked to be of the stream the snapshot reads."""
        info = led(await _found(self._kv, self._kv.stream.info(subjects_filter=subjects_filter)))
        created = info.created.isoformat()
        if created != self._created:
            raise DataLossError(
                f"bucket {self._kv.bucket!r} was deleted and created again (at {created}) "
                f"since its read began on the bucket created at {self._created}: the read "
                "would mix the two (run it again)"
            )
        return info

    async def next_entries(self) -> list[RawStreamMessage]:
        """The live values of the next keys (up to ``_BATCH_ROWS``); sets ``ended`` at the end."""
        entries: list[RawStreamMessage] = []
        while not self.ended and len(entries) < _BATCH_ROWS:
            page = self._page_at(self._next)
            entries += await self._retrying(
                functools.partial(self._page, page), f"reading keys from {page[0]!r}"
            )
            self._next += len(page)  # only once read: a retry reads the same keys
            self.ended = self._next >= len(self._subjects)
        # Still the bucket of the start (not deleted and created again meanwhile)?
        await self._retrying(self._info, "checking the bucket")
        return entries

    def _page_at(self, at: int) -> list[str]:
        """The keys of one batch get from ``at``: at most 1,024, and of request_bytes."""
        page: list[str] = []
        size = 0
        for subject in self._subjects[at : at + _MULTI_LAST]:
            size += len(subject.encode()) + 3  # quoted, with a comma
            if page and size > self._request_bytes:
                break
            page.append(subject)
        return page

    async def _page(self, subjects: list[str]) -> list[RawStreamMessage]:
        return await _found(self._kv, self._page_of(subjects))

    async def _page_of(self, subjects: list[str]) -> list[RawStreamMessage]:
        stream = self._kv.stream
        found: dict[str, RawStreamMessage] = {}
        start: int | None = None
        while True:
            batch = stream.get_last_msgs_for(
                subjects, up_to_seq=self._last, seq=start, max_bytes=_PAGE_BYTES
            )
            async for msg in batch:
                found[msg.subject] = msg
            if not batch.num_pending or batch.last_seq < (start or 1):
                break
            start = batch.last_seq + 1  # the reply stopped at max_bytes: the rest
        for subject in subjects:
            if subject not in found:
                # Listed before L was taken, so it existed at L: its revisions up to L
                # were replaced since (history=1). Its value now, if it still exists.
                with contextlib.suppress(MessageNotFoundError):
                    found[subject] = await _last_from_leader(stream, subject)
        live = []
        for subject in subjects:
            last = found.get(subject)
            if last is not None and not _marker(last.headers):
                live.append(last)  # not deleted, purged or expired
        return live


async def _last_from_leader(stream: Stream, subject: str) -> RawStreamMessage:
    """The last message on ``subject`` as the stream's leader holds it.

    A direct get is answered by any replica, and one behind the leader may not
    have the key yet (it was listed: it exists): the key left out, no error. A
    user allowed direct gets only (``STREAM.MSG.GET`` refused) reads directly.
    """
    try:
        return await stream.get_last_msg_for_subject(subject, direct=False)
    except AuthorizationError:
        return await stream.get_last_msg_for_subject(subject)


_WILDCARD_TOKENS: Final = frozenset(("*", ">"))


async def _found(kv: KeyValue, work: Awaitable[T]) -> T:
    """``work``, its missing stream reported as the bucket (as ``KeyValue.get`` does)."""
    try:
        return await work
    except StreamNotFoundError as exc:
        raise BucketNotFoundError(
            f"bucket {kv.bucket!r} not found: deleted during the read", kv.bucket
        ) from exc


def _marker(headers: dict[str, str] | None) -> bool:
    """Whether a key's last message is a delete, purge (ADR-8) or limit marker (ADR-48).

    As ``KeyValue.get`` decides: ``KV-Operation`` ``DEL`` or ``PURGE``, or
    any ``Nats-Marker-Reason``.
    """
    if not headers:
        return False
    return headers.get("KV-Operation") in ("DEL", "PURGE") or bool(
        headers.get("Nats-Marker-Reason")
    )


class KVWriter(BatchWriterBase):
    """Puts ``value`` under ``key`` for each row; a null value deletes the key."""

    def __init__(self, opts: KVOptions, schema: pa.Schema) -> None:
        self.opts = opts
        self.schema = schema  # ``key`` and ``value``: the types of Row conversion

    @surfaced
    def write(self, iterator: Iterator[Any]) -> WriteResult:
        """Write a partition's rows; return once every put is acknowledged."""
        opts = self.opts
        result = WriteResult()
        session = shared_session(opts.connect)  # the worker process's connection
        try:
            kv = session.run(_looked_up(session, opts))
            batches = record_batches(iterator, self.schema)
            for batch in counted(batches, opts.connect.telemetry, "write", _FORMAT, opts.bucket):
                # A put that fails in a leader election fails the task: Spark retries it.
                session.run(_put_batch(kv, batch, opts.max_pending))
                result.rows += batch.num_rows
        except TRANSIENT:
            discard(session)  # the next task (Spark's retry) starts on a new connection
            raise
        return result


async def _put_batch(kv: KeyValue, batch: pa.RecordBatch, window: int) -> None:
    keys = batch.column(batch.schema.get_field_index("key")).to_pylist()
    values = batch.column(batch.schema.get_field_index("value")).to_pylist()
    pending: set[asyncio.Future[Any]] = set()
    latest: dict[str, asyncio.Future[Any]] = {}
    try:
        for key, value in zip(keys, values, strict=True):
            if key is None:
                raise InvalidOptionError("a row has a null 'key'")
            previous = latest.get(key)
            if previous is not None and not previous.done():
                # A later row of the same key is written after the earlier one is stored.
                await asyncio.wait([previous])
            if len(pending) >= window:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for fut in done:
                    fut.result()  # the first failed put fails the task
            if value is None:
                fut = asyncio.ensure_future(kv.delete(key))
            else:
                data = value.encode() if type(value) is str else value
                fut = asyncio.ensure_future(kv.put(key, data))
            pending.add(fut)
            latest[key] = fut
        if pending:
            done, pending = await asyncio.wait(pending)
            for fut in done:
                fut.result()
    finally:
        # After a failure: no put keeps running while the task's loop closes.
        for fut in pending:
            fut.cancel()
        if pending:
            await asyncio.wait(pending)
