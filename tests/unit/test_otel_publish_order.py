"""publish_async send spans end when their own acknowledgement comes, in any order (issue 28).

The traced publish keeps done callbacks on the two oldest futures in flight
and the newest only; a publish overtaken by a later one gets a callback of its own. Pure
logic: futures completed in a chosen order, the end of each span recorded.
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from typing import Any

import pytest

from aiojetstream.otel.publishing import Publishing


class Recording(Publishing):
    """Publishing without a context: records which publish ended after which completion."""

    def __init__(self) -> None:
        self._in_flight = deque()
        self._head = self._second = self._tail = None
        self.ended: dict[int, int] = {}  # publish -> completions seen when it ended
        self.completed = 0

    def _done(self, future: asyncio.Future[Any], slot: Any, now: int) -> None:
        assert slot not in self.ended, "ended twice"
        assert future.done()
        self.ended[slot] = self.completed


async def complete(
    pub: Recording, futures: list[asyncio.Future[Any]], order: list[int]
) -> dict[int, int]:
    """Complete ``futures`` in ``order``, letting the callbacks run after each; when each did."""
    completed_at = {}
    for i in order:
        pub.completed += 1
        completed_at[i] = pub.completed
        futures[i].set_result(None)
        for _ in range(3):
            await asyncio.sleep(0)
    assert sorted(pub.ended) == list(range(len(futures)))  # each once
    assert not pub._in_flight
    assert all(pub.ended[i] >= completed_at[i] for i in order)  # never before its ack
    return completed_at


def tracked(pub: Recording, count: int) -> list[asyncio.Future[Any]]:
    loop = asyncio.get_running_loop()
    futures = [loop.create_future() for _ in range(count)]
    for i, future in enumerate(futures):
        pub._track(future, i)  # type: ignore[arg-type]
    return futures


@pytest.mark.parametrize("slow", [[0], [0, 3], [2, 5, 7]])
async def test_publishes_overtaken_by_the_next_do_not_hold_back_the_later_ones(
    slow: list[int],
) -> None:
    """A publish waiting for its timeout (or another stream's ack) while the later
    ones are acknowledged in order: each ends with its own acknowledgement."""
    pub = Recording()
    futures = tracked(pub, 12)
    order = [i for i in range(12) if i not in slow] + slow
    completed_at = await complete(pub, futures, order)
    assert pub.ended == completed_at


@pytest.mark.parametrize("slow", [[0, 1], [3, 4], [0, 1, 2, 5, 6]])
async def test_several_slow_publishes_in_a_row_hold_back_no_later_one_past_the_newest(
    slow: list[int],
) -> None:
    """Two publishes in a row waiting (two lost acks timing out after an election):
    the callbacks on the oldest two never fired, and every later span ended at their
    timeout. A later span now ends by the time the newest publish is done."""
    pub = Recording()
    futures = tracked(pub, 12)
    order = [i for i in range(12) if i not in slow] + slow
    completed_at = await complete(pub, futures, order)
    newest = completed_at[11]
    assert all(pub.ended[i] <= newest for i in range(12) if i not in slow)
    assert all(pub.ended[i] == completed_at[i] for i in slow)


async def test_two_streams_interleaved_end_each_with_its_own_ack() -> None:
    pub = Recording()
    futures = tracked(pub, 12)  # even: a slow stream, odd: a fast one
    order = [i for i in range(12) if i % 2] + [i for i in range(12) if not i % 2]
    completed_at = await complete(pub, futures, order)
    assert pub.ended == completed_at


@pytest.mark.parametrize("seed", range(20))
async def test_in_any_order_every_publish_ends_once_and_none_early(seed: int) -> None:
    pub = Recording()
    futures = tracked(pub, 12)
    order = list(range(12))
    random.Random(seed).shuffle(order)
    await complete(pub, futures, order)


async def test_in_order_acks_use_three_callbacks_only() -> None:
    pub = Recording()
    futures = tracked(pub, 50)
    callbacks = sum(len(f._callbacks or []) for f in futures)
    assert callbacks == 3  # the oldest two and the newest
    for future in futures:
        future.set_result(None)
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert sorted(pub.ended) == list(range(50))
