"""The router's scanner: MSG / HMSG frames parsed straight from the read buffer.

:class:`Scanner` is the half of the fast-path router that needs nothing of
nats-py: it frames the messages of routed subscriptions from bytes and hands
them to their handlers or sinks (:class:`RawSink`). The other half, which
hooks nats-py's parser and drives the scan from its read buffer, is
``_nats.Router`` (the boundary module). :meth:`Scanner._scan` is one loop on
purpose: it is the per-message hot path.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

from .._message import PlainRun, filled_msg
from ._wire import RawHandler

__all__ = [
    "SCAN_END",
    "SCAN_ORIGINAL",
    "SCAN_OTHER",
    "SCAN_PING",
    "SCAN_PONG",
    "RawSink",
    "Scanner",
]

logger = logging.getLogger("aiojetstream")

# What Scanner._scan stopped at.
SCAN_END: Final = 0  # the end of what is complete
SCAN_OTHER: Final = 1  # a line for nats-py's parser
SCAN_PING: Final = 2
SCAN_PONG: Final = 3
SCAN_ORIGINAL: Final = 4  # a message for nats-py's own processing
#: Longer sizes go to nats-py's parser (its ProtocolError): int() refuses more
#: than 4,300 digits with a ValueError, and no message is that large anyway.
_MAX_SIZE_DIGITS: Final = 18


class Scanner:
    """The routes of one nats-py client, and the scan of the frames in a read buffer.

    No reference to the client: ``stats`` is its statistics dict (nats-py's
    ``stats``), counted here for the messages framed here.
    """

    def __init__(self, stats: dict[str, int]) -> None:
        self.stats = stats
        #: Consumers' subscriptions (come and go).
        self.routes: dict[int, RawHandler] = {}
        #: Long-lived reply inboxes: requests, asynchronous publishes.
        self.internal: dict[int, RawHandler] = {}
        #: Routes whose plain messages the fast loop builds and buffers itself.
        self.sinks: dict[int, RawSink] = {}
        self.last_subject = b""
        #: A message whose payload was not all in: the bytes its read buffer must
        #: hold (from its start) before parsing it again is worth it, and that buffer.
        self._awaiting = 0
        self._awaiting_buf: bytearray | None = None

    def _still_coming(self, buf: bytearray) -> bool:
        """True while the large message the last scan stopped at is not all in ``buf``.

        Copying and parsing the buffer again on every read until it is cost
        time quadratic in its size.
        """
        if not self._awaiting:
            return False
        if buf is self._awaiting_buf and len(buf) < self._awaiting:
            return True
        self._awaiting = 0
        self._awaiting_buf = None
        return False

    def _scan(self, view: bytes, pos: int, size: int) -> tuple[int, int, int, Any]:
        """Handle the frames of ``view[pos:size]`` that need no await.

        Messages of routed subscriptions go to their handlers (or sinks), ``+OK``
        lines are skipped. Stops at the end of what is complete and at the
        first frame that needs an await or nats-py's parser. Returns the
        position of that frame, the position after it, what it is (a
        ``SCAN_*`` value) and, for a message of nats-py's own, its
        ``(sid, subject, reply, payload, header block)``. At ``SCAN_END`` a
        payload not yet all in sets :attr:`_awaiting` (relative to the position).
        """
        routes = self.routes
        internal = self.internal
        sinks = self.sinks
        last_subject = self.last_subject
        # Counted here and handed on in one go (in the finally clause, and before
        # anything else may see them): nats-py's statistics, and the messages put
        # into the current sink's buffer (sink.arrived(count)).
        in_msgs = in_bytes = 0
        sink: RawSink | None = None
        sunk = 0
        append: Callable[[Any], None] | None = None
        make: Callable[..., Any] | None = None
        context: Any = None
        fill = False  # make is a class whose instances the loop below fills in itself
        filled = filled_msg
        # The current sink's runs (RawSink.runs), and the current run's lists.
        runs: Callable[[bytes], PlainRun] | None = None
        replies: list[bytes] = []
        payloads: list[bytes] = []
        # Set when a run gathered in bulk held a reply subject that is not one token:
        # from then on this scan parses each line of a run (as for the other sinks).
        strict = False
        try:
            while pos < size:
                if view.startswith(b"MSG ", pos):
                    head = 4
                elif view.startswith(b"HMSG ", pos):
                    head = 5
                elif (
                    view.startswith(b"PING\r\n", pos) or view.startswith(b"PONG\r\n", pos)
                ) and _ends_op(view, pos + 6, size):
                    # As nats-py's parser does (so the rest of the read stays here).
                    ping = view[pos + 1] == 0x49  # I
                    return pos, pos + 6, SCAN_PING if ping else SCAN_PONG, None
                elif view.startswith(b"+OK\r\n", pos) and _ends_op(view, pos + 5, size):
                    pos += 5
                    continue
                else:
                    return pos, pos, SCAN_OTHER, None
                end = view.find(b"\r\n", pos)
                if end < 0:
                    break  # an incomplete line: wait for more
                line = view[pos + head : end]
                args = line.split()
                # Only the canonical lines are parsed here; nats-py's parser decides
                # on any other (a lone CR or LF, trailing blanks, a size that is not
                # ASCII digits, a header larger than the message, ...), so every
                # input parses as it does there. (The membership tests of ints are
                # memchr calls: far cheaper than those of one-byte bytes.) One
                # exception: nats-py's HMSG pattern lets the blank between the sizes
                # span a CRLF, so it misreads "HMSG s 1 3 3\r\n5\r\n\r\n" (a header
                # block b"5\r\n", which nats-server relays) as reply "3", sizes 3
                # and 5 and misframes the stream; this reads the line to its CRLF.
                count = len(args)
                if head == 4:
                    if count == 3:
                        subject, sid_text, size_text = args
                        reply = b""
                    elif count == 4:
                        subject, sid_text, reply, size_text = args
                    else:
                        return pos, pos, SCAN_OTHER, None
                    if (
                        13 in line
                        or 10 in line
                        or not 47 < line[-1] < 58
                        or not size_text.isdigit()
                        or len(size_text) > _MAX_SIZE_DIGITS
                    ):
                        return pos, pos, SCAN_OTHER, None
                    hsize = 0
                    needed = int(size_text)
                else:
                    if count == 4:
                        subject, sid_text, hsize_text, size_text = args
                        reply = b""
                    elif count == 5:
                        subject, sid_text, reply, hsize_text, size_text = args
                    else:
                        return pos, pos, SCAN_OTHER, None
                    if (
                        13 in line
                        or 10 in line
                        or not 47 < line[-1] < 58
                        or not size_text.isdigit()
                        or not hsize_text.isdigit()
                        or len(size_text) > _MAX_SIZE_DIGITS
                        or len(hsize_text) > _MAX_SIZE_DIGITS
                    ):
                        return pos, pos, SCAN_OTHER, None
                    hsize = int(hsize_text)
                    needed = int(size_text)
                    if hsize > needed:
                        return pos, pos, SCAN_OTHER, None
                try:
                    sid = int(sid_text)
                except ValueError:
                    return pos, pos, SCAN_OTHER, None  # nats-py reports its "malformed MSG"
                start = end + 2
                stop = start + needed
                if stop + 2 > size:
                    # The payload is not all here yet: wait for more (the read buffer
                    # starts at this line once the consumed part is removed).
                    self._awaiting = stop + 2 - pos
                    break
                if hsize:
                    hdr = view[start : start + hsize]
                    payload = view[start + hsize : stop]
                else:
                    hdr = None
                    payload = view[start:stop]
                to = sinks.get(sid)
                if to is not None and to.bulk is not None:
                    # Column mode: the run of messages starting here (plain ones, or with
                    # one header each), framed in bulk (no object per message), if any.
                    try:
                        run = to.bulk(view, pos, size, sid_text, stop + 2)
                    except Exception:
                        logger.exception("framing messages on %r in bulk failed", subject)
                        to.bulk = run = None  # the loop below from now on
                    if run is not None:
                        if to is not sink:
                            if sunk:
                                sunk = _hand_on(sink, sunk)
                            sink = to
                            append, make, context = to.append, to.factory, to.context
                            fill, runs = to.fill, to.runs
                        pos = run.end
                        in_msgs += run.count
                        in_bytes += run.payload_bytes
                        append(run)  # type: ignore[misc]
                        sunk += run.count
                        continue
                if not hsize and to is not None:
                    pos = stop + 2
                    # A plain message for a sink: built and buffered right here.
                    in_msgs += 1
                    in_bytes += needed
                    if subject == last_subject:
                        subject = last_subject
                    else:
                        last_subject = subject
                    if to is not sink:
                        if sunk:
                            sunk = _hand_on(sink, sunk)
                        sink = to
                        append, make, context = to.append, to.factory, to.context
                        fill, runs = to.fill, to.runs
                    try:
                        if runs is not None:
                            # A new run starts here (its messages share this subject).
                            run = runs(subject)
                            replies, payloads = run.replies, run.payloads
                            replies.append(reply)
                            payloads.append(payload)
                        else:
                            append(make(subject, reply, payload, None, context))  # type: ignore[misc]
                    except Exception:
                        logger.exception("buffering a message on %r failed", subject)
                        continue
                    sunk += 1
                    if to.bulk is not None:
                        continue  # the next one may start a run framed in bulk
                    if runs is not None and reply and not strict:
                        pos, gathered, gathered_bytes = _gather(
                            view, pos, size, b"MSG %b %b " % (subject, sid_text), replies, payloads
                        )
                        if gathered < 0:
                            strict = True  # (nothing was gathered: the loop below decides)
                        else:
                            in_msgs += gathered
                            in_bytes += gathered_bytes
                            sunk += gathered
                            continue
                    # The rest of a run of them (the usual read: a consumer's messages
                    # one after the other): lines that start as this one did, "MSG
                    # <subject> <sid> ", and go on canonically, "<reply> <size>" or
                    # "<size>" (single blanks, nothing else blank), are parsed here;
                    # anything else goes back to the loop above, which decides as
                    # before. (The split drops every blank, so the lengths add up only
                    # when the line holds just the one blank between the tokens: no CR,
                    # LF or tab anywhere.) Messages of a run mostly have one size: its
                    # text, checked and converted once, is compared instead.
                    prefix = b"MSG %b %b " % (subject, sid_text)
                    skip = len(prefix)
                    size_seen = size_text
                    while view.startswith(prefix, pos):
                        first = pos + skip
                        end = view.find(b"\r\n", first)
                        if end < 0:
                            break
                        rest = view[first:end]
                        args = rest.split()
                        count = len(args)
                        if count == 2:
                            reply, size_text = args
                            cut = len(reply)
                            if len(rest) != cut + len(size_text) + 1 or rest[cut] != 32:
                                break
                        elif count == 1:
                            reply = b""
                            size_text = args[0]
                            if len(rest) != len(size_text):
                                break
                        else:
                            break
                        if size_text != size_seen:
                            if not size_text.isdigit() or len(size_text) > _MAX_SIZE_DIGITS:
                                break
                            size_seen = size_text
                            needed = int(size_text)
                        start = end + 2
                        stop = start + needed
                        if stop + 2 > size:
                            break
                        pos = stop + 2
                        in_msgs += 1
                        in_bytes += needed
                        try:
                            if runs is not None:
                                replies.append(reply)
                                payloads.append(view[start:stop])
                            elif fill:
                                # make(subject, reply, payload, None, context) without
                                # its __init__ call (see RawSink.fill).
                                append(filled(make, subject, reply, view[start:stop], context))  # type: ignore[misc,arg-type]
                            else:
                                append(make(subject, reply, view[start:stop], None, context))  # type: ignore[misc]
                        except Exception:
                            logger.exception("buffering a message on %r failed", subject)
                            continue
                        sunk += 1
                    continue
                if sunk:
                    sunk = _hand_on(sink, sunk)  # before anything else sees the sink's owner
                handler = routes.get(sid)
                if handler is None:
                    handler = internal.get(sid)
                    if handler is None:
                        return pos, stop + 2, SCAN_ORIGINAL, (sid, subject, reply, payload, hdr)
                pos = stop + 2
                in_msgs += 1
                in_bytes += needed - hsize
                # Messages of a consumer mostly share their subject: keep one copy of it
                # (buffered messages hold on to it).
                if subject == last_subject:
                    subject = last_subject
                else:
                    last_subject = subject
                try:
                    handler(subject, reply, payload, hdr)
                except Exception:
                    logger.exception("the handler of a message on %r failed", subject)
        finally:
            self.last_subject = last_subject
            if in_msgs:
                stats = self.stats
                stats["in_msgs"] += in_msgs
                stats["in_bytes"] += in_bytes
            if sunk:
                _hand_on(sink, sunk)
        return pos, pos, SCAN_END, None


def _gather(
    view: bytes, pos: int, size: int, prefix: bytes, replies: list[bytes], payloads: list[bytes]
) -> tuple[int, int, int]:
    """The rest of a run, as bytes: the reply subjects and payloads of the messages at ``pos``.

    The messages that follow the first of a run (the usual read: a consumer's
    messages one after the other), on lines that start as its line did,
    ``prefix`` (``"MSG <subject> <sid> "``), and end in ``" <size>"``: per
    message only the line's end is found and the size compared in place (it
    is read again only when it changes), and two slices are kept, no other
    object. Stops at anything else, which the loops of :meth:`Scanner._scan`
    decide as before. The reply subjects are then checked in bulk: each must
    be one token (no blank, tab, CR, LF, ..., not empty), as the per-line
    parse requires; if one is not, nothing is kept and ``-1`` is returned for
    the count (the caller parses line by line from ``pos``).

    Returns the position after the last message taken, how many were taken,
    and the sum of their payload sizes.
    """
    startswith = view.startswith
    find = view.find
    skip = len(prefix)
    kept = len(replies)
    start_pos = pos
    # The line's end is found as its LF (a one-byte search is several times faster
    # than one for CRLF); the CR before it is part of the compared tail, " <size>\r",
    # so a lone LF earlier in the line (the search's answer then) never matches it.
    tail = b""  # " <size>\r" of the messages read last; needed is that size
    cut = needed = 0
    while startswith(prefix, pos):
        first = pos + skip
        end = find(b"\n", first)
        if end < 0:
            break
        if not cut or not startswith(tail, end - cut):
            blank = view.rfind(b" ", first, end)
            size_text = view[blank + 1 : end - 1]
            if (
                blank < first
                or view[end - 1] != 13
                or not size_text.isdigit()
                or len(size_text) > _MAX_SIZE_DIGITS
            ):
                break
            tail = view[blank:end]
            cut = len(tail)
            needed = int(size_text)
        start = end + 1
        stop = start + needed
        if stop + 2 > size:
            break
        replies.append(view[first : end - cut])
        payloads.append(view[start:stop])
        pos = stop + 2
    count = len(replies) - kept
    if not count:
        return pos, 0, 0
    new = replies[kept:]
    joined = b"".join(new)
    tokens = joined.split()  # [joined] itself when no reply holds a whitespace byte
    if len(tokens) != 1 or len(tokens[0]) != len(joined) or b"" in new:
        del replies[kept:]
        del payloads[kept:]
        return start_pos, -1, 0
    return pos, count, sum(map(len, payloads[kept:]))


class RawSink:
    """Where the router's fast loop buffers the plain messages of a subscription itself.

    For a plain message (MSG: no headers) on the subscription it appends
    ``factory(subject, reply, payload, None, context)`` with ``append``
    instead of calling the handler, and tells ``arrived(count)`` how many it
    appended, before anything else (a message for the handler, a PING, the
    end of the read) is handled: the owner sees its messages in order and
    counted. Messages with headers, and every message nats-py's parser frames
    (and on the fallback), still go to the handler, which must buffer plain
    messages the same way.

    ``fill`` (a flag): ``factory`` is a ``__slots__`` class (``Msg``) whose
    ``__init__`` does no more than set ``_subject``, ``_reply``, ``data``,
    ``_hdr`` and ``_acker`` to its arguments, ``_headers`` and ``_meta`` to
    None and ``_state`` to 0: the fast loop then makes the instances of a run
    with ``_message.filled_msg`` (no ``__init__`` call per
    message; ``tests/unit/test_router_fuzz.py`` checks both give the same).

    ``runs`` (None: off) takes the place of ``append`` and ``factory`` for
    plain messages: called as ``runs(subject)`` at the first message of a run
    (those that follow one another on the subscription in one read), it puts
    a new run into the buffer (``_message.PlainRun``) and returns it; the
    reply subject and payload of each message of the run are appended to its
    ``replies`` and ``payloads`` (no object per message: see ``_gather``).

    ``bulk`` (column mode, see ``_columns``; None: off) frames a whole run of
    messages at once: called as ``bulk(view, pos, size, sid_text,
    first_end)`` at a message of the sink (plain or with headers), it returns
    None (the loop goes on as without it) or a run of ``count`` messages
    ending at ``end``, appended with ``append`` as one item and counted as
    ``count``.
    """

    __slots__ = ("append", "arrived", "bulk", "context", "factory", "fill", "runs")

    def __init__(
        self,
        append: Callable[[Any], None],
        factory: Callable[[bytes, bytes, bytes, bytes | None, Any], Any],
        context: Any,
        arrived: Callable[[int], None],
        bulk: Callable[[bytes, int, int, bytes, int], Any] | None = None,
        fill: bool = False,
        runs: Callable[[bytes], PlainRun] | None = None,
    ) -> None:
        self.append = append
        self.factory = factory
        self.context = context
        self.arrived = arrived
        self.bulk = bulk
        self.fill = fill
        self.runs = runs


def _hand_on(sink: RawSink | None, count: int) -> int:
    """Tell ``sink`` how many messages the fast loop put into its buffer; 0 (none left)."""
    if sink is not None:
        try:
            sink.arrived(count)
        except Exception:
            logger.exception("the arrival callback of a raw sink failed")
    return 0


def _ends_op(view: bytes, end: int, size: int) -> bool:
    r"""True unless ASCII whitespace follows a PING, PONG or +OK line at ``end``.

    nats-py's patterns for them end in ``\s*\r\n``: blank lines after the
    line belong to it there.
    """
    if end == size:
        return True
    after = view[end]
    return after != 32 and not 9 <= after <= 13
