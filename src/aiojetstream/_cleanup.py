"""Closes in the background: of what users drop unfinished, and those no caller waits for.

A finalizer runs an async close on its loop once its owner is collected; a
close no cancellation may cut short runs in a task of its own.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable, Collection, Coroutine
from typing import Any

logger = logging.getLogger("aiojetstream")

#: Closes of readers dropped unfinished, kept until done.
_CLOSING: set[asyncio.Task[None]] = set()
#: Waits for tasks whose waiter was cancelled (see wait_for_tasks), kept until done.
_WAITING: set[asyncio.Future[Any]] = set()


def close_in_background(close: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
    """Run ``close`` in a task kept until done, for a caller that must not wait.

    For a close that no cancellation may cut short once something was handed
    out (an ordered ``next()`` returns its message at once, its fetch's
    subscription released meanwhile). An error it raises is logged (debug).
    A caller that waits after all awaits ``asyncio.shield()`` of the task
    returned: its cancellation then leaves the close running.
    """
    task = asyncio.get_running_loop().create_task(close)
    _CLOSING.add(task)
    task.add_done_callback(_closed)
    return task


def _closed(task: asyncio.Task[None]) -> None:
    _CLOSING.discard(task)
    if not task.cancelled() and (exc := task.exception()) is not None:
        logger.debug("closing in the background failed: %r", exc)


async def wait_for_tasks(*groups: Collection[asyncio.Task[Any]]) -> None:
    """Wait until every task of ``groups`` is done, those added meanwhile included.

    ``groups`` are live collections the tasks remove themselves from when done
    (``add_done_callback(tasks.discard)``); each task is gathered once (what it
    raised is retrieved, not logged as never retrieved). Not ``while tasks:
    await asyncio.gather(*tasks)``: from Python 3.12 ``gather`` of tasks all
    done completes without yielding to the loop, so a done task whose discard
    callback is still scheduled stays in its set and that loop spins forever.

    A cancellation of the caller leaves the tasks running (the wait is
    shielded): ``gather`` cancelled them, and a pull's clean-up cancelled
    before it ran (a close cut short by a timeout) left its subscription.
    """
    gathered: set[asyncio.Task[Any]] = set()
    while tasks := [task for group in groups for task in group if task not in gathered]:
        gathered.update(tasks)
        waiting = asyncio.gather(*tasks, return_exceptions=True)
        try:
            await asyncio.shield(waiting)
        except asyncio.CancelledError:
            _WAITING.add(waiting)  # kept until done (the loop holds tasks weakly)
            waiting.add_done_callback(_WAITING.discard)
            raise


def close_when_collected(
    owner: object, close: Callable[[], Coroutine[Any, Any, None]]
) -> weakref.finalize[Any, Any]:
    """Run ``close()`` on the running loop once ``owner`` is garbage collected.

    For what users may drop unfinished (``async for ...: break`` without
    ``async with``): its server consumer, subscription and buffer are freed
    then, not left pulling. ``close`` must not refer to ``owner``. Detach the
    returned finalizer once closed properly.
    """
    loop = asyncio.get_running_loop()

    def collected() -> None:
        if loop.is_closed():
            return

        def start() -> None:
            task = loop.create_task(close())
            _CLOSING.add(task)
            task.add_done_callback(_CLOSING.discard)

        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            start()
        else:
            loop.call_soon_threadsafe(start)

    finalizer = weakref.finalize(owner, collected)
    finalizer.atexit = False  # at interpreter exit the loop is gone: nothing to run
    return finalizer
