"""The times and durations the server can hold, checked before anything is sent (pure).

nats-server is written in Go. A duration is a ``time.Duration``: int64
nanoseconds, at most 2**63 - 1 ns (about 292 years); its JSON decoder refuses
a longer one with err_code 10025 ("invalid JSON"). Where it compares a time
with stored messages or schedules it turns the time into int64 nanoseconds
since the Unix epoch (``time.Time.UnixNano``), which silently wraps outside
1677-09-21T00:12:43.145224192Z .. 2262-04-11T23:47:16.854775807Z: a consumer
or a get starting after 2262-04-11 started at the first message, an ``@at``
schedule after it fired at once and one before 1677 never fired. And where it
adds a duration to now (a message's TTL, a subject delete marker's, a
schedule's interval) a sum past the end of that clock wraps into the past: the
message expired, or the schedule fired, at once.

Every check here raises :class:`InvalidOptionError` (or the caller's subclass
of it) naming the value; the library runs them before it sends a request.
"""

from __future__ import annotations

import re
import time
import typing
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any, Final

from pydantic import BaseModel

from .._bounds import shown as _shown
from .._duration import DURATION_RANGE
from .._errors import InvalidOptionError, InvalidTTLError
from ._base import NanoDatetime, coerce_duration, duration_to_ns, format_timestamp

__all__ = [
    "CLOCK_MARGIN_SECONDS",
    "MAX_DURATION_NS",
    "MAX_DURATION_SECONDS",
    "MAX_SERVER_TIME_NS",
    "MAX_SERVER_TIME_TEXT",
    "MIN_SERVER_TIME_NS",
    "MIN_SERVER_TIME_TEXT",
    "check_config_ranges",
    "check_from_now",
    "check_server_duration",
    "check_server_time",
    "check_ttl_from_now",
    "seconds_left_on_server_clock",
    "unix_ns",
]

#: The longest duration the server takes (a Go ``time.Duration``).
MAX_DURATION_NS: Final = 2**63 - 1
#: :data:`MAX_DURATION_NS` in whole seconds: 9,223,372,036 s, about 292 years.
MAX_DURATION_SECONDS: Final = MAX_DURATION_NS // 1_000_000_000
#: The first and the last instant of the server's clock, in nanoseconds since the epoch.
MIN_SERVER_TIME_NS: Final = -(2**63)
MAX_SERVER_TIME_NS: Final = 2**63 - 1
#: The same instants as the wire writes them.
MIN_SERVER_TIME_TEXT: Final = "1677-09-21T00:12:43.145224192Z"
MAX_SERVER_TIME_TEXT: Final = "2262-04-11T23:47:16.854775807Z"
#: How far a duration counted from now stays from the end of the server's clock
#: (one day): for a difference between this machine's clock and the server's,
#: and for the time a publish takes to be stored.
CLOCK_MARGIN_SECONDS: Final = 86_400

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
#: (The words of the duration parser's own bound: a string past it is no duration.)
_DURATION_RANGE: Final = DURATION_RANGE
_CLOCK_RANGE: Final = (
    "the server counts time in int64 nanoseconds since 1970, from "
    f"{MIN_SERVER_TIME_TEXT} to {MAX_SERVER_TIME_TEXT}, and wraps a time outside"
)


def unix_ns(value: datetime) -> int:
    """Nanoseconds since the Unix epoch of an aware ``datetime`` (a NanoDatetime's kept)."""
    delta = value - _EPOCH
    extra = value.nanosecond if isinstance(value, NanoDatetime) else 0
    return ((delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds) * 1_000 + extra


def check_server_time(
    value: object, what: str, error: type[InvalidOptionError] = InvalidOptionError
) -> datetime:
    """``value`` if it is a timezone-aware ``datetime`` within the server's clock.

    Raises:
        InvalidOptionError: (or ``error``) not an aware datetime, or before
            1677-09-21T00:12:43.145224192Z or after 2262-04-11T23:47:16.854775807Z.

    """
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise error(f"{what} must be a timezone-aware datetime, got {_shown(value)}")
    try:
        ns = unix_ns(value)
    except OverflowError:  # an offset that takes it past datetime's own range
        ns = MAX_SERVER_TIME_NS + 1 if value.year > 1970 else MIN_SERVER_TIME_NS - 1
    if not MIN_SERVER_TIME_NS <= ns <= MAX_SERVER_TIME_NS:
        try:
            shown = format_timestamp(value)  # in UTC, with its nanoseconds
        except OverflowError:
            shown = value.isoformat()
        raise error(f"{what} {shown} is out of range: {_CLOCK_RANGE}")
    return value


def check_server_duration(
    value: timedelta, what: str, error: type[InvalidOptionError] = InvalidOptionError
) -> timedelta:
    """``value`` if it fits in int64 nanoseconds (a negative one from the server too).

    Raises:
        InvalidOptionError: (or ``error``) longer than 2**63 - 1 ns (about 292 years).

    """
    if not -MAX_DURATION_NS - 1 <= duration_to_ns(value) <= MAX_DURATION_NS:
        raise error(f"{what} ({_amount(value.total_seconds())} s) is too long: {_DURATION_RANGE}")
    return value


def seconds_left_on_server_clock(now_ns: int | None = None) -> int:
    """Whole seconds from now (or ``now_ns``) to the end of the server's clock, less a day.

    The longest duration that may be counted from now: a message TTL, a
    subject delete marker's TTL, a schedule's interval.
    """
    now = time.time_ns() if now_ns is None else now_ns
    return (MAX_SERVER_TIME_NS - now) // 1_000_000_000 - CLOCK_MARGIN_SECONDS


def check_from_now(
    seconds: float,
    what: str,
    error: type[InvalidOptionError] = InvalidOptionError,
    hint: str = "",
) -> None:
    """Refuse ``seconds`` counted from now that run past the end of the server's clock.

    Raises:
        InvalidOptionError: (or ``error``) more than
            :func:`seconds_left_on_server_clock` (about 235 years in 2026); the
            message ends with ``hint``.

    """
    left = seconds_left_on_server_clock()
    if seconds > left:
        raise error(
            f"{what} ({_amount(seconds)} s) runs past the end of the server's clock "
            f"({MAX_SERVER_TIME_TEXT}, int64 nanoseconds since 1970), where the server "
            f"wraps it into the past and acts at once: at most {left:,} s from now (that "
            f"end less a day){hint}"
        )


#: A ``Nats-TTL`` of at most this many digits cannot reach the end of the clock yet.
_SHORT_TTL_DIGITS: Final = 9


def check_ttl_from_now(header: str, what: str = "the message TTL") -> str:
    """A ``Nats-TTL`` value (whole seconds or ``never``) that ends within the server's clock.

    The server adds it to the time the message is stored, in int64
    nanoseconds: past the end of its clock the sum wraps into the past and the
    message expired at once (its own parser wrapped a number of 20 digits too).

    Raises:
        InvalidTTLError: the TTL runs past the end of the server's clock from now.

    """
    # Up to 9 digits (under 31.7 years) a TTL ends before 2262 until about 2230: the
    # common case skips the clock (this runs for every publish with a TTL).
    if len(header) > _SHORT_TTL_DIGITS and header != "never":
        check_from_now(int(header), what, InvalidTTLError, "; use 'never' for no expiry")
    return header


def _amount(seconds: float) -> str:
    return f"{seconds:,.0f}" if seconds < 1e15 else f"{seconds:.3g}"


# --------------------------------------------------------------------------- configs

#: Times the server keeps and compares as a ``time.Time``, never as nanoseconds:
#: any year up to 9999 works there (a consumer paused until 9999 stays paused,
#: its ``pause_remaining`` the longest duration).
_KEPT_AS_TIME: Final = frozenset({("ConsumerConfig", "pause_until")})
#: ``sample_freq``: a percentage; the server keeps it in an int32 (a larger one wraps).
_SAMPLE_FREQ: Final = re.compile(r"([0-9]{1,3})%?")


@cache
def _field_kinds(cls: type[BaseModel]) -> dict[str, str]:
    """``"duration"`` or ``"time"`` for the fields of ``cls`` declared with those types."""
    kinds = {}
    for name, info in cls.model_fields.items():
        found = _types_in(info.annotation)
        if timedelta in found:
            kinds[name] = "duration"
        elif datetime in found and (cls.__name__, name) not in _KEPT_AS_TIME:
            kinds[name] = "time"
    return kinds


def _types_in(annotation: Any) -> set[Any]:
    """``timedelta`` / ``datetime`` where ``annotation`` mentions them (unions, lists)."""
    if annotation in (timedelta, datetime):
        return {annotation}
    found: set[Any] = set()
    for arg in typing.get_args(annotation):
        found |= _types_in(arg)
    return found


def check_config_ranges(config: BaseModel, path: str = "") -> None:
    """Refuse a config holding a time or a duration the server cannot hold.

    Walks ``config`` and the configs inside it (a mirror, the sources, the
    consumer limits): every duration within int64 nanoseconds (a bare number
    set with ``model_copy(update=...)`` counts as seconds, as it is sent),
    every time within the server's clock (``pause_until`` excepted, see
    :data:`_KEPT_AS_TIME`), and ``sample_freq`` a percentage from 0 to 100.
    The int fields are ``_bounds.check_config``'s.

    Raises:
        InvalidOptionError: the first such value, named by its path
            (``ConsumerConfig.backoff[2]``).

    """
    cls = type(config)
    path = path or cls.__name__
    kinds = _field_kinds(cls)
    for name in cls.model_fields:
        value = getattr(config, name, None)
        if value is None:
            continue
        if name == "sample_freq" and cls.__name__ == "ConsumerConfig":
            _check_sample_freq(value, f"{path}.{name}")
        else:
            _check_value(value, kinds.get(name), f"{path}.{name}")


def _check_value(value: object, kind: str | None, where: str) -> None:
    if isinstance(value, BaseModel):
        check_config_ranges(value, where)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _check_value(item, kind, f"{where}[{index}]")
    elif isinstance(value, Mapping):
        for key, item in value.items():
            _check_value(item, kind, f"{where}[{key!r}]")
    elif kind == "duration":
        # Seconds set with model_copy(update=...): past timedelta's own range
        # coerce_duration fails, so the bound is checked on the number itself.
        if (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and not -MAX_DURATION_SECONDS - 1 <= value <= MAX_DURATION_SECONDS
        ):
            raise InvalidOptionError(f"{where} ({_shown(value)} s) is too long: {_DURATION_RANGE}")
        try:
            delta = coerce_duration(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return  # no duration at all: the serialiser says so
        check_server_duration(delta, where)
    elif kind == "time" and isinstance(value, datetime):
        check_server_time(value, where)


def _check_sample_freq(value: object, where: str) -> None:
    if value == "":
        return  # none, as the server reads it
    match = _SAMPLE_FREQ.fullmatch(value) if isinstance(value, str) else None
    if match is None or int(match.group(1)) > 100:
        shown = repr(value) if isinstance(value, str) and len(value) < 40 else type(value).__name__
        raise InvalidOptionError(
            f"{where} must be a percentage from 0 to 100 such as '50' or '50%', got {shown} "
            "(the server keeps it in an int32: a larger number wraps around)"
        )
