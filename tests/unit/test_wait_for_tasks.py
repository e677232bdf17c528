"""Closing waits for its background tasks, and returns once they are done, on every Python.

The tasks sit in sets they discard themselves from when done (a done
callback, run by the loop soon after). From Python 3.12 ``asyncio.gather``
of tasks all done completes without yielding to the loop: a close that did
``while tasks: await asyncio.gather(*tasks)`` while a done task's discard was
still scheduled never let it run, and spun forever (``Consumer.next()``
timing out after a ``next()`` that returned a message hung at 100 % CPU).
The sets here count their iterations: a spinning wait fails instead of
hanging the test run.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

from aiojetstream._cleanup import wait_for_tasks
from aiojetstream._ordered.cursor import OrderedSource
from aiojetstream._pull_driver import PullDriver

_MOST_PASSES = 50


class CountingSet(set[asyncio.Task[Any]]):
    """A task set that fails when iterated more than a wait ever needs."""

    passes = 0

    def __iter__(self) -> Iterator[asyncio.Task[Any]]:
        self.passes += 1
        if self.passes > _MOST_PASSES:
            raise AssertionError("waiting for the tasks spins: it never yields to the loop")
        return super().__iter__()


async def _nothing() -> None:
    return None


async def _fails() -> None:
    raise RuntimeError("boom")


def _track(tasks: set[asyncio.Task[Any]], coro: Any) -> asyncio.Task[Any]:
    task = asyncio.get_running_loop().create_task(coro)
    tasks.add(task)
    task.add_done_callback(tasks.discard)
    return task


async def _done_with_discard_pending(tasks: set[asyncio.Task[Any]]) -> asyncio.Task[Any]:
    """A task of ``tasks`` that is done while its discard callback is still scheduled."""
    task = _track(tasks, _nothing())
    await asyncio.sleep(0)  # the task runs to its end; its callbacks run next round
    assert task.done()
    assert task in tasks
    return task


async def test_returns_with_a_done_task_whose_discard_is_still_scheduled() -> None:
    tasks = CountingSet()
    await _done_with_discard_pending(tasks)
    await wait_for_tasks(tasks)
    await asyncio.sleep(0)
    assert not tasks


async def test_waits_for_tasks_added_while_it_waits() -> None:
    tasks = CountingSet()
    later = asyncio.Event()
    added: list[asyncio.Task[Any]] = []

    async def adds_one() -> None:
        added.append(_track(tasks, later.wait()))

    async def sets_later() -> None:
        await asyncio.sleep(0)
        later.set()

    _track(tasks, adds_one())
    setter = asyncio.get_running_loop().create_task(sets_later())
    await wait_for_tasks(tasks)
    assert len(added) == 1
    assert added[0].done()
    await setter


async def test_a_failed_task_is_waited_for_and_its_error_retrieved() -> None:
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        tasks = CountingSet()
        task = _track(tasks, _fails())
        await wait_for_tasks(tasks)
        assert task.done()
        del task
        tasks.clear()
        gc.collect()
        assert not reported
    finally:
        loop.set_exception_handler(None)


async def test_a_pull_drivers_close_returns_with_such_a_task() -> None:
    tasks = CountingSet()
    handler_tasks = CountingSet()
    await _done_with_discard_pending(tasks)
    await _done_with_discard_pending(handler_tasks)
    driver: Any = SimpleNamespace(_tasks=tasks, _handler_tasks=handler_tasks)
    await asyncio.wait_for(PullDriver._wait_tasks(driver), 5)


async def test_an_ordered_close_returns_with_such_a_task() -> None:
    tasks = CountingSet()
    await _done_with_discard_pending(tasks)
    closing = asyncio.get_running_loop().create_task(_nothing())  # its close, done
    await closing
    source: Any = SimpleNamespace(_closed=True, _closing=closing, _tasks=tasks)
    await asyncio.wait_for(OrderedSource.aclose(source), 5)


async def test_a_cancelled_wait_leaves_the_tasks_running() -> None:
    """The caller of a close cancelled (a timeout around it): the tasks it waited for
    go on. ``gather`` cancelled them: a pull's clean-up cancelled before it ran left
    its subscription."""
    tasks = CountingSet()
    gate = asyncio.Event()
    task = _track(tasks, gate.wait())
    waiter = asyncio.get_running_loop().create_task(wait_for_tasks(tasks))
    await asyncio.sleep(0)  # it waits
    waiter.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await waiter
    assert waiter.cancelled()
    assert not task.done()
    gate.set()
    await task
    assert not task.cancelled()
