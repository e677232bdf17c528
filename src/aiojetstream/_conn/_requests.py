"""Requests: one wildcard reply inbox per client, replies taken raw from the router.

On the fallback a request is nats-py's ``request``.
"""

from __future__ import annotations

import asyncio
import collections
import re
import weakref
from typing import TYPE_CHECKING

from .._errors import (
    ConnectionClosedError,
    InvalidSubjectError,
    JetStreamTimeoutError,
    MaxPayloadExceededError,
    NoRespondersError,
)
from .._validation import check_timeout
from ._auth import closed_error
from ._fallback import after_background_publishes, decode_header_block, rebuild_header_block
from ._nats import NatsClient, fail_nats_requests, payload_limit, send_now, subscription_id
from ._raw import router_for
from ._translate import translate
from ._wire import MAX_SUBJECT_LINE, Reply, check_line, pub_command

if TYPE_CHECKING:
    from ._client import Conn

__all__ = ["REQUESTS", "Requests", "fail_requests", "request"]

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
    """

    def __init__(self) -> None:
        # No reference to the client: it is the key of REQUESTS.
        self.prefix = b""
        self.prefix_len = 0
        self.futures: dict[bytes, asyncio.Future[Reply]] = {}
        self.counter = 0
        self.started = False
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
            with translate():
                sub = await nc.subscribe(
                    prefix.decode() + "*", pending_msgs_limit=0, pending_bytes_limit=0
                )
            router_for(nc).internal[subscription_id(sub)] = self.on_reply
            self.prefix = prefix
            self.prefix_len = len(prefix)
            self.started = True

    def on_reply(self, subject: bytes, reply: bytes, data: bytes, hdr: bytes | None) -> None:
        fut = self.futures.pop(subject[self.prefix_len :], None)
        if fut is not None and not fut.done():
            fut.set_result((data, hdr))


REQUESTS: weakref.WeakKeyDictionary[NatsClient, Requests] = weakref.WeakKeyDictionary()


def fail_requests(nc: NatsClient) -> None:
    """Fail the requests of ``nc`` still waiting for a reply: it closed for good.

    Without this they waited out their whole timeout and then reported a
    timeout. On the fallback path the requests are nats-py's (its response map,
    where it has one); nats-py's own error there is translated by the request.
    """
    mux = REQUESTS.get(nc)
    for fut in list(mux.futures.values()) if mux is not None else ():
        if not fut.done():
            fut.set_exception(closed_error(nc, "the connection closed before the reply came"))
    if mux is not None:
        mux.stop_timer()
    fail_nats_requests(nc)


def _time_out(fut: asyncio.Future[Reply], subject: str) -> None:
    if not fut.done():
        fut.set_exception(JetStreamTimeoutError(f"timed out waiting for a reply on {subject!r}"))


async def request(
    conn: Conn, subject: str, payload: bytes, timeout: float, header_block: bytes | None
) -> Reply:
    """Send a request and wait for its reply (see ``Conn.request``)."""
    nc = conn.nc
    if nc.is_closed:
        raise closed_error(nc)
    check_timeout(timeout)  # a wrong one was sent, then reported as a failure
    if len(payload) + (len(header_block) if header_block else 0) > payload_limit(nc):
        # Headers count: past the limit the server closes the connection.
        raise MaxPayloadExceededError("message exceeds the server's max_payload")
    if not conn.fast:
        if len(subject) > MAX_SUBJECT_LINE // 4 - 70:  # else short in any encoding
            check_line(subject.encode(), b"_INBOX." + b"x" * 60)  # nats-py's inbox, at most
        headers = decode_header_block(header_block)
        await after_background_publishes()  # sent after the publishes made before it
        with translate(subject, nc):
            msg = await nc.request(subject, payload, timeout=timeout, headers=headers)
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
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[Reply] = loop.create_future()
    futures = mux.futures
    futures[token] = fut
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
