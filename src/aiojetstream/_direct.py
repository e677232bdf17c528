"""Batch direct get (ADR-31): ``Stream.get_batch`` and ``Stream.get_last_msgs_for``.

A batch direct get is one request on ``$JS.API.DIRECT.GET.<stream>`` answered
by many replies: the messages, then a status-only ``204 EOB`` frame. nats-py's
request returns a single reply, so each batch subscribes its own inbox.

The frame handling is pure and tested without a server:

* :func:`classify_frame` tells a message from the EOB, a 404 (nothing matched:
  an empty iteration) and an error status (408, 412, 413, 503, ...);
* :func:`status_error` turns an error status into the typed exception;
* :class:`BatchCursor` checks ``Nats-Last-Sequence`` (a dropped reply raises
  :class:`DirectBatchGapError`) and enforces ``up_to_seq`` / ``up_to_time``
  client-side, since the server ignores them outside ``multi_last``.

Needs nats-server >= 2.11 (API level 1); checked before the request is sent.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import weakref
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Final

from . import _api
from . import _bounds as B
from . import _features as F
from . import _headers as H
from ._api import ApiClient
from ._cleanup import close_when_collected
from ._conn import RawSubscription
from ._errors import (
    APIError,
    BadRequestError,
    DirectBatchGapError,
    InvalidOptionError,
    InvalidResponseError,
    InvalidSubjectError,
    JetStreamError,
    JetStreamTimeoutError,
    NoRespondersError,
    StreamNotFoundError,
    TooManyResultsError,
)
from ._models import NanoDatetime, RawStreamMessage, format_timestamp, parse_timestamp
from ._models._ranges import check_server_time
from ._models.message import raw_message
from ._validation import validate_filter_subject

logger = logging.getLogger("aiojetstream")

__all__ = [
    "BatchCursor",
    "DirectBatch",
    "DirectFrame",
    "FrameKind",
    "batch_request",
    "classify_frame",
    "last_msgs_request",
    "status_error",
]

UP_TO_SEQUENCE: Final = "Nats-UpTo-Sequence"
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)

# Headers a direct get adds to describe the stored message; they are moved into
# RawStreamMessage's fields rather than repeated in its headers.
_META: Final = frozenset(
    {H.STREAM, H.SUBJECT, H.SEQUENCE, H.TIME_STAMP, H.LAST_SEQUENCE, H.NUM_PENDING}
)


class FrameKind(enum.Enum):
    """What one reply to a batch direct get is."""

    MESSAGE = "message"
    """A stored message (headers ``Nats-Subject``, ``Nats-Sequence``, ...)."""
    EOB = "eob"
    """``204 EOB``: the end of the batch."""
    NOT_FOUND = "not_found"
    """``404`` (``Message Not Found`` or ``No Results``): nothing matched."""
    ERROR = "error"
    """Any other status: the request failed."""


@dataclass(frozen=True, slots=True)
class DirectFrame:
    """A classified reply: its kind, headers (all of them) and status line."""

    kind: FrameKind
    headers: dict[str, str]
    status: str | None = None
    description: str | None = None


def classify_frame(hdr: bytes | None) -> DirectFrame:
    """Classify one reply of a batch direct get by its raw header block (pure, never raises)."""
    if not hdr:
        # A message always has the Nats-* headers; a reply without any is malformed,
        # classified as a message so that building it reports what is missing.
        return DirectFrame(FrameKind.MESSAGE, {})
    parsed, status, description = H.decode_headers(hdr)
    headers = parsed or {}
    if status is None or H.SEQUENCE in headers:  # a stored message, whatever its first line
        return DirectFrame(FrameKind.MESSAGE, headers)
    if status == "204":
        return DirectFrame(FrameKind.EOB, headers, status, description)
    if status == "404":
        return DirectFrame(FrameKind.NOT_FOUND, headers, status, description)
    return DirectFrame(FrameKind.ERROR, headers, status, description)


def no_direct_responders(stream: str) -> NoRespondersError:
    """The error of a batch direct get on a stream that does not allow direct gets."""
    return NoRespondersError(
        f"no direct get responders for stream {stream!r} (is allow_direct on?)"
    )


def status_error(frame: DirectFrame, stream: str) -> JetStreamError:
    """The typed exception for an error status of a batch direct get (pure)."""
    status = frame.status or ""
    # A 503 carries "Nats-Subject: ..." that nats' parsers take for a description.
    description = (frame.description or "").strip()
    code = int(status) if status.isdigit() else 0
    if code == 503:
        return no_direct_responders(stream)
    if code == 413:
        return TooManyResultsError(
            413, 0, f"{description or 'Too Many Results'}: multi_last matched over 1,024 subjects"
        )
    if code == 408:
        return BadRequestError(408, 0, description or "Bad Request")
    return APIError(code, 0, description or f"status {status}")


def _int(headers: dict[str, str], key: str) -> int | None:
    value = headers.get(key)
    if value is None:
        return None
    # The server's value is the last (a stored republished message has its own).
    value = value.rpartition(H.SERVER_VALUE_SEPARATOR)[2]
    return _api.header_uint(value, f"{key} header")


def time_ns(value: datetime) -> int:
    """Nanoseconds since the Unix epoch of an aware datetime (exact; a NanoDatetime's ns kept)."""
    delta = value - _EPOCH
    extra = value.nanosecond if isinstance(value, NanoDatetime) else 0
    return (
        (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000 + extra
    )


def build_message(frame: DirectFrame, data: bytes) -> RawStreamMessage:
    """The stored message of a MESSAGE frame (nanosecond timestamp kept)."""
    hdrs = frame.headers
    meta, user = H.split_server_headers(hdrs, _META)
    try:
        subject = meta[H.SUBJECT]
        seq = _api.header_uint(meta[H.SEQUENCE], f"{H.SEQUENCE} header")
        time = parse_timestamp(meta[H.TIME_STAMP])
    except (KeyError, ValueError) as exc:
        raise InvalidResponseError(f"direct get reply without metadata: {hdrs!r}") from exc
    # No validation per message: every field was just parsed.
    return raw_message(subject, seq, user or None, data, time)


class BatchCursor:
    """The pure bookkeeping of one batch: dropped replies and the client-side upper bound.

    Args:
        up_to_seq: deliver no message above this stream sequence.
        up_to_time: deliver only messages stored before this time (exclusive,
            as the server's ``multi_last`` ``up_to_time``).

    """

    __slots__ = ("delivered", "last_seq", "received", "up_to_ns", "up_to_seq")

    def __init__(self, up_to_seq: int | None = None, up_to_time: datetime | None = None) -> None:
        self.up_to_seq = up_to_seq
        self.up_to_ns = None if up_to_time is None else time_ns(up_to_time)
        #: Sequence of the last message received (0 before the first): what the next
        #: reply must name as the one before it.
        self.received = 0
        #: Sequence of the last message within the bounds (0 before the first): a
        #: message past them, which ends the batch, is not one.
        self.last_seq = 0
        #: Messages received so far.
        self.delivered = 0

    def on_message(self, seq: int, previous: int | None, time: datetime) -> bool:
        """Account for a message; False when it is past the upper bound (end the batch there).

        Raises:
            DirectBatchGapError: ``previous`` (its ``Nats-Last-Sequence``) is not
                the sequence of the message received before it (0 for the first).
            InvalidResponseError: the first reply lacks ``Nats-Last-Sequence``
                (a server without batch direct get).

        """
        if previous is None:
            raise InvalidResponseError(
                "a batch direct get reply without Nats-Last-Sequence: the server "
                f"does not support batch gets (nats-server >= {F.BATCH_GET.version})"
            )
        if previous != self.received:  # the first reply names 0
            raise DirectBatchGapError(
                f"a reply was dropped: message {seq} follows {previous}, "
                f"but the last one received was {self.received}"
            )
        self.received = seq
        self.delivered += 1
        if self.up_to_seq is not None and seq > self.up_to_seq:
            return False
        if self.up_to_ns is not None and time_ns(time) >= self.up_to_ns:
            return False
        self.last_seq = seq
        return True

    def on_eob(self, last: int | None) -> None:
        """Check the EOB's ``Nats-Last-Sequence`` against the last message received.

        Raises:
            DirectBatchGapError: the batch's last reply(s) were dropped.

        """
        if last is not None and last != self.received:
            raise DirectBatchGapError(
                f"a reply was dropped: the batch ended at {last}, "
                f"but the last message received was {self.received}"
            )


# --------------------------------------------------------------------------- requests


def _positive(value: object, name: str) -> int:
    """A count of the request: ``batch``, ``max_bytes`` (a Go int on the server)."""
    return B.count(value, name)


def _sequence(value: object, name: str) -> int:
    """A stream sequence of the request (a uint64 on the server, which answered 408 past it)."""
    return B.sequence(value, name)


def _aware(value: object, name: str) -> datetime:
    """A timezone-aware datetime within the server's clock (1677-09-21 to 2262-04-11).

    The server reads a time as int64 nanoseconds since 1970 and wraps one
    outside: a ``start_time`` after 2262-04-11 read from the first message.
    """
    return check_server_time(value, name)


def _up_to(up_to_seq: int | None, up_to_time: datetime | None) -> None:
    if up_to_seq is not None and up_to_time is not None:
        raise InvalidOptionError("give up_to_seq or up_to_time, not both")
    if up_to_seq is not None:
        _sequence(up_to_seq, "up_to_seq")
    if up_to_time is not None:
        _aware(up_to_time, "up_to_time")


def batch_request(
    batch: int,
    *,
    seq: int | None = None,
    subject: str | None = None,
    start_time: datetime | None = None,
    max_bytes: int | None = None,
    up_to_seq: int | None = None,
    up_to_time: datetime | None = None,
) -> dict[str, Any]:
    """Validate the options of ``get_batch`` and return the request body (pure).

    ``seq`` defaults to 1 unless ``start_time`` is given (the server refuses a
    body with neither). ``up_to_seq`` / ``up_to_time`` are not sent: the
    server ignores them outside ``multi_last``, so they are enforced client-side.

    Raises:
        InvalidOptionError: an invalid value, ``seq`` with ``start_time``, or
            ``up_to_seq`` with ``up_to_time``.

    """
    body: dict[str, Any] = {}
    if seq is not None and start_time is not None:
        raise InvalidOptionError("give seq or start_time, not both")
    if start_time is not None:
        body["start_time"] = format_timestamp(_aware(start_time, "start_time"))
    else:
        body["seq"] = 1 if seq is None else _sequence(seq, "seq")
    body["batch"] = _positive(batch, "batch")
    if subject is not None:
        body["next_by_subj"] = validate_filter_subject(subject)
    if max_bytes is not None:
        body["max_bytes"] = _positive(max_bytes, "max_bytes")
    _up_to(up_to_seq, up_to_time)
    return body


def last_msgs_request(
    subjects: str | Sequence[str],
    *,
    up_to_seq: int | None = None,
    up_to_time: datetime | None = None,
    batch: int | None = None,
    seq: int | None = None,
    max_bytes: int | None = None,
) -> dict[str, Any]:
    """Validate the options of ``get_last_msgs_for`` and return the request body (pure).

    Raises:
        InvalidOptionError: no subjects, an invalid subject or value, or
            ``up_to_seq`` with ``up_to_time``.

    """
    if isinstance(subjects, str):
        items = [subjects]
    elif isinstance(subjects, Iterable) and not isinstance(subjects, bytes | bytearray):
        items = list(subjects)
    else:
        raise InvalidSubjectError(
            f"subjects must be a subject or a list of them, got {B.shown(subjects)}"
        )
    if not items:
        raise InvalidOptionError("get_last_msgs_for needs at least one subject")
    body: dict[str, Any] = {"multi_last": [validate_filter_subject(s) for s in items]}
    _up_to(up_to_seq, up_to_time)
    if up_to_seq is not None:
        body["up_to_seq"] = _sequence(up_to_seq, "up_to_seq")
    if up_to_time is not None:
        body["up_to_time"] = format_timestamp(up_to_time)
    if batch is not None:
        body["batch"] = _positive(batch, "batch")
    if seq is not None:
        body["seq"] = _sequence(seq, "seq")
    if max_bytes is not None:
        body["max_bytes"] = _positive(max_bytes, "max_bytes")
    return body


# --------------------------------------------------------------------------- iterator


class _Replies:
    """The replies of one batch, buffered by its subscription's handler.

    Apart from :class:`DirectBatch` so that the subscription does not keep the
    batch alive: a batch dropped unfinished is collected, and its finalizer
    closes the subscription.
    """

    __slots__ = ("arrived", "frames")

    def __init__(self) -> None:
        self.frames: deque[tuple[bytes, bytes | None]] = deque()
        self.arrived = asyncio.Event()

    def on_frame(self, subject: bytes, reply: bytes, data: bytes, hdr: bytes | None) -> None:
        self.frames.append((data, hdr))
        self.arrived.set()


class DirectBatch:
    """The messages of one batch direct get: an async iterator of :class:`RawStreamMessage`.

    Returned by :meth:`Stream.get_batch` and :meth:`Stream.get_last_msgs_for`.
    Nothing is sent until iteration starts. Iteration ends at the server's
    end-of-batch (``204 EOB``), at once when nothing matched (404), or at the
    first message past ``up_to_seq`` (or at or after ``up_to_time``). It owns an inbox
    subscription, released when iteration ends, on :meth:`aclose`, when used
    as ``async with`` and left, or once a batch left unfinished is collected.

    After a complete batch :attr:`num_pending` tells how many matching
    messages were left, and (for ``get_last_msgs_for``) :attr:`up_to_seq`
    the stream sequence the values are as of.
    """

    def __init__(
        self,
        api: ApiClient,
        stream: str,
        body: dict[str, Any],
        *,
        up_to_seq: int | None = None,
        up_to_time: datetime | None = None,
        timeout: float | None = None,
        direct_off: bool = False,
    ) -> None:
        checked = B.timeout(timeout)  # (NaN, infinity and 1e300 waited forever)
        self._api = api
        self._stream = stream
        # The caller's stream info says allow_direct is off: checked before sending.
        self._direct_off = direct_off
        self._body = body
        self._timeout = api.timeout if checked is None else checked
        self._cursor = BatchCursor(up_to_seq, up_to_time)
        self._replies: _Replies | None = None
        self._sub: RawSubscription | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self._started = False
        self._finished = False
        self._num_pending: int | None = None
        self._up_to_seq: int | None = None
        # multi_last: the Nats-Num-Pending of the last message (see __anext__).
        self._multi = "multi_last" in body
        self._msg_pending: int | None = None

    @property
    def num_pending(self) -> int | None:
        """Matching messages left after this batch (from the EOB), None before it."""
        return self._num_pending

    @property
    def last_seq(self) -> int:
        """The stream sequence of the last message yielded (0 before the first).

        A message past ``up_to_seq`` / ``up_to_time``, which ends the batch, is
        not counted: a next batch from ``last_seq + 1`` starts with it.
        """
        return self._cursor.last_seq

    @property
    def up_to_seq(self) -> int | None:
        """For ``get_last_msgs_for``: the stream sequence the values are as of (from the EOB)."""
        return self._up_to_seq

    def __aiter__(self) -> DirectBatch:
        return self

    async def __aenter__(self) -> DirectBatch:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop and release the inbox subscription (idempotent)."""
        self._finished = True
        if self._finalizer is not None:
            self._finalizer.detach()
        sub, self._sub = self._sub, None
        self._replies = None
        if sub is not None:
            await sub.unsubscribe()

    async def _start(self) -> None:
        self._started = True
        left = await F.require(self._api, F.BATCH_GET, self._timeout)
        if left is not None:
            self._timeout = left  # (what asking for the API level left of it)
        if self._direct_off:
            # Through a domain or a leaf node the request would only time out (a
            # leaf sends no 503): the stream's config, asked afresh, says it now.
            reply = await self._api.call(
                _api.STREAM_INFO, timeout=self._timeout, stream=self._stream
            )
            config = reply.get("config")
            if not (isinstance(config, dict) and config.get("allow_direct") is True):
                raise no_direct_responders(self._stream)
        conn = self._api.conn
        inbox = conn.new_inbox()
        replies = self._replies = _Replies()
        sub = self._sub = await conn.subscribe_raw(inbox, replies.on_frame)
        self._finalizer = close_when_collected(self, sub.unsubscribe)
        subject = self._api.subject(_api.DIRECT_GET, stream=self._stream)
        await conn.publish(subject, _api.dumps(self._body), reply=inbox)

    async def _next_frame(self) -> tuple[bytes, bytes | None]:
        replies = self._replies
        assert replies is not None
        if not replies.frames:
            replies.arrived.clear()
            try:
                async with asyncio.timeout(self._timeout):
                    await replies.arrived.wait()
            except TimeoutError:
                raise JetStreamTimeoutError(
                    f"batch direct get on {self._stream!r}: nothing within {self._timeout:g}s"
                ) from None
        return replies.frames.popleft()

    async def _error(self, frame: DirectFrame) -> JetStreamError:
        """The typed error of an error reply; a 503 for a missing stream is StreamNotFoundError."""
        error = status_error(frame, self._stream)
        if isinstance(error, NoRespondersError):
            # No direct-get responders: the stream does not allow direct gets, or it
            # does not exist; the latter raises StreamNotFoundError here. Any other
            # failure of that look-up leaves the 503's own error.
            try:
                await self._api.call(
                    _api.STREAM_INFO, timeout=min(self._timeout, 1.0), stream=self._stream
                )
            except StreamNotFoundError:
                raise
            except JetStreamError as exc:
                logger.debug("stream look-up after a 503 failed: %s", exc)
        return error

    async def __anext__(self) -> RawStreamMessage:
        if self._finished:
            raise StopAsyncIteration
        try:
            if not self._started:
                await self._start()
            while True:
                data, hdr = await self._next_frame()
                frame = classify_frame(hdr)
                kind = frame.kind
                if kind is FrameKind.MESSAGE:
                    msg = build_message(frame, data)
                    if self._multi:
                        self._msg_pending = _int(frame.headers, H.NUM_PENDING)
                    previous = _int(frame.headers, H.LAST_SEQUENCE)
                    if self._cursor.on_message(msg.seq, previous, msg.time):
                        return msg
                    break  # past up_to_seq / up_to_time
                if kind is FrameKind.EOB:
                    self._cursor.on_eob(_int(frame.headers, H.LAST_SEQUENCE))
                    pending = _int(frame.headers, H.NUM_PENDING)
                    if self._msg_pending is not None and (
                        pending is None or self._msg_pending > pending
                    ):
                        # nats-server 2.11 counts a cut multi_last reply's EOB one
                        # too low (0 with one subject left: a paging loop stopped
                        # early); its last message's count is right.
                        pending = self._msg_pending
                    self._num_pending = pending
                    self._up_to_seq = _int(frame.headers, UP_TO_SEQUENCE)
                    break
                if kind is FrameKind.NOT_FOUND:
                    self._num_pending = 0
                    break
                raise await self._error(frame)
        except BaseException:
            await self.aclose()
            raise
        await self.aclose()
        raise StopAsyncIteration
