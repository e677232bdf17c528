"""Client-side validation of names and subjects, run before anything is sent.

Every validator returns the value as an exact ``str``: a ``str`` subclass is
copied into a plain string, so that nothing the caller's type overrides
(``encode``, ``__format__``, ``__str__``) is used once the text has been
checked. Callers put the returned value on the wire, never the argument.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from datetime import timedelta
from typing import Final

from . import _bounds as B
from . import _duration as D
from ._errors import InvalidNameError, InvalidSubjectError

MAX_NAME_LEN: Final = 255

# Dots, wildcards, path separators, whitespace (Unicode's too: U+2028, U+0085, ...),
# control characters and lone surrogates (not encodable as UTF-8).
_BAD_NAME_CHARS: Final = re.compile(r"[.*>/\\\s\x00-\x1f\x7f\ud800-\udfff]")
# Whitespace (Unicode's too), control characters (CR, LF, NUL, tab, ...) and lone surrogates.
_BAD_SUBJECT_CHARS: Final = re.compile(r"[\s\x00-\x1f\x7f\ud800-\udfff]")


def exact_str(value: str) -> str:
    """``value`` as an exact ``str`` (a subclass instance is copied; a str is returned as is)."""
    return value if type(value) is str else str.__str__(value)


def validate_name(name: object, kind: str = "stream") -> str:
    """Validate a stream or consumer name and return it.

    Names must be non-empty strings of at most 255 characters with no ``.``,
    ``*``, ``>``, whitespace, control characters or path separators.

    Raises:
        InvalidNameError: the name is not valid.

    """
    if not isinstance(name, str) or not name:
        raise InvalidNameError(f"{kind} name must be a non-empty string, got {B.shown(name)}")
    name = exact_str(name)
    if len(name) > MAX_NAME_LEN:
        raise InvalidNameError(f"{kind} name is longer than {MAX_NAME_LEN} characters")
    bad = _BAD_NAME_CHARS.search(name)
    if bad is not None:
        raise InvalidNameError(
            f"invalid {kind} name {name!r}: it may not contain {bad.group()!r} "
            "('.', '*', '>', whitespace, control characters and path separators are not allowed)"
        )
    return name


#: The longest subject to publish to (UTF-8 bytes): with a reply inbox and the rest of
#: the PUB line it stays under the server's default ``max_control_line`` (4,096
#: bytes). A longer line makes the server answer -ERR and close the connection, for
#: good (nats-py does not reconnect after it).
MAX_SUBJECT_BYTES: Final = 3800


#: The largest stream sequence (nats-server's uint64; it reads larger ones modulo 2**64).
MAX_SEQUENCE: Final = B.MAX_UINT64


def check_sequence(value: object, name: str, minimum: int = 0) -> int:
    """A caller's stream sequence (or revision): an int from ``minimum`` to 2**64 - 1.

    Raises:
        InvalidOptionError: anything else (nats-server wraps a larger value: an
            expected sequence of 2**64 + 2 matched sequence 2).

    """
    return B.sequence(value, name, minimum)


def check_timeout(timeout: object) -> float | None:
    """A caller's ``timeout``: None, or positive seconds up to ``_bounds.MAX_WAIT`` (292 years).

    Seconds (an ``int`` or a ``float``, taken without parsing), a ``timedelta``
    or a duration string (``"1.5s"``): every duration form of the library.

    Raises:
        InvalidOptionError: anything else (0 or less sent the request and then
            reported it failed; NaN or infinity never timed out; 1e300 meant
            forever, and a giant int raised OverflowError).

    """
    return B.timeout(timeout)


def validate_publish_subject(subject: object) -> str:
    """Validate a subject to publish to and return it.

    The subject must be non-empty, contain no whitespace (Unicode line
    separators included), control characters (CR, LF, NUL, ...) or lone
    surrogates, no empty tokens and no wildcard tokens.

    Raises:
        InvalidSubjectError: the subject is not valid for publishing.

    """
    if not isinstance(subject, str) or not subject:
        raise InvalidSubjectError(f"subject must be a non-empty string, got {B.shown(subject)}")
    subject = exact_str(subject)
    if _BAD_SUBJECT_CHARS.search(subject):
        raise InvalidSubjectError(
            f"invalid subject {subject!r}: whitespace and control characters are not allowed"
        )
    if len(subject) > MAX_SUBJECT_BYTES // 4 and len(subject.encode()) > MAX_SUBJECT_BYTES:
        raise InvalidSubjectError(
            f"subject {subject[:40]!r}... is {len(subject.encode())} bytes: over "
            f"{MAX_SUBJECT_BYTES} (the server's protocol line limit would close the connection)"
        )
    for token in subject.split("."):
        if not token:
            raise InvalidSubjectError(f"invalid subject {subject!r}: empty token")
        if token in ("*", ">"):
            raise InvalidSubjectError(
                f"invalid subject {subject!r}: wildcards are not allowed when publishing"
            )
    return subject


def validate_filter_subject(subject: object) -> str:
    """Validate a subject filter (wildcards allowed, ``>`` only as the last token).

    Raises:
        InvalidSubjectError: the filter is not valid.

    """
    if not isinstance(subject, str) or not subject:
        raise InvalidSubjectError(
            f"subject filter must be a non-empty string, got {B.shown(subject)}"
        )
    subject = exact_str(subject)
    if _BAD_SUBJECT_CHARS.search(subject):
        raise InvalidSubjectError(
            f"invalid subject filter {subject!r}: whitespace and control characters are not allowed"
        )
    tokens = subject.split(".")
    for i, token in enumerate(tokens):
        if not token:
            raise InvalidSubjectError(f"invalid subject filter {subject!r}: empty token")
        if token == ">" and i != len(tokens) - 1:
            raise InvalidSubjectError(
                f"invalid subject filter {subject!r}: '>' must be the last token"
            )
    return subject


def validate_api_prefix(prefix: object) -> str:
    """Validate a JetStream API prefix (``$JS.API``, ``$JS.hub.API``) and return it.

    The prefix starts every API subject, so it follows the rules of a subject
    to publish to (no whitespace, control characters, empty tokens or
    wildcards); a trailing ``.`` is dropped.

    Raises:
        InvalidSubjectError: the prefix is not a valid subject.

    """
    return _subject_prefix(prefix, "api_prefix")


def _subject_prefix(prefix: object, what: str) -> str:
    """``prefix`` checked as a subject to publish to, a trailing ``.`` dropped."""
    if not isinstance(prefix, str):
        raise InvalidSubjectError(f"{what} must be a string, got {B.shown(prefix)}")
    try:
        return validate_publish_subject(exact_str(prefix).rstrip("."))
    except InvalidSubjectError as exc:
        raise InvalidSubjectError(f"invalid {what} {prefix!r}: {exc}") from None


def validate_inbox_prefix(prefix: object) -> str:
    """Validate nats-py's ``inbox_prefix`` (``_INBOX``, ``_INBOX_alice``) and return it.

    Every reply inbox is the prefix, a ``.`` and more tokens, subscribed to
    with a wildcard: the prefix follows the rules of a subject to publish to
    (no whitespace, control characters, empty tokens or wildcards, which would
    break or widen the ``SUB`` line); a trailing ``.`` is dropped (nats-py
    adds its own). Bytes are read as UTF-8, as nats-py sends them.

    Raises:
        InvalidSubjectError: the prefix is not a valid subject.

    """
    if isinstance(prefix, bytes | bytearray):
        try:
            prefix = bytes(prefix).decode()
        except UnicodeDecodeError:
            raise InvalidSubjectError("invalid inbox_prefix: not UTF-8") from None
    return _subject_prefix(prefix, "inbox_prefix")


def positive_duration(value: object, what: str, error: type[Exception]) -> timedelta:
    """A positive ``timedelta`` from a timedelta, a finite number of seconds or a duration string.

    A string is the library's one syntax (``"90s"``, ``"1h30m"``, ``"2d"``;
    :mod:`aiojetstream._duration`), exact to the nanosecond.

    Raises:
        error: (the caller's type) not a timedelta, seconds or a duration
            string, not finite, too long for a timedelta, or not positive; the
            message names ``what``.

    """
    if isinstance(value, timedelta):
        delta = value
    elif isinstance(value, str):
        delta = D.text_timedelta(value, error, what=what)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):  # (a giant int overflows it)
            raise error(f"{what} must be a finite number of seconds, got {value!r}")
        try:
            delta = timedelta(seconds=value)
        except OverflowError:
            raise error(f"{what} {B.shown(value)} is out of range") from None
    else:
        raise error(
            f"{what} must be seconds, a timedelta or a string such as '1h30m', "
            f"got {type(value).__name__}"
        )
    if delta <= timedelta(0):
        # Positive below a timedelta's microsecond ("999ns", 1e-7): not "not positive".
        if getattr(delta, "nanoseconds", 0) > 0 or (isinstance(value, int | float) and value > 0):
            raise error(f"{what} must be at least 1 microsecond, got {B.shown(value)}")
        raise error(f"{what} must be positive, got {B.shown(value)}")
    return delta


def tokens_cover(wide: Sequence[str], narrow: Sequence[str]) -> bool:
    """:func:`subject_covers` of subjects split into their tokens."""
    for i, token in enumerate(wide):
        if token == ">":
            return len(narrow) > i
        if i >= len(narrow) or narrow[i] == ">" or (token != "*" and token != narrow[i]):
            return False
    return len(wide) == len(narrow)


def subject_covers(pattern: str, subject: str) -> bool:
    """Whether the filter ``pattern`` matches every subject ``subject`` matches.

    For a literal ``subject``: whether ``pattern`` matches it. NATS rules:
    ``*`` is one token, ``>`` one or more at the end; a wildcard in
    ``subject`` is covered only by one at least as wide.
    """
    return tokens_cover(pattern.split("."), subject.split("."))
