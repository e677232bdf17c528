"""The Spark reader's range reading without Spark: chunks, recreation, ends, clean-up."""

from __future__ import annotations

import asyncio
import time

import pytest

import aiojetstream
from aiojetstream import JetStreamContext, StreamConfig
from aiojetstream.spark import DataLossError, JetStreamSparkWarning
from aiojetstream.spark._options import parse_source_options
from aiojetstream.spark._read import RangeReader
from aiojetstream.testing import NatsServer
from helpers import unique_name


async def fill(js: JetStreamContext, prefix: str, n: int) -> str:
    """A stream of its own (``prefix`` plus a random suffix) with ``n`` messages; its name."""
    stream = unique_name(prefix)
    await js.create_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"]))
    for i in range(n):
        await js.publish_async(f"{stream}.{'ab'[i % 2]}", b"%d" % i)
    await js.publish_async_complete()
    return stream


async def read_all(reader: RangeReader) -> list[int]:
    seqs: list[int] = []
    while (batch := await reader.next_batch()) is not None:
        seqs += batch.column("seq").to_pylist()
    return seqs


async def test_recreates_a_vanished_consumer_at_the_next_sequence(
    js: JetStreamContext, nats_url: str
) -> None:
    rr1 = await fill(js, "RR1", 5000)
    opts = parse_source_options({"stream": rr1, "servers": nats_url}, streaming=False)
    reader = RangeReader(js, opts, 1, 5001)
    first = await reader.next_batch()
    assert first is not None
    seqs = first.column("seq").to_pylist()
    assert seqs == list(range(1, len(seqs) + 1))
    assert len(seqs) < 5000
    # Spark held the task past the inactivity threshold: the consumer is gone.
    names = [n async for n in js.consumer_names(rr1)]
    assert len(names) == 1
    await js.delete_consumer(rr1, names[0])
    seqs += await read_all(reader)
    assert seqs == list(range(1, 5001))  # no gap, no duplicate
    await reader.aclose()
    assert [n async for n in js.consumer_names(rr1)] == []


async def test_range_end_and_filter(js: JetStreamContext, nats_url: str) -> None:
    rr2 = await fill(js, "RR2", 100)
    opts = parse_source_options(
        {"stream": rr2, "servers": nats_url, "subject": f"{rr2}.b"}, streaming=False
    )
    reader = RangeReader(js, opts, 10, 31)
    assert await read_all(reader) == list(range(10, 31, 2))
    await reader.aclose()
    # Fewer matching messages left (6) than the range has sequences (11): each fetch
    # takes what is there, none waits for its expiry (5 s).
    loop = asyncio.get_running_loop()
    started = loop.time()
    reader = RangeReader(js, opts, 90, 101)
    assert await read_all(reader) == list(range(90, 101, 2))
    assert loop.time() - started < 2.5
    await reader.aclose()
    # The end is exclusive: a range ending at a matching message's sequence (100, the
    # last the consumer delivers) leaves it to the next range.
    for end in (100, 99):
        reader = RangeReader(js, opts, 90, end)
        assert await read_all(reader) == list(range(90, end, 2))
        await reader.aclose()
        reader = RangeReader(js, opts, end, 101)
        assert await read_all(reader) == list(range(100, 101, 2))
        await reader.aclose()
    # Nothing matches from here on: the read ends at once, without waiting for a fetch.
    opts = parse_source_options(
        {"stream": rr2, "servers": nats_url, "subject": f"{rr2}.none"}, streaming=False
    )
    reader = RangeReader(js, opts, 1, 101)
    assert await read_all(reader) == []
    await reader.aclose()
    assert [n async for n in js.consumer_names(rr2)] == []


async def test_each_row_has_its_message_s_stored_time(js: JetStreamContext, nats_url: str) -> None:
    """The ``timestamp`` column is each message's stored time, to the microsecond
    (read from another token of the reply subject, every row said 1970-01-01; the
    one check, that the column is sorted, passed)."""
    rr = await fill(js, "RRT", 20)
    opts = parse_source_options({"stream": rr, "servers": nats_url}, streaming=False)
    reader = RangeReader(js, opts, 1, 21)
    rows: list[tuple[int, object]] = []
    while (batch := await reader.next_batch()) is not None:
        rows += zip(
            batch.column("seq").to_pylist(), batch.column("timestamp").to_pylist(), strict=True
        )
    await reader.aclose()
    assert [seq for seq, _ in rows] == list(range(1, 21))
    stream = await js.stream(rr)
    assert [stamp for _, stamp in rows] == [(await stream.get_msg(seq)).time for seq, _ in rows]


async def test_data_loss_before_the_read_and_after_a_recreation(
    js: JetStreamContext, nats_url: str
) -> None:
    rr3 = await fill(js, "RR3", 100)
    stream = await js.stream(rr3)
    await stream.purge()  # everything planned is gone before the partition runs
    strict = parse_source_options({"stream": rr3, "servers": nats_url}, streaming=False)
    reader = RangeReader(js, strict, 1, 101)
    with pytest.raises(DataLossError, match=r"1\.\.100"):
        await reader.next_batch()
    await reader.aclose()

    rr4 = await fill(js, "RR4", 5000)
    opts = parse_source_options({"stream": rr4, "servers": nats_url}, streaming=False)
    reader = RangeReader(js, opts, 1, 5001)
    first = await reader.next_batch()
    assert first is not None
    read = first.num_rows
    # The consumer vanished while Spark held the task, and the stream lost a range.
    names = [n async for n in js.consumer_names(rr4)]
    await js.delete_consumer(rr4, names[0])
    await (await js.stream(rr4)).purge(sequence=4001)
    with pytest.raises(DataLossError, match=rf"{read + 1}\.\.4000"):
        await reader.next_batch()
    await reader.aclose()
    lenient = parse_source_options(
        {"stream": rr4, "servers": nats_url, "failOnDataLoss": "false"}, streaming=False
    )
    reader = RangeReader(js, lenient, 1, 5001)
    with pytest.warns(JetStreamSparkWarning):
        assert await read_all(reader) == list(range(4001, 5001))
    await reader.aclose()


async def test_data_lost_between_the_check_and_the_consumer(
    js: JetStreamContext, nats_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Limits that remove messages right after the first-sequence check are still seen.

    The server starts a consumer at the stream's first message when its start
    sequence is gone; the reader compares where the new consumer starts.
    """
    from aiojetstream.spark import _read

    real_bounds = _read.stream_bounds
    purge_next: list[str] = []

    async def checked_then_purged(
        js_: JetStreamContext, opts: object, stream: str | None = None
    ) -> _read.Bounds:
        bounds = await real_bounds(js_, opts, stream)  # type: ignore[arg-type]
        if purge_next:  # just after the check
            await (await js_.stream(purge_next.pop())).purge(sequence=201)
        return bounds

    monkeypatch.setattr(_read, "stream_bounds", checked_then_purged)
    for strict in (True, False):
        stream = await fill(js, "RR5", 300)
        purge_next.append(stream)
        opts = parse_source_options(
            {"stream": stream, "servers": nats_url, "failOnDataLoss": str(strict).lower()},
            streaming=False,
        )
        reader = RangeReader(js, opts, 150, 301)
        if strict:  # was: rows 201-300, no error
            with pytest.raises(DataLossError, match=r"150\.\.200"):
                await reader.next_batch()
        else:  # was: no warning
            with pytest.warns(JetStreamSparkWarning, match=r"150\.\.200"):
                assert await read_all(reader) == list(range(201, 301))
        await reader.aclose()
        assert not purge_next  # the purge came after the check


def test_stream_reader_offsets_going_backwards_and_lost_gaps(nats_server: NatsServer) -> None:
    """The driver-side offset calls, as Spark 4.0/4.1 and 4.2+ make them."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from aiojetstream.spark._source import SequenceRange, StreamReader

    async def setup() -> tuple[str, str]:
        async with await aiojetstream.connect(nats_server.url) as js:
            name = await fill(js, "RR5", 1000)
            stream = await js.stream(name)
            await stream.purge(sequence=901)
            return name, stream.cached_info.created.isoformat()

    rr5, created = asyncio.run(setup())
    base = {"stream": rr5, "servers": nats_server.url}
    reader = StreamReader(parse_source_options(base, streaming=True))
    try:
        # 4.2+: a limit counts from what the stream still holds, not through the gap.
        lenient = StreamReader(
            parse_source_options({**base, "failOnDataLoss": "false"}, streaming=True)
        )
        assert lenient.latestOffset({"stream": rr5, "seq": 1}, ReadMaxRows(10)) == {
            "stream": rr5,
            "seq": 911,
            "created": created,
            "from": 1,  # the batch's start: partitions() reports the gap (1..900)
        }
        # 4.0/4.1: latestOffset() has no start; a checkpoint past the end shows in partitions().
        end = reader.latestOffset()
        assert end == {"stream": rr5, "seq": 1001, "created": created, "from": 1001}
        # An end offset without its start (a checkpoint of a version before "from"):
        # the start offset Spark passes decides where the batch starts.
        del end["from"]
        with pytest.raises(DataLossError, match="deleted and created again"):
            reader.partitions({"stream": rr5, "seq": 2000}, end)
        with pytest.warns(JetStreamSparkWarning):
            assert lenient.partitions({"stream": rr5, "seq": 2000}, end) == []
        # An offset of an earlier stream of that name (deleted, created again).
        earlier = {"stream": rr5, "seq": 950, "created": "2000-01-01T00:00:00+00:00"}
        with pytest.raises(DataLossError, match="was deleted and created again"):
            reader.partitions(earlier, end)
        with pytest.raises(DataLossError, match="was deleted and created again"):
            reader.latestOffset(earlier, ReadMaxRows(10))
        with pytest.warns(JetStreamSparkWarning, match="from its first sequence"):
            (whole,) = lenient.partitions(earlier, end)
        assert isinstance(whole, SequenceRange)
        assert (whole.start, whole.end) == (901, 1001)
        lenient.stop()
    finally:
        reader.stop()


async def test_large_messages_are_read_in_pulls_the_server_can_send(
    js: JetStreamContext, nats_url: str
) -> None:
    """The first pull of a partition asked for 2,000 messages whatever their size:
    with 200 messages of ~1 MB the server had to send 200 MB at once, dropped the
    connection as a slow consumer (over its 64 MiB allowance for a client), and the
    read failed with DisconnectedError every time. A pull is bounded in bytes now."""
    stream = unique_name("BIG")
    await js.create_stream(
        StreamConfig(name=stream, subjects=[f"{stream}.>"], storage=aiojetstream.StorageType.MEMORY)
    )
    size = min(1_000_000, js.nc.max_payload - 1024)
    count = 200
    for i in range(count):
        await js.publish_async(f"{stream}.x", bytes([i]) * size)
    await js.publish_async_complete(timeout=60)
    opts = parse_source_options({"stream": stream, "servers": nats_url}, streaming=False)
    reader = RangeReader(js, opts, 1, count + 1)
    rows = 0
    try:
        while (batch := await reader.next_batch()) is not None:
            data = batch.column("data").to_pylist()
            seqs = batch.column("seq").to_pylist()
            assert all(d == bytes([s - 1]) * size for d, s in zip(data, seqs, strict=True))
            assert batch.nbytes < 64 << 20
            rows += batch.num_rows
    finally:
        await reader.aclose()
    assert rows == count
    assert js.nc.is_connected


@pytest.mark.parametrize("purge_to", [4001, 5001], ids=["part", "all"])
async def test_data_lost_while_the_consumer_reads(
    js: JetStreamContext, nats_url: str, purge_to: int
) -> None:
    """A purge (or the stream's limits) removing what the consumer had not reached yet:
    the consumer carried on from the stream's new first message (or found nothing
    left) and the read ended without those rows, even with failOnDataLoss=true."""
    for strict in (True, False):
        name = await fill(js, "RR6", 5000)
        opts = parse_source_options(
            {"stream": name, "servers": nats_url, "failOnDataLoss": str(strict).lower()},
            streaming=False,
        )
        reader = RangeReader(js, opts, 1, 5001)
        try:
            first = await reader.next_batch()
            assert first is not None
            read = first.num_rows
            assert read < 4000
            await (await js.stream(name)).purge(sequence=purge_to)  # the consumer stays
            lost = rf"{read + 1}\.\.{purge_to - 1}"
            if strict:
                with pytest.raises(DataLossError, match=lost):
                    await read_all(reader)
            else:
                with pytest.warns(JetStreamSparkWarning, match=lost):
                    assert await read_all(reader) == list(range(purge_to, 5001))
        finally:
            await reader.aclose()


async def test_gaps_of_a_filter_or_of_deletes_are_no_data_loss(
    js: JetStreamContext, nats_url: str
) -> None:
    """Skipped sequences the stream still covers (filtered out, deleted) are not lost."""
    name = await fill(js, "RR7", 5000)
    stream = await js.stream(name)
    for seq in range(2001, 2101):
        await stream.delete_msg(seq)
    opts = parse_source_options(
        {"stream": name, "servers": nats_url, "subject": f"{name}.b"}, streaming=False
    )
    reader = RangeReader(js, opts, 1, 5001)
    try:
        seqs = await read_all(reader)
    finally:
        await reader.aclose()
    assert seqs == [s for s in range(2, 5001, 2) if not 2001 <= s <= 2100]


async def test_a_message_larger_than_a_pull_s_bytes_is_read_alone() -> None:
    """A server whose max_payload is raised: JetStream stores messages up to 32 MiB,
    and one that large is more than the reader's 32 MiB per pull once its subject
    and reply count (MessageTooLargeError, for good); it is pulled alone."""
    async with (
        NatsServer(config={"max_payload": 40 * 1024 * 1024}) as server,
        await aiojetstream.connect(server.url) as js,
    ):
        name = unique_name("HUGE")
        subject = f"{name}.x"
        await js.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
        huge = (32 << 20) - len(subject) - 40  # the reply subject alone is longer
        await js.publish(subject, b"x" * huge, timeout=30)
        await js.publish(subject, b"small", timeout=30)
        opts = parse_source_options({"stream": name, "servers": server.url}, streaming=False)
        reader = RangeReader(js, opts, 1, 3)
        sizes: list[int] = []
        try:
            while (batch := await reader.next_batch()) is not None:
                sizes += [len(d) for d in batch.column("data").to_pylist()]
        finally:
            await reader.aclose()
        assert sizes == [huge, 5]


@pytest.mark.parametrize("failure", [RuntimeError("the task failed"), KeyboardInterrupt()])
def test_clean_up_after_a_failure_is_short_and_keeps_the_failure(
    failure: BaseException, caplog: pytest.LogCaptureFixture
) -> None:
    """A task that fails while its server hangs: the consumer delete in the clean-up
    gets CLEANUP_TIMEOUT (not a 10 s request timeout), the task's own error is what
    is raised, and the clean-up's failure is a note on it (and a warning)."""
    from aiojetstream.spark._read import CLEANUP_TIMEOUT, read_range
    from aiojetstream.spark._runtime import _close_shared

    with NatsServer() as server:

        async def setup() -> str:
            async with await aiojetstream.connect(server.url) as js:
                return await fill(js, "CLEAN", 5000)

        name = asyncio.run(setup())
        opts = parse_source_options(
            {"stream": name, "servers": server.url, "timeout": "10"}, streaming=False
        )
        batches = read_range(opts, 1, 5001)
        try:
            assert next(batches).num_rows > 0
            server.freeze()
            started = time.monotonic()
            with pytest.raises(type(failure)) as raised:
                batches.throw(failure)  # fails where Spark holds the task
            took = time.monotonic() - started
            server.thaw()
        finally:
            _close_shared()
    assert raised.value is failure
    assert took < CLEANUP_TIMEOUT + 3  # a 10 s request timeout before the fix
    (note,) = raised.value.__notes__
    assert f"could not delete a read consumer of stream {name!r}" in note
    assert "no reply within 2 s" in note
    assert any(note in r.getMessage() for r in caplog.records)


def test_clean_up_after_success_deletes_the_consumer(nats_server: NatsServer) -> None:
    """The control: a read that ends normally (or that Spark closes early) deletes its
    consumer and raises nothing."""
    from aiojetstream.spark._read import read_range

    async def setup() -> str:
        async with await aiojetstream.connect(nats_server.url) as js:
            return await fill(js, "CLEAN2", 5000)

    async def consumers(name: str) -> list[str]:
        async with await aiojetstream.connect(nats_server.url) as js:
            return [n async for n in js.consumer_names(name)]

    name = asyncio.run(setup())
    opts = parse_source_options({"stream": name, "servers": nats_server.url}, streaming=False)
    assert sum(b.num_rows for b in read_range(opts, 1, 5001)) == 5000
    batches = read_range(opts, 1, 5001)
    assert next(batches).num_rows > 0
    assert len(asyncio.run(consumers(name))) == 1
    batches.close()  # Spark's limit reached
    assert asyncio.run(consumers(name)) == []
