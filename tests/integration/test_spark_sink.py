"""The ``jetstream`` sink on a real server: subjects that reach a stream through the
account's subject mappings or a service import; the ids of a copy that keeps its headers.

No Spark here: ``writer()`` / ``streamWriter()`` are called as Spark's driver
calls them before the job, and ``write()`` / ``commit()`` as its tasks and
driver do. The real-Spark sink tests are in tests/spark/.
"""

from __future__ import annotations

import asyncio
import contextlib
import warnings
from collections.abc import Iterable, Iterator

import pyarrow as pa
import pytest
from pyspark.sql.types import (
    BinaryType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

import aiojetstream
from aiojetstream import (
    InvalidOptionError,
    KeyValueConfig,
    MessageNotFoundError,
    NoRespondersError,
    RawStreamMessage,
    Stream,
    StreamConfig,
    StreamSource,
)
from aiojetstream.spark import JetStreamDataSource, JetStreamSparkWarning, _runtime
from aiojetstream.spark._write import StreamWriter, Writer, WriteResult
from aiojetstream.testing import NatsServer
from helpers import CROSS_ACCOUNTS_CONFIG, unique_name, wait_until

SCHEMA = StructType([StructField("data", StringType()), StructField("subject", StringType())])
SCHEMA_ARROW = pa.schema([("data", pa.string()), ("subject", pa.string())])


@pytest.fixture(scope="module")
def server() -> Iterator[NatsServer]:
    with NatsServer(config=CROSS_ACCOUNTS_CONFIG) as srv:
        yield srv


@pytest.fixture(autouse=True)
def clean() -> Iterator[None]:
    """No shared session of this module's server outlives it (nor one of another's is used)."""
    _runtime._close_shared()
    yield
    _runtime._close_shared()


def shared_stream(server: NatsServer) -> str:
    """A stream of account A on ``shared.<name>.>``; its name."""
    name = unique_name("SINK")

    async def create() -> None:
        js = await aiojetstream.connect(server.url, user="a", password="a")
        try:
            await js.create_stream(StreamConfig(name=name, subjects=[f"shared.{name}.>"]))
        finally:
            await js.close()

    asyncio.run(create())
    return name


def messages(server: NatsServer, name: str) -> list[RawStreamMessage]:
    """The messages stream ``name`` holds, in order."""

    async def read() -> list[RawStreamMessage]:
        js = await aiojetstream.connect(server.url, user="a", password="a")
        try:
            stream = await js.stream(name)
            last = (await stream.info()).state.last_seq
            out: list[RawStreamMessage] = []
            for seq in range(1, last + 1):
                out.append(await stream.get_msg(seq))
            return out
        finally:
            await js.close()

    return asyncio.run(read())


def subjects(server: NatsServer, name: str) -> list[str]:
    """The subjects of the messages stream ``name`` holds, in order."""
    return [m.subject for m in messages(server, name)]


def write_both_ways(options: dict[str, str], subject: str | None) -> None:
    """One row through a batch write and one through a micro-batch, as Spark runs them."""
    source = JetStreamDataSource(options)
    writer = source.writer(SCHEMA, False)
    assert isinstance(writer, Writer)
    result = writer.write(iter([row("batch", subject)]))
    assert result == WriteResult(rows=1)
    writer.commit([result])
    stream_writer = source.streamWriter(SCHEMA, False)
    assert isinstance(stream_writer, StreamWriter)
    result = stream_writer.write(iter([row("stream", subject)]))
    assert result == WriteResult(rows=1)
    stream_writer.commit([result], 0)


#: The columns of a copy of a ``jetstream`` read that keeps its headers.
COPY_SCHEMA = StructType(
    [
        StructField("data", BinaryType()),
        StructField("headers", MapType(StringType(), StringType())),
        StructField("stream", StringType()),
        StructField("seq", LongType()),
    ]
)


def copied_rows(
    messages: list[tuple[bytes, dict[str, str] | None]],
    streams: list[str],
    seqs: Iterable[int],
) -> pa.RecordBatch:
    """Rows as a read hands them to a copy: data, headers, stream and seq (COPY_SCHEMA)."""
    return pa.RecordBatch.from_pylist(
        [
            {"data": data, "headers": list((headers or {}).items()), "stream": name, "seq": seq}
            for (data, headers), name, seq in zip(messages, streams, seqs, strict=True)
        ],
        pa.schema(
            [
                ("data", pa.binary()),
                ("headers", pa.map_(pa.string(), pa.string())),
                ("stream", pa.string()),
                ("seq", pa.int64()),
            ]
        ),
    )


def row(data: str, subject: str | None) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([{"data": data, "subject": subject}], SCHEMA_ARROW)


def test_a_subject_the_account_maps_to_a_stream(server: NatsServer) -> None:
    """option('subject') mapped onto a stream's subjects (the account's ``mappings``):
    the driver asked STREAM.NAMES, which ignores mappings, and refused the write
    ("no stream ... captures"), though the publish reaches the stream."""
    name = shared_stream(server)
    options = {
        "servers": server.url,
        "user": "a",
        "password": "a",
        "subject": f"alias.{name}.x",
    }
    write_both_ways(options, None)
    assert subjects(server, name) == [f"shared.{name}.x"] * 2


def test_an_account_without_jetstream_writing_through_a_service_import(
    server: NatsServer,
) -> None:
    """Account I has no JetStream of its own and publishes into A's stream through a
    service import: the driver's account_info() failed (JetStream not enabled for
    account), so every write was refused before the job."""
    name = shared_stream(server)
    for subject_option in (False, True):
        options = {"servers": server.url, "user": "i", "password": "i"}
        if subject_option:
            options["subject"] = f"shared.{name}.opt"
        write_both_ways(options, None if subject_option else f"shared.{name}.col")
    assert subjects(server, name) == [f"shared.{name}.col"] * 2 + [f"shared.{name}.opt"] * 2


def test_option_subject_overrides_the_subject_column(server: NatsServer) -> None:
    """As Kafka's topic option overrides a topic column: every row goes to the
    option's subject, whatever its column says (a copy of a read went back into
    its source stream, a loop when streaming)."""
    name = shared_stream(server)
    options = {"servers": server.url, "user": "a", "password": "a"}
    with pytest.warns(JetStreamSparkWarning, match=r"option\('subject'\) overrides"):
        write_both_ways({**options, "subject": f"shared.{name}.opt"}, f"shared.{name}.col")
    assert subjects(server, name) == [f"shared.{name}.opt"] * 2
    # Without the option the column is the subject, and a null one is refused.
    write_both_ways(options, f"shared.{name}.col")
    assert subjects(server, name)[2:] == [f"shared.{name}.col"] * 2
    writer = JetStreamDataSource(options).writer(SCHEMA, False)
    assert isinstance(writer, Writer)
    with pytest.raises(InvalidOptionError, match="row 0 has a null 'subject'"):
        writer.write(iter([row("x", None)]))


def test_a_subject_no_stream_captures_fails_the_task_saying_what_to_do(
    server: NatsServer,
) -> None:
    """Nothing is checked before the job but the connection; the task's publish fails
    with the cause and what to do."""
    source = JetStreamDataSource(
        {"servers": server.url, "user": "i", "password": "i", "subject": "nowhere.x"}
    )
    writer = source.writer(SCHEMA, False)
    assert isinstance(writer, Writer)
    with pytest.raises(
        NoRespondersError,
        match=r"no stream captures subject 'nowhere\.x': create a stream whose subjects match it",
    ):
        writer.write(iter([row("x", None)]))


def test_a_copy_keeping_its_headers_stores_messages_of_one_msg_id_each(
    server: NatsServer,
) -> None:
    """A copy of a read (stream, seq and headers kept, dedupe=auto) of two messages the
    source stored with the same Nats-Msg-Id (published beyond its duplicate_window):
    the copied header was sent as the id, the copy stored one of them, and the write
    reported success. The copy's id wins; the header's value stays readable."""
    name = shared_stream(server)
    copy = copied_rows(
        [
            (b"reading-1", {"Nats-Msg-Id": "sensor-7", "X": "1"}),
            (b"reading-2", {"Nats-Msg-Id": "sensor-7"}),
        ],
        ["SRC", "SRC"],
        [1, 2],
    )
    schema = COPY_SCHEMA
    writer = JetStreamDataSource(
        {
            "servers": server.url,
            "user": "a",
            "password": "a",
            "subject": f"shared.{name}.copy",
            "dedupe": "auto",
        }
    ).writer(schema, False)
    assert isinstance(writer, Writer)
    first = writer.write(iter([copy]))
    assert first == WriteResult(rows=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        writer.commit([first])
    stored = messages(server, name)
    assert [m.data for m in stored] == [b"reading-1", b"reading-2"]
    assert [m.headers for m in stored] == [
        {"X": "1", "Source-Nats-Msg-Id": "sensor-7", "Nats-Msg-Id": f"{writer.write_id}-SRC:1"},
        {"Source-Nats-Msg-Id": "sensor-7", "Nats-Msg-Id": f"{writer.write_id}-SRC:2"},
    ]
    # A retried task: nothing stored twice, and the commit says what the stream dropped.
    again = writer.write(iter([copy]))
    assert again == WriteResult(rows=2, duplicates=2)
    with pytest.warns(JetStreamSparkWarning, match="published 2 rows; the stream dropped 2"):
        writer.commit([again])
    assert len(messages(server, name)) == 2


def test_a_copy_leaves_out_the_sources_expectations_and_batch_headers(
    server: NatsServer,
) -> None:
    """A copy of a read that keeps its headers sent the source's control headers
    again: a kv.create's Nats-Expected-Last-Subject-Sequence (the second copy into an
    archive failed, wrong last sequence) and an atomic batch's Nats-Batch-* (into a
    stream allowing batches: no acknowledgement, the task failed after storing; each
    retry stored the rows again). Left out, as nats-server's sourcing does."""
    src, arc = unique_name("CTLSRC"), unique_name("CTLARC")

    async def setup() -> list[RawStreamMessage]:
        js = await aiojetstream.connect(server.url, user="a", password="a")
        try:
            await js.create_stream(
                StreamConfig(name=src, subjects=[f"shared.{src}.>"], allow_atomic=True)
            )
            await js.create_stream(
                StreamConfig(name=arc, subjects=[f"shared.{arc}.>"], allow_atomic=True)
            )
            await js.publish(f"shared.{src}.k", b"first", expected_last_subject_sequence=0)
            await js.publish(f"shared.{src}.k", b"second", expected_last_subject_sequence=1)
            batch = js.atomic_batch()
            await batch.add(f"shared.{src}.b", b"b1")
            await batch.commit(f"shared.{src}.b", b"b2")
            stream = await js.stream(src)
            return [await stream.get_msg(seq) for seq in range(1, 5)]
        finally:
            await js.close()

    source = asyncio.run(setup())
    controls = {k for m in source for k in (m.headers or {}) if k.startswith("Nats-")}
    assert "Nats-Expected-Last-Subject-Sequence" in controls
    assert "Nats-Batch-Id" in controls
    copy = copied_rows(
        [(m.data, m.headers) for m in source], [src] * len(source), [m.seq for m in source]
    )
    schema = COPY_SCHEMA
    options = {
        "servers": server.url,
        "user": "a",
        "password": "a",
        "subject": f"shared.{arc}.copy",
    }
    for _ in range(2):  # two writes: the second is a new copy (a new write id)
        writer = JetStreamDataSource(options).writer(schema, False)
        assert isinstance(writer, Writer)
        result = writer.write(iter([copy]))
        assert result == WriteResult(rows=4)
        writer.commit([result])
    stored = messages(server, arc)
    assert [m.data for m in stored] == [b"first", b"second", b"b1", b"b2"] * 2
    for m in stored:
        left = {k for k in (m.headers or {}) if k.startswith(("Nats-Expected-", "Nats-Batch-"))}
        assert not left, m.headers


def test_a_copy_does_not_roll_up_count_or_claim_a_source_again(server: NatsServer) -> None:
    """The review of the first fix: a KV purge entry's Nats-Rollup (into an archive
    allowing rollups the write reported 4 rows and the archive kept 2: the copied
    purge deleted the copies before it; elsewhere 10111), a counter's Nats-Incr
    (10168), a sourced message's Nats-Stream-Source (10227) and a Nats-TTL (into a
    stream without TTLs: 10166, part of the copy stored) went out again too."""
    bucket, counters, sourced, ttls, arc = (
        unique_name("CTLKV"),
        unique_name("CTLCNT"),
        unique_name("CTLSRCD"),
        unique_name("CTLTTL"),
        unique_name("CTLARC2"),
    )

    async def setup() -> list[RawStreamMessage]:
        js = await aiojetstream.connect(server.url, user="a", password="a")
        try:
            kv = await js.create_key_value(KeyValueConfig(bucket=bucket, history=5))
            await kv.put("k", b"1")
            await kv.put("k", b"2")
            await kv.purge("k")
            await js.create_stream(
                StreamConfig(
                    name=counters, subjects=[f"shared.{counters}.>"], allow_msg_counter=True
                )
            )
            await js.counter(counters).add(f"shared.{counters}.c", 5)
            await js.create_stream(
                StreamConfig(name=sourced, sources=[StreamSource(name=counters)])
            )
            await js.create_stream(
                StreamConfig(name=ttls, subjects=[f"shared.{ttls}.>"], allow_msg_ttl=True)
            )
            await js.publish(f"shared.{ttls}.t", b"for a minute", ttl=60)
            await js.create_stream(
                StreamConfig(name=arc, subjects=[f"shared.{arc}.>"], allow_rollup_hdrs=True)
            )
            out: list[RawStreamMessage] = []
            for name, count in ((f"KV_{bucket}", 3), (counters, 1), (sourced, 1), (ttls, 1)):
                stream = await js.stream(name)

                async def holds(stream: Stream = stream, count: int = count) -> bool:
                    return (await stream.info()).state.last_seq >= count

                await wait_until(holds, 10)
                last = (await stream.info()).state.last_seq
                for seq in range(1, last + 1):
                    with contextlib.suppress(MessageNotFoundError):  # (purged revisions)
                        out.append(await stream.get_msg(seq))
            return out
        finally:
            await js.close()

    source = asyncio.run(setup())
    controls = {k for m in source for k in (m.headers or {})}
    assert {"Nats-Rollup", "Nats-Incr", "Nats-Stream-Source", "Nats-TTL"} <= controls
    copy = copied_rows(
        [(m.data, m.headers) for m in source], ["S"] * len(source), range(1, len(source) + 1)
    )
    schema = COPY_SCHEMA
    writer = JetStreamDataSource(
        {"servers": server.url, "user": "a", "password": "a", "subject": f"shared.{arc}.copy"}
    ).writer(schema, False)
    assert isinstance(writer, Writer)
    result = writer.write(iter([copy]))
    assert result == WriteResult(rows=len(source))
    writer.commit([result])
    stored = messages(server, arc)
    assert [m.data for m in stored] == [m.data for m in source]  # nothing rolled up
    for m in stored:
        left = {"Nats-Rollup", "Nats-Incr", "Nats-Stream-Source", "Nats-TTL"}
        assert not left & set(m.headers or {})
