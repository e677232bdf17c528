"""Closing what users drop unfinished: a finalizer that runs an async close on its loop."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Coroutine
from typing import Any

#: Closes of readers dropped unfinished, kept until done.
_CLOSING: set[asyncio.Task[None]] = set()


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


def close_soon(close: Coroutine[Any, Any, None]) -> None:
    """Run ``close`` in a task of its own, kept until done; return at once.

    For a close after something was taken that must be handed back without a
    cancellation point in between (a cancel there lost what was taken).
    """
    task = asyncio.get_running_loop().create_task(close)
    _CLOSING.add(task)
    task.add_done_callback(_CLOSING.discard)
