"""Requests: one wildcard reply inbox per client, replies taken raw from the router.

On the fallback a request is nats-py's ``request``.

A request the server refuses to publish (a permissions violation) fails at
once with :class:`PermissionViolationError`, and so does every request
waiting when the server refuses the reply inbox's subscription (see
``_violations``); the next request subscribes a new inbox.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import re
import weakref
from typing import TYPE_CHECKING, Any, Final

from .._errors import (
    ConnectionClosedError,
    InvalidSubjectError,
    JetStreamTimeoutError,
    MaxPayloadExceededError,
    NoRespondersError,
    PermissionViolationError,
)
from .._validation import check_timeout
from ._auth import closed_error
from ._fallback import after_background_publishes, decode_header_block, rebuild_header_block
from ._nats import (
    NatsClient,
    NatsSubscription,
    buffer_nearly_full,
    fail_nats_requests,
    forget_nats_request_inbox,
    nats_request_inbox,
    payload_limit,
    send_now,
    subscription_id,
)
from ._raw import ROUTERS, router_for
from ._translate import translate
from ._violations import Violation, drop_refused, watches
from ._wire import MAX_SUBJECT_LINE, Reply, check_line, pub_command

if TYPE_CHECKING:
    from ._client import Conn

__all__ = [
    "FALLBACK_REQUESTS",
    "REQUESTS",
    "FallbackRequests",
    "Requests",
    "fail_requests",
    "request",
]

logger = logging.getLogger("aiojetstream")

# What nats-py refuses in a subject it publishes to (whitespace would break the protocol).
_BAD_SUBJECT = re.compile(r"[\s\x00-\x1f\x7f\ud800-\udfff]")  # and lone surrogates
_NO_RESPONDERS = b"NATS/1.0 503"


class Requests:
    """The requests of one nats-py client: one wildcard reply inbox, raw replies.

    Each request gets a token (a counter) under the inbox prefix; its reply
    completes the request's future straight from the parser. Timeouts: the
    requests whose deadlines come in the order they were sent (every request
    with the same timeout) share one timer handle, armed for the earliest of
    them that is still waiting (:meth:`expire`); a request due before the
    last one queued gets a timer handle of its own.

    ``futures`` holds each waiting request's future and subject, in the order
    they were sent: a publish the server refuses fails the oldest request to
    that subject (:meth:`publish_refused`); a refused subscription of the
    inbox fails them all (:meth:`inbox_refused`).
    """

    def __init__(self) -> None:
        # No reference to the client: it is the key of REQUESTS.
        self.prefix = b""
        self.prefix_len = 0
        self.futures: dict[bytes, tuple[asyncio.Future[Reply], str]] = {}
        self.counter = 0
        self.started = False
        #: The inbox's subscription (weakly: nats-py's holds the client) and its subject.
        self.sub: weakref.ReferenceType[NatsSubscription] | None = None
        self.inbox = ""
        self.lock = asyncio.Lock()
        #: (deadline, future, subject) in the order of their deadlines.
        self.deadlines: collections.deque[tuple[float, asyncio.Future[Reply], str]] = (
            collections.deque()
        )
        self.timer: asyncio.TimerHandle | None = None

    def time_out_at(
        self,
        loop: asyncio.AbstractEventLoop,
        deadline: float,
        fut: asyncio.Future[Reply],
        subject: str,
    ) -> asyncio.TimerHandle | None:
        """Fail ``fut`` by a timeout at ``deadline``; a handle to cancel when answered, or None."""
        deadlines = self.deadlines
        if deadlines and deadline < deadlines[-1][0]:
            return loop.call_at(deadline, _time_out, fut, subject)
        while deadlines and deadlines[0][1].done():
            deadlines.popleft()
        deadlines.append((deadline, fut, subject))
        if self.timer is None:
            self.timer = loop.call_at(deadlines[0][0], self.expire, loop)
        return None

    def expire(self, loop: asyncio.AbstractEventLoop) -> None:
        """Fail the requests past their deadline; arm the timer for the next one waiting."""
        self.timer = None
        deadlines = self.deadlines
        now = loop.time()
        while deadlines:
            deadline, fut, subject = deadlines[0]
            if not fut.done():
                if deadline > now:
                    self.timer = loop.call_at(deadline, self.expire, loop)
                    return
                _time_out(fut, subject)
            deadlines.popleft()

    def stop_timer(self) -> None:
        """Forget every deadline (the requests were failed)."""
        self.deadlines.clear()
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    async def start(self, nc: NatsClient) -> None:
        async with self.lock:
            if self.started:
                return
            prefix = (nc.new_inbox() + ".").encode()
            inbox = prefix.decode() + "*"
            with translate():
                sub = await nc.subscribe(inbox, pending_msgs_limit=0, pending_bytes_limit=0)
            router_for(nc).internal[subscription_id(sub)] = self.on_reply
            # The server's refusals (a round trip away: nats-py's subscribe only queued
            # the SUB, without yielding to the read loop).
            found = watches(nc)
            found.publishes.setdefault(self, self.publish_refused)
            found.subscriptions.pop(self.inbox, None)
            found.subscriptions[inbox] = functools.partial(self.inbox_refused, weakref.ref(nc))
            self.sub = weakref.ref(sub)
            self.inbox = inbox
            self.prefix = prefix
            self.prefix_len = len(prefix)
            self.started = True

    def on_reply(self, subject: bytes, reply: bytes, data: bytes, hdr: bytes | None) -> None:
        entry = self.futures.pop(subject[self.prefix_len :], None)
        if entry is not None and not entry[0].done():
            entry[0].set_result((data, hdr))

    def publish_refused(self, violation: Violation) -> bool:
        """The server refused a publish: fail the oldest request waiting on its subject."""
        for fut, subject in self.futures.values():
            if not fut.done() and violation.matches(subject):
                fut.set_exception(PermissionViolationError("publish", subject))
                return True
        return False

    def inbox_refused(
        self, nc_ref: weakref.ReferenceType[NatsClient], violation: Violation
    ) -> None:
        """The server refused the inbox's subscription: fail every request waiting.

        No reply can come: the next request subscribes a new inbox (the
        refused subscription is dropped).
        """
        inbox = self.inbox
        for fut, _ in list(self.futures.values()):
            if not fut.done():
                fut.set_exception(PermissionViolationError("subscription", inbox, inbox=True))
        nc = nc_ref()
        sub = self.sub() if self.sub is not None else None
        self.started = False
        self.sub = None
        if nc is None:
            return
        watches(nc).subscriptions.pop(inbox, None)
        if sub is not None:
            router = ROUTERS.get(nc)
            if router is not None:
                router.internal.pop(subscription_id(sub), None)
            drop_refused(sub.unsubscribe)


REQUESTS: weakref.WeakKeyDictionary[NatsClient, Requests] = weakref.WeakKeyDictionary()


class _Waiting:
    """A request on the fallback, waiting in nats-py's ``request`` (see FallbackRequests)."""

    __slots__ = ("error", "subject", "task")

    def __init__(self, subject: str, task: asyncio.Task[object] | None) -> None:
        self.subject = subject
        self.task = task
        self.error: PermissionViolationError | None = None

    def refuse(self, error: PermissionViolationError) -> bool:
        """Fail the request: its task is cancelled, the request raises ``error``."""
        task = self.task
        if self.error is not None or task is None or task.done():
            return False
        self.error = error
        task.cancel()
        return True


class FallbackRequests:
    """The fallback's requests of one client waiting in nats-py's ``request``, in order.

    nats-py's request has no way to be failed from outside: a permissions
    violation cancels the waiting task (:meth:`_Waiting.refuse`), and
    :func:`request` turns that cancellation into the violation.
    """

    def __init__(self, nc: NatsClient) -> None:
        self.waiting: dict[_Waiting, None] = {}
        self._nc = weakref.ref(nc)

    def publish_refused(self, violation: Violation) -> bool:
        """The server refused a publish: fail the oldest request waiting on its subject."""
        return any(
            violation.matches(w.subject)
            and w.refuse(PermissionViolationError("publish", w.subject))
            for w in list(self.waiting)
        )

    def inbox_refused(self, violation: Violation) -> bool:
        """The server refused a subscription: if nats-py's request inbox, fail every request."""
        nc = self._nc()
        inbox = nats_request_inbox(nc) if nc is not None else None
        if nc is None or inbox is None or not violation.matches(inbox):
            return False
        for w in list(self.waiting):
            w.refuse(PermissionViolationError("subscription", inbox, inbox=True))
        sub = forget_nats_request_inbox(nc)
        if sub is not None:
            drop_refused(sub.unsubscribe)
        return True


FALLBACK_REQUESTS: weakref.WeakKeyDictionary[NatsClient, FallbackRequests] = (
    weakref.WeakKeyDictionary()
)


def _fallback_requests(nc: NatsClient) -> FallbackRequests:
    found = FALLBACK_REQUESTS.get(nc)
    if found is None:
        found = FALLBACK_REQUESTS[nc] = FallbackRequests(nc)
        watch = watches(nc)
        watch.publishes[found] = found.publish_refused
        watch.other_subscriptions[found] = found.inbox_refused
    return found


def fail_requests(nc: NatsClient) -> None:
    """Fail the requests of ``nc`` still waiting for a reply: it closed for good.

    Without this they waited out their whole timeout and then reported a
    timeout. On the fallback path the requests are nats-py's (its response map,
    where it has one); nats-py's own error there is translated by the request.
    """
    mux = REQUESTS.get(nc)
    for fut, _ in list(mux.futures.values()) if mux is not None else ():
        if not fut.done():
            fut.set_exception(closed_error(nc, "the connection closed before the reply came"))
    if mux is not None:
        mux.stop_timer()
    fail_nats_requests(nc)


def _time_out(fut: asyncio.Future[Reply], subject: str) -> None:
    if not fut.done():
        fut.set_exception(JetStreamTimeoutError(f"timed out waiting for a reply on {subject!r}"))


class RequestNotSentError(JetStreamTimeoutError):
    """A request made while reconnecting that was never sent: not reconnected in time.

    Unlike a reply that did not come, it tells that the request was not made.
    """


async def _after_reconnect(conn: Conn, subject: str, timeout: float) -> float:
    """Wait for the reconnect within ``timeout``; the time left for the request.

    Written while reconnecting, a request waits in nats-py's buffer and is
    sent after the reconnect even when it has given up: a create, an update
    or a publish the caller was told timed out was then made (a retry found
    its own write: ``KeyExistsError``). It waits here instead, and is not
    sent at all unless the connection is back in time.

    Raises:
        ConnectionClosedError: the connection closed meanwhile.
        JetStreamTimeoutError: not reconnected within ``timeout``: nothing was sent.

    """
    loop = asyncio.get_running_loop()
    started = loop.time()
    if await conn.wait_connected(timeout):
        left = timeout - (loop.time() - started)
        if left > 0:
            return left
    if conn.nc.is_closed:
        raise closed_error(conn.nc)
    raise RequestNotSentError(
        f"not reconnected within {timeout:g} s: the request on {subject!r} was not sent"
    )


async def request(
    conn: Conn, subject: str, payload: bytes, timeout: float, header_block: bytes | None
) -> Reply:
    """Send a request and wait for its reply (see ``Conn.request``)."""
    nc = conn.nc
    if nc.is_closed:
        raise closed_error(nc)
    loop = asyncio.get_running_loop()
    if loop is not conn.loop:  # written on another loop's socket, it timed out (Conn.other_loop)
        conn.other_loop(loop)
    check_timeout(timeout)  # a wrong one was sent, then reported as a failure
    if len(payload) + (len(header_block) if header_block else 0) > payload_limit(nc):
        # Headers count: past the limit the server closes the connection.
        raise MaxPayloadExceededError("message exceeds the server's max_payload")
    if conn.is_down:
        timeout = await _after_reconnect(conn, subject, timeout)
    if not conn.fast:
        if len(subject) > MAX_SUBJECT_LINE // 4 - 70:  # else short in any encoding
            check_line(subject.encode(), b"_INBOX." + b"x" * 60)  # nats-py's inbox, at most
        headers = decode_header_block(header_block)
        await after_background_publishes()  # sent after the publishes made before it
        if buffer_nearly_full(nc, len(payload)):
            msg = await _bounded_fallback_request(nc, subject, payload, timeout, headers)
        else:
            msg = await _fallback_request(nc, subject, payload, timeout, headers)
        # A stored message (a direct get's) is no status, whatever its headers say.
        stored = msg.headers is not None and "Nats-Sequence" in msg.headers
        return msg.data, rebuild_header_block(msg.headers, may_be_status=not stored)
    mux = REQUESTS.get(nc)
    if mux is None:
        mux = REQUESTS[nc] = Requests()
    if not mux.started:
        await mux.start(nc)
    if nc.is_draining_pubs:
        raise ConnectionClosedError("the connection is draining")
    if not subject or _BAD_SUBJECT.search(subject):
        raise InvalidSubjectError(f"invalid subject {subject!r}")
    subj = subject.encode()
    if len(subj) + len(mux.prefix) + 16 > MAX_SUBJECT_LINE:
        check_line(subj, mux.prefix + b"%x" % (mux.counter + 1))
    mux.counter += 1
    token = b"%x" % mux.counter
    fut: asyncio.Future[Reply] = loop.create_future()
    futures = mux.futures
    futures[token] = (fut, subject)
    try:
        cmd = pub_command(subj, mux.prefix + token, payload, header_block)
        send_now(nc, cmd, len(payload))
        timer = mux.time_out_at(loop, loop.time() + timeout, fut, subject)
        if timer is None:
            data, hdr = await fut
        else:
            try:
                data, hdr = await fut
            finally:
                timer.cancel()
    finally:
        futures.pop(token, None)
    if hdr is not None and hdr.startswith(_NO_RESPONDERS):
        raise NoRespondersError(f"no responders on {subject!r}")
    return data, hdr


#: What a bounded fallback request waits past its timeout for nats-py's own answer.
_FALLBACK_GRACE: Final = 0.25


async def _bounded_fallback_request(
    nc: NatsClient, subject: str, payload: bytes, timeout: float, headers: dict[str, str] | None
) -> Any:
    """:func:`_fallback_request` within ``timeout``, with nats-py's outgoing buffer near full.

    Past its ``pending_size`` nats-py waits for its buffer to be written out
    before the request is even sent, with no bound (its ``flush_timeout`` is
    None) and swallowing a cancellation: against a hung server a request with
    a 1 s timeout waited for good. The request runs in a task of its own,
    given up (cancelled, its outcome dropped) at the timeout. As on any
    timeout, the message may still be sent (it is in the buffer).
    """
    call = asyncio.ensure_future(_fallback_request(nc, subject, payload, timeout, headers))
    try:
        done, _ = await asyncio.wait({call}, timeout=timeout + _FALLBACK_GRACE)
    except BaseException:
        _give_up(call)
        raise
    if not done:
        _give_up(call)
        raise JetStreamTimeoutError(f"timed out waiting for a reply on {subject!r}")
    return call.result()


def _give_up(call: asyncio.Future[Any]) -> None:
    call.cancel()
    call.add_done_callback(lambda done: done.cancelled() or done.exception())


async def _fallback_request(
    nc: NatsClient, subject: str, payload: bytes, timeout: float, headers: dict[str, str] | None
) -> Any:
    """nats-py's request, failed at once by a permissions violation (see FallbackRequests)."""
    task = asyncio.current_task()
    waiting = _fallback_requests(nc).waiting
    entry = _Waiting(subject, task)
    waiting[entry] = None
    refused: PermissionViolationError | None = None
    try:
        try:
            with translate(subject, nc):
                return await nc.request(subject, payload, timeout=timeout, headers=headers)
        finally:
            waiting.pop(entry, None)
            refused = entry.error
            if refused is not None and task is not None:
                task.uncancel()  # the cancellation was ours, whatever came of it
    except asyncio.CancelledError:
        if refused is not None and task is not None and not task.cancelling():
            raise refused from None
        raise
