"""The asynchronous publish window: :class:`AsyncPublisher`.

It holds the outstanding ``publish_async`` publishes (and the spans of the
bulk ones) up to ``max_pending``, routes their replies from one raw
subscription, fails them by one timer at their ack deadline or when the
connection goes, and resends held publishes (``hold_when_full``) in order.

The class stays whole (about 700 lines): the window, the deadlines, the spans
and the held queue share one table of outstanding publishes, and each of
them is changed together with it (``_forget``, ``_expire``, ``_fail_all``).
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import heapq
import random
from collections.abc import Sequence
from datetime import timedelta

from pydantic import ValidationError

from .. import _bounds as B
from .._conn import (
    MAX_SUBJECT_LINE,
    Conn,
    RawSink,
    RawSubscription,
    Violation,
    check_line,
    drop_refused,
    pub_command,
)
from .._errors import (
    ConnectionClosedError,
    DisconnectedError,
    DuplicateMsgIdInProcessError,
    InvalidOptionError,
    InvalidResponseError,
    JetStreamError,
    JetStreamTimeoutError,
    NoRespondersError,
    PermissionViolationError,
    StreamFullError,
)
from .._models import PubAck
from .acks import SPAN_MARK, AckRun, AckRuns, AckSpan, AckTally, AckTarget, plain_ack
from .single import HOLD_FIRST_WAIT, HOLD_MAX_WAIT, HOLD_MIN_WAIT, ack_from_reply, invalid_ack

#: The deadline heap of publish_async is compacted once it holds this many more
#: entries than twice the outstanding publishes.
_HEAP_SLACK = 4096


def _retried(data: bytes, hdr: bytes | None, subject: bytes) -> JetStreamError | None:
    """The reply's error when a held publish may be tried again after it, else None.

    :class:`StreamFullError`; :class:`DuplicateMsgIdInProcessError` (an
    earlier attempt with the same msg id is still being stored: the next one
    gets its duplicate acknowledgement); :class:`NoRespondersError` (no stream
    leader for now). Any other reply is the caller's.
    """
    try:
        ack_from_reply(data, hdr, subject.decode())
    except (StreamFullError, DuplicateMsgIdInProcessError, NoRespondersError) as exc:
        return exc
    except Exception:
        return None  # another refusal: _on_reply parses the reply again and raises it
    return None


def _msg_id_of(block: bytes | None) -> str | None:
    """The ``Nats-Msg-Id`` of a header block (held publishes always have one), or None."""
    if block is None:
        return None
    for line in block.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"nats-msg-id":
            return value.strip().decode(errors="replace")
    return None


def _invalid(data: bytes, exc: Exception) -> InvalidResponseError:
    """The error of a reply that could not be read as a publish acknowledgement."""
    error = invalid_ack(data)
    error.__cause__ = exc
    return error


class _Held:
    """What a held publish needs for another attempt."""

    __slots__ = ("block", "error", "payload", "subject", "unanswered", "until", "wait")

    def __init__(
        self, subject: bytes, payload: bytes, block: bytes | None, until: float, wait: float
    ) -> None:
        self.subject = subject
        self.payload = payload
        self.block = block
        self.until = until
        self.wait = wait  # how long an attempt waits for its reply
        self.error: StreamFullError | None = None
        self.unanswered = False  # its last attempt got no reply: it may be stored


class AsyncPublisher:
    """Outstanding asynchronous publishes: one reply subscription, a bounded window.

    Every future completes: with a :class:`PubAck`, with the typed error of its
    reply, with :class:`JetStreamTimeoutError` after its ack timeout, with
    :class:`DisconnectedError` when the connection drops, with
    :class:`ConnectionClosedError` when the context closes, or with
    :class:`PermissionViolationError` when the server refuses the publish (or
    the reply subscription; see :meth:`_publish_refused`).

    The hot path builds each PUB/HPUB command itself and queues it without
    awaiting; replies come straight from the protocol parser (a raw
    subscription), and one timer handle serves every ack deadline.
    """

    def __init__(self, conn: Conn, max_pending: int, ack_timeout: float | timedelta | str) -> None:
        # (A float max_pending, NaN or inf, never filled the window; a negative, NaN
        # or infinite ack timeout was taken, a giant int raised OverflowError.)
        self._conn = conn
        self.max_pending = B.count(max_pending, "publish_async_max_pending")
        self.ack_timeout = B.seconds(ack_timeout, "publish_async_timeout")
        self._futures: dict[bytes, tuple[AckTarget, float, str]] = {}
        #: Publishes of spans beyond the one entry each has in _futures: what is
        #: outstanding is len(_futures) + _extra (see _load).
        self._extra = 0
        self._sink: RawSink | None = None
        self._deadlines: list[tuple[float, bytes]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._sub: RawSubscription | None = None
        self._prefix = b""
        self._prefix_len = 0
        self._next = 0
        self._space = asyncio.Event()  # set while the window has room
        self._space.set()
        self._idle = asyncio.Event()  # set while nothing is outstanding
        self._idle.set()
        self._full = False  # mirrors "not _space.is_set()" without a call per message
        self._busy = False  # mirrors "not _idle.is_set()"
        self._closed = False
        self._started = False  # the reply subscription is up (and not closed since)
        self._starting: asyncio.Lock = asyncio.Lock()
        # Held publishes (hold_when_full): what to resend, and the tokens (as ints,
        # in publish order) waiting for a resend; one shared, jittered backoff.
        self._held: dict[bytes, _Held] = {}
        self._hold_queue: list[int] = []
        self._hold_wait = HOLD_FIRST_WAIT
        self._hold_timer: asyncio.TimerHandle | None = None
        self._last_full: StreamFullError | None = None
        self._resending: bytes | None = None  # the held message sent again, awaiting its reply
        self._resend_timer: asyncio.TimerHandle | None = None  # its reply's deadline

    @property
    def pending(self) -> int:
        """Publishes still waiting for their acknowledgement."""
        return len(self._futures) + self._extra

    def _load(self) -> int:
        """Publishes outstanding (each publish of a span counts)."""
        return len(self._futures) + self._extra

    async def _ensure_sub(self) -> None:
        async with self._starting:
            if self._sub is not None:
                return
            prefix = self._conn.new_inbox() + "."
            # A sink: on the fast path the plain replies of a span are counted by runs
            # (AckRuns), the others handled one by one (_sunk_reply).
            bulk = AckRuns(prefix.encode(), SPAN_MARK) if self._conn.fast else None
            self._sink = RawSink(self._sunk_run, self._sunk_reply, None, _ignore, bulk)
            sub = await self._conn.subscribe_raw(
                prefix + "*", self._on_reply, internal=True, sink=self._sink
            )
            if self._closed:  # closed meanwhile: nothing may stay behind
                await sub.unsubscribe()
                return
            self._sub = sub
            self._prefix = prefix.encode()
            self._prefix_len = len(self._prefix)
            self._conn.add_listener(self)
            # The server's permissions violations: a refused publish, a refused inbox.
            self._conn.watch_publishes(self, self._publish_refused)
            self._conn.watch_subscription(prefix + "*", self._inbox_refused)
            self._started = True

    @property
    def closed(self) -> bool:
        """True once the context closed the publisher (:meth:`aclose`)."""
        return self._closed

    @property
    def has_room(self) -> bool:
        """True when :meth:`send` may be called right away (no wait for the window)."""
        return self._started and self._load() < self.max_pending

    async def publish(
        self,
        subject: str,
        payload: bytes,
        block: bytes | None,
        timeout: float | None,
        hold: float | None = None,
    ) -> asyncio.Future[PubAck]:
        """Send a message and return the future of its acknowledgement.

        Waits first while ``max_pending`` acknowledgements are outstanding.
        """
        ack_timeout = self.ack_timeout if timeout is None else timeout
        if hold is not None:
            ack_timeout += hold  # a held publish may wait for room as long as it holds
        await self.wait_for_room(ack_timeout)
        return self.send(subject, payload, block, timeout, hold)

    async def wait_for_room(self, timeout: float | None = None) -> int:
        """Wait until the window has room; return how many publishes fit now.

        Starts the reply subscription first if needed.

        Raises:
            JetStreamTimeoutError: the window stayed full for ``timeout`` seconds
                (default: the ack timeout).
            ConnectionClosedError: the context closed.

        """
        if self._closed:
            raise ConnectionClosedError("the JetStream context is closed")
        self._conn.check_loop()  # nothing is sent from another loop
        if not self._started:
            await self._ensure_sub()
            if self._closed:
                raise ConnectionClosedError("the JetStream context is closed")
        while self._load() >= self.max_pending:
            try:
                async with asyncio.timeout(self.ack_timeout if timeout is None else timeout):
                    await self._space.wait()
            except TimeoutError:
                raise JetStreamTimeoutError(
                    f"{self._load()} asynchronous publishes still await their "
                    f"acknowledgement (max_pending={self.max_pending})"
                ) from None
            if self._closed:
                raise ConnectionClosedError("the JetStream context is closed")
        return self.max_pending - self._load()

    def send(
        self,
        subject: str,
        payload: bytes,
        block: bytes | None,
        timeout: float | None,
        hold: float | None = None,
    ) -> asyncio.Future[PubAck]:
        """Send now, without waiting (:attr:`has_room` must be true).

        With ``hold`` (seconds), a "stream full" reply does not complete the
        future: the message is sent again, in publish order, after a shared
        jittered backoff (at most 20 failed attempts a second for the whole
        publisher), until it is stored or ``hold`` is up. It keeps its place in
        the window meanwhile. While earlier held messages wait, a new held one
        queues behind them instead of being sent.
        """
        conn = self._conn
        if conn.nc.is_draining_pubs:
            raise ConnectionClosedError("the connection is draining")
        # The connection's loop, checked to be the caller's by its thread and
        # is_running() (Conn.on_own_loop): asking asyncio for the running loop
        # costs a getpid() system call on Python 3.11 (0.1-0.2 us) per publish.
        loop = conn.loop
        if loop is None or not conn.on_own_loop():
            running = asyncio.get_running_loop()
            if running is not loop:  # nothing is sent (Conn.other_loop)
                conn.other_loop(running)
            loop = running
        self._next += 1
        token = b"%x" % self._next
        subject_b = subject.encode()
        if hold is not None and (self._hold_queue or self._resending is not None):
            self._hold_queue.append(self._next)  # behind the held ones, in order
        else:
            # Raises (closed, reconnect buffer full) before anything is registered;
            # on the fallback a failure found later fails the future (_not_sent).
            conn.publish_nowait(
                subject_b,
                payload,
                self._prefix + token,
                block,
                None if conn.fast else functools.partial(self._not_sent, token),
            )
        fut: asyncio.Future[PubAck] = loop.create_future()
        wait = self.ack_timeout if timeout is None else timeout
        deadline = loop.time() + wait
        if hold is not None:
            self._held[token] = _Held(subject_b, payload, block, loop.time() + hold, wait)
            deadline += hold  # the ack timeout counts from the last attempt
        self._futures[token] = (fut, deadline, subject)
        heapq.heappush(self._deadlines, (deadline, token))
        self._registered(deadline)
        return fut

    def send_many(
        self,
        subject: bytes | None,
        subjects: Sequence[bytes] | None,
        payloads: Sequence[bytes],
        blocks: Sequence[bytes | None] | None,
        tally: AckTally,
        timeout: float | None = None,
    ) -> None:
        """Send many publishes now; ``tally`` counts their acknowledgements.

        The bulk form of :meth:`send` for writers that need no future per
        message (:meth:`JetStreamContext.publish_many_async`), and no hold.
        ``subject``: the one subject of all, else ``subjects`` has one per
        payload; ``blocks``: a header block (or None) per payload, or None for
        none at all. The caller checked the subjects and the sizes
        (:func:`.options.check_sizes`). At most the room :meth:`wait_for_room`
        returned. Nothing is sent when this raises.

        Raises:
            InvalidSubjectError: a subject and its reply too long for a protocol line.
            ConnectionClosedError: the connection is closed or draining.
            DisconnectedError: disconnected, and the reconnect buffer is full.

        """
        count = len(payloads)
        if not count:
            return
        conn = self._conn
        nc = conn.nc
        if self._closed or nc.is_closed or nc.is_draining_pubs:
            raise conn.closed_error("the connection is closed or draining")
        if not self._started:
            raise InvalidOptionError("send_many before wait_for_room: no reply subscription yet")
        one = subject
        if one is None and (subjects is None or len(subjects) != count):
            raise InvalidOptionError("send_many needs a subject, or one per payload")
        many: Sequence[bytes] = subjects or ()
        # One reply subject for all of them (a span): the server answers each there.
        token = SPAN_MARK + b"%x" % (self._next + 1)
        reply = self._prefix + token
        longest = one if one is not None else max(many, key=len)
        if len(longest) + len(reply) > MAX_SUBJECT_LINE:
            check_line(longest, reply)
        loop = asyncio.get_running_loop()
        if loop is not conn.loop:  # nothing is sent (Conn.other_loop)
            conn.other_loop(loop)
        deadline = loop.time() + (self.ack_timeout if timeout is None else timeout)
        if conn.fast:
            if blocks is None and one is not None:
                head = b"PUB %b %b " % (one, reply)
                cmds = [b"%b%d\r\n%b\r\n" % (head, len(payload), payload) for payload in payloads]
            else:
                cmds = [
                    pub_command(
                        one if one is not None else many[i],
                        reply,
                        payload,
                        blocks[i] if blocks is not None else None,
                    )
                    for i, payload in enumerate(payloads)
                ]
            # Raises (disconnected, reconnect buffer full) before anything is registered.
            # One write of the chunk (the join briefly holds it twice); while
            # disconnected it fits into the reconnect buffer whole, or fails whole.
            conn.enqueue_many(cmds, sum(map(len, payloads)))
        else:
            not_sent = functools.partial(self._not_sent, token)
            for i, payload in enumerate(payloads):
                conn.publish_nowait(
                    one if one is not None else many[i],
                    payload,
                    reply,
                    blocks[i] if blocks is not None else None,
                    not_sent,
                )
        if one is not None:
            self._register_span(token, tally, count, deadline, one)
        else:
            first = many[0]
            mixed = many.count(first) != count  # (a C loop for a list)
            self._register_span(token, tally, count, deadline, first, mixed)

    def send_commands(
        self,
        reply_token: bytes,
        commands: bytes,
        count: int,
        payload_size: int,
        label: bytes,
        tally: AckTally,
        timeout: float | None = None,
        mixed: bool = False,
    ) -> None:
        """Queue ``count`` ready-made publishes whose reply subject is ``reply_token``'s.

        The bulk form of :meth:`send_many` for commands built a batch at a
        time (``_columns.pub_commands``): ``reply_token`` came from
        :meth:`next_span_reply` right before. Fast path only.

        Raises:
            ConnectionClosedError: the connection is closed or draining.
            DisconnectedError: disconnected, and the reconnect buffer is full.

        """
        conn = self._conn
        nc = conn.nc
        if self._closed or nc.is_closed or nc.is_draining_pubs:
            raise conn.closed_error("the connection is closed or draining")
        if not self._started:
            raise InvalidOptionError("send_commands before wait_for_room: no reply subscription")
        deadline = asyncio.get_running_loop().time() + (
            self.ack_timeout if timeout is None else timeout
        )
        conn.enqueue(commands, payload_size, count)
        self._register_span(reply_token, tally, count, deadline, label, mixed)

    def next_span_reply(self) -> tuple[bytes, bytes]:
        """The token and reply subject the next span will have (see :meth:`send_commands`)."""
        token = SPAN_MARK + b"%x" % (self._next + 1)
        return token, self._prefix + token

    def _register_span(
        self,
        token: bytes,
        tally: AckTally,
        count: int,
        deadline: float,
        subject: bytes,
        mixed: bool = False,
    ) -> None:
        """Publishes sent under the reply token: one entry, one deadline, ``count`` counted.

        ``subject``: theirs, or the first of theirs when they have several (``mixed``).
        """
        self._next += 1
        tally.outstanding += count
        span = AckSpan(tally, count, mixed)
        self._futures[token] = (span, deadline, subject.decode("utf-8", "replace"))
        self._extra += count - 1
        heapq.heappush(self._deadlines, (deadline, token))
        self._registered(deadline)

    def _registered(self, deadline: float) -> None:
        """After publishes were registered (futures and deadline heap): window and timer."""
        futures = self._futures
        if self._load() >= self.max_pending:
            self._full = True
            self._space.clear()
        if not self._busy:
            self._busy = True
            self._idle.clear()
        if len(self._deadlines) > 2 * len(futures) + _HEAP_SLACK:
            self._compact()
        if self._timer is None or deadline < self._timer_at:
            self._arm(deadline)

    def _compact(self) -> None:
        """Drop the deadlines of publishes that completed (they pile up under load)."""
        heap = self._deadlines
        heap[:] = [(d, t) for t, (_, d, _) in self._futures.items()]
        heapq.heapify(heap)

    def _forget(self, token: bytes) -> tuple[AckTarget, float, str] | None:
        futures = self._futures
        entry = futures.pop(token, None)
        if entry is not None and type(entry[0]) is AckSpan:
            self._extra -= max(entry[0].left - 1, 0)
        if self._full and len(futures) + self._extra < self.max_pending:
            self._full = False
            self._space.set()
        if self._busy and not futures:
            self._busy = False
            self._idle.set()
        return entry

    def _on_reply(self, subject: bytes, reply: bytes, data: bytes, hdr: bytes | None) -> None:
        token = subject[self._prefix_len :]
        if token[:1] == SPAN_MARK:
            self._span_reply(token, data, hdr)
            return
        if self._held and token in self._held and self._still_held(token, data, hdr):
            return
        entry = self._forget(token)
        if entry is None:
            return  # late reply after a timeout or a disconnect
        fut, _, target = entry
        if isinstance(fut, AckSpan) or fut.done():
            return  # (a span's replies never come here: their tokens are told apart)
        if type(fut) is AckTally and hdr is None and plain_ack(data) is not None:
            # A plain acknowledgement, counted without a PubAck. Anything else
            # (a duplicate, an error, a status, another shape) is parsed below and
            # reaches the tally as an acknowledgement or as the error it carries.
            fut.count(False)
            return
        try:
            if hdr is None and b'"error"' not in data:
                # The usual reply, a plain PubAck: parse_pub_ack without the calls.
                ack: PubAck = PubAck.__pydantic_validator__.validate_json(data)
            else:
                ack = ack_from_reply(data, hdr, target)
        except ValidationError:
            fut.set_exception(invalid_ack(data))
        except JetStreamError as exc:
            fut.set_exception(exc)
        except Exception as exc:  # a reply no JetStream server writes: fail, never hang
            fut.set_exception(_invalid(data, exc))
        else:
            fut.set_result(ack)

    # ----------------------------------------------------------------- spans

    def _sunk_reply(
        self, subject: bytes, reply: bytes, data: bytes, hdr: bytes | None, context: object
    ) -> None:
        """A plain reply the router's loop took for the sink: as any reply."""
        self._on_reply(subject, reply, data, hdr)

    def _span_answered(self, token: bytes, span: AckSpan, count: int) -> int:
        """``count`` publishes of ``span`` were answered; how many of them it still awaited."""
        before = span.left
        count = min(count, before)
        span.left = before - count
        if span.left <= 0:
            self._extra -= max(before - 1, 0)  # its share of _extra
            self._forget(token)
        else:
            self._extra -= count
            if self._full and len(self._futures) + self._extra < self.max_pending:
                self._full = False
                self._space.set()
        return count

    def _span_reply(self, token: bytes, data: bytes, hdr: bytes | None) -> None:
        """One reply to a publish of a span: counted as :meth:`_on_reply` counts a tally's."""
        entry = self._futures.get(token)
        if entry is None:
            return  # late reply after a timeout or a disconnect
        span = entry[0]
        assert type(span) is AckSpan
        if not self._span_answered(token, span, 1):
            return
        tally = span.tally
        if hdr is None and plain_ack(data) is not None:
            tally.count(False)
            return
        try:
            ack = ack_from_reply(data, hdr, entry[2], span.about(entry[2]))
        except ValidationError:
            tally.set_exception(invalid_ack(data))
        except JetStreamError as exc:
            tally.set_exception(exc)
        except Exception as exc:  # a reply no JetStream server writes: fail, never hang
            tally.set_exception(_invalid(data, exc))
        else:
            tally.count(ack.duplicate)

    def span_acks(self, token: bytes, count: int, duplicate: bool = False) -> None:
        """``count`` plain acknowledgements of the span ``token`` (all duplicates, or none)."""
        entry = self._futures.get(token)
        if entry is None or type(entry[0]) is not AckSpan:
            return  # late replies after a timeout or a disconnect
        span = entry[0]
        answered = self._span_answered(token, span, count)
        if answered:
            span.tally.count_many(answered, answered if duplicate else 0)

    def _sunk_run(self, item: object) -> None:
        """The sink's ``append``: a run of plain acknowledgements (others: handled already)."""
        if type(item) is AckRun:
            self.span_acks(item.token, item.count, item.duplicate)

    # ----------------------------------------------------------------- held publishes

    def _still_held(self, token: bytes, data: bytes, hdr: bytes | None) -> bool:
        """Handle a held publish's reply; True when it waits for another attempt."""
        held = self._held[token]
        loop = asyncio.get_running_loop()
        if token == self._resending:
            self._resent_answered()
        maybe_stored = held.unanswered  # an earlier attempt got no reply in time
        held.unanswered = False
        again = (
            _retried(data, hdr, held.subject)
            if b"10077" in data or b"10158" in data or (maybe_stored and hdr and not data)
            else None
        )
        if isinstance(again, NoRespondersError) and not maybe_stored:
            again = None  # (not asked for: a 503 with nothing stored before is the answer)
        entry = self._futures.get(token)
        wanted = entry is not None and not entry[0].done()  # not cancelled by its caller
        if isinstance(again, StreamFullError):
            self._last_full = again
            held.error = again
        elif again is not None:
            # An earlier attempt is still being stored (10158), or one that got no reply
            # may be stored and the stream has no leader now (503): this reply is not the
            # end, nor is its error; the next attempt, with the same msg id, gets the
            # duplicate acknowledgement if it was stored.
            held.unanswered = True
        if again is not None and wanted and loop.time() + HOLD_MIN_WAIT <= held.until:
            self._queue_held(token)
            if self._resending is None:  # else the resend in flight arms the next one
                self._arm_hold(backoff=True)
            return True
        # Stored, refused for another reason, or out of time: _on_reply completes it.
        del self._held[token]
        if self._hold_queue and self._resending is None:
            # The next held message goes out whatever this reply was (a held message
            # waits for a resend, never for an unrelated reply that may not come).
            if again is not None:
                self._arm_hold(backoff=True)  # out of time, but the stream is still busy
            else:
                if b'"error"' not in data:
                    self._hold_wait = HOLD_FIRST_WAIT  # there is room again
                self._arm_hold(backoff=False)
        if again is not None and not isinstance(again, StreamFullError) and wanted:
            # Out of time while a copy may be stored: a timeout, saying so.
            assert entry is not None
            self._forget(token)
            entry[0].set_exception(self._out_of_time(held, entry[2]))
            return True
        return False

    def _arm_hold(self, *, backoff: bool) -> None:
        if self._hold_timer is not None:
            if backoff:
                return  # a retry is already scheduled
            self._hold_timer.cancel()
        loop = asyncio.get_running_loop()
        delay = 0.0
        if backoff:
            # Jittered within [HOLD_MIN_WAIT, wait]: at most 20 failed attempts a second.
            delay = random.uniform(HOLD_MIN_WAIT, self._hold_wait)
            self._hold_wait = min(HOLD_MAX_WAIT, self._hold_wait * 2)
        self._hold_timer = loop.call_later(delay, self._resend)

    def _resend(self) -> None:
        """Send the first held message waiting (expired ones fail first)."""
        self._hold_timer = None
        if self._resending is not None:
            return  # one resend at a time: its reply (or its absence) sends the next
        now = asyncio.get_running_loop().time()
        queue = self._hold_queue
        while queue:
            token = b"%x" % queue.pop(0)
            held = self._held.get(token)
            entry = self._futures.get(token)
            if held is None or entry is None:
                self._held.pop(token, None)
                continue
            if entry[0].done():
                # Cancelled by its caller while held: never sent again, its place freed.
                del self._held[token]
                self._forget(token)
                continue
            if now + HOLD_MIN_WAIT > held.until:
                # Out of time before this attempt: the last "stream full" error, or a
                # timeout when the last attempt got no reply (it may have been stored).
                del self._held[token]
                self._forget(token)
                if not entry[0].done():
                    entry[0].set_exception(self._out_of_time(held, entry[2]))
                continue
            conn = self._conn
            try:
                conn.publish_nowait(
                    held.subject,
                    held.payload,
                    self._prefix + token,
                    held.block,
                    None if conn.fast else functools.partial(self._not_sent, token),
                )
            except JetStreamError as exc:
                del self._held[token]
                self._forget(token)
                if not entry[0].done():
                    entry[0].set_exception(exc)
                continue
            self._resending = token
            if self._resend_timer is not None:
                self._resend_timer.cancel()
            self._resend_timer = asyncio.get_running_loop().call_later(
                held.wait, self._resend_unanswered, token
            )
            return

    def _out_of_time(self, held: _Held, subject: str) -> JetStreamError:
        """The error of a held message whose hold ran out between two attempts.

        The stream's last "full" error, or a timeout when its last attempt got no
        reply (it may have been stored).
        """
        error = held.error or self._last_full
        if held.unanswered or error is None:
            msg_id = _msg_id_of(held.block)
            again = (
                ""
                if msg_id is None
                else f": it may be stored; publish again with msg_id={msg_id!r} (a duplicate "
                "acknowledgement if it was)"
            )
            return JetStreamTimeoutError(
                f"no acknowledgement for the publish to {subject!r} (held while the stream "
                "was full; its last attempt got no reply, or found an earlier attempt still "
                f"being stored){again}"
            )
        return error

    def _queue_held(self, token: bytes) -> None:
        """Queue a held message for a resend, in publish order (once)."""
        queue = self._hold_queue
        number = int(token, 16)
        at = bisect.bisect_left(queue, number)
        if at == len(queue) or queue[at] != number:
            queue.insert(at, number)

    def _unqueue(self, token: bytes) -> bool:
        """Take a held message off the resend queue; True if it was there."""
        queue = self._hold_queue
        number = int(token, 16)
        at = bisect.bisect_left(queue, number)
        if at < len(queue) and queue[at] == number:
            del queue[at]
            return True
        return False

    def _resent_answered(self) -> None:
        """The held message being resent is done with (replied, failed, expired)."""
        self._resending = None
        if self._resend_timer is not None:
            self._resend_timer.cancel()
            self._resend_timer = None

    def _resend_unanswered(self, token: bytes) -> None:
        """A resend got no reply in time (no leader, a hung server): try it again later.

        It keeps its msg id, so a copy stored meanwhile is acknowledged as a
        duplicate; the held messages behind it are not held up meanwhile.
        """
        self._resend_timer = None
        if token != self._resending:
            return
        self._resending = None
        held = self._held.get(token)
        if held is not None and token in self._futures:
            held.unanswered = True
            self._queue_held(token)
        if self._hold_queue:
            self._arm_hold(backoff=True)

    def _not_sent(self, token: bytes, error: JetStreamError) -> None:
        """The fallback could not write a publish (after ``send`` returned): fail its future."""
        self._held.pop(token, None)
        if self._resending == token:
            self._resent_answered()
            if self._hold_queue:
                self._arm_hold(backoff=False)  # the next held message goes now
        entry = self._forget(token)
        if entry is not None and not entry[0].done():
            entry[0].set_exception(error)

    # ----------------------------------------------------------------- permissions

    def _publish_refused(self, violation: Violation) -> bool:
        """The server refused a publish: the oldest one outstanding to its subject fails.

        The server refuses each publish with one ``-ERR`` (its subject only): a
        scan of the outstanding publishes, in publish order, on that rare
        event, and nothing per publish. A span with several subjects is not
        matched (only its first is known): it waits for its ack deadline.
        """
        for token, (target, _, subject) in self._futures.items():
            if target.done() or not violation.matches(subject):
                continue
            error = PermissionViolationError("publish", subject)
            if type(target) is AckSpan:
                if target.mixed:
                    continue
                if self._span_answered(token, target, 1):
                    target.tally.set_exception(error)
            else:
                self._not_sent(token, error)
            return True
        return False

    def _inbox_refused(self, violation: Violation) -> None:
        """The server refused the reply subscription: no acknowledgement can come.

        Every outstanding publish fails; the next one subscribes a new inbox.
        """
        inbox = self._prefix.decode() + "*"
        self._fail_all(
            PermissionViolationError,
            "",
            PermissionViolationError("subscription", inbox, inbox=True),
        )
        self._conn.unwatch(subject=inbox)
        sub, self._sub = self._sub, None
        self._started = False
        if sub is not None:
            sub.detach()
            drop_refused(sub.unsubscribe)

    def _arm(self, deadline: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = deadline
        self._timer = asyncio.get_running_loop().call_at(deadline, self._expire)

    def _expire(self) -> None:
        self._timer = None
        now = asyncio.get_running_loop().time()
        heap = self._deadlines
        while heap and heap[0][0] <= now:
            _, token = heapq.heappop(heap)
            entry = self._forget(token)
            if entry is None:
                continue
            error: JetStreamError | None = None
            held = self._held.pop(token, None)
            if held is not None:
                if token == self._resending:
                    self._resent_answered()
                    if self._hold_queue:
                        self._arm_hold(backoff=True)
                elif self._unqueue(token):
                    # Waiting for a resend (or queued behind other held messages and
                    # never sent): nothing of it is in flight.
                    error = self._out_of_time(held, entry[2])
            if not entry[0].done():
                entry[0].set_exception(
                    error
                    or JetStreamTimeoutError(
                        f"no acknowledgement for the publish to {_about(entry[0], entry[2])}"
                    )
                )
        # Drop entries of futures that completed meanwhile once they dominate.
        if len(heap) > 2 * len(self._futures) + _HEAP_SLACK:
            self._compact()
        if heap:
            self._arm(heap[0][0])

    def _fail_all(
        self, make_error: type[JetStreamError], text: str, error: JetStreamError | None = None
    ) -> None:
        """Fail every outstanding publish: ``make_error(text (publish to ...))``, or ``error``."""
        entries = list(self._futures.values())
        self._futures.clear()
        self._extra = 0
        self._held.clear()
        self._hold_queue.clear()
        self._resent_answered()
        if self._hold_timer is not None:
            self._hold_timer.cancel()
            self._hold_timer = None
        self._deadlines.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._full = self._busy = False
        self._space.set()
        self._idle.set()
        for fut, _, subject in entries:
            if not fut.done():
                fut.set_exception(error or make_error(f"{text} (publish to {subject!r})"))

    # ConnectionListener
    def on_disconnected(self) -> None:
        """Fail every outstanding future: their acks may never arrive."""
        self._fail_all(
            DisconnectedError,
            "disconnected before the acknowledgement arrived; the message may have been "
            "stored, or be sent after the reconnect (publish it again with the same msg_id)",
        )

    def on_reconnected(self) -> None:
        """Nothing to do: new publishes use the same reply subscription."""

    def on_closed(self) -> None:
        """Fail every outstanding future with ConnectionClosedError."""
        self._fail_all(ConnectionClosedError, "connection closed before the acknowledgement")

    async def complete(self, timeout: float | None) -> None:
        """Wait until every outstanding publish has completed.

        Without ``timeout`` the wait is still bounded: every outstanding future
        fails by its own ack deadline at the latest.

        Raises:
            InvalidOptionError: called from another thread's event loop (it
                waited for good there, and bound the wait to that loop, so the
                owner's own later calls raised ``RuntimeError``).
            ConnectionClosedError: the connection's event loop has ended.

        """
        self._conn.check_loop()
        if not self._futures:
            return
        try:
            async with asyncio.timeout(timeout):
                await self._idle.wait()
        except TimeoutError:
            if not self._futures:
                return  # the last ones ended in the same pass (their own ack deadlines)
            raise JetStreamTimeoutError(
                f"{self._load()} asynchronous publishes still pending after {timeout} s"
            ) from None

    def abandon(self) -> None:
        """Close without touching the connection: its event loop has ended.

        The futures and the subscription belong to that loop; failing them
        would schedule their callbacks there (``RuntimeError``).
        """
        self._closed = True
        self._started = False
        self._sub = None

    async def aclose(self, *, unsubscribe: bool = True) -> None:
        """Fail outstanding futures and drop the reply subscription (idempotent).

        ``unsubscribe=False``: the connection is closed next (which drops the
        subscription), so no UNSUB is written: nats-py's unsubscribe waits for
        its pending buffer to be flushed, for as long as a stalled server takes.
        """
        if self._closed:
            return
        self._closed = True
        self._started = False
        self._fail_all(
            ConnectionClosedError,
            "the JetStream context was closed before the acknowledgement (the message may "
            "still have been stored)",
        )
        self._conn.unwatch(self, self._prefix.decode() + "*" if self._prefix else None)
        if self._sub is not None:
            self._conn.remove_listener(self)
            sub, self._sub = self._sub, None
            if unsubscribe:
                await sub.unsubscribe()
            else:
                sub.detach()


def _ignore(_: object) -> None:
    """A sink's ``arrived``: nothing to do (replies are handled as they come)."""


def _about(target: AckTarget, subject: str) -> str:
    """``subject`` quoted as errors name a publish (a mixed span's first of several)."""
    return target.about(subject) if type(target) is AckSpan else repr(subject)
