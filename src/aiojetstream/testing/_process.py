"""Waiting for a server process to exit, and the registry that kills leftovers at exit."""

from __future__ import annotations

import asyncio
import atexit
import os
import subprocess
import threading
from typing import TYPE_CHECKING

from ._config import POLL_INTERVAL

if TYPE_CHECKING:
    from ._server import NatsServer


async def wait_process_exit(proc: subprocess.Popen[bytes], limit: float | None) -> bool:
    """Wait, without blocking the loop, until ``proc`` exits; reap it.

    Returns:
        True when the process exited (and was reaped), False on timeout.

    """
    if proc.poll() is not None:
        return True
    loop = asyncio.get_running_loop()
    pidfd = -1
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is not None:
        try:
            pidfd = pidfd_open(proc.pid)
        except OSError:
            pidfd = -1
    try:
        async with asyncio.timeout(limit):
            if pidfd >= 0:
                exited: asyncio.Future[None] = loop.create_future()

                def _on_exit() -> None:
                    if not exited.done():
                        exited.set_result(None)

                try:
                    loop.add_reader(pidfd, _on_exit)
                    watching = True
                except NotImplementedError:
                    watching = False  # this loop cannot watch descriptors: poll below
                if watching:
                    try:
                        await exited
                    finally:
                        loop.remove_reader(pidfd)
            # Fallback (no pidfd, or a loop without add_reader): a bounded poll.
            while proc.poll() is None:  # noqa: ASYNC110 - no exit event to wait on here
                await asyncio.sleep(POLL_INTERVAL)
    except TimeoutError:
        return False
    finally:
        if pidfd >= 0:
            os.close(pidfd)
    proc.wait()
    return True


# ---------------------------------------------------------------------------
# Process registry: nothing survives the interpreter
# ---------------------------------------------------------------------------

_registry_lock = threading.Lock()
_registry: set[NatsServer] = set()


def register(server: NatsServer) -> None:
    """Track ``server`` so that it is killed and cleaned up at interpreter exit."""
    with _registry_lock:
        _registry.add(server)


def unregister(server: NatsServer) -> None:
    """Stop tracking ``server`` (it was stopped and cleaned up)."""
    with _registry_lock:
        _registry.discard(server)


@atexit.register
def _cleanup_at_exit() -> None:
    with _registry_lock:
        servers = list(_registry)
        _registry.clear()
    for server in servers:
        server._force_cleanup()
