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
from aiojetstream._ordered.cursor import OrderedBatch
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


async def test_an_ordered_fetch_out_of_time_after_a_503_raises_it(
    monkeypatch: pytest.MonkeyPatch, js: JetStreamContext
) -> None:
    """A 503 whose recreation has no time left in the fetch (made to order here) raised
    nothing: the fetch returned an empty batch, which says "nothing is there", and a
    catch-up loop stopped early with messages waiting."""
    stream = await _stream(js, 3)
    oc = await js.ordered_consumer(stream)
    UnservedPulls(monkeypatch, stream, unserved=10**9)

    async def out_of_time(self: OrderedBatch) -> bool:
        return False

    monkeypatch.setattr(OrderedBatch, "_reset_and_pull", out_of_time)
    with pytest.raises(NoRespondersError):
        await (await oc.fetch(3, expires=2)).collect()
    with pytest.raises(NoRespondersError):
        [m async for m in await oc.fetch(3, expires=2)]
    monkeypatch.undo()
    got = await (await oc.fetch(3, expires=2)).collect()
    assert [m.metadata.sequence.stream for m in got] == [1, 2, 3]
    await js.delete_consumer(stream, oc.name or "")


async def test_a_503_after_answered_pulls_on_a_quiet_stream_resets_at_once(
    monkeypatch: pytest.MonkeyPatch, js: JetStreamContext
) -> None:
    """Was: on a quiet stream every later 503 (say one per node restart) waited 1 s, 2 s,
    4 s ... before the consumer was recreated, as no message had come in between,
    although the recreated consumer's pulls were answered (a 408 at each expiry)."""
    stream = await _stream(js, 0)
    pulls = UnservedPulls(monkeypatch, stream, unserved=0)
    oc = await js.ordered_consumer(stream)
    delays: list[float] = []
    async with oc.messages(expires=1) as it:
        reading = asyncio.ensure_future(it.next())  # resets are made by the reader
        for _ in range(3):
            # The current consumer's pulls are answered (a 408 each second): the next
            # pull is unserved, and the consumer after it pulls twice (answered).
            await wait_until(lambda: len(pulls.subjects) >= 2 and pulls.served[-1], 10)
            answered = pulls.subjects[-1]

            def pulled_again(subject: bytes = answered) -> bool:
                return pulls.subjects.count(subject) >= 2

            await wait_until(pulled_again, 10, interval=0.01)
            sent = len(pulls.subjects)
            pulls.limit += 1

            def served_after_unserved(sent: int = sent) -> bool:
                after = pulls.served[sent:]
                return False in after and True in after[after.index(False) :]

            await wait_until(served_after_unserved, 10, interval=0.01)
            unserved = pulls.served.index(False, sent)
            served = pulls.served.index(True, unserved)
            assert pulls.subjects[served] != answered  # a new consumer
            delays.append(pulls.times[served] - pulls.times[unserved])
        assert not reading.done()
        reading.cancel()
    # Each at once (the backoff would have waited 0, 1 and 2 s).
    assert max(delays) < 0.9, delays
