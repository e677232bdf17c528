"""Counting many acknowledgements without a future each: tallies, spans and runs.

The bulk publishes (``publish_many``, the Spark sink) send many messages under
one reply subject (a :class:`AckSpan`) and count their acknowledgements into an
:class:`AckTally`, which ends as a :class:`PublishSummary`. On the fast path,
:class:`AckRuns` matches a run of plain acknowledgements in the read buffer at
once, so the window (:mod:`.window`) counts them without an object each.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Final

from .._models import PubAck


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

    For bulk writers (the Spark sink, :meth:`.window.AsyncPublisher.send_many`): every
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


class AckSpan:
    """The publishes of one :meth:`.window.AsyncPublisher.send_many`, under one reply subject.

    The server answers each of them on that subject: the span counts the
    answers into its tally (``left``: how many are still unanswered) and fails
    what is left at once when its deadline passes or the connection goes.
    """

    __slots__ = ("left", "mixed", "tally")

    def __init__(self, tally: AckTally, count: int, mixed: bool = False) -> None:
        self.tally = tally
        self.left = count
        #: Its publishes have more than one subject (errors name the first as one of them).
        self.mixed = mixed

    def about(self, subject: str) -> str:
        """``subject`` quoted, as its errors name the publishes (the first of several)."""
        if self.mixed:
            return f"{subject!r} or another subject of the batch"
        return repr(subject)

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
AckTarget = asyncio.Future[PubAck] | AckTally | AckSpan
#: The first byte of a span's token (the others are hex: never this).
SPAN_MARK: Final = b"z"


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
    rb'\{"stream":"([^"\\\r\n ]{1,255})","seq":[1-9][0-9]{0,18}(\}|,"duplicate": ?true\})'
)

#: The most digits of a sequence counted without a parse: 19, all below 2**64 - 1
#: (a 20-digit one may be past it; it goes through the full parse, as a 0 or a leading 0).
_SEQ_DIGITS: Final = 19

#: nats-server's plain acknowledgement, exactly (``{"stream":"<S>","seq":<n>}``, with
#: ``"domain":"<D>",`` before the sequence in a domain; ``<n>`` from 1, without a
#: leading zero, at most 19 digits): counted as stored without a :class:`PubAck`.
#: Anything else (a duplicate, an error, another shape) takes the full parse.
plain_ack: Final = re.compile(
    rb'\{"stream":"[^"\\]+",(?:"domain":"[^"\\]*",)?"seq":[1-9][0-9]{0,18}\}'
).fullmatch


class AckRuns:
    """The publisher sink's ``bulk``: runs of plain acknowledgements of a span, in one match.

    A run is the replies, one after the other in a read, on one span's reply
    subject (``<prefix><mark><hex>``) whose payloads are plain acknowledgements
    ``{"stream":"<S>","seq":<n>}`` of one stream, or all duplicates'
    ``{"stream":"<S>","seq":<n>,"duplicate": true}`` (as nats-server writes
    it; without the blank too; ``<n>`` as :data:`plain_ack` takes it), no
    error, domain or status: one regular expression matches all of them at once, with each
    message's size written into it for each count of digits of ``<n>``, so it
    matches exactly what framing by sizes reads, and nothing else. Anything
    else ends the run, and the router's loop takes it one by one. Pure
    Python: no object per message.
    """

    __slots__ = ("_head", "_mark", "_patterns", "_prefix")

    def __init__(self, prefix: bytes, mark: bytes) -> None:
        self._prefix = prefix
        self._mark = mark
        #: How a message to a span's reply subject starts: any other is no run (one
        #: comparison, not the regular expressions, for each reply to a publish_async).
        self._head = b"MSG " + prefix + mark
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
                b'%d\\r\\n\\{"stream":"%b","seq":[1-9][0-9]{%d}%b\\}'
                % (size, re.escape(stream), digits - 1, re.escape(tail))
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
        if not view.startswith(self._head, pos):
            return None
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
