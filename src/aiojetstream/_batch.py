"""Atomic batch publish (ADR-50): ``js.atomic_batch()`` and :class:`AtomicBatch`.

Messages of a batch carry ``Nats-Batch-Id`` (a fresh id per batch) and
``Nats-Batch-Sequence`` (1, 2, ...); the last one also ``Nats-Batch-Commit: 1``.
The batch sets these three itself: user headers naming them (in any case) are
refused before sending, as a ``Nats-Batch-Commit`` on an earlier message would
make the server commit only part of the batch.
The stream (``allow_atomic=True``, nats-server >= 2.12, API level 2) stores
all of them, or none, when the commit arrives, and answers the commit with
``{"stream", "seq", "batch", "count"}``.

As the Go client does by default, the first message is sent as a request, so
that a stream refusing the batch is noticed at once; the others are
published without waiting. Most failures (a gap, a duplicate ``Nats-Msg-Id``,
an ``expected_*`` check, a batch idle for over 10 s) are reported only by the
commit, which then fails for the whole batch.

:class:`BatchState` is the pure bookkeeping (sequence, limits, closed),
tested without a server.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import timedelta
from types import TracebackType
from typing import Any, Final

from . import _bounds as B
from . import _features as F
from . import _headers as H
from . import _publish as P
from ._api import ApiClient, check_reply
from ._errors import (
    BatchClosedError,
    BatchTooLargeError,
    InvalidHeaderError,
    InvalidOptionError,
    InvalidResponseError,
    JetStreamError,
    JetStreamTimeoutError,
    NoRespondersError,
)
from ._validation import check_timeout, validate_publish_subject

logger = logging.getLogger("aiojetstream")

__all__ = [
    "BATCH_COMMIT",
    "BATCH_ID",
    "BATCH_SEQUENCE",
    "MAX_BATCH_MESSAGES",
    "AtomicBatch",
    "BatchAck",
    "BatchState",
    "batch_ack",
    "check_first_reply",
]

BATCH_ID: Final = "Nats-Batch-Id"
BATCH_SEQUENCE: Final = "Nats-Batch-Sequence"
BATCH_COMMIT: Final = "Nats-Batch-Commit"
MAX_BATCH_MESSAGES: Final = 1000
"""The server's limit on the messages of one batch, the commit included."""
MAX_BATCH_ID: Final = 64
#: The batch's own headers, lower-cased: set by the batch, refused in user headers.
_RESERVED: Final = frozenset(h.lower() for h in (BATCH_ID, BATCH_SEQUENCE, BATCH_COMMIT))

Payload = bytes | bytearray | memoryview


@dataclass(frozen=True, slots=True)
class BatchAck:
    """The acknowledgement of a committed atomic batch.

    Attributes:
        stream: The stream that stored the batch.
        seq: The stream sequence of the batch's last message.
        batch_id: The batch's ``Nats-Batch-Id``.
        batch_size: How many messages were stored (the commit included).
        domain: The JetStream domain of the stream, when one is configured.

    """

    stream: str
    seq: int
    batch_id: str
    batch_size: int
    domain: str | None = None


def batch_ack(data: bytes) -> BatchAck:
    """Parse a commit's reply, raising the typed error it may carry (pure).

    Raises:
        AtomicPublishError: (a subclass of) the server's refusal.
        InvalidResponseError: not a batch acknowledgement.

    """
    reply: dict[str, Any] = check_reply(data)
    try:
        return BatchAck(
            stream=str(reply["stream"]),
            seq=int(reply["seq"]),
            batch_id=str(reply["batch"]),
            batch_size=int(reply["count"]),
            domain=reply.get("domain"),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidResponseError(f"not a batch acknowledgement: {data[:200]!r}") from exc


def check_first_reply(reply: bytes, level: int | None = None) -> None:
    """Check the answer to a batch's first message: empty while the batch is open.

    Raises:
        APIError: the stream refused it (its typed subclass, such as
            ``AtomicPublishDisabledError``).
        FeatureNotSupportedError: it was acknowledged as a message of its own:
            a server without atomic batches stored it alone (its API level was
            not known, see ``_features.require``; or ``level``, the meta
            leader's in a cluster, is newer than the stream's node).

    """
    if reply:
        check_reply(reply)  # raises the typed error
        raise F.old_server(F.ATOMIC_BATCH, "it stored the batch's first message alone", level)


class BatchState:
    """The pure bookkeeping of one atomic batch: id, sequence, limit, open or closed."""

    __slots__ = ("batch_id", "closed", "limit", "size")

    def __init__(self, batch_id: str, limit: int = MAX_BATCH_MESSAGES) -> None:
        if not isinstance(batch_id, str) or not 0 < len(batch_id) <= MAX_BATCH_ID:
            raise InvalidOptionError(f"a batch id has 1 to {MAX_BATCH_ID} characters")
        limit = B.count(limit, "max_messages")  # (a giant int's message raised ValueError)
        _, self.batch_id = H.validate_header(BATCH_ID, batch_id)
        #: The most messages the batch may hold (the server's limit, 1,000 by default).
        self.limit = int(limit)
        #: Messages sent so far.
        self.size = 0
        #: True once committed, discarded or failed.
        self.closed = False

    def check(self, *, expected_last_sequence: int | None = None) -> int:
        """The batch sequence the next message would have (1-based); see :meth:`sent`.

        Raises:
            BatchClosedError: the batch was committed, discarded or failed.
            BatchTooLargeError: it would exceed ``limit`` messages.
            InvalidOptionError: ``expected_last_sequence`` on a message other
                than the first (the server checks it only there).

        """
        if self.closed:
            raise BatchClosedError(f"batch {self.batch_id!r} is closed")
        if self.size >= self.limit:
            raise BatchTooLargeError(
                400,
                10199,
                f"atomic publish batch is too large: at most {self.limit} messages, the "
                "commit included (checked before sending; a server configured for more "
                "takes atomic_batch(max_messages=...))",
            )
        if expected_last_sequence is not None and self.size > 0:
            raise InvalidOptionError(
                "expected_last_sequence is allowed on the first message of a batch only"
            )
        return self.size + 1

    def sent(self) -> None:
        """Count the message :meth:`check` allowed as sent."""
        self.size += 1

    def headers(
        self, base: dict[str, str] | None, sequence: int, *, commit: bool = False
    ) -> dict[str, str]:
        """The headers of the message at ``sequence``: ``base`` plus the batch's own.

        Raises:
            InvalidHeaderError: ``base`` has a header of the batch's own
                (``Nats-Batch-Id``, ``Nats-Batch-Sequence``,
                ``Nats-Batch-Commit``, in any case): the batch sets them.

        """
        for key in base or ():
            if key.lower() in _RESERVED:
                raise InvalidHeaderError(
                    f"header {key!r} is set by the atomic batch itself: a batch refuses it "
                    "in headers (nothing was sent)"
                )
        out = dict(base) if base else {}
        out[BATCH_ID] = self.batch_id
        out[BATCH_SEQUENCE] = str(sequence)
        if commit:
            out[BATCH_COMMIT] = "1"
        return out


class AtomicBatch:
    """An atomic batch publish (ADR-50; nats-server >= 2.12, stream ``allow_atomic``).

    Get one with :meth:`JetStreamContext.atomic_batch`; :meth:`add` messages,
    then :meth:`commit` the last one: the stream stores all of them or none.
    At most 1,000 messages (the commit included). Used as ``async with``, a
    batch left without a commit is discarded.
    """

    def __init__(
        self,
        api: ApiClient,
        *,
        batch_id: str | None = None,
        max_messages: int = MAX_BATCH_MESSAGES,
    ) -> None:
        self._api = api
        self._state = BatchState(uuid.uuid4().hex if batch_id is None else batch_id, max_messages)
        #: The subject of the last message sent (a subject of the batch's stream).
        self._subject: str | None = None
        #: True once the server holds nothing of the batch for us to release:
        #: released (see :meth:`_release`), committed, or its first message refused.
        #: Apart from ``closed``, which a failed call sets too: a call cancelled or
        #: timed out after its message may have reached the server still releases it.
        self._released = False
        #: True once the stream answered the first message (the batch is open there).
        self._opened = False

    @property
    def batch_id(self) -> str:
        """The batch's ``Nats-Batch-Id``."""
        return self._state.batch_id

    @property
    def size(self) -> int:
        """How many messages were sent so far (the commit included)."""
        return self._state.size

    @property
    def is_closed(self) -> bool:
        """True once committed, discarded or failed: no more messages can be added."""
        return self._state.closed

    def __repr__(self) -> str:
        return f"<AtomicBatch {self.batch_id} size={self.size} closed={self.is_closed}>"

    async def __aenter__(self) -> AtomicBatch:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.discard()

    def discard(self) -> None:
        """Abandon the batch: nothing of it is stored.

        The server would hold an open batch for 10 s after its last message,
        and a stream takes at most 50 open batches, so a batch with messages
        sent is released on the server at once: a message that skips a batch
        sequence makes the server drop the batch (it is not stored either).
        That message is queued without waiting; when it can not be sent (the
        connection is down or closed) the server drops the batch after its
        10 s. This holds for a batch closed by a failed, timed-out or
        cancelled :meth:`add` too (its message may have reached the server;
        such a call releases it already). Idempotent; a committed batch stays
        committed.
        """
        self._state.closed = True
        self._release()

    def _release(self) -> None:
        """Send the message that makes the server drop the batch, once, if it may hold it."""
        state = self._state
        if self._released or not state.size or self._subject is None:
            return  # released, committed or refused; or nothing of it reached the server
        if not self._api.conn.on_own_loop():
            # Discarded outside the connection's loop (another thread, an ended loop):
            # nothing is written from there; the server drops the batch after 10 s.
            return
        if not self._opened and self._api.level is None:
            # The stream never answered, and the server's API level is unknown:
            # a server without atomic batches would store the message alone.
            return
        self._released = True
        gap = {BATCH_ID: state.batch_id, BATCH_SEQUENCE: str(state.size + 2)}
        try:
            self._api.conn.publish_nowait(
                self._subject.encode(), b"", header_block=P.header_block(gap)
            )
        except JetStreamError as exc:
            logger.debug("batch %s is left for the server to drop: %s", state.batch_id, exc)

    def _prepare(
        self,
        subject: str,
        payload: Payload,
        headers: dict[str, str] | None,
        msg_id: str | None,
        ttl: H.TTLInput | None,
        expected_stream: str | None,
        expected_last_sequence: int | None,
        expected_last_subject_sequence: int | None,
        commit: bool,
    ) -> tuple[str, bytes, dict[str, str]]:
        subject = validate_publish_subject(subject)
        data = P.payload_bytes(payload)
        base = P.build_headers(
            headers,
            msg_id,
            ttl,
            expected_stream,
            expected_last_sequence,
            expected_last_subject_sequence,
            None,
        )
        sequence = self._state.check(expected_last_sequence=expected_last_sequence)
        out = self._state.headers(base, sequence, commit=commit)
        P.check_size(self._api.conn, data, P.header_block(out))
        return subject, data, out

    async def _send(self, subject: str, data: bytes, headers: dict[str, str]) -> None:
        self._state.sent()
        self._subject = subject
        try:
            await self._api.conn.publish(subject, data, headers=headers)
        except BaseException:
            self.discard()  # the server may or may not have it: unusable, released
            raise

    async def _request(
        self, subject: str, data: bytes, headers: dict[str, str], timeout: float | None
    ) -> bytes:
        wait = self._api.timeout if timeout is None else timeout
        try:
            reply, _ = await self._api.conn.request(subject, data, wait, P.header_block(headers))
        except NoRespondersError:
            raise NoRespondersError(P.no_stream_text(repr(subject))) from None
        return reply

    async def add(
        self,
        subject: str,
        payload: Payload = b"",
        *,
        headers: dict[str, str] | None = None,
        msg_id: str | None = None,
        ttl: H.TTLInput | None = None,
        expected_stream: str | None = None,
        expected_last_sequence: int | None = None,
        expected_last_subject_sequence: int | None = None,
        timeout: float | timedelta | str | None = None,
    ) -> None:
        """Add a message to the batch (stored only when the batch is committed).

        The first message waits for the stream's answer, so a stream without
        ``allow_atomic`` (or too many open batches) fails here; the others are
        sent without waiting, and their problems are reported by :meth:`commit`.

        Args:
            subject: where to publish; every subject must be in the same stream.
            payload: the message body.
            headers: extra headers; not ``Nats-Batch-Id``,
                ``Nats-Batch-Sequence`` nor ``Nats-Batch-Commit`` (in any
                case), which the batch sets.
            msg_id: ``Nats-Msg-Id`` (de-duplication, nats-server >= 2.12.1);
                a duplicate inside the batch fails the commit.
            ttl: per-message TTL (the stream needs ``allow_msg_ttl``).
            expected_stream: the stream that must capture the subject.
            expected_last_sequence: the stream's last sequence before the
                batch; first message only.
            expected_last_subject_sequence: the subject's last sequence; not
                for a subject written earlier in the batch.
            timeout: seconds to wait for the first message's answer.

        Raises:
            BatchClosedError: the batch was committed, discarded or failed.
            BatchTooLargeError: the batch holds 1,000 messages already.
            InvalidOptionError: bad input, before anything is sent (an
                ``InvalidHeaderError`` for a batch header in ``headers``);
                the batch is left as it was.
            AtomicPublishDisabledError: the stream lacks ``allow_atomic``.
            TooManyInflightBatchesError: 50 batches are open on the stream.
            FeatureNotSupportedError: the server is older than 2.12.

        """
        if self._state.closed:
            raise BatchClosedError(f"batch {self.batch_id!r} is closed")
        # From another loop: refused before the batch counts the message (its release
        # was written from that thread and closed the batch).
        self._api.conn.check_loop()
        args = (
            subject,
            payload,
            headers,
            msg_id,
            ttl,
            expected_stream,
            expected_last_sequence,
            expected_last_subject_sequence,
        )
        subject, data, hdrs = self._prepare(*args, commit=False)
        timeout = check_timeout(timeout)  # before anything is sent or the batch moves on
        first = self._state.size == 0
        if first:
            # Once the input is checked (this may ask the server); prepared again
            # after it, as the batch may have moved on meanwhile.
            timeout = await F.require(self._api, F.ATOMIC_BATCH, timeout)
            subject, data, hdrs = self._prepare(*args, commit=False)
            first = self._state.size == 0  # a concurrent add may have gone first
        if not first:
            await self._send(subject, data, hdrs)
            return
        self._state.sent()
        self._subject = subject
        try:
            reply = await self._request(subject, data, hdrs, timeout)
        except JetStreamTimeoutError as exc:
            self.discard()  # it may be open there (a no_ack stream holds it)
            raise JetStreamTimeoutError(
                f"{exc}: the stream did not answer the batch's first message (a stream "
                "with no_ack never does; atomic batches need one that acknowledges); "
                "the batch is closed"
            ) from exc
        except BaseException:
            self.discard()  # cancelled (a timeout around it) or lost: it may be open there
            raise
        try:
            check_first_reply(reply, self._api.level)
        except BaseException:
            # Answered: the stream refused the batch (or an old server stored the
            # message alone); it holds no open batch.
            self._state.closed = True
            self._released = True
            raise
        self._opened = True

    async def commit(
        self,
        subject: str,
        payload: Payload = b"",
        *,
        headers: dict[str, str] | None = None,
        msg_id: str | None = None,
        ttl: H.TTLInput | None = None,
        expected_stream: str | None = None,
        expected_last_sequence: int | None = None,
        expected_last_subject_sequence: int | None = None,
        timeout: float | timedelta | str | None = None,
    ) -> BatchAck:
        """Send the last message and commit: the stream stores the whole batch, or nothing.

        Arguments are those of :meth:`add`. The batch is closed afterwards,
        whatever the outcome, except when the call is refused before sending
        (``InvalidOptionError``, ``BatchTooLargeError``): then the batch is
        left open as it was.

        Raises:
            BatchClosedError: the batch was committed, discarded or failed.
            BatchTooLargeError: the batch holds 1,000 messages (its
                ``max_messages``) already, before sending; the batch stays
                open and can not be committed: :meth:`discard` it (else the
                server drops its messages after 10 s) and send fewer, the
                last one by ``commit``.
            InvalidOptionError: bad input, before anything is sent (an
                ``InvalidHeaderError`` for a batch header in ``headers``).
            BatchIncompleteError: a message was lost, or the batch was idle
                for over 10 s (the server abandoned it).
            AtomicPublishError: a message of the batch was refused (a subclass
                such as ``BatchDuplicateMsgIdError`` or
                ``BatchUnsupportedHeaderError``); nothing was stored.
            WrongLastSequenceError: an expected sequence did not hold; nothing
                was stored.
            InvalidResponseError: the acknowledgement names another batch or size.

        """
        if self._state.closed:
            raise BatchClosedError(f"batch {self.batch_id!r} is closed")
        # From another loop: refused before the batch counts the message (its release
        # was written from that thread and closed the batch).
        self._api.conn.check_loop()
        args = (
            subject,
            payload,
            headers,
            msg_id,
            ttl,
            expected_stream,
            expected_last_sequence,
            expected_last_subject_sequence,
        )
        subject, data, hdrs = self._prepare(*args, commit=True)
        timeout = check_timeout(timeout)  # before anything is sent or the batch closes
        if self._state.size == 0:
            # Once the input is checked (this may ask the server); prepared again
            # after it, as the batch may have moved on meanwhile.
            timeout = await F.require(self._api, F.ATOMIC_BATCH, timeout)
            subject, data, hdrs = self._prepare(*args, commit=True)
        self._state.sent()
        self._state.closed = True
        try:
            reply = await self._request(subject, data, hdrs, timeout)
        except BaseException:
            # No answer: the commit may or may not have reached the server. The
            # release is sent after it on this connection, so it can not undo a
            # commit that arrived; one that did not would leave the batch open.
            self._release()
            raise
        self._released = True  # answered: committed, or dropped by the server
        ack = batch_ack(reply)
        if ack.batch_id != self.batch_id or ack.batch_size != self.size:
            raise InvalidResponseError(
                f"batch acknowledgement for {ack.batch_id!r} of {ack.batch_size} messages, "
                f"expected {self.batch_id!r} of {self.size}"
            )
        return ack
