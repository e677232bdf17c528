"""The message delivered by consumers, its acknowledgements and its metadata.

:class:`Msg` sits on the hot path: it is a plain ``__slots__`` class holding the
raw bytes received from the server and decodes subject, headers and metadata
only when asked. Acknowledgements follow ADR-15 (``+ACK``, ``-NAK``, ``+WPI``,
``+TERM``): each is one publish of a constant payload to the message's reply
subject. Metadata is parsed from that reply subject, the ``$JS.ACK`` subject in
either of its two forms (ADR-15; nats.go ``parseMetadata``).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, Generic, Protocol, TypeVar

from . import _bounds as B
from . import _duration as D
from ._errors import (
    InvalidOptionError,
    JetStreamError,
    JetStreamTimeoutError,
    MessageAlreadyAckedError,
    NotJetStreamMessageError,
)
from ._headers import decode_headers

if TYPE_CHECKING:
    from ._codec import Codec

T = TypeVar("T")

__all__ = [
    "Acker",
    "Msg",
    "MsgMetadata",
    "SequencePair",
    "ack_sequences",
    "parse_metadata",
]

# --------------------------------------------------------------------------- metadata

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_UINT64_LIMIT: Final = 1 << 64

# $JS.ACK.<stream>.<consumer>.<delivered>.<stream_seq>.<consumer_seq>.<timestamp_ns>.<pending>
_V1_TOKENS: Final = 9
# $JS.ACK.<domain>.<account_hash>.<stream>.<consumer>.<delivered>.<stream_seq>
#   .<consumer_seq>.<timestamp_ns>.<pending>.<random>: 12 tokens, 11 without the random
#   one (nats.go and nats.js take 11: the server may drop it; the client needs none).
_V2_TOKENS: Final = 11
# Index of <stream> in each form; <consumer>, <delivered>, ... follow it.
_V1_BASE: Final = 2
_V2_BASE: Final = 4


@dataclass(frozen=True, slots=True)
class SequencePair:
    """A message's position in its stream and in its consumer.

    Attributes:
        stream: The stream sequence.
        consumer: The consumer sequence (the delivery count of the consumer).

    """

    stream: int
    consumer: int


@dataclass(frozen=True, slots=True)
class MsgMetadata:
    """JetStream metadata of a delivered message, from its ``$JS.ACK`` reply subject (ADR-15).

    Attributes:
        stream: The stream name.
        consumer: The consumer name.
        domain: The JetStream domain, or None (v1 subjects, or ``_`` in v2).
        sequence: The stream and consumer sequences.
        num_delivered: How many times the message was delivered (1 the first time).
        num_pending: How many messages matching the consumer remain after this one.
        timestamp: When the message was stored (UTC, microsecond precision).
        account_hash: The account hash of a v2 subject, or None.

    """

    stream: str
    consumer: str
    domain: str | None
    sequence: SequencePair
    num_delivered: int
    num_pending: int
    timestamp: datetime
    account_hash: str | None = None


def _base(tokens: list[str] | list[bytes], js: str | bytes, ack: str | bytes) -> int:
    """Index of the stream token, or -1 when ``tokens`` is not an ack subject."""
    n = len(tokens)
    if n == _V1_TOKENS:
        base = _V1_BASE
    elif n >= _V2_TOKENS:
        base = _V2_BASE
    else:
        return -1
    if tokens[0] != js or tokens[1] != ack or not tokens[base] or not tokens[base + 1]:
        return -1
    return base


def _uint(token: str) -> int:
    if token.isascii() and token.isdigit() and len(token) <= 20:  # 2**64 has 20 digits
        value = int(token)
        if value < _UINT64_LIMIT:
            return value
    raise NotJetStreamMessageError(f"invalid number {token!r} in a $JS.ACK reply subject")


def parse_metadata(reply: str | bytes) -> MsgMetadata:
    """Parse the metadata out of a ``$JS.ACK`` reply subject (ADR-15).

    Both forms are accepted:

    * v1 (9 tokens): ``$JS.ACK.<stream>.<consumer>.<delivered>.<stream_seq>.
      <consumer_seq>.<timestamp_ns>.<pending>``
    * v2 (11 or more tokens): ``$JS.ACK.<domain>.<account_hash>.<stream>.
      <consumer>.<delivered>.<stream_seq>.<consumer_seq>.<timestamp_ns>.<pending>.
      <random>``; a domain of ``_`` means none, and trailing tokens (the random
      one included) are ignored, as nats.go and nats.js read it.

    Args:
        reply: The reply subject of a message delivered by a consumer.

    Returns:
        The parsed metadata.

    Raises:
        NotJetStreamMessageError: the subject is not a ``$JS.ACK`` subject of
            either form: wrong prefix, 10 tokens, an empty stream or
            consumer name, or a number that is not a decimal integer below 2**64.

    """
    text = reply.decode("utf-8", "replace") if isinstance(reply, bytes) else reply
    tokens = text.split(".")
    base = _base(tokens, "$JS", "ACK")
    if base < 0:
        raise NotJetStreamMessageError(f"{text!r} is not a JetStream $JS.ACK reply subject")
    timestamp_ns = _uint(tokens[base + 5])
    domain: str | None = None
    account_hash: str | None = None
    if base == _V2_BASE:
        domain = tokens[2] if tokens[2] not in ("", "_") else None
        account_hash = tokens[3] or None
    return MsgMetadata(
        stream=tokens[base],
        consumer=tokens[base + 1],
        domain=domain,
        sequence=SequencePair(stream=_uint(tokens[base + 3]), consumer=_uint(tokens[base + 4])),
        num_delivered=_uint(tokens[base + 2]),
        num_pending=_uint(tokens[base + 6]),
        # Integer arithmetic: exact to the microsecond for any uint64 nanoseconds.
        timestamp=_EPOCH + timedelta(microseconds=timestamp_ns // 1000),
        account_hash=account_hash,
    )


def ack_sequences(reply: bytes) -> tuple[int, int, int] | None:
    """Return ``(stream_seq, consumer_seq, num_delivered)`` from a raw ack reply subject.

    The ordered consumer's fast path (ADR-17): no decoding, no datetime. It
    accepts and rejects exactly the subjects :func:`parse_metadata` does.

    Args:
        reply: The raw reply subject of a delivered message.

    Returns:
        The three numbers, or None when the subject is not a valid ``$JS.ACK``
        subject.

    """
    tokens = reply.split(b".")
    n = len(tokens)
    if n == _V1_TOKENS:
        js, ack, stream, consumer, delivered, stream_seq, consumer_seq, stamp, pending = tokens
    elif n >= _V2_TOKENS:
        js, ack, _, _, stream, consumer, delivered, stream_seq, consumer_seq, stamp, pending = (
            tokens[:11]
        )
    else:
        return None
    # bytes.isdigit() is ASCII-only (and False for b"").
    if (
        js != b"$JS"
        or ack != b"ACK"
        or not stream
        or not consumer
        or not delivered.isdigit()
        or not stream_seq.isdigit()
        or not consumer_seq.isdigit()
        or not stamp.isdigit()
        or not pending.isdigit()
    ):
        return None
    try:  # (int() refuses over 4,300 digits: a hostile subject, not a delivery)
        sseq, cseq, dlv = int(stream_seq), int(consumer_seq), int(delivered)
        # 20 digits and more may exceed a uint64.
        if (
            sseq >= _UINT64_LIMIT
            or cseq >= _UINT64_LIMIT
            or dlv >= _UINT64_LIMIT
            or (len(stamp) > 19 and int(stamp) >= _UINT64_LIMIT)
            or (len(pending) > 19 and int(pending) >= _UINT64_LIMIT)
        ):
            return None
    except ValueError:
        return None
    return sseq, cseq, dlv


# --------------------------------------------------------------------------- acks

ACK: Final = b"+ACK"
NAK: Final = b"-NAK"
WPI: Final = b"+WPI"
TERM: Final = b"+TERM"

_NS_PER_SECOND: Final = 1_000_000_000
#: The longest nak delay the server takes (a Go duration: int64 nanoseconds).
_MAX_DELAY_NS: Final = 2**63 - 1

# Acknowledgement state of a Msg.
_OPEN: Final = 0
_IN_FLIGHT: Final = 1  # a double_ack awaits its confirmation
_DONE: Final = 2


class Acker(Protocol):
    """What a :class:`Msg` needs from the connection to acknowledge itself."""

    @property
    def timeout(self) -> float:
        """The default timeout of :meth:`Msg.double_ack`, in seconds."""
        ...

    def send_nowait(self, subject: bytes, payload: bytes) -> bool:
        """Queue the publish of ``payload`` to ``subject`` without a coroutine if it can.

        Returns False when it cannot: the caller then awaits :meth:`send`.
        """
        ...

    async def send(self, subject: bytes, payload: bytes) -> None:
        """Publish ``payload`` to the raw ``subject`` without waiting (fire and forget)."""
        ...

    async def request(self, subject: bytes, payload: bytes, timeout: float) -> bytes:
        """Publish ``payload`` to ``subject`` and return the reply's payload.

        Raises the library's typed errors, :class:`JetStreamTimeoutError` on timeout.
        """
        ...


def _delay_ns(delay: float | timedelta | str) -> int:
    if isinstance(delay, timedelta):
        ns = (delay.days * 86_400 + delay.seconds) * _NS_PER_SECOND + delay.microseconds * 1000
    elif isinstance(delay, str):
        ns = D.text_ns(delay, InvalidOptionError, what="nak delay")
    elif isinstance(delay, bool) or not isinstance(delay, int | float):
        raise InvalidOptionError(
            f"invalid nak delay {B.shown(delay)}: expected seconds, a timedelta or a string "
            "such as '30s'"
        )
    elif isinstance(delay, int):
        ns = delay * _NS_PER_SECOND
    elif math.isfinite(delay):
        # Huge floats are too long anyway; bounded first, their nanoseconds are exact.
        ns = round(delay * _NS_PER_SECOND) if abs(delay) < 2**63 else int(delay)
    else:
        raise InvalidOptionError(f"invalid nak delay {B.shown(delay)}: not a finite number")
    if ns < 0:
        raise InvalidOptionError(f"invalid nak delay {B.shown(delay)}: must not be negative")
    if ns > _MAX_DELAY_NS:
        raise InvalidOptionError(
            f"invalid nak delay {B.shown(delay)}: over the server's int64 nanoseconds"
        )
    return ns


class Msg:
    """A message delivered by a JetStream consumer.

    Holds the raw bytes received from the server; the subject, headers and
    metadata are decoded on first use.

    Attributes:
        data: The payload.

    """

    # "value" is TypedMsg's: a typed consumer turns the message into one in place.
    __slots__ = (
        "_acker",
        "_hdr",
        "_headers",
        "_meta",
        "_reply",
        "_state",
        "_subject",
        "data",
        "value",
    )

    def __init__(
        self, subject: bytes, reply: bytes, data: bytes, hdr: bytes | None, acker: Acker
    ) -> None:
        self._subject = subject
        self._reply = reply
        self.data = data
        self._hdr = hdr
        self._headers: dict[str, str] | None = None
        self._acker = acker
        self._state = _OPEN
        self._meta: MsgMetadata | None = None

    # ----------------------------------------------------------------- content

    @property
    def subject(self) -> str:
        """The subject the message was published to."""
        return self._subject.decode("utf-8", "replace")

    @property
    def reply(self) -> str:
        """The reply subject (the ``$JS.ACK`` subject acks go to), or ``""``."""
        return self._reply.decode("utf-8", "replace")

    @property
    def headers(self) -> dict[str, str] | None:
        """The headers, or None when the message has none.

        Repeated keys are joined with ``", "``; bytes that are not UTF-8 are
        replaced by U+FFFD (as nats-py and nats.js decode them). The dict is
        parsed once and cached.
        """
        headers = self._headers
        if headers is None and self._hdr:
            headers = self._headers = decode_headers(self._hdr)[0]
        return headers

    @property
    def metadata(self) -> MsgMetadata:
        """The JetStream metadata, parsed from the reply subject once and cached.

        Raises:
            NotJetStreamMessageError: the reply is not a ``$JS.ACK`` subject.

        """
        meta = self._meta
        if meta is None:
            meta = self._meta = parse_metadata(self._reply)
        return meta

    @property
    def size(self) -> int:
        """The size the server counts against a pull's ``max_bytes`` (ADR-37).

        ``len(subject) + len(reply) + len(headers) + len(data)``, all in bytes.
        (A pinned client's message also carries the ``Nats-Pin-Id`` header,
        which the server adds after counting; pulls leave it out.)
        """
        hdr = self._hdr
        return len(self._subject) + len(self._reply) + (len(hdr) if hdr else 0) + len(self.data)

    @property
    def acked(self) -> bool:
        """True once the message was acked, nak'ed or terminated."""
        return self._state == _DONE

    def __repr__(self) -> str:
        return f"<Msg subject={self.subject!r} data={len(self.data)}B acked={self.acked}>"

    def decode(self, type_: type[T], codec: Codec | None = None) -> T:
        """The payload validated as ``type_`` (``type_.model_validate_json(data)`` for a model).

        Args:
            type_: a pydantic model (or any type pydantic validates JSON as).
            codec: decode with this :class:`Codec` instead of JSON.

        Raises:
            PayloadValidationError: the payload is not a valid ``type_`` (with
                the subject, the stream sequence and pydantic's errors).
            InvalidOptionError: pydantic cannot validate JSON as ``type_`` (no
                schema for it, or a model not fully defined), without ``codec``.

        """
        from ._codec import decode

        return decode(self.data, type_, codec, lambda: where(self))

    # ----------------------------------------------------------------- acks

    def _claim(self) -> None:
        if not self._reply:
            raise NotJetStreamMessageError("the message has no reply subject to acknowledge to")
        if self._state == _DONE:
            raise MessageAlreadyAckedError("the message was already acknowledged")
        if self._state == _IN_FLIGHT:
            raise MessageAlreadyAckedError("a double_ack of the message is in progress")

    async def _finish(self, payload: bytes) -> None:
        self._claim()
        self._state = _DONE
        try:
            acker = self._acker
            if not acker.send_nowait(self._reply, payload):
                await acker.send(self._reply, payload)
        except BaseException:
            # The ack may not have left: allow a retry (a duplicate ack is harmless).
            self._state = _OPEN
            raise

    async def ack(self) -> None:
        """Acknowledge the message (``+ACK``, ADR-15).

        Raises:
            MessageAlreadyAckedError: the message was already acked, nak'ed or
                terminated.
            NotJetStreamMessageError: the message has no reply subject.

        """
        # _finish(ACK) inlined: the hot path of explicit acks is one coroutine.
        if self._state != _OPEN or not self._reply:
            self._claim()
        self._state = _DONE
        try:
            acker = self._acker
            if not acker.send_nowait(self._reply, ACK):
                await acker.send(self._reply, ACK)
        except BaseException:
            self._state = _OPEN
            raise

    async def double_ack(self, timeout: float | timedelta | str | None = None) -> None:
        """Acknowledge the message and wait for the server to confirm (ADR-15).

        The message counts as acked only once the confirmation arrived; after a
        failure the call may be retried.

        Args:
            timeout: How long to wait for the confirmation, in seconds or as
                a duration (``"1.5s"``, a ``timedelta``; default: the
                connection's timeout).

        Raises:
            JetStreamTimeoutError: no confirmation before ``timeout``.
            NoRespondersError: nothing serves the ack subject: the consumer's
                leader is being elected (retry), the consumer was deleted, or it
                is an ``AckPolicy.NONE`` consumer (no ack is ever confirmed).
            MessageAlreadyAckedError: the message was already acknowledged.
            NotJetStreamMessageError: the message has no reply subject.
            InvalidOptionError: ``timeout`` is not a positive duration.

        """
        # (NaN said "must be a positive number"; inf, 1e300 and giant ints were taken.)
        checked = B.timeout(timeout)
        wait = self._acker.timeout if checked is None else checked
        self._claim()
        self._state = _IN_FLIGHT
        try:
            await self._acker.request(self._reply, ACK, wait)
        except BaseException as exc:
            self._state = _OPEN
            if isinstance(exc, TimeoutError) and not isinstance(exc, JetStreamError):
                raise JetStreamTimeoutError(
                    f"no ack confirmation from the server within {wait} s"
                ) from exc
            raise
        self._state = _DONE

    async def nak(self, delay: float | timedelta | str | None = None) -> None:
        """Negatively acknowledge the message for redelivery (``-NAK``, ADR-15).

        Args:
            delay: Redeliver no sooner than this (seconds, a timedelta or a
                duration string such as ``"30s"``); sent
                as ``-NAK {"delay": <nanoseconds>}``. None: redelivered at once
                (the consumer's ``backoff`` applies only when ``ack_wait`` runs
                out, never to a nak); give a delay to wait.

        Raises:
            MessageAlreadyAckedError: the message was already acknowledged.
            NotJetStreamMessageError: the message has no reply subject.
            InvalidOptionError: the delay is negative or not a number.

        """
        payload = NAK if delay is None else b'-NAK {"delay": %d}' % _delay_ns(delay)
        await self._finish(payload)

    async def in_progress(self) -> None:
        """Tell the server the message is still being worked on (``+WPI``, ADR-15).

        Resets the redelivery timer; may be sent any number of times and does
        not acknowledge the message.

        Raises:
            MessageAlreadyAckedError: the message was already acknowledged.
            NotJetStreamMessageError: the message has no reply subject.

        """
        self._claim()
        if not self._acker.send_nowait(self._reply, WPI):
            await self._acker.send(self._reply, WPI)

    async def term(self, reason: str | None = None) -> None:
        """Stop redelivery of the message for good (``+TERM``, ADR-15).

        Args:
            reason: An optional reason, sent as ``+TERM <reason>`` and shown in
                the server's advisory. It must not contain CR or LF, and
                ``+TERM <reason>`` (UTF-8) must fit the server's ``max_payload``.

        Raises:
            MessageAlreadyAckedError: the message was already acknowledged.
            NotJetStreamMessageError: the message has no reply subject.
            InvalidOptionError: the reason is not a string, contains CR or LF,
                or is not encodable as UTF-8 (a lone surrogate).
            MaxPayloadExceededError: ``+TERM <reason>`` is over the server's
                ``max_payload`` (nothing was sent; the message stays unsettled).

        """
        if reason is None or reason == "":
            payload = TERM
        elif not isinstance(reason, str):
            raise InvalidOptionError(
                f"invalid term reason {B.shown(reason)}: expected a string or None"
            )
        elif "\r" in reason or "\n" in reason:
            raise InvalidOptionError(
                f"invalid term reason {B.shown(reason)}: must not contain CR or LF"
            )
        else:
            try:
                payload = TERM + b" " + reason.encode()
            except UnicodeEncodeError as exc:
                raise InvalidOptionError(
                    f"invalid term reason {B.shown(reason)}: not encodable as UTF-8 ({exc.reason})"
                ) from None
        await self._finish(payload)


def filled_msg(cls: type[Msg], subject: bytes, reply: bytes, data: bytes, acker: Acker) -> Msg:
    """``cls(subject, reply, data, None, acker)`` without its ``__init__`` call.

    The router's fast loop builds a consumer's plain messages with it (about
    30 ns a message less than calling the class); ``cls`` is :class:`Msg` or a
    subclass adding no slot of its own. ``tests/unit/test_router_fuzz.py``
    checks both give equal objects.
    """
    msg = _new(cls)
    msg._subject = subject
    msg._reply = reply
    msg.data = data
    msg._hdr = None
    msg._headers = None
    msg._acker = acker
    msg._state = _OPEN
    msg._meta = None
    return msg


_new = object.__new__


class PlainRun:
    """Plain messages of one subscription, buffered as their bytes: a :class:`Msg` each when taken.

    The router's fast loop (see ``_conn.RawSink.runs``) appends the reply
    subject and the payload of each message of a run to :attr:`replies` and
    :attr:`payloads` (all share the subject and the acker); a consumer's
    buffer holds the run as one item and :meth:`take` makes its messages one
    at a time. So a buffer of thousands of messages holds no object the
    garbage collector tracks per message: built in bulk, they outlived the
    young generation, went on to the oldest and set off full collections
    (about 0.1-0.2 us a message, measured with ``messages()``); made when
    taken, each is gone before the next collection.
    """

    __slots__ = ("_acker", "_next", "_subject", "payloads", "replies")

    def __init__(self, subject: bytes, acker: Acker) -> None:
        self._subject = subject
        self._acker = acker
        self._next = 0
        #: The messages' reply subjects and payloads, in order (the router appends).
        self.replies: list[bytes] = []
        self.payloads: list[bytes] = []

    def __len__(self) -> int:
        """The messages not taken yet."""
        return len(self.replies) - self._next

    def take(self, buffer: deque[Any]) -> Msg:
        """The next message of the run, which is ``buffer[0]`` (popped with the last one)."""
        i = self._next
        self._next = i + 1
        if i + 1 >= len(self.replies):
            buffer.popleft()
        # filled_msg(Msg, ...)'s stores, inline: one call less on every message taken
        # (test_router_fuzz and test_pull_driver_batching compare them with Msg()'s).
        msg = _new(Msg)
        msg._subject = self._subject
        msg._reply = self.replies[i]
        msg.data = self.payloads[i]
        msg._hdr = None
        msg._headers = None
        msg._acker = self._acker
        msg._state = _OPEN
        msg._meta = None
        return msg

    def truncate(self, count: int) -> None:
        """Keep the first ``count`` messages not taken yet (``count >= 1``); drop the rest."""
        end = self._next + count
        del self.replies[end:]
        del self.payloads[end:]

    def peek(self, last: bool = False) -> Msg:
        """The next message of the run (the last with ``last``), made for a look.

        :meth:`take` makes its own object for it: nothing is taken.
        """
        i = len(self.replies) - 1 if last else self._next
        return filled_msg(Msg, self._subject, self.replies[i], self.payloads[i], self._acker)

    def messages(self, acker: Acker) -> list[Msg]:
        """The messages not taken yet (``acker`` is the run's own), all at once."""
        start, self._next = self._next, len(self.replies)
        subject = self._subject
        return [
            filled_msg(Msg, subject, reply, data, acker)
            for reply, data in zip(self.replies[start:], self.payloads[start:], strict=True)
        ]


def msg_sequences(msg: Msg) -> tuple[int, int, int] | None:
    """:func:`ack_sequences` of a delivered message."""
    return ack_sequences(msg._reply)


def next_in_order(msg: Msg, expected: int) -> int:
    """The ordered consumer's per-message check (ADR-17).

    Returns:
        The message's stream sequence if its consumer sequence is ``expected``
        and its reply subject a valid ``$JS.ACK`` subject (as
        :func:`ack_sequences` decides), else -1.

    """
    # ack_sequences, without building the tuple or converting num_delivered.
    tokens = msg._reply.split(b".")
    n = len(tokens)
    if n == _V1_TOKENS:
        js, ack, stream, consumer, delivered, stream_seq, consumer_seq, stamp, pending = tokens
    elif n >= _V2_TOKENS:
        js, ack, _, _, stream, consumer, delivered, stream_seq, consumer_seq, stamp, pending = (
            tokens[:11]
        )
    else:
        return -1
    if (
        js != b"$JS"
        or ack != b"ACK"
        or not stream
        or not consumer
        or not delivered.isdigit()
        or not stream_seq.isdigit()
        or not consumer_seq.isdigit()
        or not stamp.isdigit()
        or not pending.isdigit()
    ):
        return -1
    try:  # (int() refuses over 4,300 digits: a hostile subject, not a delivery)
        if int(consumer_seq) != expected:
            return -1
        sseq = int(stream_seq)
        if (
            sseq >= _UINT64_LIMIT
            or expected >= _UINT64_LIMIT
            or (len(delivered) > 19 and int(delivered) >= _UINT64_LIMIT)
            or (len(stamp) > 19 and int(stamp) >= _UINT64_LIMIT)
            or (len(pending) > 19 and int(pending) >= _UINT64_LIMIT)
        ):
            return -1
    except ValueError:
        return -1
    return sseq


def total_size(msgs: Iterable[Msg]) -> int:
    """The summed :attr:`Msg.size` of ``msgs`` (one pass, no property call each)."""
    return sum([len(m._subject) + len(m._reply) + len(m._hdr or b"") + len(m.data) for m in msgs])


class TypedMsg(Msg, Generic[T]):
    """A :class:`Msg` whose payload was validated: ``value`` is the decoded ``T``.

    Handed out by ``consumer.messages(model=...)`` and ``consume(handler,
    model=...)``; everything else (``data``, ``headers``, ``metadata``, the
    acknowledgements) is the message's.

    Attributes:
        value: The payload as a ``T``.

    """

    __slots__ = ()  # the layout of Msg (whose "value" slot this fills): see typed()

    value: T

    def __repr__(self) -> str:
        return f"<TypedMsg subject={self.subject!r} value={self.value!r} acked={self.acked}>"


def typed(msg: Msg, value: T) -> TypedMsg[T]:
    """``msg``, turned into a :class:`TypedMsg` of ``value`` in place (no copy).

    The two classes share one layout, so the message keeps its identity (and
    whatever refers to it, such as a tracing span) and costs two stores.
    """
    msg.__class__ = TypedMsg
    out: TypedMsg[T] = msg  # type: ignore[assignment]
    out.value = value
    return out


def where(msg: Msg) -> tuple[str, int | None]:
    """The subject and stream sequence of ``msg`` (None when not a JetStream message)."""
    sequences = ack_sequences(msg._reply)
    return msg.subject, sequences[0] if sequences is not None else None
