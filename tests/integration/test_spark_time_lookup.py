"""The Spark reads' times (``startingTimestamp``, ``endingTimestamp``, a pushed
``timestamp >=``) with two subject filters, against a real nats-server.

nats-server (seen with 2.15.1) starts a by-time consumer with two or more
filters at the first-ever message of a filter whose first message is at or
after the time, skipping the later messages of a filter that began before it:
``startingTimestamp`` lost rows, ``endingTimestamp`` added some. The reads now
look the time up over the whole stream.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from aiojetstream import JetStreamContext, StreamConfig
from aiojetstream.spark import _runtime
from aiojetstream.spark._filters import CLOCK_MARGIN
from aiojetstream.spark._options import parse_source_options
from aiojetstream.spark._read import RangeReader, plan_range
from aiojetstream.spark._source import FilteringBatchReader, SequenceRange
from helpers import unique_name, wait_until


@pytest.fixture
def clean() -> Iterator[None]:
    _runtime._close_shared()
    yield
    _runtime._close_shared()


@dataclass
class Timeline:
    stream: str
    #: The time of seq 2 (seq 1 is before it) and of seq 4 (seq 3 before it).
    start: datetime
    end: datetime


async def timeline(js: JetStreamContext) -> Timeline:
    """Seqs 1-4 and 6-7 on ``<stream>.a``, seq 5 on ``<stream>.b`` (its first).

    Each of seqs 2 and 4 is published once the clock has passed the message
    before it by 2 ms.
    """
    stream = unique_name("TL")
    await js.create_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"]))
    s = await js.stream(stream)

    async def publish(subject: str) -> datetime:
        seq = (await js.publish(f"{stream}.{subject}", b"x")).seq
        return (await s.get_msg(seq)).time

    async def after(t: datetime) -> None:
        passed = t + timedelta(milliseconds=2)
        await wait_until(lambda: datetime.now(t.tzinfo) > passed)

    await after(await publish("a"))  # 1
    start = await publish("a")  # 2
    await after(await publish("a"))  # 3
    end = await publish("a")  # 4
    for subject in ("b", "a", "a"):  # 5 to 7
        await publish(subject)
    return Timeline(stream, start, end)


def options(t: Timeline, url: str, streaming: bool = False, **more: str) -> Any:
    given = {"stream": t.stream, "servers": url, "subject": f"{t.stream}.a,{t.stream}.b"}
    return parse_source_options({**given, **more}, streaming=streaming)


async def read(js: JetStreamContext, opts: Any, start: int, end: int) -> list[int]:
    reader = RangeReader(js, opts, start, end)
    seqs: list[int] = []
    try:
        while (batch := await reader.next_batch()) is not None:
            seqs += batch.column("seq").to_pylist()
    finally:
        await reader.aclose()
    return seqs


@pytest.mark.parametrize("streaming", [False, True], ids=["batch", "streaming"])
async def test_starting_timestamp_with_two_filters(
    js: JetStreamContext, nats_url: str, streaming: bool
) -> None:
    t = await timeline(js)
    opts = options(t, nats_url, streaming, startingTimestamp=t.start.isoformat())
    start, end, _ = await plan_range(js, opts, streaming=streaming)
    assert start == 2  # was 5: seqs 2-4 of the first filter lost
    assert await read(js, opts, start, end) == [2, 3, 4, 5, 6, 7]


async def test_ending_timestamp_with_two_filters(js: JetStreamContext, nats_url: str) -> None:
    t = await timeline(js)
    opts = options(t, nats_url, endingTimestamp=t.end.isoformat())
    start, end, _ = await plan_range(js, opts, streaming=False)
    assert (start, end) == (1, 4)  # was (1, 5): seq 4, at the time, read too
    assert await read(js, opts, start, end) == [1, 2, 3]


def flt(kind: str, column: str, value: object) -> Any:
    """A stand-in of pyspark's filter class ``kind`` (recognised by name)."""
    return type(kind, (SimpleNamespace,), {})(attribute=(column,), value=value)


async def test_pushed_time_filter_with_two_subjects(
    js: JetStreamContext, nats_url: str, clean: None
) -> None:
    t = await timeline(js)
    opts = parse_source_options(
        {"stream": t.stream, "servers": nats_url, "pushDownPredicate": "true"}, streaming=False
    )
    reader = FilteringBatchReader(opts)
    # WHERE subject IN (a, b) AND timestamp >= <seq 2's time + the clock margin>:
    # the read starts at the first message of the time less the margin, seq 2.
    pushed = [
        flt("In", "subject", [f"{t.stream}.a", f"{t.stream}.b"]),
        flt("GreaterThanOrEqual", "timestamp", t.start + CLOCK_MARGIN),
    ]
    left = list(reader.pushFilters(pushed))
    assert left == pushed[1:]  # Spark checks the time itself
    assert len(reader.opts.subjects) == 2
    parts = await asyncio.to_thread(reader.partitions)
    assert all(isinstance(p, SequenceRange) for p in parts)
    assert [(p.start, p.end) for p in parts if isinstance(p, SequenceRange)] == [(2, 8)]  # was 5
    assert await read(js, reader.opts, 2, 8) == [2, 3, 4, 5, 6, 7]
