"""Header names, header encoding and parsing, and ADR-43 TTL parsing/formatting.

Pure functions only: nothing here touches the network.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Final

from . import _duration as D
from ._bounds import shown
from ._errors import InvalidHeaderError, InvalidTTLError

# --------------------------------------------------------------------------- names

MSG_ID: Final = "Nats-Msg-Id"
EXPECTED_STREAM: Final = "Nats-Expected-Stream"
EXPECTED_LAST_SEQ: Final = "Nats-Expected-Last-Sequence"
EXPECTED_LAST_SUBJ_SEQ: Final = "Nats-Expected-Last-Subject-Sequence"
EXPECTED_LAST_MSG_ID: Final = "Nats-Expected-Last-Msg-Id"
TTL: Final = "Nats-TTL"
MARKER_REASON: Final = "Nats-Marker-Reason"
ROLLUP: Final = "Nats-Rollup"
STREAM: Final = "Nats-Stream"
SEQUENCE: Final = "Nats-Sequence"
TIME_STAMP: Final = "Nats-Time-Stamp"
SUBJECT: Final = "Nats-Subject"
LAST_SEQUENCE: Final = "Nats-Last-Sequence"
NUM_PENDING: Final = "Nats-Num-Pending"
PENDING_MESSAGES: Final = "Nats-Pending-Messages"
PENDING_BYTES: Final = "Nats-Pending-Bytes"
STATUS: Final = "Status"
DESCRIPTION: Final = "Description"

HEADER_LINE: Final = b"NATS/1.0\r\n"

#: What surrounds a header key or value and is not part of it: ASCII blanks only
#: (``bytes.strip()``'s, as nats-py strips), never U+00A0, U+3000 or \x1c-\x1f,
#: which ``str.strip()`` also takes and nats.go and nats-py keep.
BLANKS: Final = " \t\n\r\x0b\x0c"

# RFC 7230 token characters: what a header key may contain.
_KEY_RE: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# What a header value may not contain: control characters other than tab (CR,
# LF and NUL included), DEL, the Unicode line breaks (U+0085, U+2028, U+2029:
# str.splitlines() splits there) and lone surrogates (not encodable as UTF-8).
_BAD_VALUE_CHARS: Final = re.compile(r"[\x00-\x08\x0a-\x1f\x7f\x85\u2028\u2029\ud800-\udfff]")


def _plain(text: str) -> str:
    # An exact str: a subclass's encode/__format__/__str__ must not run once checked.
    return text if type(text) is str else str.__str__(text)


def validate_header(key: object, value: object) -> tuple[str, str]:
    """Raise :class:`InvalidHeaderError` unless ``key: value`` is a safe header line.

    Keys must be non-empty RFC 7230 tokens (no spaces, colons, CR, LF or NUL);
    values must be strings without control characters other than tab (so no
    CR, LF or NUL), DEL, Unicode line separators or lone surrogates; spaces
    are allowed. Returns the key and value as exact ``str`` (a ``str``
    subclass is copied), which is what the caller sends.
    """
    if not isinstance(key, str) or not _KEY_RE.fullmatch(key):
        raise InvalidHeaderError(
            f"invalid header key {shown(key)}: must be a non-empty RFC 7230 token"
        )
    if not isinstance(value, str):
        raise InvalidHeaderError(f"header {key!r} has a non-str value {shown(value)}")
    value = _plain(value)
    bad = _BAD_VALUE_CHARS.search(value)
    if bad is not None:
        raise InvalidHeaderError(
            f"header {key!r} has a value containing {bad.group()!r} (CR, LF, NUL, other "
            "control characters but tab, and line separators are not allowed)"
        )
    return _plain(key), value


def encode_headers(headers: dict[str, str]) -> bytes:
    """Validate and encode headers as a NATS/1.0 header block (CRLF-terminated)."""
    parts = [HEADER_LINE]
    for key, value in headers.items():
        key, value = validate_header(key, value)
        parts.append(f"{key}: {value}\r\n".encode())
    parts.append(b"\r\n")
    return b"".join(parts)


#: What :func:`decode_headers` joins a repeated key's values with: a reply's own
#: value of a header the server adds is the part after the last one.
SERVER_VALUE_SEPARATOR: Final = ", "


def decode_headers(block: bytes) -> tuple[dict[str, str] | None, str | None, str | None]:
    """Parse a NATS/1.0 header block into ``(headers, status, description)``.

    Multiple values of a key are joined with ``", "``; bytes that are not UTF-8
    become U+FFFD (as nats-py and nats.js decode them; documented for
    ``Msg.headers`` and the CLI). Keys and values lose the ASCII blanks around
    them (:data:`BLANKS`), nothing else. ``headers`` is None when
    the block holds no key/value lines. Never raises on malformed input: lines
    without a colon are ignored.
    """
    text = block.decode("utf-8", "replace")
    lines = text.split("\r\n")
    first = lines[0]
    status: str | None = None
    description: str | None = None
    if first.startswith("NATS/1.0"):
        rest = first[8:].strip(BLANKS)
        if rest:
            status, _, desc = rest.partition(" ")
            description = desc.strip(BLANKS) or None
    headers: dict[str, str] = {}
    repeated: dict[str, list[str]] | None = None  # joined once at the end: linear time
    for line in lines[1:]:
        if not line:
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip(BLANKS)
        if not key:
            continue
        value = value.strip(BLANKS)
        if key in headers:
            if repeated is None:
                repeated = {}
            values = repeated.get(key)
            if values is None:
                repeated[key] = [headers[key], value]
            else:
                values.append(value)
        else:
            headers[key] = value
    if repeated:
        for key, values in repeated.items():
            headers[key] = SERVER_VALUE_SEPARATOR.join(values)
    return (headers or None), status, description


def split_server_headers(
    headers: dict[str, str], server: frozenset[str]
) -> tuple[dict[str, str], dict[str, str]]:
    """The headers the server added to a reply (``server`` keys), and the stored ones.

    The server appends its headers (``Nats-Stream``, ``Nats-Sequence``, ...) to
    the stored message's: a stored message that already had one (a republished
    message kept by another stream) has it twice, joined by
    :func:`decode_headers` with ``", "``. The server's value is the last, the
    rest is the stored message's own.
    """
    added: dict[str, str] = {}
    stored: dict[str, str] = {}
    for key, value in headers.items():
        if key in server:
            own, sep, last = value.rpartition(SERVER_VALUE_SEPARATOR)
            added[key] = last
            if sep:
                stored[key] = own
        else:
            stored[key] = value
    return added, stored


# --------------------------------------------------------------------------- TTL

NEVER: Final = "never"
_NS_PER_S: Final = 1_000_000_000
_UNDER_A_SECOND: Final = "{} is under 1 second: a message TTL must be at least 1 second"


def parse_go_duration(text: str) -> float:
    """Parse a duration string (``"1h30m"``, ``"1.5s"``, ``"300ms"``, ``"2d"``) into seconds.

    The library's one syntax (:mod:`aiojetstream._duration`): a Go duration, with
    ``d`` and ``w`` too, or plain seconds.

    Raises:
        ValueError: the text is not a duration, or is too long to read.

    """
    return D.text_ns(text, ValueError) / _NS_PER_S


def format_go_duration(value: timedelta) -> str:
    """Format a non-negative duration as Go's ``time.Duration.String()`` does.

    ``1h0m0s``, ``1m30s``, ``1.5s``, ``500ms``, ``0s``: what
    :func:`parse_go_duration` (and the server) reads back. Microsecond
    precision (``timedelta``'s).

    Raises:
        ValueError: the duration is negative.

    """
    us = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    if us < 0:
        raise ValueError(f"negative duration {value!r}")
    if us == 0:
        return "0s"
    if us < 1_000:
        return f"{us}µs"
    if us < 1_000_000:
        return _fraction(us, 1_000) + "ms"
    hours, rest = divmod(us, 3_600_000_000)
    minutes, rest = divmod(rest, 60_000_000)
    text = _fraction(rest, 1_000_000) + "s"
    if hours:
        return f"{hours}h{minutes}m{text}"
    if minutes:
        return f"{minutes}m{text}"
    return text


def _fraction(value: int, unit: int) -> str:
    whole, frac = divmod(value, unit)
    if not frac:
        return str(whole)
    digits = len(str(unit)) - 1
    return f"{whole}.{frac:0{digits}d}".rstrip("0")


TTLInput = int | float | timedelta | str


def ttl_header_value(ttl: TTLInput) -> str:
    """Validate a message TTL and return the ``Nats-TTL`` header value to send.

    Accepts seconds (int or float), a :class:`~datetime.timedelta`, a duration
    string (a Go duration such as ``"1h30m"``, or with ``d``/``w``: ``"1d"``; or
    seconds: ``"60"``; see :mod:`aiojetstream._duration`) or ``"never"``. The
    client always sends whole seconds or ``never``; a fractional part is
    truncated, as the server itself does (ADR-43).

    Raises:
        InvalidTTLError: the TTL is under 1 s, zero, negative, not a number,
            unparsable, or (a string) too long to read (past 10**30 ns); the
            server's clock is checked when the message is published.

    """
    seconds: float
    if isinstance(ttl, bool):
        raise InvalidTTLError(f"invalid TTL {ttl!r}: expected seconds, timedelta or duration")
    if isinstance(ttl, timedelta):
        seconds = ttl.total_seconds()
    elif isinstance(ttl, int | float):
        try:
            seconds = float(ttl)
        except OverflowError:  # an int past a float's range: far past any TTL
            raise InvalidTTLError(
                f"invalid TTL: an int of {int(ttl).bit_length()} bits is too long"
            ) from None
    elif isinstance(ttl, str):
        if _BAD_VALUE_CHARS.search(ttl):
            raise InvalidTTLError(f"invalid TTL {ttl!r}: control characters are not allowed")
        text = _plain(ttl).strip()
        if text.lower() == NEVER:
            return NEVER
        ns = D.text_ns(
            text,
            InvalidTTLError,
            kind="TTL",
            hint=", or 'never' for no expiry",
            too_long="; use 'never' for no expiry",
        )
        if ns < _NS_PER_S:
            raise InvalidTTLError(_UNDER_A_SECOND.format(shown(ttl)))
        return str(ns // _NS_PER_S)
    else:
        raise InvalidTTLError(f"invalid TTL {ttl!r}: expected seconds, timedelta or duration")
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        raise InvalidTTLError(f"invalid TTL {ttl!r}: not a finite duration")
    if seconds < 1.0:
        raise InvalidTTLError(_UNDER_A_SECOND.format(shown(ttl)))
    return str(int(seconds))


def parse_ttl_header(value: str) -> timedelta | None:
    """Parse a received ``Nats-TTL`` value; ``None`` means ``never``.

    Raises:
        ValueError: the value is neither seconds, a duration string nor ``never``.

    """
    text = value.strip()
    if text.lower() == NEVER:
        return None
    return D.text_timedelta(text, ValueError)
