"""An ordered consumer whose pulls get 503 No Responders while its consumer exists.

In a cluster the ordered consumer's server-side consumer is R1 and in memory:
when its node is down, a meta leader may still answer its look-up (from the
consumer's assignment) while every pull gets a 503. The ordered consumer then
recreates the consumer at cursor + 1 (as nats.go resets on no responders); a
reset that brings no message is followed by the next only after the reset
backoff, so an account whose pulls nothing serves does not create and delete
consumers in a tight loop. The 503 is made to order (see ``UnservedPulls``).
"""

from __future__ import annotations

import asyncio

import pytest

from aiojetstream import (
    JetStreamContext,
    JetStreamError,
    NoRespondersError,
    StorageType,
    StreamConfig,
)
from helpers import UnservedPulls, unique_name, wait_until


async def _stream(js: JetStreamContext, count: int) -> str:
    stream = unique_name("ORD503")
    await js.create_stream(
        StreamConfig(name=stream, subjects=[f"{stream}.>"], storage=StorageType.MEMORY)
    )
    for i in range(count):
        await js.publish(f"{stream}.x", b"%d" % i)
    return stream


@pytest.mark.parametrize("call", ["next", "fetch"])
async def test_an_ordered_pull_answered_503_recreates_the_consumer(
    monkeypatch: pytest.MonkeyPatch, js: JetStreamContext, call: str
) -> None:
    """Was: ``NoRespondersError`` "(503), although the consumer exists" on every call
    (the reliability test of a killed consumer node saw it under load)."""
    stream = await _stream(js, 3)
    oc = await js.ordered_consumer(stream)
    first = await oc.next(expires=2)
    assert first.metadata.sequence.stream == 1
    pulls = UnservedPulls(monkeypatch, stream, unserved=1)
    if call == "next":
        seqs = [(await oc.next(expires=3)).metadata.sequence.stream]
    else:
        seqs = [m.metadata.sequence.stream async for m in await oc.fetch(2, expires=3)]
    assert seqs == ([2] if call == "next" else [2, 3])
    assert pulls.unserved == 1
    assert len(set(pulls.subjects)) == 2  # a new consumer, at cursor + 1
    rest = [m.metadata.sequence.stream async for m in await oc.fetch(5, expires=1)]
    assert seqs + rest == [2, 3]
    assert [n async for n in js.consumer_names(stream)] == [oc.name]  # the old one deleted
    await js.delete_consumer(stream, oc.name or "")


async def test_ordered_messages_reset_after_503s_with_backoff(
    monkeypatch: pytest.MonkeyPatch, js: JetStreamContext
) -> None:
    """Every pull unserved: a reset each time, the second and later ones after the
    backoff (1 s, then 2 s: at least 3 s for the fourth consumer; without it, dozens a
    second). Served again, delivery goes on in order, and each 503 was reported."""
    stream = await _stream(js, 5)
    pulls = UnservedPulls(monkeypatch, stream, unserved=10**9)
    reports: list[JetStreamError] = []
    oc = await js.ordered_consumer(stream)
    loop = asyncio.get_running_loop()
    async with oc.messages(expires=2, error_handler=reports.append) as it:
        started = loop.time()
        reading = asyncio.ensure_future(it.next())  # resets are made by the reader
        await wait_until(lambda: len(set(pulls.subjects)) >= 4, timeout=20, interval=0.01)
        took = loop.time() - started
        assert took >= 2.5, (took, len(pulls.subjects))
        assert len(set(pulls.subjects)) == 4, pulls.subjects  # none early
        assert not reading.done()
        pulls.limit = pulls.unserved  # served from now on
        seqs = [(await asyncio.wait_for(reading, 15)).metadata.sequence.stream]
        seqs += [(await asyncio.wait_for(it.next(), 15)).metadata.sequence.stream for _ in range(4)]
    assert any(isinstance(e, NoRespondersError) for e in reports), reports
    assert [n async for n in js.consumer_names(stream)] == []  # closing deleted the last one
