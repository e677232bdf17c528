"""The one duration syntax of the library and its CLI (pure: nothing here touches the network).

Every duration a caller gives (a config's, a TTL, an interval, an age, a
pull's ``expires``, ``hold_when_full``) and every duration option of the CLI
takes the same forms:

* a :class:`~datetime.timedelta`;
* a number of seconds (``int`` or ``float``; a ``bool`` is refused);
* a string:

  - a Go duration, as ``time.ParseDuration`` reads it and the ``nats`` CLI
    and ADR-43 write it: ``"1h30m"``, ``"500ms"``, ``"1.5h"``, ``"2m0.5s"``;
    an optional sign, then one or more decimal numbers, each with a unit:
    ``ns``, ``us`` (or ``µs``), ``ms``, ``s``, ``m``, ``h``;
  - with two more units, as the ``nats`` CLI has them: ``d`` (24 hours) and
    ``w`` (7 days), so ``"2d"``, ``"1w3d"``, ``"1.5d"``. Months and years
    (``1M``, ``1y``) are refused: they have no fixed length;
  - a plain decimal number of seconds (``"90"``, ``"1.5"``, ``"0"``): what
    ADR-43's ``Nats-TTL`` header holds and what a command line passes for a
    number (Go's own parser takes ``"0"`` only).

  Text around it may be spaces; inside, nothing but digits, ``.`` and units.
  Digits are ASCII only.

A string is read exactly to the nanosecond (digits of a fraction below the
nanosecond are dropped, as Go does). Whether a negative or a zero duration is
allowed, and every bound, is the caller's rule, checked on the parsed value,
so a string meets the same rules with the same messages, at the same moment,
as the number or timedelta it equals: past the server's int64 nanoseconds
(2**63 - 1 ns, about 292 years) a config's duration is refused before it is
sent, a message TTL when it is published, a wait or an interval when it is
given (``_models._ranges``, ``_bounds``). Only a string too long to read
(past 10**30 ns, or a ``timedelta``'s range where one is made) is refused as
it is read.

:func:`text_ns` is the parser; every module that takes a duration string calls
it (configs through ``_models._base.coerce_duration``, TTLs through
``_headers.ttl_header_value``). :func:`parse_duration`, public, gives both to
tools built on the library, such as its CLI.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Final, Literal, overload

__all__ = [
    "DURATION_FORMS",
    "DURATION_RANGE",
    "GO_UNITS",
    "MAX_NS",
    "MIN_NS",
    "UNIT_NS",
    "parse_duration",
    "text_ns",
    "text_timedelta",
]

#: Nanoseconds of each unit a duration string may use.
UNIT_NS: Final = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,  # U+00B5 MICRO SIGN
    "μs": 1_000,  # U+03BC GREEK SMALL LETTER MU
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3_600 * 1_000_000_000,
    "d": 86_400 * 1_000_000_000,
    "w": 7 * 86_400 * 1_000_000_000,
}
#: The units of Go's ``time.ParseDuration`` (``d`` and ``w`` are the ``nats`` CLI's).
GO_UNITS: Final = frozenset({"ns", "us", "µs", "μs", "ms", "s", "m", "h"})
#: The range of a Go ``time.Duration`` (int64 nanoseconds).
MAX_NS: Final = 2**63 - 1
MIN_NS: Final = -(2**63)

#: What a duration string may be, for error messages.
DURATION_FORMS: Final = (
    "seconds (90, 1.5) or a Go duration such as '1h30m', '500ms' or '2d' "
    "(units ns, us, ms, s, m, h, and d = 24h, w = 7d)"
)
#: Why a longer duration is refused (the same words as ``_models._ranges``'s bound).
DURATION_RANGE: Final = (
    f"the server's durations are int64 nanoseconds, at most {MAX_NS // 1_000_000_000:,} s "
    "(2**63 - 1 ns, about 292 years)"
)

_UNIT: Final = "ns|us|µs|μs|ms|s|m|h|d|w"  # (ms before m and s; the rest need no order)
_PART: Final = re.compile(rf"([0-9]*)(?:\.([0-9]*))?({_UNIT})")
_SECONDS: Final = re.compile(r"([0-9]*)(?:\.([0-9]*))?")
#: Months and years as other tools write them (1M, 1y, 2mo, 3mon, 1yr).
_CALENDAR: Final = re.compile(r"[0-9.](?:M|[yY]|mo)")
#: Digits of a fraction kept: far below a nanosecond of a week (Go keeps fewer).
_FRACTION_DIGITS: Final = 30
#: A string past this many nanoseconds (about 3 * 10**13 years) is refused as it is
#: read, without building a giant number: far past any bound the server has.
_LIMIT_NS: Final = 10**30
#: Digits of a whole number past which any unit is past :data:`_LIMIT_NS`.
_WHOLE_DIGITS: Final = 31
_SHOWN_CHARS: Final = 60


def _shown(text: str) -> str:
    shown = repr(text)
    return shown if len(shown) <= _SHOWN_CHARS else shown[: _SHOWN_CHARS - 4] + "...'"


def _amount(whole: str, fraction: str | None, unit_ns: int) -> int | None:
    """Nanoseconds of ``whole.fraction`` units (fraction truncated), None when far too long."""
    whole = whole.lstrip("0")
    if len(whole) > _WHOLE_DIGITS:
        return None  # (never converted: a giant digit string is past int() 's limit)
    ns = int(whole or "0") * unit_ns
    if fraction:
        digits = fraction[:_FRACTION_DIGITS]
        ns += int(digits) * unit_ns // 10 ** len(digits)
    return ns


def text_ns(
    text: str,
    error: type[Exception] = ValueError,
    *,
    what: str = "",
    kind: str = "duration",
    hint: str = "",
    too_long: str = "",
) -> int:
    """The signed nanoseconds of a duration string (see the module's docstring).

    Args:
        text: the string (a ``str`` subclass is read as its plain value).
        error: the error to raise (the caller's typed error).
        what: what the value is, to start the message (``"expires"``); none
            where the caller names it (a pydantic field, a CLI option).
        kind: what the string is not, when it is not a duration (``"TTL"``).
        hint: more text for the message of a string that is not a duration
            (``", or 'never'"``).
        too_long: more text for the message of one far too long to read.

    Raises:
        error: not a duration string (the message says which forms are), a
            month or a year, or far too long to be read (past 10**30 ns; the
            server's bound, int64 nanoseconds, is the caller's to apply).

    """
    plain = str.__str__(text)
    value = plain.strip()
    start = f"{what} " if what else ""
    sign, body = 1, value
    if body[:1] in ("+", "-"):
        sign, body = (-1 if body[0] == "-" else 1), body[1:]
    total: int | None = 0
    seconds = _SECONDS.fullmatch(body)
    if seconds is not None and (seconds.group(1) or seconds.group(2)):
        total = _amount(seconds.group(1), seconds.group(2), UNIT_NS["s"])
    else:
        pos = 0
        while total is not None and pos < len(body):
            part = _PART.match(body, pos)
            if part is None or not (part.group(1) or part.group(2)):
                break
            amount = _amount(part.group(1), part.group(2), UNIT_NS[part.group(3)])
            total = None if amount is None or total + amount > _LIMIT_NS else total + amount
            pos = part.end()
        if total is not None and (pos == 0 or pos != len(body)):
            if _CALENDAR.search(value):
                raise error(
                    f"{start}{_shown(plain)} is not a {kind}: months and years have no "
                    "fixed length (use d or w: '30d', '52w')"
                )
            raise error(f"{start}{_shown(plain)} is not a {kind}: give {DURATION_FORMS}{hint}")
    if total is None or total > _LIMIT_NS:
        raise error(f"{start}{_shown(plain)} is too long: {DURATION_RANGE}{too_long}")
    return sign * total


def text_timedelta(
    text: str,
    error: type[Exception] = ValueError,
    *,
    what: str = "",
    hint: str = "",
    too_long: str = "",
) -> timedelta:
    """:func:`text_ns` as an exact ``timedelta`` (a ``NanoTimedelta`` below the microsecond)."""
    from ._models._base import ns_to_duration  # (the models import this module)

    ns = text_ns(text, error, what=what, hint=hint, too_long=too_long)
    try:
        return ns_to_duration(ns)
    except OverflowError:  # past timedelta.max (2.7 million years)
        start = f"{what} " if what else ""
        raise error(f"{start}{_shown(str.__str__(text))} is too long: {DURATION_RANGE}") from None


@overload
def parse_duration(value: timedelta | float | str) -> timedelta: ...
@overload
def parse_duration(value: timedelta | float | str, *, ttl: Literal[True]) -> timedelta | None: ...


def parse_duration(value: timedelta | float | str, *, ttl: bool = False) -> timedelta | None:
    """Read a duration as every argument and config field of the library reads one.

    ``value`` is a ``timedelta``, a number of seconds, or a string: a Go
    duration (``"1h30m"``, ``"500ms"``, ``"1.5h"``; units ``ns``, ``us``/``µs``,
    ``ms``, ``s``, ``m``, ``h``), with ``d`` (24 hours) and ``w`` (7 days) too
    (``"2d"``, ``"1w3d"``), or plain seconds (``"90"``). A string is exact to
    the nanosecond. For tools that take durations the way the library does
    (its CLI reads every duration option with it); a config field, a TTL and
    an interval read the same forms themselves.

    Args:
        value: the duration.
        ttl: read it as a message TTL instead (``ttl=`` of ``publish``):
            ``"never"`` too (returned as None), at least 1 second, and whole
            seconds (a fraction is dropped, as the library and the server do).

    Returns:
        The duration (None for a TTL of ``"never"``).

    Raises:
        InvalidOptionError: not a duration (the message says which forms are),
            negative, NaN or infinite, months or years (``"1M"``), or a string
            too long for a ``timedelta``. (The server's bound, int64
            nanoseconds, applies where a duration is used, as for a number.)
        InvalidTTLError: (``ttl=True``) what ``publish(ttl=...)`` refuses,
            with its message.

    """
    if ttl:
        from ._headers import NEVER, ttl_header_value

        header = ttl_header_value(value)
        if header == NEVER:
            return None
        try:
            return timedelta(seconds=int(header))
        except OverflowError:  # past timedelta.max (about 2.7 million years)
            from ._bounds import shown
            from ._errors import InvalidTTLError

            raise InvalidTTLError(
                f"{shown(value)} is longer than a timedelta holds (about 2.7 million "
                "years); use 'never' for no expiry"
            ) from None
    from ._errors import InvalidOptionError
    from ._models._base import coerce_duration

    try:
        return coerce_duration(value)
    except InvalidOptionError:
        raise
    except (TypeError, ValueError) as exc:
        raise InvalidOptionError(str(exc)) from None
