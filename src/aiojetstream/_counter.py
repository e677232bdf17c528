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

An increment goes to whatever stream captures its subject (the server
decides, after its subject mappings and account imports, so the client cannot
tell beforehand), and the server does not let an increment carry
``Nats-Expected-Stream`` (err_code 10171): :meth:`Counter.add` checks that
the acknowledgement names the counter stream, and otherwise raises
:class:`StreamNotMatchError` saying where the increment went.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from typing import Any, Final

from . import _api
from . import _direct as D
from . import _features as F
from . import _publish as P
from ._api import ApiClient
from ._bounds import decimal_digits, shown
from ._errors import (
    CounterNotFoundError,
    CountersDisabledError,
    InvalidOptionError,
    InvalidResponseError,
    MessageNotFoundError,
    NoRespondersError,
    StreamNotMatchError,
)
from ._models import PubAck, RawStreamMessage
from ._stream import direct_message, stored_message
from ._validation import check_timeout, validate_name, validate_publish_subject

__all__ = [
    "INCR",
    "Counter",
    "ack_value",
    "counter_value",
    "increment_header",
]

INCR: Final = "Nats-Incr"
"""The header carrying a counter increment (``+1``, ``-10``)."""


def _digit_limit() -> str:
    limit = sys.get_int_max_str_digits()
    return f"{limit:,} digits" if limit else "no limit"


def increment_header(delta: object) -> str:
    """The ``Nats-Incr`` value of an increment (pure): ``+5``, ``-3``, ``+0``.

    nats-server takes an increment of any size (a Go ``big.Int``; only the
    server's ``max_payload`` bounds the header). The bound here is the one of
    turning ``delta`` into its digits: Python's int-to-str digit limit
    (``sys.get_int_max_str_digits()``, 4,300 digits by default; raise or lift it
    with ``sys.set_int_max_str_digits``).

    Raises:
        InvalidOptionError: ``delta`` is not an ``int`` (``bool`` included), or
            has more digits than the limit.

    """
    if isinstance(delta, bool) or not isinstance(delta, int):
        raise InvalidOptionError(f"a counter increment must be an int, got {shown(delta)}")
    try:
        return int.__format__(delta, "+d")  # not an int subclass's own __format__
    except ValueError:  # Python's digit limit (the message says nothing of the counter)
        raise InvalidOptionError(
            f"a counter increment of about {decimal_digits(delta):,} digits is over Python's "
            f"int-to-str limit ({_digit_limit()}; sys.set_int_max_str_digits() raises it): "
            "it can not be sent"
        ) from None


#: The most a page of get_many asks for (a counter is some 100 bytes: 1,024 fit in one).
_PAGE_BYTES: Final = 256 * 1024

#: A counter value as the server writes it: a decimal integer of any size.
_INTEGER = re.compile(r"[+-]?[0-9]+")


def _to_int(value: object, what: str) -> int:
    if isinstance(value, str) and _INTEGER.fullmatch(value):
        try:
            return int(value)
        except ValueError:  # Python's int-to-str digit limit
            raise InvalidResponseError(
                f"{what} holds a counter value of {len(value.lstrip('+-')):,} digits, over "
                f"Python's int-to-str limit ({_digit_limit()}; sys.set_int_max_str_digits() "
                "raises it)"
            ) from None
    raise InvalidResponseError(f"{what} holds no counter value: {shown(value)}")


def counter_value(data: bytes) -> int:
    """The total in a stored counter message's body, ``{"val":"42"}`` (pure).

    Raises:
        InvalidResponseError: the body is not a counter value.

    """
    try:
        body: Any = json.loads(data)
    except (ValueError, RecursionError):  # (nesting past the parser's depth)
        raise InvalidResponseError(f"not a counter value: {data[:100]!r}") from None
    return _to_int(body.get("val") if isinstance(body, dict) else None, "the message")


def ack_value(ack: PubAck) -> int:
    """The new total in an increment's acknowledgement (its ``val``, a string) (pure).

    Raises:
        InvalidResponseError: the acknowledgement has no ``val``.

    """
    return _to_int((ack.model_extra or {}).get("val"), "the acknowledgement")


class Counter:
    """The counters of one counter stream (ADR-49; nats-server >= 2.12).

    Get one with :meth:`JetStreamContext.counter`. Each subject of the stream
    is a counter. Nothing is sent until the first call, and the stream's
    config is never looked up: a stored message is read as a counter only when
    it carries ``Nats-Incr``, which the server puts on every message of a
    counter stream (and on its copies by mirror or source) and refuses on any
    other stream; one without it raises :class:`CountersDisabledError`.
    """

    def __init__(self, api: ApiClient, stream: str) -> None:
        self._api = api
        self._stream = validate_name(stream, "stream")
        self._direct_subject = api.subject(_api.DIRECT_GET, stream=self._stream)

    @property
    def stream_name(self) -> str:
        """The name of the counter stream."""
        return self._stream

    def __repr__(self) -> str:
        return f"<Counter {self._stream}>"

    async def add(
        self, subject: str, delta: int, *, timeout: float | timedelta | str | None = None
    ) -> int:
        """Add ``delta`` (any size, negative to subtract) to ``subject``; return the new total.

        The increment goes to the stream that captures ``subject`` (the server
        decides, after its subject mappings and account imports), which must be
        the counter stream: when the acknowledgement names another stream,
        the increment was applied there and :class:`StreamNotMatchError` says so.

        Raises:
            InvalidOptionError: ``delta`` is not an int, or has more digits
                than Python turns into text (``sys.get_int_max_str_digits()``,
                4,300 by default; the server itself takes any size), or a bad
                subject.
            MaxPayloadExceededError: the increment's header is over the
                server's ``max_payload`` (with the digit limit lifted), refused
                before sending (the server closed the connection).
            InvalidResponseError: the new total has more digits than that limit
                (the increment was stored: a note on the error says where).
            StreamNotMatchError: another stream captured ``subject`` and
                stored the increment (its total is in the message).
            CountersDisabledError: the counter stream is no counter.
            NoRespondersError: no stream captures ``subject``.
            FeatureNotSupportedError: the server is older than 2.12.
            JetStreamTimeoutError: no reply in time; the increment may have been
                applied (asking again may count it twice).

        """
        block = P.header_block({INCR: increment_header(delta)})
        subject = validate_publish_subject(subject)
        checked = check_timeout(timeout)
        # A header over max_payload made the server close the connection.
        P.check_size(self._api.conn, b"", block)
        checked = await F.require(self._api, F.COUNTERS, checked)  # (its time left)
        wait = self._api.timeout if checked is None else checked
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
        try:
            return ack_value(ack)
        except InvalidResponseError as exc:
            where = f"stream {ack.stream!r}, sequence {ack.seq}"
            if "val" not in (ack.model_extra or {}):
                # A server without counters stored a plain message: its level was not
                # known, or (in a cluster, where the level read is the meta leader's)
                # the stream's node is older.
                raise F.old_server(
                    F.COUNTERS,
                    f"it stored the increment as a plain message ({where})",
                    self._api.level,
                ) from None
            exc.add_note(f"the increment was stored: {where}")
            raise

    async def get(self, subject: str, *, timeout: float | timedelta | str | None = None) -> int:
        """The current total of ``subject``.

        Raises:
            CounterNotFoundError: the subject has no counter (never incremented,
                or purged).
            CountersDisabledError: the stream is no counter stream (its last
                message on ``subject`` has no ``Nats-Incr``).
            FeatureNotSupportedError: the server is older than 2.12.

        """
        subject = validate_publish_subject(subject)
        timeout = await F.require(self._api, F.COUNTERS, check_timeout(timeout))
        try:
            msg = await self._last(subject, timeout)
        except MessageNotFoundError as exc:
            raise CounterNotFoundError(
                404, exc.err_code, f"no counter for subject {subject!r} in {self._stream!r}"
            ) from exc
        return self._total(msg)

    def _total(self, msg: RawStreamMessage) -> int:
        """The total in a stored message, which must be a counter's (it has ``Nats-Incr``)."""
        if msg.headers is None or INCR not in msg.headers:
            # Not from a counter stream: a plain stream's {"val":"5"} is no total.
            raise CountersDisabledError(
                400,
                10168,
                f"stream {self._stream!r} is not a counter stream (allow_msg_counter): its "
                f"message {msg.seq} on {msg.subject!r} has no {INCR} header",
            )
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
        self, subjects: str | Sequence[str], *, timeout: float | timedelta | str | None = None
    ) -> AsyncIterator[tuple[str, int]]:
        """Async-iterate ``(subject, total)`` of every counter matching ``subjects``.

        A batch direct get (ADR-31, ``multi_last``) in stream order; wildcards
        are allowed, at most 1,024 subjects may match, and subjects without a
        counter are left out. The stream needs ``allow_direct``. A reply the
        server cuts short (at 256 KiB, or its ``max_pending`` bytes) is
        continued where it stopped, as of the same stream sequence: every
        counter comes once.

        Raises:
            TooManyResultsError: more than 1,024 subjects matched.
            CountersDisabledError: the stream is no counter stream (a message
                without ``Nats-Incr``).
            NoRespondersError: the stream does not allow direct gets.
            FeatureNotSupportedError: the server is older than 2.12.

        """
        timeout = check_timeout(timeout)
        # Pages of at most _PAGE_BYTES: without max_bytes the server sends up to its
        # max_pending (the client's whole outbound allowance) at once, and a client a
        # little slow to read is cut off as a slow consumer.
        body = D.last_msgs_request(subjects, max_bytes=_PAGE_BYTES)
        await F.require(self._api, F.COUNTERS, timeout)
        seen: set[str] = set()  # (at most 1,024) a subject updated between two pages
        while True:
            async with D.DirectBatch(self._api, self._stream, body, timeout=timeout) as batch:
                async for msg in batch:
                    if msg.subject not in seen:
                        seen.add(msg.subject)
                        yield msg.subject, self._total(msg)
            if not batch.num_pending:
                return
            start = body.get("seq", 1)
            if batch.last_seq < start:
                raise InvalidResponseError(
                    f"a batch get of stream {self._stream!r} ended with {batch.num_pending} "
                    f"counters pending and none delivered from sequence {start}"
                )
            # Cut short: the rest from the next sequence, as of the same sequence.
            body = {**body, "seq": batch.last_seq + 1}
            if batch.up_to_seq is not None:
                body["up_to_seq"] = batch.up_to_seq
