"""The ``jetstream`` sink on subjects that reach a stream through the account's
subject mappings or a service import, on a real server.

No Spark here: ``writer()`` / ``streamWriter()`` are called as Spark's driver
calls them before the job, and ``write()`` / ``commit()`` as its tasks and
driver do. The real-Spark sink tests are in tests/spark/.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pyarrow as pa
import pytest
from pyspark.sql.types import StringType, StructField, StructType

import aiojetstream
from aiojetstream import NoRespondersError, StreamConfig
from aiojetstream.spark import JetStreamDataSource, _runtime
from aiojetstream.spark._write import StreamWriter, Writer, WriteResult
from aiojetstream.testing import NatsServer
from helpers import CROSS_ACCOUNTS_CONFIG, unique_name

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


def subjects(server: NatsServer, name: str) -> list[str]:
    """The subjects of the messages stream ``name`` holds, in order."""

    async def read() -> list[str]:
        js = await aiojetstream.connect(server.url, user="a", password="a")
        try:
            stream = await js.stream(name)
            last = (await stream.info()).state.last_seq
            out: list[str] = []
            for seq in range(1, last + 1):
                out.append((await stream.get_msg(seq)).subject)
            return out
        finally:
            await js.close()

    return asyncio.run(read())


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
