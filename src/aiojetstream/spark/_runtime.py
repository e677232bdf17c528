"""A private event loop and connection for code that Spark calls synchronously.

Spark calls ``partitions()``, ``read()``, ``write()`` and the streaming offset
methods from plain threads of its Python workers, where no event loop runs.
:class:`Session` owns a new loop, run by a daemon thread of its own, and one
:class:`~aiojetstream.JetStreamContext` on it; every call runs to completion on
that loop while the caller waits. Between calls the loop keeps serving the
connection: it answers the server's pings (a connection nobody reads from is
closed as stale after ``ping_interval x ping_max``, 4-6 minutes by default:
a long trigger interval, or a partition generator paused by slow work
downstream) and reconnects after a failure. Callers still only ask the server
for what they are about to consume.

:func:`shared_session` keeps one such session per set of connection options
in each Python process (Spark reuses its Python workers across tasks and
micro-batches), closed when the process exits. :func:`retrying` rides out
what a stream-leader election causes for a while (timeouts, "cluster not
available", a dropped connection) within the ``retryTimeout`` option.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import logging
import os
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine
from types import TracebackType
from typing import Any, TypeVar

import aiojetstream
from aiojetstream import (
    AuthorizationError,
    ClusterUnavailableError,
    ConnectionClosedError,
    ConnectionFailedError,
    DisconnectedError,
    InvalidOptionError,
    JetStreamContext,
    JetStreamTimeoutError,
    NoHeartbeatError,
    PermissionViolationError,
    StreamInfo,
    TLSError,
)

from ._options import ConnectOptions

__all__ = [
    "FIRST_DELAY",
    "MAX_DELAY",
    "TRANSIENT",
    "Refusals",
    "Session",
    "led",
    "retrying",
    "run_once",
    "run_shared",
    "shared_session",
]

logger = logging.getLogger("aiojetstream.spark")

T = TypeVar("T")

#: How long closing waits for the connection to close and the loop's thread to end.
CLOSE_TIMEOUT = 10.0


async def _await(awaitable: Awaitable[T]) -> T:
    return await awaitable


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    """The session thread: run the loop until stopped, then close it."""
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        loop.close()


async def _close_then_stop(js: JetStreamContext) -> None:
    try:
        await js.close()
    except Exception as exc:
        logger.warning("closing an abandoned Spark session's connection failed: %r", exc)
    finally:
        asyncio.get_running_loop().stop()


def _shut_down(loop: asyncio.AbstractEventLoop, thread: threading.Thread, js: list[Any]) -> None:
    """Close the connection (if still held) and stop the loop, on the loop's own thread.

    Also the finalizer of a :class:`Session` that was never closed (Spark may
    never call ``stop()``): its thread and connection do not outlive it. The
    close and the stop are scheduled on the session's loop, whose thread then
    ends; a failure to close is logged there (nobody is left to raise to). The
    caller waits for that thread (at most CLOSE_TIMEOUT), as :meth:`Session.close`
    does, unless it runs an event loop itself: a garbage collection runs the
    finalizer in whichever thread it happens on, and an event loop's thread
    would stand still meanwhile (up to CLOSE_TIMEOUT while the session's loop
    is busy). At interpreter exit (``weakref.finalize``'s own exit hook, which
    runs before :func:`_close_shared`) it waits, so the connection is closed.
    """
    if loop.is_closed() or not thread.is_alive():
        return

    def begin() -> None:
        if js:
            loop.create_task(_close_then_stop(js.pop()))
        else:
            loop.stop()

    if thread is threading.current_thread():
        begin()
        return
    try:
        loop.call_soon_threadsafe(begin)
    except RuntimeError:
        return  # the loop closed meanwhile: nothing to stop
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        thread.join(CLOSE_TIMEOUT)  # no event loop here to hold up


class Refusals:
    """The permission violations the server reported on a connection (nats-py's error callback).

    A request the user may not publish gets no reply, only an asynchronous
    ``-ERR 'Permissions Violation ...'``: :func:`retrying` consults this to
    fail at once with the cause instead of retrying a timeout.
    """

    def __init__(self) -> None:
        self.count = 0
        self.last = ""
        #: Set once the first connection opened: until then an error is the failed
        #: attempt the connect error names (debug level, not a warning per attempt).
        self.connected = False

    async def record(self, exc: Exception) -> None:
        """nats-py's ``error_cb``: count permission violations; log every error once."""
        text = str(exc) or type(exc).__name__
        if "permissions violation" in text.lower():
            self.count += 1
            self.last = text
        if self.connected:
            logger.warning("nats connection error: %s", text)
        else:
            logger.debug("connecting: %s", text)


class Session:
    """A private event loop, served by its own thread, with one JetStream connection on it."""

    def __init__(self, options: ConnectOptions, *, max_pending: int | None = None) -> None:
        self._options = options
        self._max_pending = max_pending
        self.refusals = Refusals()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=_serve, args=(self._loop,), name="aiojetstream-spark-session", daemon=True
        )
        self._held: list[JetStreamContext] = []  # the connection, for the finalizer
        self._closer = weakref.finalize(self, _shut_down, self._loop, self._thread, self._held)
        self._thread.start()
        try:
            self._held.append(self.run(self._connect()))
        except BaseException:
            self._closer()
            self._join()
            raise
        self.refusals.connected = True

    async def _connect(self) -> JetStreamContext:
        opts = self._options
        try:
            kwargs = opts.connect_kwargs()
            kwargs["error_cb"] = self.refusals.record
            if self._max_pending is not None:
                kwargs["publish_async_max_pending"] = self._max_pending
        except InvalidOptionError:
            raise  # names its option itself ('creds')
        except (OSError, ValueError) as exc:
            raise InvalidOptionError(
                f"options 'tlsCaFile' / 'tlsCertFile' / 'tlsKeyFile': {exc}"
            ) from exc
        try:
            return await aiojetstream.connect(opts.urls(), **kwargs)
        except (ConnectionClosedError, TLSError) as exc:
            raise ConnectionFailedError(
                f"aiojetstream.spark: cannot reach NATS at {opts.describe()} "
                f"(option 'servers'): {exc}"
            ) from exc

    @property
    def usable(self) -> bool:
        """Whether the loop runs and the connection is open (nats-py may have given up)."""
        return (
            bool(self._held)
            and self._thread.is_alive()
            and not self._loop.is_closed()
            and not self._held[0].nc.is_closed
        )

    @property
    def js(self) -> JetStreamContext:
        """The connected context."""
        if not self._held:
            raise ConnectionClosedError("aiojetstream.spark: the session is closed")
        return self._held[0]

    def run(self, awaitable: Awaitable[T]) -> T:
        """Run ``awaitable`` to completion on the session's loop; its result or exception.

        If the caller is interrupted while it waits (``KeyboardInterrupt``, a
        Spark task kill), the work on the loop is cancelled.
        """
        if not self._thread.is_alive() or self._loop.is_closed():
            if asyncio.iscoroutine(awaitable):
                awaitable.close()  # never awaited: no warning about it
            raise ConnectionClosedError("aiojetstream.spark: the session is closed")
        if threading.current_thread() is self._thread:
            if asyncio.iscoroutine(awaitable):
                awaitable.close()
            raise RuntimeError("Session.run() on the session's own loop thread would deadlock")
        future = asyncio.run_coroutine_threadsafe(_await(awaitable), self._loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    def close(self) -> None:
        """Close the connection, stop the loop and its thread (idempotent).

        Raises what closing the connection raised (after stopping the loop).
        """
        if not self._closer.alive:
            return
        try:
            if self._held and self._thread.is_alive():
                js = self._held.pop()
                self.run(js.close())
                self.run(self._loop.shutdown_asyncgens())
        finally:
            self._closer()
            self._join()

    def _join(self) -> None:
        """Wait (at most CLOSE_TIMEOUT) for the loop's thread to end, unless on it.

        (The finalizer waits only where no event loop runs: an explicit close
        waits wherever it is called.)
        """
        if threading.current_thread() is not self._thread:
            self._thread.join(CLOSE_TIMEOUT)

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def run_once(
    options: ConnectOptions, work: Callable[[JetStreamContext], Coroutine[Any, Any, T]]
) -> T:
    """Connect, run ``work(js)``, close: one synchronous call."""
    with Session(options) as session:
        return session.run(work(session.js))


# ----------------------------------------------------------------------------- one per process

#: Sessions kept per process; the least recently used beyond it is closed (a worker
#: that served jobs against many servers does not keep reconnecting to all of them).
MAX_SHARED = 8

_SHARED: OrderedDict[tuple[ConnectOptions, int | None], Session] = OrderedDict()
_SHARED_LOCK = threading.Lock()
_SHARED_PID = [os.getpid()]


def shared_session(options: ConnectOptions, *, max_pending: int | None = None) -> Session:
    """The session of the calling process for ``options``: connected on first use, then reused.

    Spark runs the tasks and micro-batches of a Python worker one after the
    other in the same process, so they share one connection instead of opening
    one each. A session whose connection closed for good is replaced. All are
    closed when the process exits; at most :data:`MAX_SHARED` are kept.
    """
    evicted: list[Session] = []
    try:
        with _SHARED_LOCK:
            return _shared(options, max_pending, evicted)
    finally:
        for old in evicted:
            _close_quietly(old)


def _shared(options: ConnectOptions, max_pending: int | None, evicted: list[Session]) -> Session:
    """:func:`shared_session` under the lock; sessions to close go to ``evicted``."""
    if _SHARED_PID[0] != os.getpid():
        # Forked (Spark's daemon forks its workers): the parent's loop threads
        # do not exist here; its sockets are the parent's to close.
        _SHARED.clear()
        _SHARED_PID[0] = os.getpid()
    key = (options, max_pending)
    session = _SHARED.get(key)
    if session is not None and session.usable:
        _SHARED.move_to_end(key)
        return session
    if session is not None:
        del _SHARED[key]
        evicted.append(session)
    session = Session(options, max_pending=max_pending)
    _SHARED[key] = session
    while len(_SHARED) > MAX_SHARED:
        evicted.append(_SHARED.popitem(last=False)[1])
    return session


def discard(session: Session) -> None:
    """Stop sharing ``session`` and close it (after a failure that may have broken it)."""
    with _SHARED_LOCK:
        for key, held in list(_SHARED.items()):
            if held is session:
                del _SHARED[key]
    _close_quietly(session)


def _close_quietly(session: Session) -> None:
    try:
        session.close()
    except Exception as exc:  # nobody is left to raise to: the session is given up
        logger.warning("closing a Spark session's connection failed: %r", exc)


@atexit.register
def _close_shared() -> None:
    with _SHARED_LOCK:
        sessions = list(_SHARED.values()) if _SHARED_PID[0] == os.getpid() else []
        _SHARED.clear()
    for session in sessions:
        _close_quietly(session)


# ----------------------------------------------------------------------------- retries

#: What a stream-leader election or a lost node causes for a while: worth asking again.
TRANSIENT: tuple[type[Exception], ...] = (
    JetStreamTimeoutError,
    ClusterUnavailableError,
    DisconnectedError,
    NoHeartbeatError,
)
#: The first delay between two attempts (it doubles up to MAX_DELAY), in seconds.
FIRST_DELAY = 0.1
MAX_DELAY = 2.0


async def retrying(
    work: Callable[[], Awaitable[T]],
    timeout: float,
    what: str,
    *,
    on_error: Callable[[Exception], None] | None = None,
    refusals: Refusals | None = None,
) -> T:
    """Await ``work()`` until it succeeds, retrying :data:`TRANSIENT` errors within ``timeout``.

    The delay between attempts doubles from 0.1 s up to 2 s. After ``timeout``
    seconds the last error is raised, with a note naming ``what`` and the
    ``retryTimeout`` option. ``on_error`` sees each transient error first (to
    drop state the failure may have broken). A timeout while the server
    reported a permission violation on the connection (``refusals``) is not
    retried, nor is a :class:`~aiojetstream.PermissionViolationError` (the
    request the server refused): :class:`~aiojetstream.AuthorizationError`
    names the violation.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    delay = FIRST_DELAY
    while True:
        refused = refusals.count if refusals is not None else 0
        try:
            return await work()
        except PermissionViolationError as exc:
            raise AuthorizationError(
                f"aiojetstream.spark: {what}: the server refused it ({exc}); "
                "check the user's permissions (and consumerNamePrefix)"
            ) from exc
        except TRANSIENT as exc:
            if refusals is not None and refusals.count > refused:
                raise AuthorizationError(
                    f"aiojetstream.spark: {what}: the server refused it ({refusals.last}); "
                    "check the user's permissions (and consumerNamePrefix)"
                ) from exc
            if on_error is not None:
                on_error(exc)
            left = deadline - loop.time()
            if left <= 0:
                exc.add_note(
                    f"aiojetstream.spark: {what} still failed after retrying for {timeout:g} s "
                    "(option 'retryTimeout')"
                )
                raise
            logger.info("aiojetstream.spark: %s failed (%r); retrying", what, exc)
            await asyncio.sleep(min(delay, left))
            delay = min(delay * 2, MAX_DELAY)


def led(info: StreamInfo) -> StreamInfo:
    """``info`` unless a replicated stream answered it without a leader.

    While a replicated stream has no leader, nats-server lets a member of its
    group answer ``STREAM.INFO`` itself, with ``cluster.leader`` empty and that
    member's own state, which may be far behind (a node paused or restarting):
    a read planned on it ended early or (``jetstream_kv``) read an old bucket,
    with no error. Such an answer raises :class:`ClusterUnavailableError`,
    which :func:`retrying` asks again (within ``retryTimeout``) until a leader
    answers.

    Raises:
        ClusterUnavailableError: a stream of more than one replica, no leader named.

    """
    if info.config.num_replicas > 1 and (info.cluster is None or not info.cluster.leader):
        raise ClusterUnavailableError(
            503,
            0,
            f"stream {info.config.name!r} has no leader (a member of its group answered "
            "its info, whose state may be behind): waiting for an election",
        )
    return info


def run_shared(
    options: ConnectOptions,
    work: Callable[[JetStreamContext], Awaitable[T]],
    *,
    timeout: float,
    what: str,
) -> T:
    """Run ``work(js)`` on this process's shared session, retrying transient errors.

    A connection closed for good (nats-py gave up reconnecting) is replaced
    by a new one within the same ``timeout``.
    """
    loop_deadline = _now() + timeout
    while True:
        session = shared_session(options)
        left = max(0.0, loop_deadline - _now())
        try:
            return session.run(
                retrying(functools.partial(work, session.js), left, what, refusals=session.refusals)
            )
        except ConnectionClosedError:
            discard(session)
            if _now() >= loop_deadline:
                raise


def _now() -> float:
    return time.monotonic()
