"""A read task's pulls answered with 503 No Responders while its consumer exists.

In a cluster the server places a read task's new (R1) consumer on any node;
its first pull may reach the client's node before the consumer's interest in
its pull subject has crossed the route, and the server answers it with a 503
(about 1 % of R3 reads in the Spark deployment review). The task pulls again
after a short delay, with no gap and no duplicate; only pulls that get 503s
for ``retryTimeout`` fail it, with an error that says the consumer exists.

The 503 is made to order: the chosen pulls are sent to a consumer name nobody
serves, and the server answers them with a real 503 (the consumer itself
exists all along, as in the race).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import aiojetstream
from aiojetstream import JetStreamContext, NoRespondersError, StreamConfig
from aiojetstream.spark._options import parse_source_options
from aiojetstream.spark._read import read_range
from aiojetstream.testing import NatsCluster
from helpers import UnservedPulls as Pulls
from helpers import unique_name
from reliability.harness import create_r3_stream


async def fill(js: JetStreamContext, stream: str, n: int) -> None:
    for i in range(n):
        await js.publish_async(f"{stream}.x", b"%d" % i, timeout=10)
    await js.publish_async_complete(timeout=30)


def read(opts: Any, start: int, end: int, stream: str) -> list[int]:
    seqs: list[int] = []
    for batch in read_range(opts, start, end, stream):
        seqs += batch.column("seq").to_pylist()
    return seqs


@pytest.mark.cluster
async def test_r3_read_pulls_again_after_a_503_on_its_first_pull(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Was: NoRespondersError "... the consumer or stream may be gone" after 0 rows."""
    async with NatsCluster(3) as cluster:
        js = await aiojetstream.connect(cluster.urls, timeout=5)
        try:
            stream = unique_name("UNSERVED")
            await create_r3_stream(js, stream, [f"{stream}.>"])
            await fill(js, stream, 5000)
            opts = parse_source_options(
                {"servers": ",".join(cluster.urls), "stream": stream}, streaming=False
            )
            pulls = Pulls(monkeypatch, stream, unserved=2)
            seqs = await asyncio.to_thread(read, opts, 1, 5001, stream)
            assert seqs == list(range(1, 5001))  # no gap, no duplicate
            assert pulls.unserved == 2
            # Pulled again (the consumer exists), not created again: one consumer.
            assert len(set(pulls.subjects)) == 1
            assert len(pulls.subjects) > 2
            assert [n async for n in js.consumer_names(stream)] == []  # deleted at the end
            # Every real R3 read of a quiet stream (a fresh consumer each) is exact: was
            # about 1 in 150 failing (about 5 s for the 1,000).
            monkeypatch.undo()
            for i in range(1000):
                lo = 1 + (i % 10) * 500
                assert await asyncio.to_thread(read, opts, lo, lo + 500, stream) == list(
                    range(lo, lo + 500)
                ), f"read {i}"
        finally:
            await js.close()


async def test_pulls_unserved_for_retry_timeout_fail_saying_the_consumer_exists(
    monkeypatch: pytest.MonkeyPatch, js: JetStreamContext, nats_url: str
) -> None:
    """Every pull gets a 503 (nothing serves them): the task fails after ``retryTimeout``."""
    stream = unique_name("UNSERVED")
    await js.create_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"]))
    await fill(js, stream, 10)
    opts = parse_source_options(
        {"servers": nats_url, "stream": stream, "retryTimeout": "1s"}, streaming=False
    )
    pulls = Pulls(monkeypatch, stream, unserved=1_000_000)
    started = time.monotonic()
    with pytest.raises(NoRespondersError) as info:
        await asyncio.to_thread(read, opts, 1, 11, stream)
    took = time.monotonic() - started
    text = str(info.value)
    assert "although the consumer exists" in text
    assert "may be gone" not in text
    assert "retryTimeout" in text
    assert stream in text
    assert 1.0 <= took < 10.0
    assert pulls.unserved >= 3  # pulled again, with a delay between pulls
    assert len(set(pulls.subjects)) == 1  # the same consumer all along
    assert [n async for n in js.consumer_names(stream)] == []  # deleted at the end
