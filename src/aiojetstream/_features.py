"""The server features newer than the core API, with the JetStream API level each needs.

One table, so every feature refuses an old server the same way: with a
:class:`FeatureNotSupportedError` naming the first nats-server release that
has it, raised before the request that needs it is sent. Stream settings of
these features are checked by the stream create and update calls too (an
older server would silently ignore a field it does not know).

In a cluster the level is the meta leader's (only it answers
``$JS.API.INFO``): during a rolling upgrade, a stream or consumer placed on
an older node passes the check and that node drops the settings it does not
know. So the config the server echoes after a create or update is compared
with the gated settings sent (:func:`stream_dropped`, :func:`consumer_dropped`,
as nats.go checks its own, e.g. "stream subject transforms not supported").
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from time import monotonic as _clock
from typing import Final

from ._api import ApiClient
from ._errors import FeatureNotSupportedError, JetStreamTimeoutError, PermissionViolationError
from ._models import AckPolicy, ConsumerConfig, PriorityPolicy, StreamConfig
from ._validation import check_timeout

__all__ = [
    "ATOMIC_BATCH",
    "BATCH_GET",
    "COUNTERS",
    "FAST_BATCH",
    "FLOW_CONTROL_ACK",
    "LEVEL_PROBE",
    "MARKER_TTL",
    "MSG_TTL",
    "PAUSED_CONSUMER",
    "PERSIST_MODE",
    "PRIORITIZED",
    "PRIORITY_GROUPS",
    "SCHEDULES",
    "SCHEDULE_PATTERNS",
    "STREAM_MSG_TTL",
    "Feature",
    "check_level",
    "consumer_config_features",
    "consumer_dropped",
    "dropped_error",
    "old_server",
    "require",
    "stream_config_features",
    "stream_dropped",
]


logger = logging.getLogger("aiojetstream")
#: Seconds a data-plane call waits for the server's API level before leaving the check to it.
LEVEL_PROBE: Final = 1.0


@dataclass(frozen=True, slots=True)
class Feature:
    """A server feature: its name in errors, its API level and first server release."""

    name: str
    level: int
    version: str


BATCH_GET: Final = Feature("batch direct get", 1, "2.11")
#: ``ttl=`` on a publish: an older server stores the ``Nats-TTL`` header and never expires it.
MSG_TTL: Final = Feature("per-message TTL (ttl=, Nats-TTL)", 1, "2.11")
#: The ADR-43 stream settings (checked before sending by ``_ttl_rules``; here for the echo).
STREAM_MSG_TTL: Final = Feature("allow_msg_ttl", 1, "2.11")
MARKER_TTL: Final = Feature("subject_delete_marker_ttl", 1, "2.11")
COUNTERS: Final = Feature("message counters (allow_msg_counter)", 2, "2.12")
ATOMIC_BATCH: Final = Feature("atomic batch publish (allow_atomic)", 2, "2.12")
SCHEDULES: Final = Feature("message schedules (allow_msg_schedules)", 2, "2.12")
#: 2.12 takes ``@at`` schedules only; ``@every``, cron and time zones came with 2.14.
SCHEDULE_PATTERNS: Final = Feature(
    "message schedules by interval or cron (Schedule.every, Schedule.cron)", 4, "2.14"
)
PRIORITY_GROUPS: Final = Feature("priority groups", 1, "2.11")
#: A consumer created paused (``pause_until``): an older server ignores the field.
PAUSED_CONSUMER: Final = Feature("consumer pause (pause_until)", 1, "2.11")
#: ``persist_mode`` other than ``default``: an older server ignores the field.
PERSIST_MODE: Final = Feature("persist_mode", 2, "2.12")
#: A 2.11 server (API level 1) refuses this policy: 2.12 is API level 2.
PRIORITIZED: Final = Feature("priority groups (prioritized policy)", 2, "2.12")
#: ``allow_batched``: 2.10 and 2.11 ignore the field, 2.12 refuses it as unknown JSON.
FAST_BATCH: Final = Feature("fast batch publish (allow_batched)", 4, "2.14")
#: ``AckPolicy.FLOW_CONTROL``: older servers refuse it as invalid JSON.
FLOW_CONTROL_ACK: Final = Feature(
    "flow-control acknowledgement (AckPolicy.FLOW_CONTROL)", 4, "2.14"
)


def check_level(feature: Feature, level: int) -> None:
    """Raise :class:`FeatureNotSupportedError` when ``level`` is below the feature's (pure)."""
    if level < feature.level:
        raise FeatureNotSupportedError(feature.name, feature.level, level, feature.version)


async def require(
    api: ApiClient, feature: Feature, timeout: float | None = None, *, default: bool = True
) -> float | None:
    """Check the server's API level (read once per context) for ``feature``: data-plane calls.

    Returns the call's time left: ``timeout`` (the context's when None and
    ``default``; None stays None otherwise) less what asking for the level
    took, or ``timeout`` as given when the level was known (the probe took
    up to 1 s more than the call's timeout).

    A user allowed to publish and read but not to ask for account info (a
    common least-privilege set-up: ``$JS.API.INFO`` denied) gets no reply to
    it: the server refuses the request (:class:`PermissionViolationError`,
    at once), or, where the refusal does not reach the request, it times out.
    So the level is asked for at most ``LEVEL_PROBE`` seconds (and at most
    half of the call's ``timeout``); refused or unanswered, the check is left to the
    server, for this call and every later one of the context (as the Go and
    JavaScript clients leave it), and the call goes on with the rest of its
    time. Administrative calls (stream and consumer create or update) keep
    the strict check.
    """
    left = timeout
    if api.level is None and not api.level_unknown:
        allowed = check_timeout(timeout)
        base = api.timeout if allowed is None else allowed
        probe = min(base / 2, LEVEL_PROBE)
        began = _clock()
        try:
            await api.api_level(probe)
        except PermissionViolationError:
            api.level_unknown = True
            logger.info(
                "the user may not ask for the JetStream API level ($JS.API.INFO is denied): "
                "%s is not checked before sending",
                feature.name,
            )
        except JetStreamTimeoutError:
            api.level_unknown = True
            logger.info(
                "the server did not tell its JetStream API level within %g s (is $JS.API.INFO "
                "denied to this user?): %s is not checked before sending",
                probe,
                feature.name,
            )
        if allowed is not None or default:
            # At least the half the probe was to leave: a loop busy elsewhere may
            # handle its answer late (a negative time left refused the call, or
            # sent it with an ack deadline already past).
            left = max(base - (_clock() - began), base / 2)
    if api.level is not None:
        check_level(feature, api.level)
    return left


def _level_note(level: int | None) -> str:
    if level is None:
        return "the server's API level is unknown (not asked for, or not answered)"
    return (
        f"the API level read, {level}, is the meta leader's in a cluster: a node older than "
        "it (a mixed-version cluster, as in a rolling upgrade) passes that check"
    )


def old_server(feature: Feature, what: str, level: int | None = None) -> FeatureNotSupportedError:
    """The error for a server that turned out not to have ``feature``.

    For a data-plane call whose answer only an older server gives: it went
    ahead without the level (see :func:`require`, ``level`` None), or the
    level (the meta leader's, in a cluster) allowed it and the stream's node
    is older.
    """
    error = FeatureNotSupportedError(
        feature.name,
        feature.level,
        level or 0,
        feature.version,
        "the server that holds the stream (in a cluster, the stream's node) is older",
    )
    error.add_note(f"{_level_note(level)}; but {what}")
    return error


def stream_dropped(sent: StreamConfig, echoed: StreamConfig) -> list[Feature]:
    """The gated settings ``sent`` turned on that the server's ``echoed`` config lacks (pure).

    A node older than the setting (of a mixed-version cluster) creates or
    updates the stream without it and echoes its own config.
    """
    dropped: list[Feature] = []
    if sent.allow_msg_ttl and not echoed.allow_msg_ttl:
        dropped.append(STREAM_MSG_TTL)
    if sent.subject_delete_marker_ttl is not None and echoed.subject_delete_marker_ttl is None:
        dropped.append(MARKER_TTL)
    if sent.allow_msg_counter and not echoed.allow_msg_counter:
        dropped.append(COUNTERS)
    if sent.allow_atomic and not echoed.allow_atomic:
        dropped.append(ATOMIC_BATCH)
    if sent.allow_msg_schedules and not echoed.allow_msg_schedules:
        dropped.append(SCHEDULES)
    if (
        sent.persist_mode is not None
        and sent.persist_mode != "default"
        and echoed.persist_mode != sent.persist_mode
    ):
        dropped.append(PERSIST_MODE)
    if sent.allow_batched and not echoed.allow_batched:
        dropped.append(FAST_BATCH)
    return dropped


def consumer_dropped(sent: ConsumerConfig, echoed: ConsumerConfig) -> list[Feature]:
    """The gated settings ``sent`` turned on that the server's ``echoed`` config lacks (pure)."""
    dropped: list[Feature] = []
    policy = sent.priority_policy
    if (sent.priority_groups and not echoed.priority_groups) or (
        policy is not None and policy != PriorityPolicy.NONE and echoed.priority_policy != policy
    ):
        dropped.append(PRIORITIZED if policy == PriorityPolicy.PRIORITIZED else PRIORITY_GROUPS)
    if sent.pause_until is not None and echoed.pause_until is None:
        dropped.append(PAUSED_CONSUMER)
    if sent.ack_policy == AckPolicy.FLOW_CONTROL and echoed.ack_policy != AckPolicy.FLOW_CONTROL:
        dropped.append(FLOW_CONTROL_ACK)
    return dropped


def dropped_error(
    dropped: list[Feature], what: str, done: str, level: int | None
) -> FeatureNotSupportedError:
    """The error for settings the server dropped: ``what`` (``"stream 'S'"``) was ``done`` anyway.

    Raised after the create or update (nothing is undone: the caller decides).
    """
    top = max(dropped, key=lambda feature: feature.level)
    names = ", ".join(feature.name for feature in dropped)
    error = FeatureNotSupportedError(
        names,
        top.level,
        level or 0,
        top.version,
        f"{what} WAS {done} without it: the server that holds it ignored the setting "
        "(a node of the cluster too old for it, as in a mixed-version cluster during "
        "a rolling upgrade, or an older server)",
    )
    error.add_note(_level_note(level))
    return error


def stream_config_features(config: StreamConfig) -> list[Feature]:
    """The features of this table a stream configuration turns on (pure)."""
    used: list[Feature] = []
    if config.allow_msg_counter:
        used.append(COUNTERS)
    if config.allow_atomic:
        used.append(ATOMIC_BATCH)
    if config.allow_msg_schedules:
        used.append(SCHEDULES)
    if config.persist_mode is not None and config.persist_mode != "default":
        used.append(PERSIST_MODE)
    if config.allow_batched:
        used.append(FAST_BATCH)
    return used


def consumer_config_features(config: ConsumerConfig) -> list[Feature]:
    """The features of this table a consumer configuration turns on (pure)."""
    policy = config.priority_policy
    used: list[Feature] = []
    if (
        config.priority_groups
        or (policy is not None and policy != PriorityPolicy.NONE)
        or config.priority_timeout is not None
    ):
        used.append(PRIORITY_GROUPS)
    if policy == PriorityPolicy.PRIORITIZED:
        used.append(PRIORITIZED)
    if config.pause_until is not None:
        used.append(PAUSED_CONSUMER)
    if config.ack_policy == AckPolicy.FLOW_CONTROL:
        used.append(FLOW_CONTROL_ACK)
    return used
