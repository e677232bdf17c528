"""``Conn``: the typed facade over one nats-py client, and its connection listeners."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import weakref
from collections.abc import Awaitable, Callable
from typing import Protocol

from .._errors import ConnectionClosedError, InvalidOptionError, JetStreamError
from ._auth import REFUSALS, closed_error
from ._connect import logging_errors
from ._fallback import after_background_publishes, publish_in_task
from ._nats import (
    CLOSE_FLUSH_TIMEOUT,
    NatsClient,
    NatsMsg,
    NatsSubscription,
    abandon,
    bound_close_waits,
    enqueue,
    enqueue_many,
    guard_late_pongs,
    guard_permission_errors,
    is_down,
    nats_errors,
    owning_loop,
    queue_unsub,
    set_state_callbacks,
    state_callbacks,
    write_now,
    write_pending,
)
from ._nats import (
    ack_nowait as queue_ack,
)
from ._paths import choose_path
from ._raw import RawSubscription, subscribe_raw
from ._requests import fail_requests, request
from ._scan import RawSink
from ._translate import translate
from ._violations import PublishWatch, SubscriptionWatch, route_violation, watches
from ._wire import MAX_SUBJECT_LINE, RawHandler, Reply, check_line, pub_command

__all__ = ["CLOSE_FLUSH_TIMEOUT", "HUBS", "Conn", "ConnectionListener", "Hub"]

logger = logging.getLogger("aiojetstream")


class ConnectionListener(Protocol):
    """Receives connection state changes (called synchronously, must not block)."""

    def on_disconnected(self) -> None:
        """The connection dropped; nats-py is reconnecting (or closing). Once per drop."""

    def on_reconnected(self) -> None:
        """The connection is back."""

    def on_closed(self) -> None:
        """The connection is closed for good."""


class _Waking:
    """A connection listener that sets ``event`` at each state change (see wait_connected)."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def on_disconnected(self) -> None:
        """Wake the waiter (it looks again)."""
        self.event.set()

    def on_reconnected(self) -> None:
        """Wake the waiter."""
        self.event.set()

    def on_closed(self) -> None:
        """Wake the waiter (it gives up)."""
        self.event.set()


class Hub:
    """Chains itself in front of a nats-py client's state callbacks.

    A lost connection is passed on once (nats-py calls its callback again
    when it closes a client whose connection was already lost; see
    :func:`~._connect.one_disconnect_each`), to the listeners and the
    callback it chains.
    """

    def __init__(self, nc: NatsClient) -> None:
        self.nc = nc
        self.listeners: dict[int, ConnectionListener] = {}
        #: A disconnect was passed on (or happened before this hub) since the last
        #: reconnect: the one nats-py's close repeats is not.
        self._down = not nc.is_connected
        self._orig_disconnected, self._orig_reconnected, self._orig_closed = state_callbacks(nc)
        set_state_callbacks(nc, self._disconnected, self._reconnected, self._closed)

    def restore(self) -> None:
        set_state_callbacks(
            self.nc, self._orig_disconnected, self._orig_reconnected, self._orig_closed
        )

    def _fan_out(self, name: str) -> None:
        # Each listener on its own: one that raises must not keep the others, nor
        # nats-py (which awaits these callbacks inside its reconnect task), from
        # hearing of the change.
        for listener in list(self.listeners.values()):
            try:
                getattr(listener, name)()
            except Exception:
                logger.exception("a connection listener's %s raised", name)

    @staticmethod
    async def _user_callback(callback: Callable[[], Awaitable[None]] | None, name: str) -> None:
        if callback is not None:
            await logging_errors(callback, f"{name}_cb")()

    async def _disconnected(self) -> None:
        if self._down and self.nc.is_closed:
            return
        self._down = True
        self._fan_out("on_disconnected")
        await self._user_callback(self._orig_disconnected, "disconnected")

    async def _reconnected(self) -> None:
        self._down = False
        self._fan_out("on_reconnected")
        await self._user_callback(self._orig_reconnected, "reconnected")

    async def _closed(self) -> None:
        self._fan_out("on_closed")
        await self._user_callback(self._orig_closed, "closed")


HUBS: weakref.WeakKeyDictionary[NatsClient, Hub] = weakref.WeakKeyDictionary()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    """The running event loop, None outside one."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class Conn:
    """A thin, typed facade over one nats-py client."""

    __slots__ = ("__weakref__", "fast", "loop", "nc", "thread")

    def __init__(self, nc: NatsClient) -> None:
        self.nc = nc
        #: The event loop the connection belongs to (nats-py's tasks run there): a
        #: call from another loop is refused (:meth:`other_loop`). None until known.
        self.loop = owning_loop(nc) or _running_loop()
        #: The thread :attr:`loop` was seen running in (None until known): with
        #: ``loop.is_running()``, what the per-publish check compares (cheaper than
        #: asking asyncio for the running loop).
        self.thread = threading.get_ident() if self.loop is _running_loop() else None
        #: True on the fast path, False on the fallback (see the module docstring).
        self.fast = choose_path(nc)
        # A permissions violation fails the call that caused it (see _violations).
        guard_permission_errors(nc, functools.partial(route_violation, nc))
        guard_late_pongs(nc)  # a flush given up: its PONG must not drop the connection

    # ----------------------------------------------------------------- state

    @property
    def max_payload(self) -> int:
        """The server's ``max_payload`` (0 when unknown)."""
        return int(self.nc.max_payload or 0)

    @property
    def is_closed(self) -> bool:
        """True once the connection is closed for good."""
        return bool(self.nc.is_closed)

    def closed_error(self, text: str = "the connection is closed") -> ConnectionClosedError:
        """The error of a closed connection: ``text``, and the refusal that closed it.

        The refusal of credentials that made nats-py give up, if one did (see ``_auth``).
        """
        return closed_error(self.nc, text)

    @property
    def is_connected(self) -> bool:
        """True while connected to a server."""
        return bool(self.nc.is_connected)

    @property
    def is_down(self) -> bool:
        """True while the connection is lost and nats-py reconnects.

        Between two attempts and during each one (its handshake, nats-py's
        CONNECTING): what is written meanwhile waits in nats-py's buffer and is
        sent after the reconnect, also when the call that wrote it has given up.
        """
        return is_down(self.nc)

    async def wait_connected(self, timeout: float) -> bool:
        """Wait until connected: True; False once closed or after ``timeout`` seconds.

        At once while connected. For a call that must not queue anything for a
        server it never reaches: what nats-py buffers while reconnecting is sent
        after the reconnect, even when the call that wrote it has given up.
        """
        if self.is_connected or self.is_closed:
            return self.is_connected
        waking = _Waking()
        self.add_listener(waking)
        try:
            async with asyncio.timeout(timeout):
                while not (self.is_connected or self.is_closed):
                    waking.event.clear()
                    await waking.event.wait()
        except TimeoutError:
            return False
        finally:
            self.remove_listener(waking)
        return self.is_connected

    def add_listener(self, listener: ConnectionListener) -> None:
        """Start delivering connection state changes to ``listener``."""
        hub = HUBS.get(self.nc)
        if hub is None:
            hub = HUBS[self.nc] = Hub(self.nc)
        hub.listeners[id(listener)] = listener

    def remove_listener(self, listener: ConnectionListener) -> None:
        """Stop delivering to ``listener``; the last one out restores nats-py's callbacks."""
        hub = HUBS.get(self.nc)
        if hub is None:
            return
        hub.listeners.pop(id(listener), None)
        if not hub.listeners:
            hub.restore()
            del HUBS[self.nc]

    def listener_count(self) -> int:
        """How many listeners are registered on this client (for leak checks)."""
        hub = HUBS.get(self.nc)
        return 0 if hub is None else len(hub.listeners)

    def other_loop(self, running: asyncio.AbstractEventLoop) -> None:
        """A call from ``running``, not :attr:`loop`: adopt it if none was known, else refuse.

        The callers compare ``asyncio.get_running_loop() is not conn.loop``
        first (one identity check per call). Written from another loop, a
        command went out on the old loop's socket while the reply could only
        come to the old loop's read task: the call waited out its timeout and
        reported a failure for a write the server had carried out.

        Raises:
            ConnectionClosedError: the connection's loop has ended (closed).
            InvalidOptionError: the connection's loop still runs (another thread's).

        """
        owner = self.loop
        if owner is None:
            self.loop = running
            self.thread = threading.get_ident()
            return
        raise self.other_loop_error(owner)

    def on_own_loop(self) -> bool:
        """True when the caller runs in :attr:`loop` (its thread, and it is running).

        The per-publish form of ``asyncio.get_running_loop() is conn.loop``: a
        thread id and an attribute read, where asking asyncio for the running
        loop costs a ``getpid()`` system call on Python 3.11. Only called from
        coroutines and callbacks, so some loop runs in this thread: when the
        connection's does, it is the running one.
        """
        loop = self.loop
        if loop is None:
            return False
        thread = self.thread
        if thread is None:  # (made outside its loop: learnt at the first call in it)
            if _running_loop() is not loop:
                return False
            thread = self.thread = threading.get_ident()
        return thread == threading.get_ident() and loop.is_running()

    def check_loop(self) -> None:
        """Refuse a call from an event loop other than :attr:`loop` (adopted if none yet).

        Before anything is sent or changed: :meth:`other_loop` says why. The
        thread check of :meth:`on_own_loop` first, asyncio's running loop only
        when it fails.
        """
        if not self.on_own_loop():
            running = asyncio.get_running_loop()
            if running is not self.loop:
                self.other_loop(running)

    def outside(self) -> bool:
        """For a wait or a close of a handle: whether the caller runs outside an ended loop.

        Not per message: the slow paths and closes of pulls, watches and reads.
        True when the connection's loop has ended and the caller runs in
        another (nothing of the handle can run: a close only marks it closed);
        False in the connection's loop (or when none is known yet).

        Raises:
            InvalidOptionError: the caller runs in another loop while the
                connection's is open (another thread's: a wait there hung, or
                raised a bare ``RuntimeError``; a close left the server's consumer).

        """
        loop = self.loop
        if loop is None or asyncio.get_running_loop() is loop:
            return False
        if loop.is_closed():
            return True
        raise self.other_loop_error(loop)

    def refuse_outside(self) -> None:
        """:meth:`outside` for a wait: an ended loop raises too (``ConnectionClosedError``)."""
        loop = self.loop
        if self.outside() and loop is not None:
            raise self.other_loop_error(loop)

    @staticmethod
    def other_loop_error(owner: asyncio.AbstractEventLoop) -> JetStreamError:
        """The error of a call made from an event loop other than ``owner``, the connection's."""
        if owner.is_closed():
            return ConnectionClosedError(
                "this connection belongs to another event loop, one that has ended (it was "
                "opened in an earlier asyncio.run(), say): nothing was sent. Connect inside "
                "the event loop that uses it (in the same asyncio.run())"
            )
        if not owner.is_running():
            return InvalidOptionError(
                "this connection belongs to another event loop, open but not running (one "
                "left from an earlier run: a pytest-asyncio fixture of a wider loop_scope "
                "than the test's?): nothing was sent. Connect inside the event loop that "
                "uses it (give the fixture and the test the same loop_scope)"
            )
        return InvalidOptionError(
            "this connection belongs to another event loop (still running: another "
            "thread's?): nothing was sent. Connect inside the event loop that uses it, or "
            "run the call in the connection's loop (asyncio.run_coroutine_threadsafe)"
        )

    def orphaned(self) -> bool:
        """True when the connection's event loop has ended and the caller runs in another.

        Closing it normally from there raised ``RuntimeError: Event loop is
        closed`` and left the socket open: :meth:`close` drops it instead.

        Raises:
            InvalidOptionError: the connection's loop still runs (another thread's).

        """
        owner = self.loop
        if owner is None or owner is asyncio.get_running_loop():
            return False
        if not owner.is_closed():
            raise self.other_loop_error(owner)
        return True

    # ----------------------------------------------------------------- permissions

    def watch_publishes(self, owner: object, watch: PublishWatch) -> None:
        """Offer ``watch`` the server's publish permission violations (see ``_violations``).

        Called in the read loop with each one until a watch takes it (returns
        True); watches are asked in the order they were first registered.
        """
        watches(self.nc).publishes[owner] = watch

    def watch_subscription(self, subject: str, watch: SubscriptionWatch) -> None:
        """Tell ``watch`` when the server refuses the subscription to ``subject``."""
        watches(self.nc).subscriptions[subject] = watch

    def unwatch(self, owner: object = None, subject: str | None = None) -> None:
        """Stop watching for ``owner``'s publishes and the subscription to ``subject``."""
        found = watches(self.nc)
        if owner is not None:
            found.publishes.pop(owner, None)
        if subject is not None:
            found.subscriptions.pop(subject, None)

    # ----------------------------------------------------------------- I/O

    def new_inbox(self) -> str:
        """A new unique inbox subject."""
        return self.nc.new_inbox()

    async def request(
        self,
        subject: str,
        payload: bytes,
        timeout: float,
        header_block: bytes | None = None,
    ) -> Reply:
        """Send a request and return the reply's payload and raw header block.

        Raises:
            ConnectionClosedError: the connection is closed (or draining).
            DisconnectedError: disconnected and the reconnect buffer is full.
            NoRespondersError: nobody listens on ``subject``.
            JetStreamTimeoutError: no reply within ``timeout`` seconds.

        """
        return await request(self, subject, payload, timeout, header_block)

    async def publish(
        self,
        subject: str,
        payload: bytes,
        reply: str = "",
        headers: dict[str, str] | None = None,
    ) -> None:
        """Publish a message (errors translated).

        On the fallback it is queued after the asynchronous publishes made
        before it (:func:`~._fallback.after_background_publishes`).
        """
        self.check_loop()
        if len(subject) + len(reply) > MAX_SUBJECT_LINE // 4:  # else short in any encoding
            check_line(subject.encode(), reply.encode())
        if not self.fast:
            await after_background_publishes()
        with translate(subject, self.nc):
            await self.nc.publish(subject, payload, reply=reply, headers=headers)

    async def subscribe(
        self,
        subject: str,
        cb: Callable[[NatsMsg], Awaitable[None]],
        *,
        pending_msgs_limit: int = 0,
        pending_bytes_limit: int = 0,
    ) -> NatsSubscription:
        """Subscribe with a callback; limits of 0 mean unlimited (no client-side drops)."""
        self.check_loop()
        with translate(subject, self.nc):
            return await self.nc.subscribe(
                subject,
                cb=cb,
                pending_msgs_limit=pending_msgs_limit,
                pending_bytes_limit=pending_bytes_limit,
            )

    async def subscribe_raw(
        self,
        subject: str,
        handler: RawHandler,
        *,
        internal: bool = False,
        sink: RawSink | None = None,
    ) -> RawSubscription:
        """Subscribe; each message goes to ``handler(subject, reply, payload, header_block)``.

        The handler runs synchronously in the connection's read loop, so it
        must be quick and must not block. ``internal`` marks a long-lived
        subscription of the library itself (reply inboxes), kept apart from the
        consumers' routes. With a ``sink`` (fast path only), the plain messages
        the router frames itself are buffered through it instead (see
        :class:`RawSink`); the handler gets the others.
        """
        self.check_loop()
        return await subscribe_raw(self, subject, handler, internal, sink)

    def publish_nowait(
        self,
        subject: bytes,
        payload: bytes,
        reply: bytes = b"",
        header_block: bytes | None = None,
        on_error: Callable[[JetStreamError], None] | None = None,
    ) -> None:
        """Queue a publish without awaiting (pull requests, acks, asynchronous publishes).

        On the fast path the command is in nats-py's outgoing buffer when this
        returns, and every failure is raised here. On the fallback nats-py's
        ``publish`` runs in a task: a failure found there (the reconnect buffer
        filled up meanwhile, the connection closed, nats-py refused the
        message) goes to ``on_error``, or is logged as a warning without one;
        an awaited publish or request made after it is queued after it.

        Raises:
            ConnectionClosedError: the connection is closed (or draining, on the fallback).
            DisconnectedError: disconnected and the reconnect buffer is full.

        """
        nc = self.nc
        if nc.is_closed:
            raise closed_error(nc)
        if len(subject) + len(reply) > MAX_SUBJECT_LINE:
            check_line(subject, reply)
        if not self.fast:
            publish_in_task(nc, subject, payload, reply, header_block, on_error)
            return
        if header_block is not None:
            cmd = pub_command(subject, reply, payload, header_block)
        elif reply:
            cmd = b"PUB %b %b %d\r\n%b\r\n" % (subject, reply, len(payload), payload)
        else:
            cmd = b"PUB %b %d\r\n%b\r\n" % (subject, len(payload), payload)
        enqueue(nc, cmd, len(payload))

    def write_queued(self) -> None:
        """Write what is queued now rather than when nats-py's flusher task next runs.

        For a pull request: it is sent while the consumer goes on with its
        buffer, not once the consumer loop yields (the server would sit idle
        meanwhile). Fast path only (the fallback writes from tasks anyway);
        while disconnected the queue is the reconnect buffer and stays.
        """
        if self.fast:
            write_pending(self.nc)

    def publish_now(
        self,
        subject: bytes,
        payload: bytes,
        reply: bytes,
        on_error: Callable[[JetStreamError], None] | None = None,
    ) -> None:
        """:meth:`publish_nowait` then :meth:`write_queued` (a pull request), in one.

        On the fast path over TCP the command goes out at once, after what is
        queued, without waking nats-py's flusher task for it.

        Raises:
            ConnectionClosedError: the connection is closed (or draining, on the fallback).
            DisconnectedError: disconnected and the reconnect buffer is full.

        """
        nc = self.nc
        if (
            self.fast
            and reply
            and not nc.is_closed
            and len(subject) + len(reply) <= MAX_SUBJECT_LINE
            and write_now(
                nc,
                b"PUB %b %b %d\r\n%b\r\n" % (subject, reply, len(payload), payload),
                len(payload),
            )
        ):
            return
        self.publish_nowait(subject, payload, reply, None, on_error)
        self.write_queued()

    #: Queue an acknowledgement (fast path only): :func:`._nats.ack_nowait`.
    ack_nowait = queue_ack

    def enqueue(self, cmds: bytes, payload_size: int, count: int) -> None:
        """Queue ``count`` ready-made PUB/HPUB commands, joined, as one write (fast path).

        Raises:
            DisconnectedError: disconnected and the reconnect buffer is full.

        """
        enqueue(self.nc, cmds, payload_size, count)

    def enqueue_many(self, cmds: list[bytes], payload_size: int) -> None:
        """Queue ready-made PUB/HPUB commands as one write (fast path; as :meth:`enqueue`).

        Raises:
            DisconnectedError: disconnected and the reconnect buffer is full.

        """
        enqueue_many(self.nc, cmds, payload_size)

    @property
    def is_draining_pubs(self) -> bool:
        """True while nats-py drains publishes (the last step before closing)."""
        return bool(self.nc.is_draining_pubs)

    async def unsubscribe(self, sub: NatsSubscription) -> None:
        """Unsubscribe; a closed connection is not an error here.

        While reconnecting nats-py forgets the subscription but writes no
        UNSUB, whereas the SUB of a subscription made meanwhile waits in its
        buffer and is sent after the reconnect: the server kept the interest
        (and delivered to it) for as long as the connection lived. The UNSUB is
        queued behind it (a server that does not know the sid ignores it).
        """
        nc = self.nc
        if nc.is_closed:
            return
        reconnecting = nc.is_reconnecting  # as nats-py sees it below
        with contextlib.suppress(
            nats_errors.ConnectionClosedError,
            nats_errors.ConnectionDrainingError,  # the drain removes it anyway
            nats_errors.BadSubscriptionError,
        ):
            await sub.unsubscribe()
            if reconnecting and not nc.is_closed:
                await queue_unsub(nc, sub)

    async def drain_subscription(
        self, sub: NatsSubscription, timeout: float, *, routed: bool
    ) -> None:
        """Unsubscribe ``sub``, then wait for the server's PONG to a PING sent after the UNSUB.

        Every message the server sent to ``sub`` before it read the UNSUB
        arrives before that PONG. ``routed``: the router hands on the
        subscription's messages (fast path), which it goes on doing until the
        caller detaches it; else nats-py's own drain keeps delivering them to
        the callback until the PONG. A closed connection is not an error, nor
        a lost one: no PONG can come then, and nats-py does not renew an
        unsubscribed subscription after the reconnect, so nothing more arrives.

        Raises:
            JetStreamTimeoutError: no PONG within ``timeout`` seconds.

        """
        nc = self.nc
        if nc.is_closed:
            return
        if not routed and nc.is_connected:
            # nats-py's drain (public API): UNSUB, PING, then it drops the subscription.
            # Its PING is written at once and may overtake the UNSUB, which its
            # flusher task writes: a message the server sends in between is lost.
            with (
                translate(),
                contextlib.suppress(
                    nats_errors.ConnectionClosedError,
                    nats_errors.ConnectionDrainingError,
                    nats_errors.BadSubscriptionError,
                ),
            ):
                await sub.drain()  # type: ignore[no-untyped-call]
            return
        await self.unsubscribe(sub)  # the UNSUB queued; nats-py forgets the subscription
        if not routed or not nc.is_connected:
            return
        if not write_pending(nc):
            # Not over TCP: the UNSUB waits for nats-py's flusher task, while the
            # PING of a flush is written at once; a first round trip lets it out.
            await self.flush(timeout)
        await self.flush(timeout)

    async def flush(self, timeout: float) -> None:
        """Flush and wait for the server's PONG."""
        with translate(nc=self.nc):
            # nats-py annotates an int but waits on any positive number.
            await self.nc.flush(timeout=timeout)  # type: ignore[arg-type]

    async def close(self) -> None:
        """Close the connection, flushing for at most ``CLOSE_FLUSH_TIMEOUT`` seconds.

        Requests still waiting for a reply fail with :class:`ConnectionClosedError`.
        A connection whose event loop has ended (closed from the next
        ``asyncio.run()``) is dropped quietly: its socket shut down, the client
        marked closed (:meth:`orphaned`).

        Raises:
            InvalidOptionError: called from an event loop other than the
                connection's, which still runs.

        """
        if self.orphaned():
            if not self.nc.is_closed:
                abandon(self.nc)
            return
        if not self.nc.is_closed:
            bound_close_waits(self.nc, CLOSE_FLUSH_TIMEOUT)
            refusals = REFUSALS.get(self.nc)
            if refusals is not None:
                refusals.closing = True
        try:
            with translate():
                await self.nc.close()
        finally:
            fail_requests(self.nc)
