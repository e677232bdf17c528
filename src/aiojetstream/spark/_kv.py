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
)

from ._options import KVOptions, parse_kv_options
from ._runtime import Session, run_once
from ._source import check_read_schema
from ._write import BatchWriterBase, WriteResult, record_batches

__all__ = ["JetStreamKVDataSource"]

KV_DDL: Final = "bucket string, key string, value binary, revision long, created timestamp"
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
        """The fixed read schema."""
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
        return KVWriter(opts)


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
        """Yield the live entries in Arrow batches."""
        opts = self.opts
        with Session(opts.connect) as session:
            kv = session.run(_bucket(session.js, opts))
            watcher = session.run(kv.watch(ignore_deletes=True).__aenter__())
            try:
                while True:
                    entries, ended = session.run(_next_entries(watcher))
                    if entries:
                        yield _arrow(opts.bucket, entries)
                    if ended:
                        return
            finally:
                session.run(watcher.__aexit__(None, None, None))


async def _next_entries(watcher: Any) -> tuple[list[KeyValueEntry], bool]:
    entries: list[KeyValueEntry] = []
    async for entry in watcher:
        if entry is None:
            return entries, True
        entries.append(entry)
        if len(entries) >= _BATCH_ROWS:
            return entries, False
    return entries, True


class KVWriter(BatchWriterBase):
    """Puts ``value`` under ``key`` for each row; a null value deletes the key."""

    def __init__(self, opts: KVOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[Any]) -> WriteResult:
        """Write a partition's rows; return once every put is acknowledged."""
        opts = self.opts
        result = WriteResult()
        with Session(opts.connect) as session:
            kv = session.run(_bucket(session.js, opts))
            for batch in record_batches(iterator):
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
