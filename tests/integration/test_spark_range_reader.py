"""The Spark reader's range reading without Spark: chunks, recreation, ends, clean-up."""

from __future__ import annotations

from aiojetstream import JetStreamContext, StreamConfig
from aiojetstream.spark._options import parse_source_options
from aiojetstream.spark._read import RangeReader


async def fill(js: JetStreamContext, stream: str, n: int) -> None:
    await js.create_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"]))
    for i in range(n):
        await js.publish_async(f"{stream}.{'ab'[i % 2]}", b"%d" % i)
    await js.publish_async_complete()


async def read_all(reader: RangeReader) -> list[int]:
    seqs: list[int] = []
    while (batch := await reader.next_batch()) is not None:
        seqs += batch.column("seq").to_pylist()
    return seqs


async def test_recreates_a_vanished_consumer_at_the_next_sequence(
    js: JetStreamContext, nats_url: str
) -> None:
    await fill(js, "RR1", 5000)
    opts = parse_source_options({"stream": "RR1", "servers": nats_url}, streaming=False)
    reader = RangeReader(js, opts, 1, 5001)
    first = await reader.next_batch()
    assert first is not None
    seqs = first.column("seq").to_pylist()
    assert seqs == list(range(1, len(seqs) + 1))
    assert len(seqs) < 5000
    # Spark held the task past the inactivity threshold: the consumer is gone.
    names = [n async for n in js.consumer_names("RR1")]
    assert len(names) == 1
    await js.delete_consumer("RR1", names[0])
    seqs += await read_all(reader)
    assert seqs == list(range(1, 5001))  # no gap, no duplicate
    await reader.aclose()
    assert [n async for n in js.consumer_names("RR1")] == []


async def test_range_end_and_filter(js: JetStreamContext, nats_url: str) -> None:
    await fill(js, "RR2", 100)
    opts = parse_source_options(
        {"stream": "RR2", "servers": nats_url, "subject": "RR2.b"}, streaming=False
    )
    reader = RangeReader(js, opts, 10, 31)
    assert await read_all(reader) == list(range(10, 31, 2))
    await reader.aclose()
    # Nothing matches from here on: the read ends at once, without waiting for a fetch.
    opts = parse_source_options(
        {"stream": "RR2", "servers": nats_url, "subject": "RR2.none"}, streaming=False
    )
    reader = RangeReader(js, opts, 1, 101)
    assert await read_all(reader) == []
    await reader.aclose()
    assert [n async for n in js.consumer_names("RR2")] == []
