"""Apache Pulsar's retention policies and backlog quotas as JetStream stream configs.

Pure functions: nothing here touches the network. Each one takes or builds a
:class:`~aiojetstream.StreamConfig` and returns a new one (configs are
frozen); pass the result to ``create_stream`` / ``update_stream``.

Pulsar keeps two things per topic: the *backlog* (messages some subscription
has not acknowledged) and *retention* (acknowledged messages kept for a time
or size). A JetStream stream has one store, and its ``retention`` says what
removes messages:

=================================  =============================================
Pulsar                             JetStream
=================================  =============================================
default: keep until every          ``retention: interest`` (a publish with no
subscription acks                  consumer is acked but stores nothing)
retention time / size              ``retention: limits`` + ``max_age`` /
                                   ``max_bytes``, ``discard: old``
quota ``destination_storage``      ``max_bytes``
quota ``message_age``              ``max_age`` (eviction only)
``producer_exception``             ``discard: new`` (publish raises
                                   :class:`~aiojetstream.StreamFullError`)
``producer_request_hold``          ``discard: new`` + ``publish(...,
                                   hold_when_full=seconds)``
``consumer_backlog_eviction``      ``discard: old``
=================================  =============================================

JetStream limits (``max_age``, ``max_bytes``, ``max_msgs``) remove unacked
messages too, while Pulsar's retention never touches the backlog. To keep the
backlog until it is consumed *and* keep consumed data for a time or size, use
two streams: :func:`archive_pair`.

Example:
    >>> from aiojetstream import StreamConfig
    >>> from aiojetstream.pulsar import apply_retention
    >>> cfg = apply_retention(StreamConfig(name="ORDERS"), time_minutes=180, size_mb=10240)
    >>> cfg.retention, cfg.max_age, cfg.max_bytes
    (<RetentionPolicy.LIMITS: 'limits'>, datetime.timedelta(seconds=10800), 10737418240)

"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from enum import StrEnum
from typing import Any, Final

from ._bounds import shown
from ._errors import InvalidOptionError, InvalidSubjectError
from ._models import (
    DiscardPolicy,
    RetentionPolicy,
    StreamConfig,
    StreamSource,
    duration_to_ns,
)
from ._validation import MAX_NAME_LEN, positive_duration, validate_filter_subject, validate_name

__all__ = [
    "BacklogQuotaPolicy",
    "InvalidRetentionError",
    "apply_backlog_quota",
    "apply_retention",
    "archive_pair",
]

_MIB: Final = 1024 * 1024
"""Pulsar's ``retentionSizeInMB`` counts mebibytes (``size * 1024 * 1024`` bytes)."""
_INT64_MAX: Final = 2**63 - 1
"""The server keeps ``max_bytes`` and ``max_age`` (nanoseconds) in Go int64s."""
_MAX_SIZE_MB: Final = _INT64_MAX // _MIB
_MAX_TIME_MINUTES: Final = _INT64_MAX // (60 * 1_000_000_000)
_MIN_MAX_AGE: Final = timedelta(milliseconds=100)
"""nats-server refuses a ``max_age`` under 100 ms (err_code 10052)."""
_UNLIMITED_AGE: Final = timedelta(0)
_UNLIMITED_BYTES: Final = -1
_ARCHIVE_SUFFIX: Final = "_ARCHIVE"
_DEFAULT_DUPLICATE_WINDOW: Final = timedelta(minutes=2)
"""The server's ``duplicate_window`` when none is set (shortened to ``max_age``)."""

_RETENTION_RULE: Final = (
    "Pulsar's retention table: -1/-1 infinite, -1/>0 size only, >0/-1 time only, "
    ">0/>0 whichever limit is reached first, 0/0 no retention (the default); "
    "0/>0 and >0/0 are invalid (use -1, not 0, to leave one limit out), "
    "and nothing below -1 is allowed"
)


class InvalidRetentionError(InvalidOptionError):
    """A Pulsar retention policy or backlog quota that has no valid JetStream equivalent.

    Raised before anything is sent. It is an
    :class:`~aiojetstream.InvalidOptionError`, so also a ``ValueError`` and a
    :class:`~aiojetstream.JetStreamError`.
    """


class BacklogQuotaPolicy(StrEnum):
    """What Pulsar's broker does when a backlog quota is reached (``--policy``)."""

    PRODUCER_REQUEST_HOLD = "producer_request_hold"
    """Hold publishes until there is room: ``discard: new`` + ``publish(hold_when_full=...)``."""
    PRODUCER_EXCEPTION = "producer_exception"
    """Refuse publishes: ``discard: new``; ``publish`` raises ``StreamFullError``."""
    CONSUMER_BACKLOG_EVICTION = "consumer_backlog_eviction"
    """Drop the oldest backlog messages: ``discard: old``."""


# --------------------------------------------------------------------------- retention


def apply_retention(config: StreamConfig, *, time_minutes: int, size_mb: int) -> StreamConfig:
    """Return ``config`` with Pulsar's retention policy ``time_minutes`` / ``size_mb`` applied.

    The arguments are those of ``pulsar-admin namespaces set-retention --time
    --size`` (``retentionTimeInMinutes`` / ``retentionSizeInMB``; a MB is
    1024 * 1024 bytes). Pulsar's table maps to:

    ======  ======  ============================  ================================
    time    size    Pulsar                        JetStream fields set
    ======  ======  ============================  ================================
    -1      -1      infinite retention            limits, ``max_age`` 0,
                                                  ``max_bytes`` -1, discard old
    -1      > 0     by size                       limits, ``max_age`` 0,
                                                  ``max_bytes`` = size MiB, old
    > 0     -1      by time                       limits, ``max_age`` = time,
                                                  ``max_bytes`` -1, discard old
    > 0     > 0     whichever is reached first    limits, both limits, discard old
    0       0       no retention (the default):   interest, ``max_age`` 0,
                    keep until every              ``max_bytes`` -1 (``discard``
                    subscription acks             left as it is)
    ======  ======  ============================  ================================

    ``max_age`` 0 and ``max_bytes`` -1 are the server's "unlimited" values;
    they are set explicitly so that a limit already in ``config`` goes away
    and the config reads back from the server unchanged. Every other field is
    kept, including ``max_msgs`` and ``max_msgs_per_subject``, which still
    remove messages. A ``duplicate_window`` longer than the new ``max_age``
    (an unset one counts as the server's default, 2 minutes) is set to the
    ``max_age``: the server refuses a longer explicit window (err_code 10052)
    and, in pedantic mode, the default one too (10157). Fields the server sent
    that this library does not model are kept as well.

    Note:
        JetStream limits remove **unacknowledged** messages too: a ``limits``
        stream keeps its consumers' backlog only for as long as the time and
        size allow, while Pulsar's retention applies to acknowledged messages
        only. To keep both, use :func:`archive_pair` (an interest stream for
        the backlog plus a limits archive for retention). For a backlog quota
        on top of the default (0/0) policy, apply the retention first and the
        quota second: the 0/0 row resets ``max_age`` and ``max_bytes``.

    Args:
        config: the stream configuration to start from (not changed).
        time_minutes: retention time in minutes; -1 for no time limit, 0 with
            ``size_mb`` 0 for no retention.
        size_mb: retention size in MiB; -1 for no size limit, 0 with
            ``time_minutes`` 0 for no retention.

    Returns:
        A new :class:`~aiojetstream.StreamConfig`.

    Raises:
        InvalidRetentionError: a combination Pulsar refuses (0/>0, >0/0, -1/0,
            0/-1, anything below -1), a value that is not an ``int``, a value
            too large for the server, or a limits row on a config with
            ``discard_new_per_subject`` (which needs ``discard: new``).
        InvalidOptionError: ``config`` is not a :class:`~aiojetstream.StreamConfig`.

    """
    _check_config(config)
    time_minutes, size_mb = _check_retention(time_minutes, size_mb)
    update: dict[str, Any]
    if time_minutes == 0:  # and size_mb == 0: Pulsar's default, no retention
        update = {
            "retention": RetentionPolicy.INTEREST,
            "max_age": _UNLIMITED_AGE,
            "max_bytes": _UNLIMITED_BYTES,
        }
        return config.model_copy(update=update)
    if config.discard_new_per_subject:
        raise InvalidRetentionError(
            f"retention {time_minutes}/{size_mb} discards the oldest messages (discard: old), "
            "but the config has discard_new_per_subject, which needs discard: new"
        )
    max_age = _UNLIMITED_AGE if time_minutes == -1 else timedelta(minutes=time_minutes)
    update = {
        "retention": RetentionPolicy.LIMITS,
        "max_age": max_age,
        "max_bytes": _UNLIMITED_BYTES if size_mb == -1 else size_mb * _MIB,
        "discard": DiscardPolicy.OLD,
    }
    update.update(_fit_duplicate_window(config, max_age))
    return config.model_copy(update=update)


def archive_pair(
    name: str, subjects: list[str], *, time_minutes: int, size_mb: int
) -> tuple[StreamConfig, StreamConfig]:
    """Return the two streams that keep Pulsar's backlog and its retention apart.

    * ``name``: an **interest** stream on ``subjects`` (Pulsar's default 0/0
      policy): it keeps each message until every consumer has acknowledged it.
    * ``f"{name}_ARCHIVE"``: a **limits** stream with no subjects that sources
      ``name`` (``sources=[StreamSource(name=name)]``) and carries the
      retention of :func:`apply_retention` (``time_minutes`` / ``size_mb``,
      discard old). The name is the origin's plus ``_ARCHIVE`` so that the
      pair sorts together and the archive can be found from the origin's name;
      it is also the returned config's ``name``.

    The server copies every message into the archive through a durable
    consumer of its own on the interest stream (``ack_policy: flow_control``
    on nats-server 2.14+, where this recipe was verified), so a message
    published before any application consumer exists is still archived, and
    then leaves the interest stream, as in Pulsar, where a topic with no
    subscription has no backlog. The archive has a message at once, but
    confirms it to the interest stream in batches: a message acknowledged by
    every application consumer stays in the interest stream (and counts
    against a backlog quota there) until then, about a second was measured.

    Create the interest stream first, then the archive, and **publish only
    once the archive's source is active**: the server sets the source up in
    the background after the create call returns (about half a second was
    measured), and a message that every existing consumer acknowledged
    before then, or that arrived with no consumer at all, is gone and never
    archived. The source is active when ``StreamInfo.sources[0].active`` of
    the archive is not negative, or when the interest stream's
    ``state.consumer_count`` has gone up by one.

    Both configs use file storage and one replica: change them with
    ``model_copy(update=...)``.

    The archive's limits count every message, acknowledged or not, where
    Pulsar's retention counts acknowledged messages only; size the storage
    for backlog plus retention, as Pulsar's documentation advises.

    Args:
        name: the interest stream's name (a valid stream name of at most
            ``255 - len("_ARCHIVE")`` characters).
        subjects: the subjects of the interest stream (at least one).
        time_minutes: the archive's retention time in minutes (-1: no limit).
        size_mb: the archive's retention size in MiB (-1: no limit).

    Returns:
        ``(interest_config, archive_config)``.

    Raises:
        InvalidRetentionError: an invalid retention (see :func:`apply_retention`)
            or 0/0: "no retention" needs no archive, use
            ``apply_retention(config, time_minutes=0, size_mb=0)`` alone.
        InvalidNameError: ``name`` (or the archive's name) is not a valid stream name.
        InvalidSubjectError: ``subjects`` is empty or holds an invalid subject.

    """
    time_minutes, size_mb = _check_retention(time_minutes, size_mb)
    if time_minutes == 0:
        raise InvalidRetentionError(
            "retention 0/0 means no retention in Pulsar: there is nothing to archive; "
            "use apply_retention(config, time_minutes=0, size_mb=0) for an interest stream alone"
        )
    validate_name(name)
    archive = name + _ARCHIVE_SUFFIX
    if len(archive) > MAX_NAME_LEN:
        validate_name(archive)  # raises: too long for the suffix
    subject_list = _check_subjects(subjects)
    interest = apply_retention(
        StreamConfig(name=name, subjects=subject_list), time_minutes=0, size_mb=0
    )
    archive_config = apply_retention(
        StreamConfig(name=archive, sources=[StreamSource(name=name)]),
        time_minutes=time_minutes,
        size_mb=size_mb,
    )
    return interest, archive_config


# --------------------------------------------------------------------------- backlog quota


def apply_backlog_quota(
    config: StreamConfig,
    *,
    limit_bytes: int | None = None,
    limit_time: float | timedelta | str | None = None,
    policy: BacklogQuotaPolicy,
) -> StreamConfig:
    """Return ``config`` with a Pulsar backlog quota applied.

    The arguments are those of ``pulsar-admin namespaces set-backlog-quota``:
    ``--limit`` (quota type ``destination_storage``), ``--limitTime`` (type
    ``message_age``, seconds or a ``timedelta``) and ``--policy``. At least one
    limit is required.

    ===============================  ==============================================
    Pulsar                           JetStream
    ===============================  ==============================================
    ``destination_storage`` limit    ``max_bytes = limit_bytes``
    ``message_age`` limit            ``max_age = limit_time`` (only with
                                     ``consumer_backlog_eviction``; >= 100 ms)
    ``producer_exception``           ``discard: new``: a full stream refuses the
                                     publish, ``publish`` raises
                                     :class:`~aiojetstream.StreamFullError`
                                     (:class:`~aiojetstream.MaxBytesExceededError`)
                                     and the connection stays up
    ``producer_request_hold``        ``discard: new``, and publish with
                                     ``js.publish(..., hold_when_full=seconds)``:
                                     the server cannot hold a publish, the
                                     client retries until there is room or the
                                     hold time is over
    ``consumer_backlog_eviction``    ``discard: old``: the oldest messages go,
                                     for **all** consumers
    ===============================  ==============================================

    A ``message_age`` quota with a producer policy is refused: JetStream can
    refuse a publish only on a count or size limit, and ``max_age`` always
    deletes (the age of the oldest unacknowledged message is a per-consumer
    value, see ``Consumer.backlog()``).

    The quota counts what the stream stores. On an interest or workqueue
    stream (Pulsar's default, see :func:`apply_retention` 0/0 and
    :func:`archive_pair`) that is the backlog; on a limits stream the same
    limit also counts data already acknowledged, and replaces a retention
    limit set there before. ``discard`` applies to every limit of the stream
    (``max_msgs`` too). Other fields are kept, except that a
    ``duplicate_window`` longer than a new ``max_age`` (unset: 2 minutes) is
    set to the ``max_age``, as in :func:`apply_retention`.

    Args:
        config: the stream configuration to start from (not changed).
        limit_bytes: the backlog size limit in bytes (> 0).
        limit_time: the backlog age limit, in seconds, as a ``timedelta`` or a
            duration string such as ``"3h"``
            (at least 100 ms, the server's minimum ``max_age``).
        policy: what happens when the quota is reached.

    Returns:
        A new :class:`~aiojetstream.StreamConfig`.

    Raises:
        InvalidRetentionError: no limit, a limit that is zero, negative, not a
            number or too large for the server, a ``max_age`` under 100 ms, a
            time limit with a producer policy, an unknown policy, or
            ``consumer_backlog_eviction`` on a config with
            ``discard_new_per_subject`` (which needs ``discard: new``).
        InvalidOptionError: ``config`` is not a :class:`~aiojetstream.StreamConfig`.

    """
    _check_config(config)
    quota = _check_policy(policy)
    if limit_bytes is None and limit_time is None:
        raise InvalidRetentionError(
            "a backlog quota needs a limit: limit_bytes (destination_storage) "
            "and/or limit_time (message_age)"
        )
    update: dict[str, Any] = {}
    if limit_bytes is not None:
        update["max_bytes"] = _check_limit_bytes(limit_bytes)
    if limit_time is not None:
        if quota is not BacklogQuotaPolicy.CONSUMER_BACKLOG_EVICTION:
            raise InvalidRetentionError(
                f"a message_age backlog quota with {quota.value} has no JetStream equivalent: "
                "the server refuses publishes only on a count or size limit (discard: new), "
                "and max_age always deletes old messages; use consumer_backlog_eviction for "
                "an age limit, or limit_bytes with this policy"
            )
        max_age = _check_limit_time(limit_time)
        update["max_age"] = max_age
        update.update(_fit_duplicate_window(config, max_age))
    if quota is BacklogQuotaPolicy.CONSUMER_BACKLOG_EVICTION:
        if config.discard_new_per_subject:
            raise InvalidRetentionError(
                "consumer_backlog_eviction discards the oldest messages (discard: old), "
                "but the config has discard_new_per_subject, which needs discard: new"
            )
        update["discard"] = DiscardPolicy.OLD
    else:
        update["discard"] = DiscardPolicy.NEW
    return config.model_copy(update=update)


# --------------------------------------------------------------------------- checks


def _check_config(config: object) -> None:
    # InvalidOptionError, not InvalidRetentionError: the config is wrong, not the retention.
    if not isinstance(config, StreamConfig):
        raise InvalidOptionError(f"config must be a StreamConfig, got {type(config).__name__}")


def _check_retention(time_minutes: object, size_mb: object) -> tuple[int, int]:
    """Validate a retention pair against Pulsar's table; return it as ints."""
    if (
        isinstance(time_minutes, bool)
        or not isinstance(time_minutes, int)
        or isinstance(size_mb, bool)
        or not isinstance(size_mb, int)
    ):
        raise InvalidRetentionError(
            f"time_minutes and size_mb must be ints, got {shown(time_minutes)} / {shown(size_mb)}"
        )
    pair = f"time_minutes={shown(time_minutes)}, size_mb={shown(size_mb)}"  # (giant ints too)
    if time_minutes < -1 or size_mb < -1:
        raise InvalidRetentionError(f"invalid retention {pair}: {_RETENTION_RULE}")
    if (time_minutes == 0) != (size_mb == 0):
        raise InvalidRetentionError(
            f"invalid retention {pair}: a single 0 limit is invalid; {_RETENTION_RULE}"
        )
    if time_minutes > _MAX_TIME_MINUTES:
        raise InvalidRetentionError(
            f"invalid retention {pair}: time_minutes is above {_MAX_TIME_MINUTES} "
            "(the server's max_age is an int64 of nanoseconds); use -1 for no time limit"
        )
    if size_mb > _MAX_SIZE_MB:
        raise InvalidRetentionError(
            f"invalid retention {pair}: size_mb is above {_MAX_SIZE_MB} "
            "(the server's max_bytes is an int64); use -1 for no size limit"
        )
    return time_minutes, size_mb


def _check_policy(policy: object) -> BacklogQuotaPolicy:
    if isinstance(policy, BacklogQuotaPolicy):
        return policy
    if isinstance(policy, str) and policy in {p.value for p in BacklogQuotaPolicy}:
        return BacklogQuotaPolicy(policy)
    choices = ", ".join(p.value for p in BacklogQuotaPolicy)
    raise InvalidRetentionError(
        f"unknown backlog quota policy {policy!r}; expected one of {choices}"
    )


def _check_limit_bytes(limit_bytes: object) -> int:
    if isinstance(limit_bytes, bool) or not isinstance(limit_bytes, int):
        raise InvalidRetentionError(f"limit_bytes must be an int, got {shown(limit_bytes)}")
    if limit_bytes <= 0:
        raise InvalidRetentionError(
            f"limit_bytes must be positive, got {shown(limit_bytes)} (leave it None for no "
            "size quota)"
        )
    if limit_bytes > _INT64_MAX:
        raise InvalidRetentionError(
            f"limit_bytes {shown(limit_bytes)} is above {_INT64_MAX} (the server's max_bytes "
            "is an int64)"
        )
    return limit_bytes


def _check_limit_time(limit_time: object) -> timedelta:
    try:
        age = positive_duration(limit_time, "limit_time", InvalidRetentionError)
    except InvalidRetentionError as exc:
        raise InvalidRetentionError(f"{exc} (leave it None for no age quota)") from None
    if age < _MIN_MAX_AGE:
        raise InvalidRetentionError(
            f"limit_time {limit_time!r} is under 100 ms, the server's minimum max_age "
            "(it refuses a smaller one with err_code 10052)"
        )
    if duration_to_ns(age) > _INT64_MAX:
        raise InvalidRetentionError(
            f"limit_time {limit_time!r} is too long (the server's max_age is an int64 of "
            "nanoseconds)"
        )
    return age


def _check_subjects(subjects: object) -> list[str]:
    if isinstance(subjects, str) or not isinstance(subjects, Sequence):
        raise InvalidSubjectError(f"subjects must be a list of subjects, got {subjects!r}")
    if not subjects:
        raise InvalidSubjectError("the interest stream needs at least one subject")
    return [validate_filter_subject(subject) for subject in subjects]


def _fit_duplicate_window(config: StreamConfig, max_age: timedelta) -> dict[str, Any]:
    """Shorten the ``duplicate_window`` to a new, non-zero ``max_age`` when it is longer.

    The server refuses an explicit window longer than ``max_age`` (10052) and
    shortens an unset one (its default is 2 minutes) to ``max_age``, which
    pedantic mode refuses instead (10157): set the value the server would use.
    """
    window = config.duplicate_window
    effective = _DEFAULT_DUPLICATE_WINDOW if window is None else window
    if max_age and effective > max_age:
        return {"duplicate_window": max_age}
    return {}
