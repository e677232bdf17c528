"""Message schedules (ADR-51): :class:`Schedule` and the headers of a scheduled publish.

A schedule is a message published to its own subject (the *schedule
subject*) on a stream with ``allow_msg_schedules=True`` (nats-server >= 2.12,
API level 2). Its headers say when and where the server publishes a copy of
it::

    Nats-Schedule: @at 2026-11-21T06:19:42Z | @every 5m | 0 0 5 * * * | @hourly
    Nats-Schedule-Target: orders.daily        (a subject of the same stream)
    Nats-Schedule-TTL: 300                    (the TTL of each message produced)
    Nats-Schedule-Time-Zone: Europe/Amsterdam (cron only)

The server keeps only the latest schedule per schedule subject (it adds
``Nats-Rollup: sub``); purging that subject cancels the schedule. Produced
messages are stored in the stream only (no core publish) and carry
``Nats-Scheduler: <schedule subject>``.

Everything here is pure: the checks run before anything is sent and raise
:class:`InvalidScheduleError`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Final

from . import _headers as H
from ._bounds import shown
from ._errors import InvalidHeaderError, InvalidScheduleError, InvalidSubjectError
from ._models import duration_to_ns, format_timestamp, parse_timestamp
from ._models._ranges import check_from_now, check_server_time, check_ttl_from_now
from ._validation import positive_duration, validate_publish_subject

__all__ = [
    "PREDEFINED",
    "SCHEDULE",
    "SCHEDULER",
    "SCHEDULE_NEXT",
    "SCHEDULE_TARGET",
    "SCHEDULE_TIME_ZONE",
    "SCHEDULE_TTL",
    "Schedule",
    "schedule_headers",
]

SCHEDULE: Final = "Nats-Schedule"
SCHEDULE_TARGET: Final = "Nats-Schedule-Target"
SCHEDULE_TTL: Final = "Nats-Schedule-TTL"
SCHEDULE_TIME_ZONE: Final = "Nats-Schedule-Time-Zone"
SCHEDULER: Final = "Nats-Scheduler"
"""Set by the server on each produced message: the schedule subject."""
SCHEDULE_NEXT: Final = "Nats-Schedule-Next"
"""Set by the server on each produced message: the next time, or ``purge``."""

PREDEFINED: Final = frozenset(
    {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
)
"""The cron shorthands a schedule accepts besides six-field expressions."""

MIN_INTERVAL: Final = timedelta(seconds=1)
#: The longest interval: a Go duration is int64 nanoseconds (whole seconds here).
MAX_INTERVAL: Final = timedelta(seconds=(2**63 - 1) // 1_000_000_000)
CRON_FIELDS: Final = 6
# IANA zone names: "UTC", "Europe/Amsterdam", "America/Argentina/Buenos_Aires", "Etc/GMT+2".
_TIME_ZONE: Final = re.compile(r"[A-Za-z][A-Za-z0-9_+\-./]*")
_ALLOWED_CRON = frozenset("0123456789*/,-?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
# Month and weekday names (JAN, mon): letters come only in these, never alone as
# Quartz's L and W (nor #), which nats-server refuses (10189).
_CRON_NAMES = re.compile(r"[A-Za-z]{3}")


class Schedule:
    """When a scheduled message is produced: :meth:`at`, :meth:`every` or :meth:`cron`.

    Pass one to ``publish(..., schedule=..., schedule_target=...)``. The
    checks run when the schedule is built and raise :class:`InvalidScheduleError`.

    Attributes:
        spec: The ``Nats-Schedule`` header value (``@at ...``, ``@every 5m``,
            a cron expression).
        time_zone: The IANA time zone of a cron schedule, or None (UTC).

    """

    __slots__ = ("spec", "time_zone")

    spec: str
    time_zone: str | None

    def __init__(self, spec: str, time_zone: str | None = None) -> None:
        # Use the class methods: they validate.
        object.__setattr__(self, "spec", spec)
        object.__setattr__(self, "time_zone", time_zone)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Schedule is immutable")

    def __repr__(self) -> str:
        zone = f", time_zone={self.time_zone!r}" if self.time_zone else ""
        return f"Schedule({self.spec!r}{zone})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Schedule):
            return NotImplemented
        return (self.spec, self.time_zone) == (other.spec, other.time_zone)

    def __hash__(self) -> int:
        return hash((self.spec, self.time_zone))

    @classmethod
    def at(cls, when: datetime) -> Schedule:
        """Once, at ``when`` (a timezone-aware datetime; sent in UTC).

        A time in the past fires at once.

        Raises:
            InvalidScheduleError: not a timezone-aware datetime, or outside the
                server's clock (int64 nanoseconds since 1970: after
                2262-04-11T23:47:16.854775807Z it fired at once, before
                1677-09-21T00:12:43.145224192Z it never fired).

        """
        if not isinstance(when, datetime) or when.tzinfo is None or when.utcoffset() is None:
            raise InvalidScheduleError(
                f"Schedule.at needs a timezone-aware datetime, got {shown(when)}"
            )
        check_server_time(when, "Schedule.at: the time", InvalidScheduleError)
        return cls(f"@at {format_timestamp(when)}")

    @classmethod
    def every(cls, interval: timedelta | float | str) -> Schedule:
        """Repeatedly, every ``interval`` (a ``timedelta``, seconds or ``"5m"``; at least 1 s).

        The interval is a whole number of seconds (``2``, ``2.0``,
        ``timedelta(minutes=5)``, ``"1h30m"``, ``"1d"``): the server accepts a fraction but does not
        keep it (``1.5`` fires every 2 s), so a fraction is refused.

        The firings are counted from when the schedule is stored, not aligned
        to the clock: the first is one interval after that time rounded to the
        nearest second, then one every interval (``every("1h")`` stored at
        10:17:42.6 fires at 11:17:43, 12:17:43, ...). Publishing the schedule
        again starts the count again; firings missed by more than an interval
        (a server restart) are not caught up: the next is one interval after
        the server noticed.

        Raises:
            InvalidScheduleError: under 1 s, not a whole number of seconds,
                over a Go duration (about 292 years), not finite, a ``bool`` or
                another type, or so long that the first firing would be past the
                end of the server's clock (2262-04-11, less a day): there the
                server wrapped it into the past and fired it over and over. The
                publish checks that again.

        """
        delta = positive_duration(interval, "Schedule.every: the interval", InvalidScheduleError)
        if isinstance(interval, timedelta | str):  # (a string is exact to the nanosecond)
            whole = duration_to_ns(delta) % 1_000_000_000 == 0
        else:  # the number itself: timedelta rounds 1.0000001 to 1 s
            whole = isinstance(interval, int) or float(interval).is_integer()
        if delta < MIN_INTERVAL:
            raise InvalidScheduleError(
                f"Schedule.every: the interval must be at least 1 second, got {shown(interval)}"
            )
        if not whole:
            raise InvalidScheduleError(
                "Schedule.every: the interval must be a whole number of seconds, got "
                f"{shown(interval)} (the server fires at whole seconds: every 1.5 s fires "
                "every 2 s)"
            )
        if delta > MAX_INTERVAL:
            raise InvalidScheduleError(
                f"Schedule.every: the interval {shown(interval)} is longer than a Go duration "
                f"(at most {MAX_INTERVAL.total_seconds():.0f} s, about 292 years)"
            )
        check_from_now(delta.total_seconds(), "Schedule.every: the interval", InvalidScheduleError)
        return cls(f"@every {H.format_go_duration(delta)}")

    @classmethod
    def cron(cls, expr: str, time_zone: str | None = None) -> Schedule:
        """On a cron expression: six fields (seconds first) or a shorthand such as ``@hourly``.

        Args:
            expr: ``"sec min hour day-of-month month day-of-week"``, for
                example ``"0 0 5 * * *"`` (05:00 every day), or one of
                :data:`PREDEFINED`.
            time_zone: the IANA zone the expression is read in (for example
                ``"Europe/Amsterdam"``; nats-server >= 2.14); UTC when None.
                ``"Local"`` is refused: the server would read it as the zone
                of its own host.

        """
        if not isinstance(expr, str):
            raise InvalidScheduleError(f"a cron expression must be a str, got {shown(expr)}")
        text = " ".join(expr.split())
        if text.lower() in PREDEFINED:
            text = text.lower()
        else:
            fields = text.split(" ") if text else []
            if len(fields) != CRON_FIELDS:
                raise InvalidScheduleError(
                    f"a cron expression needs six fields (seconds first), got {expr!r}"
                )
            if any(not set(field) <= _ALLOWED_CRON for field in fields):
                raise InvalidScheduleError(
                    f"invalid character in cron expression {expr!r} (nats-server takes "
                    "numbers, * / , - ? and month or weekday names, not L, W or #)"
                )
            if any(c.isalpha() for field in fields for c in _CRON_NAMES.sub("", field)):
                raise InvalidScheduleError(
                    f"cron expression {expr!r}: letters only in month or weekday names "
                    "(JAN, mon); nats-server has no L or W"
                )
        if time_zone is not None and (
            not isinstance(time_zone, str) or not _TIME_ZONE.fullmatch(time_zone)
        ):
            raise InvalidScheduleError(
                f"invalid time zone {shown(time_zone)}: an IANA name such as "
                "'Europe/Amsterdam' (None for UTC)"
            )
        if time_zone is not None and time_zone.lower() == "local":
            # Go's time.LoadLocation("Local") is the zone of the server's host.
            raise InvalidScheduleError(
                f"time zone {time_zone!r}: nats-server reads 'Local' as its own host's zone, "
                "not yours; name an IANA zone such as 'Europe/Amsterdam' (None for UTC)"
            )
        return cls(text, time_zone)


def _check_clock(spec: str) -> None:
    """Check an ``@at`` time or ``@every`` interval against the server's clock again.

    An interval's end is counted from now, and the Schedule may be old; a
    Schedule made with its constructor was not checked at all. What does not
    parse is left to the server.
    """
    try:
        if spec.startswith("@every "):
            interval: float | None = H.parse_go_duration(spec.removeprefix("@every "))
            when = None
        elif spec.startswith("@at "):
            interval, when = None, parse_timestamp(spec.removeprefix("@at "))
        else:
            return
    except ValueError:
        return
    if interval is not None:
        check_from_now(interval, "Schedule.every: the interval", InvalidScheduleError)
    if when is not None:
        check_server_time(when, "Schedule.at: the time", InvalidScheduleError)


def schedule_headers(
    subject: str,
    headers: Mapping[str, str] | None,
    schedule: Schedule | None,
    target: str | None,
    ttl: H.TTLInput | None,
) -> dict[str, str]:
    """The headers of a scheduled publish: the user's plus the schedule's (pure).

    Raises:
        InvalidScheduleError: ``schedule_target`` / ``schedule_ttl`` without a
            schedule, no target, a target with wildcards or equal to the
            schedule subject, an ``@every`` interval that now runs past the end
            of the server's clock.
        InvalidTTLError: ``schedule_ttl`` under 1 s or unparsable.
        InvalidHeaderError: ``headers`` is not a mapping.

    """
    if schedule is None:
        raise InvalidScheduleError("schedule_target and schedule_ttl need a schedule")
    if not isinstance(schedule, Schedule):
        raise InvalidScheduleError(
            f"schedule must be a Schedule (Schedule.at/every/cron), got {shown(schedule)}"
        )
    if schedule.time_zone is not None and schedule.spec.startswith(("@at ", "@every ")):
        raise InvalidScheduleError("a time zone goes only with a cron schedule")
    _check_clock(schedule.spec)
    if target is None:
        raise InvalidScheduleError("a schedule needs a schedule_target")
    try:
        validate_publish_subject(target)
    except InvalidSubjectError as exc:
        raise InvalidScheduleError(
            f"invalid schedule_target {target!r}: a subject without wildcards"
        ) from exc
    if target == subject:
        raise InvalidScheduleError(
            f"schedule_target must differ from the schedule subject {subject!r}"
        )
    if headers is not None and not isinstance(headers, Mapping):
        raise InvalidHeaderError(f"headers must be a mapping of str to str, got {headers!r}")
    out = dict(headers) if headers else {}
    out[SCHEDULE] = schedule.spec
    out[SCHEDULE_TARGET] = target
    if schedule.time_zone is not None:
        out[SCHEDULE_TIME_ZONE] = schedule.time_zone
    if ttl is not None:
        out[SCHEDULE_TTL] = check_ttl_from_now(H.ttl_header_value(ttl), "the schedule TTL")
    return out
