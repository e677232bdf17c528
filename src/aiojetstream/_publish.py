"""Publishing: option validation, ``publish`` and ``publish_async`` with a bounded window."""

from __future__ import annotations

import asyncio
import bisect
import functools
import heapq
import random
import re
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Final

from pydantic import ValidationError

from . import _bounds as B
from . import _headers as H
from ._api import check_reply
from ._conn import (
    MAX_SUBJECT_LINE,
    Conn,
    RawSink,
    RawSubscription,
    check_line,
    pub_command,
)
from ._errors import (
    ConnectionClosedError,
    DisconnectedError,
    DuplicateMsgIdInProcessError,
    InvalidHeaderError,
    InvalidOptionError,
    InvalidResponseError,
    JetStreamError,
    JetStreamTimeoutError,
    MaxPayloadExceededError,
    NoRespondersError,
    StreamFullError,
)
from ._models import PubAck
from ._models._ranges import check_ttl_from_now
from ._validation import check_sequence

#: How often ``publish`` retries when no stream answers, and how long it waits
#: in between (as the Go client: 2 retries, 250 ms apart), within its timeout.
PUBLISH_RETRY_ATTEMPTS = 2
PUBLISH_RETRY_WAIT = 0.25
#: "duplicate message id is in process" (DuplicateMsgIdInProcessError, 10158):
#: a copy with the same Nats-Msg-Id (an earlier attempt, a publish buffered
#: across a reconnect) is still being stored. ``publish`` asks again, waiting
#: 50 ms doubling to 1 s (at most 20 requests a second), until the duplicate
#: acknowledgement or its timeout.
IN_PROCESS_FIRST_WAIT: Final = 0.05
IN_PROCESS_MAX_WAIT: Final = 1.0
#: The deadline heap of publish_async is compacted once it holds this many more
#: entries than twice the outstanding publishes.
_HEAP_SLACK = 4096


def build_headers(
    headers: Mapping[str, str] | None,
    msg_id: str | None,
    ttl: H.TTLInput | None,
    expected_stream: str | None,
    expected_last_sequence: int | None,
    expected_last_subject_sequence: int | None,
    expected_last_msg_id: str | None,
) -> dict[str, str] | None:
    """Validate the publish options and return the headers to send (None for none)."""
    out: dict[str, str] = {}
    if headers is not None:
        if not isinstance(headers, Mapping):
            raise InvalidHeaderError(
                f"headers must be a mapping of str to str, got {B.shown(headers)}"
            )
        for key, value in headers.items():
            key, value = H.validate_header(key, value)
            out[key] = value
    if msg_id is not None:
        out[H.MSG_ID] = _msg_id(H.MSG_ID, msg_id, "msg_id")
    if ttl is not None:
        # Counted from when the message is stored: past the server's clock, expired at once.
        out[H.TTL] = check_ttl_from_now(H.ttl_header_value(ttl))
    if expected_stream is not None:
        _, out[H.EXPECTED_STREAM] = H.validate_header(H.EXPECTED_STREAM, expected_stream)
    if expected_last_sequence is not None:
        out[H.EXPECTED_LAST_SEQ] = _sequence(expected_last_sequence, "expected_last_sequence")
    if expected_last_subject_sequence is not None:
        out[H.EXPECTED_LAST_SUBJ_SEQ] = _sequence(
            expected_last_subject_sequence, "expected_last_subject_sequence"
        )
    if expected_last_msg_id is not None:
        out[H.EXPECTED_LAST_MSG_ID] = _msg_id(
            H.EXPECTED_LAST_MSG_ID, expected_last_msg_id, "expected_last_msg_id"
        )
    return out or None


def _msg_id(header: str, value: object, name: str) -> str:
    """A validated msg id header value: not empty, nor only whitespace.

    :func:`header_block` strips values, so a blank id would go out empty (and
    the server would not de-duplicate on it).
    """
    _, value = H.validate_header(header, value)
    if not value.strip():
        raise InvalidOptionError(f"{name} must not be empty or only whitespace, got {value!r}")
    return value


def _sequence(value: object, name: str) -> str:
    return str(check_sequence(value, name))  # the digits, whatever a subclass's __str__ says


def header_block(headers: dict[str, str] | None) -> bytes | None:
    """The NATS/1.0 header block of validated headers (None without headers).

    Values are stripped of surrounding whitespace, as nats-py sends them.
    """
    if not headers:
        return None
    parts = [H.HEADER_LINE]
    for key, value in headers.items():
        parts.append(f"{key}: {value.strip()}\r\n".encode())
    parts.append(b"\r\n")
    return b"".join(parts)


def check_size(conn: Conn, payload: bytes, block: bytes | None) -> None:
    """Raise :class:`MaxPayloadExceededError` if headers plus payload exceed max_payload."""
    limit = conn.max_payload
    if not limit:
        return
    total = len(payload) + (len(block) if block else 0)
    if total > limit:
        raise MaxPayloadExceededError(
            f"message of {total} bytes (headers included) exceeds the server's "
            f"max_payload of {limit} bytes"
        )


def check_sizes(
    conn: Conn, payloads: Sequence[bytes], blocks: Sequence[bytes | None] | None
) -> None:
    """:func:`check_size` for many messages (``blocks``: one per payload, or None for none)."""
    limit = conn.max_payload
    if not limit or not payloads:
        return
    if blocks is None:
        check_size(conn, max(payloads, key=len), None)
        return
    for payload, block in zip(payloads, blocks, strict=True):
        if len(payload) + (len(block) if block else 0) > limit:
            check_size(conn, payload, block)


def parse_pub_ack(data: bytes) -> PubAck:
    """Parse a publish acknowledgement, raising the typed error it may carry."""
    if b'"error"' in data:
        check_reply(data)
    try:
        # model_validate_json without its wrapper (this runs once per publish).
        ack: PubAck = PubAck.__pydantic_validator__.validate_json(data)
    except ValidationError as exc:
        raise InvalidResponseError(f"invalid publish acknowledgement: {data[:200]!r}") from exc
    return ack


def ack_from_reply(data: bytes, hdr: bytes | None, subject: str) -> PubAck:
    """Turn a reply (payload and raw header block) into a PubAck or raise its typed error."""
    if hdr and not data:
        status = H.decode_headers(hdr)[1]
        if status == "503":
            raise NoRespondersError(f"no stream captures subject {subject!r}")
        if status is not None:
            raise InvalidResponseError(f"unexpected status {status} in reply to a publish")
    return parse_pub_ack(data)


def payload_bytes(payload: bytes | bytearray | memoryview | str) -> bytes:
    """Return the payload as bytes (str is refused: encode it explicitly)."""
    if isinstance(payload, bytes):
        return payload
    if isinstance(payload, bytearray | memoryview):
        return bytes(payload)
    raise InvalidOptionError(f"payload must be bytes, got {type(payload).__name__}")


async def publish(
    conn: Conn,
    subject: str,
    payload: bytes,
    block: bytes | None,
    timeout: float,
) -> PubAck:
    """Publish and wait for the stream's acknowledgement.

    ``timeout`` bounds the whole call, retries included. No responders (no
    stream, or none during an election) is retried ``PUBLISH_RETRY_ATTEMPTS``
    times ``PUBLISH_RETRY_WAIT`` apart; err_code 10158 (the msg id is still
    being stored) until the duplicate acknowledgement comes, with a doubling
    wait. A retry is made only if the deadline leaves time after its wait;
    otherwise the last error is raised.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    left = timeout
    no_responders = 0
    in_process_wait = IN_PROCESS_FIRST_WAIT
    while True:
        error: JetStreamError
        try:
            data, hdr = await conn.request(subject, payload, left, block)
            return ack_from_reply(data, hdr, subject)
        except NoRespondersError:
            error = NoRespondersError(f"no stream captures subject {subject!r}")
            if no_responders >= PUBLISH_RETRY_ATTEMPTS:
                raise error from None
            no_responders += 1
            wait = PUBLISH_RETRY_WAIT
        except DuplicateMsgIdInProcessError as exc:
            error = exc
            wait = in_process_wait
            in_process_wait = min(IN_PROCESS_MAX_WAIT, 2 * in_process_wait)
        if deadline - loop.time() <= wait:
            raise error  # no time for another attempt after the wait
        await asyncio.sleep(wait)
        left = deadline - loop.time()
        if left <= 0:
            raise error


def duration_seconds(value: float | timedelta | str | None, name: str) -> float | None:
    """A client-side wait as float seconds (None stays None; 0 allowed).

    Raises:
        InvalidOptionError: not seconds, a timedelta or a duration string, NaN (its own message),
            negative, or longer than the server's int64 nanoseconds (about 292
            years; ``inf`` and ``1e300`` included: nothing means "forever").

    """
    if value is None:
        return None
    return B.seconds(value, name, zero=True)


def _stream_full(data: bytes, hdr: bytes | None, subject: bytes) -> StreamFullError | None:
    """The reply's :class:`StreamFullError`, or None for any other reply (handled by the caller)."""
    try:
        ack_from_reply(data, hdr, subject.decode())
    except StreamFullError as exc:
        return exc
    except JetStreamError:
        return None  # another refusal: _on_reply parses the reply again and raises it
    return None


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


@dataclass(frozen=True, slots=True)
class PublishSummary:
    """What :meth:`~aiojetstream.JetStreamContext.publish_many` stored.

    Attributes:
        stored: Messages the stream acknowledged (duplicates included).
        duplicates: Of those, how many the stream had already stored under
            the same ``Nats-Msg-Id`` (within its ``duplicate_window``).

    """

    stored: int
    duplicates: int


class AckTally:
    """Counts the acknowledgements of many publishes, without a future each.

    For bulk writers (the Spark sink, :meth:`AsyncPublisher.send_many`): every
    acknowledgement counts into :attr:`stored` (and :attr:`duplicates`), the
    first failure (the server's error, a timeout, a disconnect) is kept in
    :attr:`error`, and :meth:`wait` returns once nothing is outstanding or
    something failed. It stands where a publish's future would (``done``,
    ``set_result``, ``set_exception``), so every way a publish can end reaches it.
    """

    __slots__ = ("_waiter", "duplicates", "error", "outstanding", "stored")

    def __init__(self) -> None:
        self.stored = 0
        self.duplicates = 0
        self.outstanding = 0
        self.error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None

    def done(self) -> bool:
        """Always False: every publish's outcome is counted."""
        return False

    def count(self, duplicate: bool) -> None:
        """One publish was stored (``duplicate``: the stream had its msg id already)."""
        self.stored += 1
        if duplicate:
            self.duplicates += 1
        self.outstanding -= 1
        if not self.outstanding:
            self._wake()

    def count_many(self, stored: int, duplicates: int = 0) -> None:
        """``stored`` publishes were stored, ``duplicates`` of them duplicates."""
        self.stored += stored
        self.duplicates += duplicates
        self.outstanding -= stored
        if not self.outstanding:
            self._wake()

    def fail_many(self, exc: BaseException, count: int) -> None:
        """``count`` publishes failed with ``exc`` (the first failure is kept)."""
        if self.error is None:
            self.error = exc
        self.outstanding -= count
        self._wake()

    def set_result(self, ack: PubAck) -> None:
        """One publish was stored, with this acknowledgement."""
        self.count(ack.duplicate)

    def set_exception(self, exc: BaseException) -> None:
        """One publish failed: the first failure is kept, and :meth:`wait` returns."""
        if self.error is None:
            self.error = exc
        self.outstanding -= 1
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self) -> None:
        """Wait until no publish is outstanding or one failed; raise its error then.

        Bounded without a timeout of its own: each publish fails by its ack
        deadline at the latest.
        """
        while self.outstanding > 0 and self.error is None:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        if self.error is not None:
            raise self.error


class _Span:
    """The publishes of one :meth:`AsyncPublisher.send_many`, under one reply subject.

    The server answers each of them on that subject: the span counts the
    answers into its tally (``left``: how many are still unanswered) and fails
    what is left at once when its deadline passes or the connection goes.
    """

    __slots__ = ("left", "tally")

    def __init__(self, tally: AckTally, count: int) -> None:
        self.tally = tally
        self.left = count

    def done(self) -> bool:
        """True once every publish of it was answered or failed."""
        return self.left <= 0

    def set_exception(self, exc: BaseException) -> None:
        """Every publish still unanswered failed with ``exc``."""
        left, self.left = self.left, 0
        if left > 0:
            self.tally.fail_many(exc, left)


#: What stands for a publish until its acknowledgement: its future, or a tally of
#: many (a span: the publishes of one send_many under one reply subject).
AckTarget = asyncio.Future[PubAck] | AckTally | _Span
#: The first byte of a span's token (the others are hex: never this).
_SPAN: Final = b"z"


class AsyncPublisher:
    """Outstanding asynchronous publishes: one reply subscription, a bounded window.

    Every future completes: with a :class:`PubAck`, with the typed error of its
    reply, with :class:`JetStreamTimeoutError` after its ack timeout, with
    :class:`DisconnectedError` when the connection drops, or with
    :class:`ConnectionClosedError` when the context closes.

    The hot path builds each PUB/HPUB command itself and queues it without
    awaiting; replies come straight from the protocol parser (a raw
    subscription), and one timer handle serves every ack deadline.
    """

    def __init__(self, conn: Conn, max_pending: int, ack_timeout: float) -> None:
        # (A float max_pending, NaN or inf, never filled the window; a negative, NaN
        # or infinite ack timeout was taken, a giant int raised OverflowError.)
        self._conn = conn
        self.max_pending = B.count(max_pending, "publish_async_max_pending")
        self.ack_timeout = B.seconds(ack_timeout, "publish_async_timeout", delta=False)
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
            bulk = AckRuns(prefix.encode(), _SPAN) if self._conn.fast else None
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
        self._next += 1
        token = b"%x" % self._next
        loop = asyncio.get_running_loop()
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
        (:func:`check_sizes`). At most the room :meth:`wait_for_room`
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
            raise ConnectionClosedError("the connection is closed or draining")
        if not self._started:
            raise InvalidOptionError("send_many before wait_for_room: no reply subscription yet")
        one = subject
        if one is None and (subjects is None or len(subjects) != count):
            raise InvalidOptionError("send_many needs a subject, or one per payload")
        many: Sequence[bytes] = subjects or ()
        # One reply subject for all of them (a span): the server answers each there.
        token = _SPAN + b"%x" % (self._next + 1)
        reply = self._prefix + token
        longest = one if one is not None else max(many, key=len)
        if len(longest) + len(reply) > MAX_SUBJECT_LINE:
            check_line(longest, reply)
        loop = asyncio.get_running_loop()
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
        self._register_span(token, tally, count, deadline, one if one is not None else many[0])

    def send_commands(
        self,
        reply_token: bytes,
        commands: bytes,
        count: int,
        payload_size: int,
        label: bytes,
        tally: AckTally,
        timeout: float | None = None,
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
            raise ConnectionClosedError("the connection is closed or draining")
        if not self._started:
            raise InvalidOptionError("send_commands before wait_for_room: no reply subscription")
        deadline = asyncio.get_running_loop().time() + (
            self.ack_timeout if timeout is None else timeout
        )
        conn.enqueue(commands, payload_size, count)
        self._register_span(reply_token, tally, count, deadline, label)

    def next_span_reply(self) -> tuple[bytes, bytes]:
        """The token and reply subject the next span will have (see :meth:`send_commands`)."""
        token = _SPAN + b"%x" % (self._next + 1)
        return token, self._prefix + token

    def _register_span(
        self, token: bytes, tally: AckTally, count: int, deadline: float, subject: bytes
    ) -> None:
        """Publishes sent under the reply token: one entry, one deadline, ``count`` counted."""
        self._next += 1
        tally.outstanding += count
        self._futures[token] = (_Span(tally, count), deadline, subject.decode("utf-8", "replace"))
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
        if entry is not None and type(entry[0]) is _Span:
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
        if token[:1] == _SPAN:
            self._span_reply(token, data, hdr)
            return
        if self._held and token in self._held and self._still_held(token, data, hdr):
            return
        entry = self._forget(token)
        if entry is None:
            return  # late reply after a timeout or a disconnect
        fut, _, target = entry
        if isinstance(fut, _Span) or fut.done():
            return  # (a span's replies never come here: their tokens are told apart)
        if (
            type(fut) is AckTally
            and hdr is None
            and data.startswith(b'{"stream":"')
            and b'"seq":' in data
            and b'"error"' not in data
            and b'"duplicate"' not in data
        ):
            # A plain acknowledgement, counted without a PubAck. Anything else
            # (a duplicate, an error, a status) is parsed below and reaches the
            # tally as an acknowledgement or as the error it carries.
            fut.count(False)
            return
        try:
            if hdr is None and b'"error"' not in data:
                # The usual reply, a plain PubAck: parse_pub_ack without the calls.
                ack: PubAck = PubAck.__pydantic_validator__.validate_json(data)
            else:
                ack = ack_from_reply(data, hdr, target)
        except ValidationError:
            fut.set_exception(
                InvalidResponseError(f"invalid publish acknowledgement: {data[:200]!r}")
            )
        except JetStreamError as exc:
            fut.set_exception(exc)
        else:
            fut.set_result(ack)

    # ----------------------------------------------------------------- spans

    def _sunk_reply(
        self, subject: bytes, reply: bytes, data: bytes, hdr: bytes | None, context: object
    ) -> None:
        """A plain reply the router's loop took for the sink: as any reply."""
        self._on_reply(subject, reply, data, hdr)

    def _span_answered(self, token: bytes, span: _Span, count: int) -> int:
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
        assert type(span) is _Span
        if not self._span_answered(token, span, 1):
            return
        tally = span.tally
        if (
            hdr is None
            and data.startswith(b'{"stream":"')
            and b'"seq":' in data
            and b'"error"' not in data
            and b'"duplicate"' not in data
        ):
            tally.count(False)
            return
        try:
            ack = ack_from_reply(data, hdr, entry[2])
        except ValidationError:
            tally.set_exception(
                InvalidResponseError(f"invalid publish acknowledgement: {data[:200]!r}")
            )
        except JetStreamError as exc:
            tally.set_exception(exc)
        else:
            tally.count(ack.duplicate)

    def span_acks(self, token: bytes, count: int, duplicate: bool = False) -> None:
        """``count`` plain acknowledgements of the span ``token`` (all duplicates, or none)."""
        entry = self._futures.get(token)
        if entry is None or type(entry[0]) is not _Span:
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
        held.unanswered = False
        full = _stream_full(data, hdr, held.subject) if b"10077" in data else None
        if full is not None:
            self._last_full = full
            held.error = full
            entry = self._futures.get(token)
            wanted = entry is not None and not entry[0].done()  # not cancelled by its caller
            if wanted and loop.time() + HOLD_MIN_WAIT <= held.until:
                self._queue_held(token)
                if self._resending is None:  # else the resend in flight arms the next one
                    self._arm_hold(backoff=True)
                return True
        # Stored, refused for another reason, or out of time: _on_reply completes it.
        del self._held[token]
        if self._hold_queue and self._resending is None:
            # The next held message goes out whatever this reply was (a held message
            # waits for a resend, never for an unrelated reply that may not come).
            if full is not None:
                self._arm_hold(backoff=True)  # out of time, but the stream is still full
            else:
                if b'"error"' not in data:
                    self._hold_wait = HOLD_FIRST_WAIT  # there is room again
                self._arm_hold(backoff=False)
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
            return JetStreamTimeoutError(
                f"no acknowledgement for the publish to {subject!r} "
                "(held while the stream was full; its last attempt got no reply)"
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
                    or JetStreamTimeoutError(f"no acknowledgement for the publish to {entry[2]!r}")
                )
        # Drop entries of futures that completed meanwhile once they dominate.
        if len(heap) > 2 * len(self._futures) + _HEAP_SLACK:
            self._compact()
        if heap:
            self._arm(heap[0][0])

    def _fail_all(self, make_error: type[JetStreamError], text: str) -> None:
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
                fut.set_exception(make_error(f"{text} (publish to {subject!r})"))

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
        """
        if not self._futures:
            return
        try:
            async with asyncio.timeout(timeout):
                await self._idle.wait()
        except TimeoutError:
            raise JetStreamTimeoutError(
                f"{self._load()} asynchronous publishes still pending after {timeout} s"
            ) from None

    async def aclose(self) -> None:
        """Fail outstanding futures and drop the reply subscription (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._started = False
        self._fail_all(ConnectionClosedError, "the JetStream context was closed")
        if self._sub is not None:
            self._conn.remove_listener(self)
            sub, self._sub = self._sub, None
            await sub.unsubscribe()


def _ignore(_: object) -> None:
    """A sink's ``arrived``: nothing to do (replies are handled as they come)."""


class AckRun:
    """A run of plain acknowledgements on one span's reply subject (all duplicates, or none)."""

    __slots__ = ("count", "duplicate", "end", "payload_bytes", "token")

    def __init__(
        self, token: bytes, count: int, end: int, payload_bytes: int, duplicate: bool = False
    ) -> None:
        self.token = token
        self.count = count
        self.end = end
        self.payload_bytes = payload_bytes
        self.duplicate = duplicate


#: The stream a plain acknowledgement names (to build the run pattern for it), and
#: whether it is a duplicate's.
_ACK_STREAM: Final = re.compile(
    rb'\{"stream":"([^"\\\r\n ]{1,255})","seq":[0-9]{1,20}(\}|,"duplicate": ?true\})'
)

#: The most digits of a sequence (a uint64).
_SEQ_DIGITS: Final = 20


class AckRuns:
    """The publisher sink's ``bulk``: runs of plain acknowledgements of a span, in one match.

    A run is the replies, one after the other in a read, on one span's reply
    subject (``<prefix><mark><hex>``) whose payloads are plain acknowledgements
    ``{"stream":"<S>","seq":<n>}`` of one stream, or all duplicates'
    ``{"stream":"<S>","seq":<n>,"duplicate": true}`` (as nats-server writes
    it; without the blank too), no error, domain or status: one regular
    expression matches all of them at once, with each
    message's size written into it for each count of digits of ``<n>``, so it
    matches exactly what framing by sizes reads, and nothing else. Anything
    else ends the run, and the router's loop takes it one by one. Pure
    Python: no object per message.
    """

    __slots__ = ("_mark", "_patterns", "_prefix")

    def __init__(self, prefix: bytes, mark: bytes) -> None:
        self._prefix = prefix
        self._mark = mark
        #: (sid, stream, the duplicate flag or b"") -> the run pattern and its sizes' digits.
        self._patterns: dict[tuple[bytes, bytes, bytes], tuple[re.Pattern[bytes], int] | None] = {}

    def _pattern(
        self, sid: bytes, stream: bytes, tail: bytes
    ) -> tuple[re.Pattern[bytes], int] | None:
        key = (sid, stream, tail)
        found = self._patterns.get(key, False)
        if found is not False:
            return found  # type: ignore[return-value]
        if len(self._patterns) >= 64:
            self._patterns.clear()
        # {"stream":"<S>","seq":<n><tail>}: 20 bytes besides <S>, <n> and <tail>.
        sizes = [20 + len(stream) + len(tail) + digits for digits in range(1, _SEQ_DIGITS + 1)]
        width = len(str(sizes[0]))
        pattern: tuple[re.Pattern[bytes], int] | None = None
        if width == len(str(sizes[-1])):  # else its bytes are not simply counted: none
            payloads = b"|".join(
                b'%d\\r\\n\\{"stream":"%b","seq":[0-9]{%d}%b\\}'
                % (size, re.escape(stream), digits, re.escape(tail))
                for digits, size in enumerate(sizes, 1)
            )
            head = b"MSG " + re.escape(self._prefix)
            head += b"(%b[0-9a-f]+) %b " % (re.escape(self._mark), re.escape(sid))
            again = b"MSG " + re.escape(self._prefix) + b"\\1 %b " % re.escape(sid)
            one = b"(?:" + payloads + b")\\r\\n"
            pattern = (re.compile(head + one + b"(?:" + again + one + b")*"), width)
        self._patterns[key] = pattern
        return pattern

    def __call__(
        self, view: bytes, pos: int, size: int, sid: bytes, first_end: int
    ) -> AckRun | None:
        """The run of plain acknowledgements at ``view[pos:size]``, or None."""
        eol = view.find(b"\r\n", pos, first_end)
        stream = _ACK_STREAM.match(view, eol + 2, first_end - 2)
        if stream is None or not sid.isdigit():
            return None
        tail = stream.group(2)[:-1]  # b"", or the duplicate flag as the server writes it
        duplicate = bool(tail)
        found = self._pattern(sid, stream.group(1), tail)
        if found is None:
            return None
        pattern, width = found
        run = pattern.match(view, pos, size)
        if run is None:
            return None
        token = run.group(1)
        head = b"MSG %b%b %b " % (self._prefix, token, sid)
        end = run.end()
        count = view.count(head, pos, end)
        payload_bytes = end - pos - count * (len(head) + width + 4)
        return AckRun(token, count, end, payload_bytes, duplicate)


# --------------------------------------------------------------------------- hold when full

#: At most 20 attempts a second: the first retry waits 50 ms, doubling to 1 s.
HOLD_MIN_WAIT: Final = 0.05
HOLD_MAX_WAIT: Final = 1.0
#: The first wait is jittered in [50, 100] ms so held publishers do not retry in step.
HOLD_FIRST_WAIT: Final = 0.1


def hold_seconds(value: float | timedelta | str | None) -> float | None:
    """Validate ``hold_when_full``: a positive duration (``"30s"`` too), at most ``B.MAX_WAIT``.

    Raises:
        InvalidOptionError: anything else; NaN says so (it said "must not be
            negative"), and ``1e300`` is refused as ``inf`` is.

    """
    if value is None:
        return None
    return B.seconds(value, "hold_when_full")


def new_msg_id() -> str:
    """A ``Nats-Msg-Id`` for the retries of one held publish."""
    return uuid.uuid4().hex


async def hold_when_full(attempt: Callable[[], Awaitable[PubAck]], hold: float) -> PubAck:
    """Retry ``attempt`` while the stream is full, for up to ``hold`` seconds.

    Pulsar's ``producer_request_hold`` on the client: the waits are jittered,
    start at 50-100 ms and double to 1 s, so there are at most 20 attempts a
    second; the last :class:`StreamFullError` is raised once ``hold`` is up.
    (``publish_async`` holds inside :class:`AsyncPublisher` instead.)
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + hold
    wait = HOLD_FIRST_WAIT
    pending = attempt()
    while True:
        try:
            return await pending
        except StreamFullError:
            left = deadline - loop.time()
            if left < HOLD_MIN_WAIT:
                raise  # no room for another attempt at 20 a second
        # Jitter within [HOLD_MIN_WAIT, wait]: never faster than 20 attempts a second.
        await asyncio.sleep(min(left, random.uniform(HOLD_MIN_WAIT, wait)))
        wait = min(HOLD_MAX_WAIT, wait * 2)
        pending = attempt()
