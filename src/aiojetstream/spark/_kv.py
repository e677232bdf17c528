"""The ``jetstream_kv`` data source: a key-value bucket's live keys as a table, and puts."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import Any, Final

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import BinaryType, StringType, StructType

from aiojetstream import (
    BucketNotFoundError,
    InvalidOptionError,
    JetStreamContext,
    KeyValue,
    KeyValueEntry,
    KeyValueOp,
    KeyWatcher,
)

from ._options import KVOptions, lower_keys, parse_kv_options
from ._runtime import Session, run_once
from ._source import check_read_schema
from ._write import BatchWriterBase, WriteResult, arrow_schema, record_batches

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


async def _bucket(js: JetStreamContext, opts: KVOptions) -> KeyValue:
    try:
        return await js.key_value(opts.bucket)
    except BucketNotFoundError as exc:
        raise InvalidOptionError(
            f"option 'bucket': bucket {opts.bucket!r} does not exist at {opts.connect.describe()}"
        ) from exc


def _arrow(bucket: str, entries: list[KeyValueEntry]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [
            pa.repeat(bucket, len(entries)).cast(pa.string()),
            pa.array([e.key for e in entries], pa.string()),
            pa.array([e.value for e in entries], pa.binary()),
            pa.array([e.revision for e in entries], pa.int64()),
            pa.array([e.created for e in entries], pa.timestamp("us", tz="UTC")),
        ],
        schema=KV_SCHEMA,
    )


class JetStreamKVDataSource(DataSource):
    """``format("jetstream_kv")``: the live value of every key; writes put or delete keys."""

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return "jetstream_kv"

    def schema(self) -> str:
        """The fixed read schema.

        Spark asks for it at ``load()`` (and for writes too): when a ``bucket``
        option is present the options are validated here, so a malformed one
        fails at ``load()``; otherwise the reader or writer checks them.
        """
        if "bucket" in lower_keys(self.options):
            parse_kv_options(self.options)
        return KV_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        """A batch reader of the bucket's live keys (one partition)."""
        check_read_schema(
            schema,
            "struct<bucket:string,key:string,value:binary,revision:bigint,created:timestamp>",
            "jetstream_kv",
        )
        return KVReader(parse_kv_options(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> KVWriter:
        """A batch writer: ``key``, ``value`` (null deletes the key)."""
        if overwrite:
            raise InvalidOptionError("format('jetstream_kv') supports mode('append') only")
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

        run_once(opts.connect, check)  # before the job: the bucket exists
        return KVWriter(opts, arrow_schema(schema, ("key", "value")))


class KVReader(DataSourceReader):
    """Reads the bucket's live keys with a watch of the latest values."""

    def __init__(self, opts: KVOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        """One partition; checks the bucket exists (before the job)."""
        opts = self.opts

        async def check(js: JetStreamContext) -> None:
            await _bucket(js, opts)

        run_once(opts.connect, check)
        return [InputPartition(opts.bucket)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Yield the live entries in Arrow batches, each key at most once."""
        opts = self.opts
        with Session(opts.connect) as session:
            kv = session.run(_bucket(session.js, opts))
            snapshot = _Snapshot(kv, kv.watch())
            session.run(snapshot.start())
            try:
                while not snapshot.ended:
                    entries = session.run(snapshot.next_entries())
                    if entries:
                        yield _arrow(opts.bucket, entries)
            finally:
                session.run(snapshot.aclose())


class _Snapshot:
    """The live keys of a bucket from a watch of the latest values, each key once.

    The watch first delivers the latest revision of every key as of its
    consumer's creation (in stream order), then every later change. The read
    ends at ``bound``: first the stream's last sequence right after the
    consumer was created, so every initial value comes at or before it. A key
    changed before its initial value was delivered may have lost that value
    (a bucket with ``history=1`` keeps one revision), so when the watch passes
    ``bound`` the read goes on to the stream's last sequence at that moment:
    such changes were stored before then. A key is taken once, at its first
    ``PUT``; later revisions of a key already taken are left out.
    """

    def __init__(self, kv: KeyValue, watcher: KeyWatcher) -> None:
        self._kv = kv
        self._watcher = watcher
        self._seen: set[str] = set()
        self._bound = 0
        self._final = False
        self.ended = False

    async def _last_seq(self) -> int:
        info = await self._kv.stream.info()
        return info.state.last_seq

    async def start(self) -> None:
        await self._watcher.__aenter__()  # creates the consumer: fixes the initial values
        self._bound = await self._last_seq()

    async def next_entries(self) -> list[KeyValueEntry]:
        """Up to ``_BATCH_ROWS`` more live entries; sets ``ended`` at the end."""
        entries: list[KeyValueEntry] = []
        while not self.ended and len(entries) < _BATCH_ROWS:
            try:
                entry = await anext(self._watcher)
            except StopAsyncIteration:
                self.ended = True
                break
            if entry is None:  # caught up: nothing was pending
                self.ended = True
                break
            seq = entry.revision
            if seq >= self._bound and not self._final:
                # Every initial value has been delivered or replaced by a later revision.
                self._final = True
                self._bound = max(self._bound, await self._last_seq())
            if seq > self._bound:
                self.ended = True
                break
            if entry.operation is KeyValueOp.PUT and entry.key not in self._seen:
                self._seen.add(entry.key)
                entries.append(entry)
            if self._final and seq >= self._bound:
                self.ended = True
        return entries

    async def aclose(self) -> None:
        await self._watcher.aclose()


class KVWriter(BatchWriterBase):
    """Puts ``value`` under ``key`` for each row; a null value deletes the key."""

    def __init__(self, opts: KVOptions, schema: pa.Schema) -> None:
        self.opts = opts
        self.schema = schema  # ``key`` and ``value``: the types of Row conversion

    def write(self, iterator: Iterator[Any]) -> WriteResult:
        """Write a partition's rows; return once every put is acknowledged."""
        opts = self.opts
        result = WriteResult()
        with Session(opts.connect) as session:
            kv = session.run(_bucket(session.js, opts))
            for batch in record_batches(iterator, self.schema):
                session.run(_put_batch(kv, batch, opts.max_pending))
                result.rows += batch.num_rows
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
