"""Distributed counters (ADR-49): ``js.counter(stream)`` and :class:`Counter`.

A counter stream (``StreamConfig(allow_msg_counter=True)``, nats-server >= 2.12,
API level 2) keeps one running total per subject. An increment is a publish
with an empty body and the header ``Nats-Incr: +5``; the acknowledgement
carries the new total as a decimal string (``"val"``), and the stored message
has the body ``{"val":"<total>"}``. Totals are arbitrary-size integers: Python's
``int`` holds them as they are.

Reading uses direct get (the stream should have ``allow_direct``; without it
a single ``get`` falls back to the message-get API); :meth:`Counter.get_many`
reads many subjects in one batch direct get (ADR-31).

An increment goes to whatever stream captures its subject, so
:meth:`Counter.add` first checks the subject against the counter stream's
configured ``subjects`` (read once with the stream info, then cached), and
checks the acknowledgement names the counter stream. The server does not let
an increment carry ``Nats-Expected-Stream`` (err_code 10171).
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Sequence
from typing import Any, Final

from . import _api
from . import _direct as D
from . import _features as F
from . import _publish as P
from ._api import ApiClient
from ._errors import (
    CounterNotFoundError,
    InvalidOptionError,
    InvalidResponseError,
    MessageNotFoundError,
    NoRespondersError,
    StreamNotMatchError,
)
from ._models import PubAck, RawStreamMessage, StreamInfo
from ._stream import direct_message, stored_message
from ._validation import validate_name, validate_publish_subject

__all__ = [
    "INCR",
    "Counter",
    "ack_value",
    "captured_by",
    "counter_value",
    "increment_header",
]

INCR: Final = "Nats-Incr"
"""The header carrying a counter increment (``+1``, ``-10``)."""


def increment_header(delta: object) -> str:
    """The ``Nats-Incr`` value of an increment (pure): ``+5``, ``-3``, ``+0``.

    Raises:
        InvalidOptionError: ``delta`` is not an ``int`` (``bool`` included).

    """
    if isinstance(delta, bool) or not isinstance(delta, int):
        raise InvalidOptionError(f"a counter increment must be an int, got {delta!r}")
    return int.__format__(delta, "+d")  # not an int subclass's own __format__


#: A counter value as the server writes it: a decimal integer of any size.
_INTEGER = re.compile(r"[+-]?[0-9]+")


def _to_int(value: object, what: str) -> int:
    if isinstance(value, str) and _INTEGER.fullmatch(value):
        return int(value)
    raise InvalidResponseError(f"{what} holds no counter value: {value!r}")


def counter_value(data: bytes) -> int:
    """The total in a stored counter message's body, ``{"val":"42"}`` (pure).

    Raises:
        InvalidResponseError: the body is not a counter value.

    """
    try:
        body: Any = json.loads(data)
    except ValueError:
        raise InvalidResponseError(f"not a counter value: {data[:100]!r}") from None
    return _to_int(body.get("val") if isinstance(body, dict) else None, "the message")


def captured_by(subjects: Sequence[str], subject: str) -> bool:
    """Whether a stream with these configured ``subjects`` captures ``subject`` (pure).

    NATS wildcard matching: ``*`` matches one token, ``>`` (last) one or more.
    ``subject`` is a subject to publish to (no wildcards).
    """
    tokens = subject.split(".")
    for pattern in subjects:
        parts = pattern.split(".")
        for i, part in enumerate(parts):
            if part == ">":
                if len(tokens) > i:
                    return True
                break
            if i >= len(tokens) or (part != "*" and part != tokens[i]):
                break
        else:
            if len(parts) == len(tokens):
                return True
    return False


def ack_value(ack: PubAck) -> int:
    """The new total in an increment's acknowledgement (its ``val``, a string) (pure).

    Raises:
        InvalidResponseError: the acknowledgement has no ``val``.

    """
    return _to_int((ack.model_extra or {}).get("val"), "the acknowledgement")


class Counter:
    """The counters of one counter stream (ADR-49; nats-server >= 2.12).

    Get one with :meth:`JetStreamContext.counter`. Each subject of the stream
    is a counter; the stream is not looked up until the first call. The first
    :meth:`add` reads the stream's configured ``subjects`` (stream info) and
    keeps them; they are read again when a subject does not match them.
    """

    def __init__(self, api: ApiClient, stream: str) -> None:
        self._api = api
        self._stream = validate_name(stream, "stream")
        self._direct_subject = api.subject(_api.DIRECT_GET, stream=self._stream)
        #: The stream's configured subjects, once read (None: not read yet).
        self._subjects: tuple[str, ...] | None = None

    @property
    def stream_name(self) -> str:
        """The name of the counter stream."""
        return self._stream

    def __repr__(self) -> str:
        return f"<Counter {self._stream}>"

    async def add(self, subject: str, delta: int, *, timeout: float | None = None) -> int:
        """Add ``delta`` (any size, negative to subtract) to ``subject``; return the new total.

        The subject must be captured by the counter stream: it is checked
        against the stream's configured ``subjects`` (read once from the
        stream info and cached; read again before refusing a subject they do
        not match, as the stream may have been edited) before anything is
        sent. A stream without subjects of its own (fed by sources) captures
        no publish, so every subject is refused.

        Raises:
            InvalidOptionError: ``delta`` is not an int, a bad subject, or a
                subject the counter stream does not capture.
            StreamNotFoundError: the counter stream does not exist.
            StreamNotMatchError: the acknowledgement names another stream (the
                increment was applied there); a backstop, as the subject is
                checked first.
            CountersDisabledError: the counter stream is no counter.
            NoRespondersError: no stream captures ``subject``.
            FeatureNotSupportedError: the server is older than 2.12.

        """
        block = P.header_block({INCR: increment_header(delta)})
        subject = validate_publish_subject(subject)
        await F.require(self._api, F.COUNTERS, timeout)
        await self._check_captured(subject, timeout)
        wait = self._api.timeout if timeout is None else timeout
        ack = await P.publish(self._api.conn, subject, b"", block, wait)
        if ack.stream != self._stream:
            total = (ack.model_extra or {}).get("val")
            raise StreamNotMatchError(
                400,
                10060,
                f"the increment of {subject!r} went to stream {ack.stream!r} (sequence "
                f"{ack.seq}, total there now {total!r}), not to the counter stream "
                f"{self._stream!r}",
            )
        return ack_value(ack)

    async def _read_subjects(self, timeout: float | None) -> tuple[str, ...]:
        info = await self._api.call_model(
            _api.STREAM_INFO, StreamInfo, timeout=timeout, stream=self._stream
        )
        self._subjects = tuple(info.config.subjects or ())
        return self._subjects

    async def _check_captured(self, subject: str, timeout: float | None) -> None:
        """Refuse ``subject`` unless the counter stream's configured subjects capture it."""
        subjects = self._subjects
        if subjects is not None and captured_by(subjects, subject):
            return
        # Not read yet, or no match: read (again) before refusing.
        subjects = await self._read_subjects(timeout)
        if captured_by(subjects, subject):
            return
        if not subjects:
            raise InvalidOptionError(
                f"counter stream {self._stream!r} has no subjects of its own (it is fed by "
                f"sources): an increment of {subject!r} cannot reach it; increment the "
                "counter of the stream that captures the subject"
            )
        raise InvalidOptionError(
            f"subject {subject!r} is not captured by counter stream {self._stream!r} "
            f"(subjects {list(subjects)!r}); nothing was sent"
        )

    async def get(self, subject: str, *, timeout: float | None = None) -> int:
        """The current total of ``subject``.

        Raises:
            CounterNotFoundError: the subject has no counter (never incremented,
                or purged).
            FeatureNotSupportedError: the server is older than 2.12.

        """
        subject = validate_publish_subject(subject)
        await F.require(self._api, F.COUNTERS, timeout)
        try:
            msg = await self._last(subject, timeout)
        except MessageNotFoundError as exc:
            raise CounterNotFoundError(
                404, exc.err_code, f"no counter for subject {subject!r} in {self._stream!r}"
            ) from exc
        return counter_value(msg.data)

    async def _last(self, subject: str, timeout: float | None) -> RawStreamMessage:
        body = {"last_by_subj": subject}
        try:
            data, hdr = await self._api.conn.request(
                self._direct_subject,
                _api.dumps(body),
                self._api.timeout if timeout is None else timeout,
            )
        except NoRespondersError:
            # No direct get (allow_direct off): the stream leader answers the API.
            reply = await self._api.call(
                _api.STREAM_MSG_GET, body, timeout=timeout, stream=self._stream
            )
            return stored_message(reply)
        return direct_message(data, hdr, f"subject {subject!r}")

    async def get_many(
        self, subjects: str | Sequence[str], *, timeout: float | None = None
    ) -> AsyncIterator[tuple[str, int]]:
        """Async-iterate ``(subject, total)`` of every counter matching ``subjects``.

        One batch direct get (ADR-31, ``multi_last``) in stream order; wildcards
        are allowed, at most 1,024 subjects may match, and subjects without a
        counter are left out. The stream needs ``allow_direct``.

        Raises:
            TooManyResultsError: more than 1,024 subjects matched.
            NoRespondersError: the stream does not allow direct gets.
            FeatureNotSupportedError: the server is older than 2.12.

        """
        body = D.last_msgs_request(subjects)
        await F.require(self._api, F.COUNTERS, timeout)
        async with D.DirectBatch(self._api, self._stream, body, timeout=timeout) as batch:
            async for msg in batch:
                yield msg.subject, counter_value(msg.data)
