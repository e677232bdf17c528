"""``format("jetstream_kv")`` reads under change, and writes that receive ``Row`` objects.

The reader and writer objects are driven directly (as Spark's Python worker
does): a KV read is a generator of Arrow batches, so a test can change the
bucket between two batches without timing; Spark 4.0 streaming writes hand
``Row`` objects to the writer, which Spark >= 4.1 (installed here) never does.
"""

from __future__ import annotations

import asyncio
import warnings
from collections import Counter
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import Row
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import (
    BinaryType,
    DecimalType,
    DoubleType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from aiojetstream import (
    BucketNotFoundError,
    JetStreamContext,
    KeyValueConfig,
    RawStreamMessage,
    StreamConfig,
    StreamSource,
    SubjectTransformConfig,
)
from aiojetstream.spark import DataLossError, JetStreamSparkWarning
from aiojetstream.spark._kv import _BATCH_ROWS, KVReader, _Snapshot
from aiojetstream.spark._options import parse_kv_options, parse_sink_options
from aiojetstream.spark._write import StreamWriter, check_sink_schema, record_batches
from aiojetstream.testing import NatsServer
from helpers import unique_name, wait_until
from spark.spark_helpers import Nats

#: Two and a half Arrow batches; the watch prefetches about 1,000 values, so
#: after the first batch the last key's value has not been delivered yet.
KEYS = 2 * _BATCH_ROWS + _BATCH_ROWS // 2


def test_kv_read_key_updated_between_batches_appears_once(nats: Nats) -> None:
    bucket = unique_name("KV")
    keys = [f"k{i:05d}" for i in range(KEYS)]

    async def fill(js: JetStreamContext) -> None:
        await js.create_key_value(KeyValueConfig(bucket=bucket))  # history 1
        acks = [await js.publish_async(f"$KV.{bucket}.{key}", b"v1") for key in keys]
        await asyncio.gather(*acks)

    nats.run(fill)
    kv = nats.run(lambda js: js.key_value(bucket))
    reader = KVReader(parse_kv_options({"servers": nats.url, "bucket": bucket}))
    batches = reader.read(InputPartition(bucket))
    first = next(batches)
    assert isinstance(first, pa.RecordBatch)
    assert first.column("key").to_pylist()[0] == keys[0]
    # A writer updates a key already read and one not yet delivered (its only
    # revision, the initial value, is replaced), and adds a key.
    nats.run(kv.put(keys[0], b"v2"))
    last_rev = nats.run(kv.put(keys[-1], b"v2"))
    nats.run(kv.put("new", b"v2"))
    rows: list[dict[str, Any]] = first.to_pylist()
    for batch in batches:
        assert isinstance(batch, pa.RecordBatch)
        rows += batch.to_pylist()

    counts = Counter(r["key"] for r in rows)
    assert [k for k, n in counts.items() if n > 1] == []
    # Every key of the start is there, once; "new" may or may not be.
    assert set(counts) - {"new"} == set(keys)
    by_key = {r["key"]: r for r in rows}
    assert by_key[keys[0]]["value"] == b"v1"  # read before its update
    # The last key's first value was gone before delivery: its update stands in.
    assert (by_key[keys[-1]]["value"], by_key[keys[-1]]["revision"]) == (b"v2", last_rev)
    assert all(by_key[k]["value"] == b"v1" for k in keys[1:-1])


SINK_SCHEMA = StructType(
    [
        StructField("data", BinaryType()),
        StructField("subject", StringType()),
        StructField("headers", MapType(StringType(), StringType())),
        StructField("ttl", DoubleType()),
    ]
)


def _stream_writer(url: str, schema: StructType) -> StreamWriter:
    opts = parse_sink_options({"servers": url})
    return StreamWriter(opts, check_sink_schema(schema, opts))


def test_stream_writer_rows_publish_each_rows_own_headers(nats: Nats) -> None:
    stream = unique_name("S")
    nats.run(lambda js: js.create_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"])))
    headers: list[dict[str, str] | None] = [
        {"a": "1"},
        {"b": "2"},
        None,
        {"a": "x", "b": "y", "C": "z"},
        {},
        {"b": "3"},
    ]
    rows = [
        Row(data=bytearray(b"m%d" % i), subject=f"{stream}.s", headers=h, ttl=None)
        for i, h in enumerate(headers)
    ]
    result = _stream_writer(nats.url, SINK_SCHEMA).write(iter(rows))
    assert result.rows == len(rows)
    handle = nats.run(lambda js: js.stream(stream))
    for i, h in enumerate(headers):
        msg = nats.run(handle.get_msg(i + 1))
        assert msg.data == b"m%d" % i
        assert (msg.headers or None) == (h or None), f"row {i}"


def test_record_batches_types_rows_by_the_sink_schema() -> None:
    schema = StructType(
        [
            StructField("data", StringType()),
            StructField("headers", MapType(StringType(), StringType())),
            StructField("ttl", DecimalType(10, 2)),
            StructField("other", StringType()),
        ]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # column 'other' is not written
        columns = check_sink_schema(schema, parse_sink_options({"subject": "x"}))
    rows = [
        Row(data="a", headers={"a": "1"}, ttl=None, other="o"),
        Row(data=None, headers=None, ttl=Decimal("1.5"), other="o"),
        Row(data="c", headers={"b": "2"}, ttl=Decimal("30"), other="o"),
    ]
    (batch,) = record_batches(iter(rows), columns.arrow)
    assert batch.schema.names == ["data", "headers", "ttl"]
    assert batch.schema.field("headers").type == pa.map_(pa.string(), pa.string())
    assert batch.schema.field("ttl").type == pa.decimal128(10, 2)
    assert batch.column("headers").to_pylist() == [[("a", "1")], None, [("b", "2")]]
    assert batch.column("data").to_pylist() == ["a", None, "c"]
    assert batch.column("ttl").to_pylist() == [None, Decimal("1.50"), Decimal("30.00")]
    # Arrow batches (Spark >= 4.1) pass through unchanged.
    arrow = pa.RecordBatch.from_pylist([{"data": b"z"}])
    assert list(record_batches(iter([arrow]), columns.arrow)) == [arrow]


def test_dedupe_auto_uses_a_reads_stream_and_seq_columns() -> None:
    """With dedupe=auto a read's ``stream`` and ``seq`` make the ids: typed into the
    rows (Spark 4.0 streaming writes hand Row objects), and not warned as unwritten."""
    schema = StructType(
        [
            StructField("data", BinaryType()),
            StructField("stream", StringType()),
            StructField("seq", LongType()),
        ]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        columns = check_sink_schema(schema, parse_sink_options({"subject": "x", "dedupe": "auto"}))
    assert columns.arrow.names == ["data", "stream", "seq"]
    with pytest.warns(JetStreamSparkWarning, match=r"\['seq', 'stream'\] are not written"):
        columns = check_sink_schema(schema, parse_sink_options({"subject": "x"}))
    assert columns.arrow.names == ["data"]


def test_kv_read_continues_a_reply_the_server_cut_at_its_byte_limit() -> None:
    """Keys past the server's byte limit for one batch direct get are read as of the
    snapshot too (the read continues the batch), not as they are now.

    The server's ``max_pending`` (the default limit of a batch direct get) is
    lowered to 4 MiB; 40 keys of 300 kB values (history 5) need several replies.
    After the snapshot's start every key is rewritten and some are deleted:
    the read still returns every key's value at the start.
    """
    bucket = unique_name("KVBIG")
    keys = [f"k{i:02d}" for i in range(40)]
    old, new = b"1" * 300_000, b"2" * 300_000
    with NatsServer(config={"max_pending": 4 * 1024 * 1024}) as server:
        nats = Nats(server.url)
        try:
            kv = nats.run(lambda js: js.create_key_value(KeyValueConfig(bucket=bucket, history=5)))
            for key in keys:
                nats.run(kv.put(key, old))
            snapshot = _Snapshot(kv)
            nats.run(snapshot.start())
            for key in keys:
                nats.run(kv.put(key, new))
            for key in keys[30:]:
                nats.run(kv.delete(key))
            entries: list[RawStreamMessage] = []
            while not snapshot.ended:
                entries += nats.run(snapshot.next_entries())
        finally:
            nats.close()
    assert sorted(m.subject.rsplit(".", 1)[1] for m in entries) == keys
    assert all(m.data == old for m in entries)


def test_kv_read_of_long_keys_keeps_each_request_under_max_payload(nats: Nats) -> None:
    """1,024 keys a batch get named 1,024 subjects in one request: keys of 1,200
    characters (valid) made it 1.2 MB, over the server's max_payload of 1 MiB, and the
    read failed at once with MaxPayloadExceededError. Pages are cut by bytes too."""
    bucket = unique_name("KVLONG")
    keys = [f"{i:04d}" + "k" * 1_196 for i in range(1_100)]
    kv = nats.run(lambda js: js.create_key_value(KeyValueConfig(bucket=bucket)))
    for key in keys:
        nats.run(kv.put(key, b"v"))
    snapshot = _Snapshot(kv)
    nats.run(snapshot.start())
    entries: list[RawStreamMessage] = []
    while not snapshot.ended:
        entries += nats.run(snapshot.next_entries())
    assert sorted(m.subject.rsplit(".", 1)[1] for m in entries) == keys


def test_kv_read_leaves_out_stored_subjects_with_wildcard_tokens(nats: Nats) -> None:
    """A subject such as ``$KV.<b>.>`` is no key (puts refuse it), but a server stores
    what another client publishes there; as a filter it would match every key."""
    import nats as nats_py

    bucket = unique_name("KVW")
    keys = [f"k{i}" for i in range(10)]

    async def fill(js: JetStreamContext) -> None:
        kv = await js.create_key_value(KeyValueConfig(bucket=bucket))
        for key in keys:
            await kv.put(key, b"v")
        raw = await nats_py.connect(nats.url)
        try:
            for subject in (f"$KV.{bucket}.>", f"$KV.{bucket}.x.*"):
                await raw.request(subject, b"wild", timeout=5)  # stored: acknowledged
        finally:
            await raw.close()

    nats.run(fill)
    reader = KVReader(parse_kv_options({"servers": nats.url, "bucket": bucket}))
    rows = [r for batch in reader.read(InputPartition(bucket)) for r in batch.to_pylist()]
    assert sorted(r["key"] for r in rows) == keys


@pytest.mark.parametrize("history", [1, 5])
def test_kv_read_leaves_out_keys_created_during_the_read(nats: Nats, history: int) -> None:
    """A key created between the snapshot's two stream-info calls (the key listing and
    ``L``), or after them, is not read; one replaced after ``L`` is read as of ``L``
    (``history=5``) or as it is now (``history=1``: its value at ``L`` is gone)."""
    bucket = unique_name("KVC")
    kv = nats.run(lambda js: js.create_key_value(KeyValueConfig(bucket=bucket, history=history)))
    nats.run(kv.put("old", b"1"))
    real_info = kv.stream.info
    calls = 0

    async def info(**kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:  # between the snapshot's two calls
            await kv.put("between", b"x")
        return await real_info(**kwargs)

    kv.stream.info = info  # type: ignore[method-assign]
    snapshot = _Snapshot(kv)
    nats.run(snapshot.start())
    assert calls == 2
    nats.run(kv.put("after", b"x"))
    new_rev = nats.run(kv.put("old", b"2"))
    entries: list[RawStreamMessage] = []
    while not snapshot.ended:
        entries += nats.run(snapshot.next_entries())
    assert [(m.subject.rsplit(".", 1)[1], m.data) for m in entries] == [
        ("old", b"1" if history > 1 else b"2")
    ]
    if history == 1:
        assert entries[0].seq == new_rev


def test_kv_read_of_a_bucket_deleted_during_it_fails_as_bucket_not_found(nats: Nats) -> None:
    bucket = unique_name("KVD")
    kv = nats.run(lambda js: js.create_key_value(KeyValueConfig(bucket=bucket)))
    nats.run(kv.put("k", b"v"))
    snapshot = _Snapshot(kv)
    nats.run(snapshot.start())
    nats.run(lambda js: js.delete_key_value(bucket))
    with pytest.raises(BucketNotFoundError, match=f"bucket '{bucket}' not found"):
        nats.run(snapshot.next_entries())


def test_kv_read_of_a_bucket_created_again_during_it_fails(nats: Nats) -> None:
    """Its keys would be read from the new bucket up to the old one's last sequence."""
    bucket = unique_name("KVR")

    async def create(value: bytes) -> Any:
        kv = await nats.js.create_key_value(KeyValueConfig(bucket=bucket))
        for i in range(3):
            await kv.put(f"k{i}", value)
        return kv

    kv = nats.run(create(b"old"))
    snapshot = _Snapshot(kv)
    nats.run(snapshot.start())
    nats.run(lambda js: js.delete_key_value(bucket))
    nats.run(create(b"new"))
    with pytest.raises(DataLossError, match=f"bucket '{bucket}' was deleted and created again"):
        nats.run(snapshot.next_entries())


def test_kv_read_task_of_a_bucket_created_again_since_planning_fails(nats: Nats) -> None:
    bucket = unique_name("KVP")
    nats.run(lambda js: js.create_key_value(KeyValueConfig(bucket=bucket)))
    reader = KVReader(parse_kv_options({"servers": nats.url, "bucket": bucket}))
    (partition,) = reader.partitions()
    nats.run(lambda js: js.delete_key_value(bucket))
    kv = nats.run(lambda js: js.create_key_value(KeyValueConfig(bucket=bucket)))
    nats.run(kv.put("k", b"new"))
    with pytest.raises(DataLossError, match="was deleted and created again"):
        list(reader.read(partition))


def test_kv_read_of_a_mirror_with_subject_transforms_reads_its_renamed_keys(nats: Nats) -> None:
    """The snapshot reads the subjects the mirror holds (``$KV.<mirror>.``), as the handle does."""
    origin = unique_name("KVO")
    name = unique_name("KVM")
    rename = SubjectTransformConfig(src=f"$KV.{origin}.>", dest=f"$KV.{name}.>")

    async def create(js: JetStreamContext) -> Any:
        kv = await js.create_key_value(KeyValueConfig(bucket=origin))
        await kv.put("k", b"v")
        mirror = StreamSource(name=origin, subject_transforms=[rename])
        return await js.create_key_value(KeyValueConfig(bucket=name, mirror=mirror))

    kv = nats.run(create)

    async def mirrored() -> bool:
        values: int = (await kv.status()).values
        return values == 1

    nats.run(wait_until(mirrored))
    snapshot = _Snapshot(kv)
    nats.run(snapshot.start())
    entries: list[RawStreamMessage] = []
    while not snapshot.ended:
        entries += nats.run(snapshot.next_entries())
    assert [(m.subject, m.data) for m in entries] == [(f"$KV.{name}.k", b"v")]
