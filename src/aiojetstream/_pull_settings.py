"""The options of a pull run, validated once into :class:`PullSettings` (ADR-37 defaults).

``resolve_consume`` (``messages()`` / ``consume()``) and ``resolve_fetch``
(fetch, fetch_bytes, fetch_no_wait, next) check the caller's options against
the server's limits and each other, apply the defaults (500 messages, 30 s
expiry, heartbeats, thresholds at half of the maximum) and the priority-group
options a consumer allows (ADR-42); ``shortened`` cuts checked settings to
what is left of a caller's time. The engine (:mod:`._pull_engine`) runs on
the result. Pure, as the engine is: no asyncio, no nats-py, no clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Final

from . import _bounds as B
from ._errors import InvalidOptionError
from ._priority import PriorityOptions, resolve_priority

DEFAULT_MAX_MESSAGES: Final = 500
DEFAULT_EXPIRES: Final = 30.0
MIN_EXPIRES: Final = 1.0
MIN_HEARTBEAT: Final = 0.5
MAX_HEARTBEAT: Final = 30.0
FETCH_HEARTBEAT: Final = 5.0
FETCH_HEARTBEAT_MIN_EXPIRES: Final = 10.0
BYTES_MODE_BATCH: Final = 1_000_000
#: The buffer's hard limit, as a multiple of what a run asks for (see :func:`buffer_limits`).
BUFFER_LIMIT_FACTOR: Final = 4


#: The largest number the server takes in a pull request (a Go int64): counts, and
#: durations in nanoseconds.
MAX_INT64: Final = 2**63 - 1
#: (The longest ``expires`` or ``heartbeat`` the server takes is ``_bounds.MAX_WAIT``.)


def _seconds(value: float | None, name: str) -> float | None:
    # NaN has its own message; a giant int is compared, never converted (OverflowError).
    return None if value is None else B.seconds(value, name, zero=True, delta=False)


def _positive_int(value: int | None, name: str) -> int | None:
    # (A giant int's own message raised ValueError.)
    return None if value is None else B.count(value, name, 1, MAX_INT64)


@dataclass(frozen=True, slots=True)
class PullSettings:
    """Resolved options of one pull run (validated once; see the ``resolve_*`` helpers).

    ``max_bytes == 0`` means message mode. ``single`` marks a fetch/next: one
    pull, finished when it is filled or terminated.
    """

    max_messages: int
    max_bytes: int
    threshold_messages: int
    threshold_bytes: int
    expires: float
    heartbeat: float
    single: bool = False
    no_wait: bool = False
    priority: PriorityOptions | None = None
    """The priority-group fields of every pull (ADR-42), None without groups."""
    byte_cap: int = 0
    """A message-mode fetch's ``max_bytes`` (0: none): the server ends the pull there
    (with a 409, which ends the fetch normally once something came, or without a
    word when the messages use it up exactly: see
    :meth:`._pull_engine.PullEngine.on_fetched_bytes`)."""
    paced: bool = False
    """The consumer replays at the original pace (``replay_policy=original``): the
    server sleeps out the gaps between messages without a heartbeat, so a silence of
    2 x heartbeat is no sign of trouble: the consumer is looked up, and it is not
    reported (a missing consumer still ends or resets the run)."""


def buffer_limits(settings: PullSettings) -> tuple[int, int]:
    """The most messages, and bytes in byte mode (0: not counted), a run's buffer holds.

    What was asked for bounds the buffer (``pending`` never exceeds
    ``max_messages`` / ``max_bytes``) except for messages nobody asked for:
    those still delivered for pulls written off (after a reconnect, a
    missed heartbeat, a 503 or ``stop(drain=True)``: each adds at most one
    maximum's worth), a server delivering more than asked, or another client
    of the account publishing to the pull's inbox. Beyond
    ``BUFFER_LIMIT_FACTOR`` times the maximum, plus what the pulls written off
    may still deliver until they expire (``PullEngine.written_off``: asked
    for, so never dropped), the driver drops the newest arrivals (and reports
    it), so memory stays proportional to what the caller allowed.
    """
    return (
        BUFFER_LIMIT_FACTOR * settings.max_messages,
        BUFFER_LIMIT_FACTOR * settings.max_bytes,
    )


@dataclass(frozen=True, slots=True)
class PriorityConsumer:
    """What option resolution needs to know of a consumer's priority settings."""

    groups: tuple[str, ...] = ()
    policy: str | None = None
    timeout: float | None = None
    """``priority_timeout`` in seconds (the server's default for pinned_client: 120 s)."""


#: The server's pin timeout when ``priority_timeout`` is unset.
DEFAULT_PIN_TIMEOUT: Final = 120.0


def _resolve_priority(
    consumer: PriorityConsumer | None,
    expires: float,
    no_wait: bool,
    group: str | None,
    min_pending: int | None,
    min_ack_pending: int | None,
    priority: int | None,
) -> PriorityOptions | None:
    c = consumer or PriorityConsumer()
    options = resolve_priority(
        groups=c.groups,
        policy=c.policy,
        group=group,
        min_pending=min_pending,
        min_ack_pending=min_ack_pending,
        priority=priority,
    )
    if options is not None and options.pinned and not no_wait:
        # ADR-42: a pull must come back with the pin before it times out.
        timeout = c.timeout or DEFAULT_PIN_TIMEOUT
        if expires >= timeout:
            raise InvalidOptionError(
                f"expires ({expires:g} s) must be shorter than the consumer's "
                f"priority_timeout ({timeout:g} s), or the pin expires between pulls"
            )
    return options


def resolve_consume(
    *,
    max_messages: int | None = None,
    max_bytes: int | None = None,
    expires: float | None = None,
    heartbeat: float | None = None,
    threshold_messages: int | None = None,
    threshold_bytes: int | None = None,
    consumer: PriorityConsumer | None = None,
    group: str | None = None,
    min_pending: int | None = None,
    min_ack_pending: int | None = None,
    priority: int | None = None,
) -> PullSettings:
    """Validate ``messages()`` / ``consume()`` options and apply the ADR-37 defaults.

    500 messages, 30 s expiry (minimum 1 s), heartbeat half of expires capped at
    30 s (an explicit one must lie within 0.5 s to 30 s and not exceed half of
    expires), thresholds half of the maximum (rounded up); ``max_bytes`` pulls
    batches of 1,000,000 messages limited by bytes. The priority-group options
    are checked against ``consumer`` (see :func:`~aiojetstream._priority.resolve_priority`).

    Raises:
        InvalidOptionError: an option is out of range, or both ``max_messages``
            and ``max_bytes`` were given, or a priority option does not fit the
            consumer.

    """
    max_messages = _positive_int(max_messages, "max_messages")
    max_bytes = _positive_int(max_bytes, "max_bytes")
    threshold_messages = _positive_int(threshold_messages, "threshold_messages")
    threshold_bytes = _positive_int(threshold_bytes, "threshold_bytes")
    if max_messages is not None and max_bytes is not None:
        raise InvalidOptionError("max_messages and max_bytes can not be used together")
    exp = _seconds(expires, "expires")
    exp = DEFAULT_EXPIRES if exp is None else exp
    if exp < MIN_EXPIRES:
        raise InvalidOptionError(f"expires must be at least {MIN_EXPIRES:g} s, got {exp!r}")
    hb = _seconds(heartbeat, "heartbeat")
    if hb is None:
        hb = min(exp / 2, MAX_HEARTBEAT)
    else:
        _check_heartbeat(hb, exp)
    prio = _resolve_priority(consumer, exp, False, group, min_pending, min_ack_pending, priority)
    if max_bytes is not None:
        if threshold_messages is not None:
            raise InvalidOptionError("threshold_messages needs max_messages, not max_bytes")
        tb = threshold_bytes if threshold_bytes is not None else math.ceil(max_bytes / 2)
        if tb > max_bytes:
            raise InvalidOptionError("threshold_bytes can not exceed max_bytes")
        return PullSettings(BYTES_MODE_BATCH, max_bytes, 0, tb, exp, hb, priority=prio)
    if threshold_bytes is not None:
        raise InvalidOptionError("threshold_bytes needs max_bytes")
    mm = DEFAULT_MAX_MESSAGES if max_messages is None else max_messages
    tm = threshold_messages if threshold_messages is not None else math.ceil(mm / 2)
    if tm > mm:
        raise InvalidOptionError("threshold_messages can not exceed max_messages")
    return PullSettings(mm, 0, tm, 0, exp, hb, priority=prio)


def resolve_fetch(
    *,
    max_messages: int | None = None,
    max_bytes: int | None = None,
    expires: float | None = None,
    heartbeat: float | None = None,
    no_wait: bool = False,
    consumer: PriorityConsumer | None = None,
    group: str | None = None,
    min_pending: int | None = None,
    min_ack_pending: int | None = None,
    priority: int | None = None,
) -> PullSettings:
    """Validate fetch / fetch_bytes / fetch_no_wait / next options.

    The heartbeat defaults to 5 s when ``expires >= 10 s`` and is off below.

    Raises:
        InvalidOptionError: an option is out of range.

    """
    max_messages = _positive_int(max_messages, "max_messages")
    max_bytes = _positive_int(max_bytes, "max_bytes")
    cap = 0
    if max_messages is not None and max_bytes is not None:
        if not no_wait:
            raise InvalidOptionError("max_messages and max_bytes can not be used together")
        # fetch_no_wait(max_messages, max_bytes=): counted in messages, capped in bytes.
        cap, max_bytes = max_bytes, None
    exp = _seconds(expires, "expires")
    exp = DEFAULT_EXPIRES if exp is None else exp
    if not no_wait and exp < MIN_EXPIRES:
        raise InvalidOptionError(f"expires must be at least {MIN_EXPIRES:g} s, got {exp!r}")
    hb = _seconds(heartbeat, "heartbeat")
    if hb is None:
        hb = FETCH_HEARTBEAT if exp >= FETCH_HEARTBEAT_MIN_EXPIRES and not no_wait else 0.0
    elif hb != 0:
        _check_heartbeat(hb, exp)
    prio = _resolve_priority(consumer, exp, no_wait, group, min_pending, min_ack_pending, priority)
    if max_bytes is not None:
        return PullSettings(BYTES_MODE_BATCH, max_bytes, 0, 0, exp, hb, True, no_wait, prio)
    return PullSettings(max_messages or 1, 0, 0, 0, exp, hb, True, no_wait, prio, cap)


def _check_heartbeat(hb: float, expires: float) -> None:
    if not MIN_HEARTBEAT <= hb <= MAX_HEARTBEAT:
        raise InvalidOptionError(
            f"heartbeat must be between {MIN_HEARTBEAT:g} s and {MAX_HEARTBEAT:g} s, got {hb!r}"
        )
    if hb > expires / 2:
        raise InvalidOptionError(
            f"heartbeat ({hb:g} s) can not be more than half of expires ({expires:g} s)"
        )


def fit_heartbeat(heartbeat: float, expires: float) -> float:
    """``heartbeat`` clamped to half of ``expires`` (for a shortened pull); 0 stays off."""
    return min(heartbeat, expires / 2) if heartbeat else heartbeat


def shortened(settings: PullSettings, left: float) -> PullSettings:
    """``settings`` with ``expires`` cut to ``left`` (at least MIN_EXPIRES), heartbeat to fit.

    For a pull that gets what is left of a caller's time: the options were
    checked once, up front, and are not checked again against the time left.
    """
    expires = max(left, MIN_EXPIRES)
    if expires >= settings.expires:
        return settings
    return replace(settings, expires=expires, heartbeat=fit_heartbeat(settings.heartbeat, expires))


def paced(settings: PullSettings, replay_policy: object) -> PullSettings:
    """``settings`` marked :attr:`~PullSettings.paced` for a consumer replaying at pace.

    That is when ``replay_policy``, the consumer's, is ``original``.
    """
    value = getattr(replay_policy, "value", replay_policy)
    if value == "original" and not settings.paced:
        return replace(settings, paced=True)
    return settings


def fit_to_limits(
    settings: PullSettings, max_batch: int | None, max_bytes: int | None, max_expires: float | None
) -> PullSettings:
    """``settings`` cut to a consumer's pull limits (``max_batch``, ``max_bytes``, ``max_expires``).

    For the library's own consumers (the ordered consumer, and through it the
    key-value and object reads), whose pull sizes the library picks: the
    server gives a consumer created without these limits the server's or
    account's (``max_request_batch`` and friends) and answers every pull over
    them with a 409, so a watch waited for ever. None or 0 is no limit.
    """
    changes: dict[str, object] = {}
    if max_batch and max_batch > 0 and settings.max_messages > max_batch:
        changes["max_messages"] = max_batch
        changes["threshold_messages"] = min(settings.threshold_messages, math.ceil(max_batch / 2))
    if max_bytes and max_bytes > 0:
        if settings.max_bytes > max_bytes:
            changes["max_bytes"] = max_bytes
            changes["threshold_bytes"] = min(settings.threshold_bytes, math.ceil(max_bytes / 2))
        if settings.byte_cap > max_bytes:
            changes["byte_cap"] = max_bytes
    fitted = replace(settings, **changes) if changes else settings  # type: ignore[arg-type]
    if max_expires and max_expires > 0 and fitted.expires > max_expires:
        fitted = shortened(fitted, max_expires)
    return fitted
