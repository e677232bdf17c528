"""The Spark reader's read tasks on a three-node cluster while a restarted node catches up.

nats-server places a read task's consumer (R1) on any of the stream's peers. On
one whose node restarted and is still catching up, the consumer reports nothing
pending although the stream's leader holds the rest of the task's range: the
task ended there, without an error (40 of 1131 ranges read short), so a batch
read returned too few rows and a streaming query's offsets moved past rows it
never read. The read tasks here run as Spark's Python worker runs them (a
:class:`RangeReader` each, many at once), right after the restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import os

import pytest

import aiojetstream
from aiojetstream import JetStreamContext, JetStreamError, JetStreamTimeoutError
from aiojetstream.spark._options import SourceOptions, parse_source_options
from aiojetstream.spark._read import CLEANUP_TIMEOUT, RangeReader, split
from aiojetstream.testing import NatsCluster
from helpers import unique_name
from reliability.harness import create_r3_stream, stream_leader

pytestmark = pytest.mark.cluster

#: Messages published while a node is away, per cycle, and their size: enough for
#: the restarted node's catch-up to outlast the read tasks' start.
COUNT = 4000
SIZE = 8000


async def _read(
    js: JetStreamContext, opts: SourceOptions, lo: int, hi: int, slots: asyncio.Semaphore
) -> list[int]:
    reader = RangeReader(js, opts, lo, hi)
    seqs: list[int] = []
    try:
        async with slots:
            while (batch := await reader.next_batch()) is not None:
                seqs += batch.column("seq").to_pylist()
    finally:
        # As a read task's clean-up: a delete that is not answered soon is left to
        # the consumer's inactivity threshold (its node may be the one catching up).
        with contextlib.suppress(JetStreamError, TimeoutError):
            await asyncio.wait_for(reader.aclose(), CLEANUP_TIMEOUT)
    return seqs


async def _publish(js: JetStreamContext, subject: str, payload: bytes) -> None:
    for _ in range(COUNT):
        for attempt in range(5):  # (an ack lost while the node went away: the stream dedupes)
            try:
                await js.publish(subject, payload)
                break
            except JetStreamTimeoutError:
                if attempt == 4:
                    raise


async def test_read_tasks_right_after_a_node_restarts_read_their_whole_ranges() -> None:
    async with NatsCluster(3) as cluster:
        js = await aiojetstream.connect(cluster.urls, max_reconnect_attempts=-1, timeout=10)
        try:
            stream = unique_name("LAGREAD")
            await create_r3_stream(js, stream, [f"{stream}.>"])
            opts = parse_source_options(
                {"servers": ",".join(cluster.urls), "stream": stream, "retryTimeout": "30"},
                streaming=False,
            )
            payload = os.urandom(SIZE)
            total = 0
            short: list[str] = []
            for cycle in range(3):
                leader = await stream_leader(js, stream)
                assert leader is not None
                # A node that leads nothing the publishes need: no election.
                victim = next(s for s in cluster.servers if s.server_name != leader)
                await victim.kill()
                await _publish(js, f"{stream}.x", payload)
                total += COUNT
                await victim.start()
                for round_ in range(2):  # at once, while the restarted node catches up
                    ranges = split(1, total + 1, 24)
                    # (Six tasks at once, as Spark's worker processes of a few cores: 24
                    # pulls of 4 MB at once would exceed the server's allowance for one
                    # connection, which drops it.)
                    slots = asyncio.Semaphore(6)
                    reads = [_read(js, opts, lo, hi, slots) for lo, hi in ranges]
                    for (lo, hi), seqs in zip(ranges, await asyncio.gather(*reads), strict=True):
                        if seqs != list(range(lo, hi)):
                            last = seqs[-1] if seqs else None
                            short.append(
                                f"cycle {cycle} round {round_}: [{lo}, {hi}) read "
                                f"{len(seqs)} rows, the last {last}"
                            )
            assert short == []
        finally:
            await js.close()
