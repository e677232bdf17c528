"""Consumer administration: pause, resume, reset, clear-backlog, per-consumer TTL, backlog.

These are Pulsar's subscription operations in JetStream terms (see
``docs/from-pulsar.md``):

* pause / resume: ``$JS.API.CONSUMER.PAUSE`` (nats-server >= 2.11, API level 1);
* reset: ``$JS.API.CONSUMER.RESET`` (nats-server >= 2.14, API level 4), which
  the server answers with the consumer's info plus ``reset_seq``. Two server
  traps are kept away from users: a sequence beyond the stream's last + 1 is
  accepted and silently skips future messages (refused here), and a reset of a
  missing consumer gets no reply at all (checked first, so the error is
  prompt and typed);
* clear-backlog: a reset to the stream's last sequence + 1;
* skip_older_than: Pulsar's per-subscription message TTL, a reset (of this
  consumer only) to the first message stored after ``now - age``, never back;
* backlog: the consumer's counters and its oldest unacknowledged message.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from . import _api
from . import _bounds as B
from . import _direct as D
from ._api import ApiClient, Left
from ._errors import (
    ClusterUnavailableError,
    FeatureNotSupportedError,
    InvalidOptionError,
    InvalidResponseError,
    JetStreamError,
    JetStreamTimeoutError,
    MessageNotFoundError,
    NoRespondersError,
    TooManyResultsError,
)
from ._models import (
    ConsumerInfo,
    ConsumerPauseResponse,
    DeliverPolicy,
    format_timestamp,
)
from ._models._ranges import check_server_duration, check_server_time
from ._validation import positive_duration, validate_name

__all__ = [
    "Backlog",
    "backlog",
    "clear_backlog",
    "pause",
    "reset",
    "resume",
    "skip_older_than",
]

PAUSE_API_LEVEL: Final = 1
PAUSE_SERVER_VERSION: Final = "2.11"
RESET_API_LEVEL: Final = 4
#: The first and longest pause between two asks of a leaderless stream's info.
LEADERLESS_FIRST_WAIT: Final = 0.05
LEADERLESS_MAX_WAIT: Final = 1.0
RESET_SERVER_VERSION: Final = "2.14"

logger = logging.getLogger("aiojetstream")


@dataclass(frozen=True, slots=True)
class Backlog:
    """A consumer's backlog (Pulsar's subscription backlog), from its info.

    Attributes:
        pending: Messages matching the filter not delivered yet (``num_pending``).
        ack_pending: Delivered, not yet acknowledged (``num_ack_pending``).
        redelivered: Delivered more than once, not yet acknowledged.
        waiting: Pull requests waiting on the server.
        oldest_unacked_sequence: The first stored message after the ack floor
            that the consumer still has to process (with nothing waiting for an
            ack: the next undelivered), or None without a backlog. A message that
            ran out of deliveries (``max_deliver``) while others wait for an ack
            holds the server's ack floor and is reported until none waits. A
            ``last_per_subject`` consumer first delivers the last message of each
            subject as it started, skipping the older ones; while one of those
            comes first, the next of its initial values is found with a batch
            direct get, so it is None when that cannot be done (a stream without
            ``allow_direct``, nats-server < 2.11, over 1,024 subjects).
        oldest_unacked_time: When that message was stored (UTC), or None.
        oldest_unacked_age: How old it was when asked, or None.

    """

    pending: int
    ack_pending: int
    redelivered: int
    waiting: int
    oldest_unacked_sequence: int | None
    oldest_unacked_time: datetime | None
    oldest_unacked_age: timedelta | None


#: How far off the client's clock may be from the server's: a pause's end this far in
#: the past is refused before anything is sent.
CLOCK_MARGIN: Final = timedelta(days=1)
#: Seconds for the look-up that tells a timed-out reset from a deleted consumer.
FOLLOW_UP_TIMEOUT: Final = 1.0


async def _check_level(api: ApiClient, need: int, version: str, feature: str, left: Left) -> None:
    level = await api.api_level(left()) if api.level is None else api.level
    if level < need:
        raise FeatureNotSupportedError(feature, need, level, version)


def _until(until: datetime | timedelta | float | str) -> datetime | timedelta:
    """``until`` checked: a UTC datetime, or the duration from now (InvalidOptionError)."""
    if isinstance(until, datetime):
        if until.tzinfo is None or until.utcoffset() is None:
            raise InvalidOptionError("pause until: a datetime must be timezone-aware")
        try:
            when = until.astimezone(UTC)
        except OverflowError:
            raise InvalidOptionError(
                f"pause until: {B.shown(until)} is out of range in UTC"
            ) from None
        if when <= datetime.now(UTC) - CLOCK_MARGIN:
            # Past by any clock: refused before anything is sent (the server's
            # clock decides the rest, see _pause_request).
            raise InvalidOptionError(f"pause until: {B.shown(until)} is not in the future")
        return when
    delta = positive_duration(until, "pause until", InvalidOptionError)
    try:
        datetime.now(UTC) + delta
    except OverflowError:
        raise InvalidOptionError(f"pause until: {B.shown(until)} is too far ahead") from None
    return delta


def server_now(info: ConsumerInfo) -> datetime:
    """The server's time when it answered ``info`` (its ``ts``; the client's without it).

    Times the server compares with its own clock (a pause's end, a cutoff by
    age) are counted from it: a client clock minutes off paused nothing, or
    skipped (and so deleted, on an interest stream) messages just stored.
    """
    return info.ts if info.ts is not None else datetime.now(UTC)


async def _pause_request(
    api: ApiClient,
    stream: str,
    name: str,
    until: datetime | timedelta | None,
    timeout: float | None,
) -> ConsumerPauseResponse:
    validate_name(stream, "stream")
    validate_name(name, "consumer")
    left = api.budget(timeout)
    await _check_level(api, PAUSE_API_LEVEL, PAUSE_SERVER_VERSION, "consumer pause", left)
    body: dict[str, Any] | None = None
    if until is not None:
        # The server ends the pause by its own clock: "now" is its time, not ours.
        now = server_now(await _info(api, stream, name, left))
        try:
            when = until if isinstance(until, datetime) else now + until
        except OverflowError:
            raise InvalidOptionError(f"pause until: {B.shown(until)} is too far ahead") from None
        if when <= now:
            raise InvalidOptionError(
                f"pause until: {B.shown(until)} is not in the future by the server's clock "
                f"(it is {format_timestamp(now)} there); nothing was paused"
            )
        body = {"pause_until": format_timestamp(when)}
    response = await api.call_model(
        _api.CONSUMER_PAUSE,
        ConsumerPauseResponse,
        body,
        timeout=left(),
        stream=stream,
        consumer=name,
    )
    if not response.paused and response.pause_until is not None and response.pause_until.year < 2:
        # A resume answers Go's zero time: no pause, so no end either.
        response = response.model_copy(update={"pause_until": None})
    return response


async def pause(
    api: ApiClient,
    stream: str,
    name: str,
    until: datetime | timedelta | float | str,
    timeout: float | None,
) -> ConsumerPauseResponse:
    """Pause a consumer until ``until`` (a datetime, or a duration from the server's now)."""
    return await _pause_request(api, stream, name, _until(until), timeout)


async def resume(
    api: ApiClient, stream: str, name: str, timeout: float | None
) -> ConsumerPauseResponse:
    """Resume a paused consumer (an empty pause request)."""
    return await _pause_request(api, stream, name, None, timeout)


async def _info(api: ApiClient, stream: str, name: str, left: Left) -> ConsumerInfo:
    info = await api.call_model(
        _api.CONSUMER_INFO, ConsumerInfo, timeout=left(), stream=stream, consumer=name
    )
    _named(info, stream, name)
    return info


def _named(info: ConsumerInfo, stream: str, name: str) -> None:
    _api.check_named("stream", stream, info.stream_name)
    _api.check_named("consumer", name, info.name)


async def _last_seq(api: ApiClient, stream: str, left: Left) -> int:
    return (await _stream_state(api, stream, left))[0]


async def _stream_state(api: ApiClient, stream: str, left: Left) -> tuple[int, bool, bool]:
    """The stream's last sequence, whether it is a work queue, and whether it denies purges.

    While a replicated stream has no leader, a member of its group answers its
    info itself, with its own state, maybe far behind: ``clear_backlog`` found
    "nothing to clear" (and 1,500 stored messages came after it), a reset's
    range check took an old last sequence. Such an answer is asked again,
    :data:`LEADERLESS_FIRST_WAIT` apart and doubling, within the call's time
    (an election, a scale-up: about 0.1 s); then it raises.

    Raises:
        ClusterUnavailableError: the stream had no leader for the call's whole time.

    """
    pause = LEADERLESS_FIRST_WAIT
    while True:
        reply = await api.call(_api.STREAM_INFO, timeout=left(), stream=stream)
        config, state = reply.get("config", {}), reply.get("state", {})
        if not isinstance(config, dict) or not isinstance(state, dict):
            raise InvalidResponseError(f"unexpected stream info for {stream!r}")
        cluster = reply.get("cluster")
        replicas = config.get("num_replicas", 1)
        led = isinstance(cluster, dict) and bool(cluster.get("leader"))
        if led or not isinstance(replicas, int) or replicas <= 1:
            break
        if left() <= pause:
            raise ClusterUnavailableError(
                503,
                0,
                f"stream {stream!r} has no leader (a member of its group answered its "
                "info, whose state may be behind): try again once one is elected",
            )
        await asyncio.sleep(pause)  # a bounded wait for an election, not a sync
        pause = min(pause * 2, LEADERLESS_MAX_WAIT)
    last = _api.reply_int(state.get("last_seq", 0), "last sequence")
    return last, config.get("retention") == "workqueue", bool(config.get("deny_purge"))


async def reset(
    api: ApiClient,
    stream: str,
    name: str,
    sequence: int | None,
    timeout: float | None,
) -> tuple[int, ConsumerInfo]:
    """Reset a consumer (ADR-style ``CONSUMER.RESET``); return the sequence and the new info.

    Raises:
        InvalidOptionError: ``sequence`` is not an integer >= 1, or beyond the
            stream's last sequence + 1 (the server would silently skip future
            messages).
        ConsumerNotFoundError: the consumer does not exist.
        StreamNotFoundError: the stream does not exist.
        FeatureNotSupportedError: the server is older than 2.14 (API level 4).
        ConsumerResetError: the server refused (10204).

    """
    validate_name(stream, "stream")
    validate_name(name, "consumer")
    if sequence is not None:
        # Before anything is sent: over 2**64 - 1 it was refused after two requests.
        sequence = B.sequence(sequence, "reset sequence")
    left = api.budget(timeout)
    await _check_level(api, RESET_API_LEVEL, RESET_SERVER_VERSION, "consumer reset", left)
    return await _reset(api, stream, name, sequence, left)


async def _reset(
    api: ApiClient, stream: str, name: str, sequence: int | None, left: Left
) -> tuple[int, ConsumerInfo]:
    # The server never answers a reset of a missing consumer: ask first.
    before = await _info(api, stream, name, left)
    if (
        sequence is None
        and before.config.deliver_policy == DeliverPolicy.LAST_PER_SUBJECT
        and before.num_ack_pending > 0
    ):
        # nats-server (2.15.1) keeps the list of initial values a last_per_subject
        # consumer has still to send across a reset: it sends the rest and jumps past
        # them, so a value delivered and not acknowledged never came again, and the
        # floor passed it (on an interest stream it was removed).
        raise InvalidOptionError(
            f"consumer {name!r} of stream {stream!r} delivers the last message per subject "
            f"and has {before.num_ack_pending} unacknowledged: nats-server would not deliver "
            "them again after a reset with no sequence. Acknowledge or nak them first (a "
            "nak redelivers without a reset), or create the consumer anew"
        )
    work_queue = deny_purge = False
    if sequence is not None:
        last, work_queue, deny_purge = await _stream_state(api, stream, left)
        if sequence > last + 1:
            raise InvalidOptionError(
                f"reset sequence {sequence} is beyond stream {stream!r}'s last sequence + 1 "
                f"({last + 1}); the server would skip the next {sequence - last - 1} messages"
            )
    body = None if sequence is None else {"seq": sequence}
    wait = left()  # out of time before sending: raised as it is, no follow-up
    try:
        reply = await api.call(
            _api.CONSUMER_RESET, body, timeout=wait, stream=stream, consumer=name
        )
    except JetStreamTimeoutError:
        # Deleted meanwhile (the server does not answer then): ConsumerNotFoundError.
        # A short look-up past the call's timeout, to tell the two apart.
        await _info(api, stream, name, lambda: min(api.timeout, FOLLOW_UP_TIMEOUT))
        raise
    info = _api.parse(ConsumerInfo, {k: v for k, v in reply.items() if k != "reset_seq"})
    _named(info, stream, name)
    seq = reply.get("reset_seq")
    if not isinstance(seq, int):
        seq = info.delivered.stream_seq + 1
    if work_queue and seq > 1:
        if deny_purge:
            logger.warning(
                "consumer %r of work queue %r was reset to %d, but the stream denies purges: "
                "the messages below it stay stored (and go to the next consumer)",
                name,
                stream,
                seq,
            )
        else:
            try:
                await _remove_below(api, stream, info, seq, left)
            except JetStreamError as exc:
                exc.add_note(
                    f"consumer {name!r} was reset to {seq}; the messages below it were not "
                    "all removed from the work queue"
                )
                raise
    return seq, info


async def _remove_below(
    api: ApiClient, stream: str, info: ConsumerInfo, seq: int, left: Left
) -> None:
    """On a work queue, remove what a reset to ``seq`` counts as acknowledged.

    A work queue removes a message once its consumer acknowledges it, but the
    server removes nothing when a reset moves a consumer past messages (it
    does for interest streams only): they stayed stored, counted against the
    limits (a stream with ``discard: new`` stayed full) and went to the next
    consumer. A work queue gives each subject to one consumer, so what its
    filters match below ``seq`` is this consumer's alone.
    """
    for subject in _filters(info):
        await api.call(
            _api.STREAM_PURGE, {"filter": subject, "seq": seq}, timeout=left(), stream=stream
        )


#: Deliver policies whose consumers the server lets reset to a sequence.
_RESETTABLE: Final = frozenset(
    {DeliverPolicy.ALL, DeliverPolicy.BY_START_SEQUENCE, DeliverPolicy.BY_START_TIME}
)


def _check_resettable(info: ConsumerInfo, what: str) -> None:
    policy = info.config.deliver_policy
    if policy not in _RESETTABLE:
        raise InvalidOptionError(
            f"{what} moves consumer {info.name!r} to a sequence, which the server allows only "
            f"for deliver_policy all, by_start_sequence or by_start_time (not {policy}); "
            "for 'from now on', create it with by_start_sequence at the stream's last + 1"
        )


async def clear_backlog(
    api: ApiClient, stream: str, name: str, timeout: float | None
) -> tuple[int, ConsumerInfo]:
    """Reset to the stream's last sequence + 1: nothing stored now is delivered."""
    validate_name(stream, "stream")
    validate_name(name, "consumer")
    left = api.budget(timeout)
    await _check_level(api, RESET_API_LEVEL, RESET_SERVER_VERSION, "consumer reset", left)
    info = await _info(api, stream, name, left)
    _check_resettable(info, "clear_backlog")
    last = await _last_seq(api, stream, left)
    delivered = info.delivered.stream_seq
    if delivered >= last and not info.num_ack_pending:
        # Nothing stored is left to deliver or to acknowledge (a consumer may even
        # start beyond the end, where the server refuses a reset to last + 1).
        return delivered + 1, info
    return await _reset(api, stream, name, last + 1, left)


def _age(age: float | timedelta | str) -> timedelta:
    """``age`` checked (InvalidOptionError): a cutoff it gives must be a server time."""
    value = check_server_duration(positive_duration(age, "age", InvalidOptionError), "age")
    _cutoff(age, value, datetime.now(UTC))  # (minutes of clock skew do not matter here)
    return value


def _cutoff(age: object, value: timedelta, now: datetime) -> datetime:
    """``now - age``: when the messages ``age`` old were stored (InvalidOptionError)."""
    try:
        cutoff = now - value
    except OverflowError:
        raise InvalidOptionError(f"age: {age!r} reaches before year 1") from None
    # Before 1677-09-21 the server wraps the time to after every message: all skipped.
    return check_server_time(cutoff, "age: the cutoff")


async def skip_older_than(
    api: ApiClient, stream: str, name: str, age: float | timedelta | str, timeout: float | None
) -> tuple[int, ConsumerInfo]:
    """Move this consumer past every message older than ``age``; never backwards.

    Returns the sequence the consumer continues at: the first message stored
    after ``now - age`` (the stream's last + 1 when all are older); the
    delivered but unacknowledged messages below it are skipped. When that
    message was delivered already, the reset goes back to it only if nothing
    after the ack floor was acknowledged (those from it on are delivered
    again); otherwise nothing moves (a reset back would deliver acknowledged
    messages again): it returns where the consumer continues now, and the old
    messages still unacknowledged stay pending (acknowledged or delivered
    again after ``ack_wait``).
    """
    validate_name(stream, "stream")
    validate_name(name, "consumer")
    value = _age(age)
    left = api.budget(timeout)
    await _check_level(api, RESET_API_LEVEL, RESET_SERVER_VERSION, "consumer reset", left)
    loop = asyncio.get_running_loop()
    asked = loop.time()
    info = await _info(api, stream, name, left)
    _check_resettable(info, "skip_older_than")
    # Message times are the server's: the cutoff is counted from its clock, as it was
    # when the call asked (its ts less the look-up's time: never later than then).
    now = server_now(info) - timedelta(seconds=loop.time() - asked)
    cutoff = _cutoff(age, value, now)
    floor = info.ack_floor.stream_seq + 1
    # Read before looking for the cutoff: a message stored in between is younger.
    last = await _last_seq(api, stream, left)
    try:
        reply = await api.call(
            _api.STREAM_MSG_GET,
            {"start_time": format_timestamp(cutoff)},
            timeout=left(),
            stream=stream,
        )
        target = _message_fields(reply)[0]
    except MessageNotFoundError:
        target = last + 1  # every message stored when we looked is older
    delivered = info.delivered.stream_seq
    if target <= floor or (target <= delivered and not _none_acked_above_floor(info)):
        return max(floor, delivered + 1), info
    return await _reset(api, stream, name, target, left)


def _message_fields(reply: dict[str, Any]) -> tuple[int, datetime, str]:
    """Sequence, time and subject of a ``STREAM.MSG.GET`` reply's message.

    Raises:
        InvalidResponseError: a field missing or of the wrong type.

    """
    from ._stream import stored_fields  # (_stream imports the consumers, which import this)

    _, subject, seq, time = stored_fields(reply)
    return seq, time, subject


def _none_acked_above_floor(info: ConsumerInfo) -> bool:
    """True when no message delivered after the ack floor was acknowledged.

    Every delivery after the floor is still pending: as many pending messages
    as deliveries (a redelivery counts twice, so it answers False: unsure).
    """
    deliveries = info.delivered.consumer_seq - info.ack_floor.consumer_seq
    return info.num_ack_pending == deliveries


def _filters(info: ConsumerInfo) -> list[str]:
    config = info.config
    if config.filter_subjects:
        return list(config.filter_subjects)
    if config.filter_subject:
        return [config.filter_subject]
    return [">"]


async def _first_matching(
    api: ApiClient, stream: str, filters: list[str], start: int, left: Left
) -> tuple[int, datetime, str] | None:
    """The first stored message from ``start`` on matching one of ``filters``.

    Its sequence, time and subject; None when there is none.
    """
    first: tuple[int, datetime, str] | None = None
    for subject in filters:
        try:
            reply = await api.call(
                _api.STREAM_MSG_GET,
                {"seq": start, "next_by_subj": subject},
                timeout=left(),
                stream=stream,
            )
        except MessageNotFoundError:
            continue
        found = _message_fields(reply)
        if first is None or found[0] < first[0]:
            first = found
    return first


async def _superseded_before(
    api: ApiClient, stream: str, message: tuple[int, datetime, str], moment: datetime, left: Left
) -> bool:
    """True when a later message on the subject of ``message`` was stored before ``moment``."""
    seq, _, subject = message
    try:
        reply = await api.call(
            _api.STREAM_MSG_GET,
            {"seq": seq + 1, "next_by_subj": subject},
            timeout=left(),
            stream=stream,
        )
    except MessageNotFoundError:
        return False
    return D.time_ns(_message_fields(reply)[1]) < D.time_ns(moment)


async def _first_initial_value(
    api: ApiClient, stream: str, info: ConsumerInfo, start: int, left: Left
) -> tuple[int, datetime] | None:
    """For a ``last_per_subject`` consumer: its first initial value from ``start`` on.

    Called when the first matching message from ``start`` on, and a later one
    on its subject, were stored before the consumer was created: the consumer
    is still delivering its initial values (the last message of each subject
    as it started, in stream order: the server's skip list, not in its info)
    and skips that message. The next initial value is the first of a batch
    direct get ``multi_last`` from ``start`` up to the consumer's creation
    time (the server picks them under the stream's lock after taking that
    time; in a cluster a little later, so a message stored meanwhile can be
    misjudged). None when it cannot be told: the stream does not allow direct
    gets, the server is older than 2.11, over 1,024 subjects match, or none
    is found.
    """
    body = D.last_msgs_request(_filters(info), up_to_time=info.created, batch=1, seq=start)
    try:
        async with D.DirectBatch(
            api, stream, body, up_to_time=info.created, timeout=left()
        ) as batch:
            async for message in batch:
                return message.seq, message.time
    except (
        FeatureNotSupportedError,  # nats-server < 2.11
        TooManyResultsError,  # over 1,024 subjects
    ):
        return None
    except NoRespondersError:
        # No direct get: the stream does not allow them, or none answers now (an
        # election): only the first is "cannot be told".
        reply = await api.call(_api.STREAM_INFO, timeout=left(), stream=stream)
        if reply.get("config", {}).get("allow_direct"):
            raise
        return None
    return None


async def backlog(api: ApiClient, stream: str, name: str, timeout: float | None) -> Backlog:
    """A consumer's backlog: its counters and the oldest message it has yet to process."""
    validate_name(stream, "stream")
    validate_name(name, "consumer")
    left = api.budget(timeout)
    info = await _info(api, stream, name, left)
    oldest: tuple[int, datetime] | None = None
    if info.num_pending or info.num_ack_pending:
        # Nothing waiting for an ack: the oldest to process is the next undelivered (a
        # message that ran out of deliveries, max_deliver, keeps the server's ack floor
        # below it). Otherwise the ack floor + 1; the info does not say which messages
        # wait, so such a message is reported there until none does.
        start = (
            info.ack_floor.stream_seq + 1 if info.num_ack_pending else info.delivered.stream_seq + 1
        )
        first = await _first_matching(api, stream, _filters(info), start, left)
        if first is not None:
            oldest = first[:2]
            if (
                info.config.deliver_policy is DeliverPolicy.LAST_PER_SUBJECT
                and D.time_ns(first[1]) < D.time_ns(info.created)
                and await _superseded_before(api, stream, first, info.created, left)
            ):
                # Stored before the consumer and not the last of its subject then: the
                # consumer is still delivering its initial values and skips this one.
                oldest = await _first_initial_value(api, stream, info, start, left)
    return Backlog(
        pending=info.num_pending,
        ack_pending=info.num_ack_pending,
        redelivered=info.num_redelivered,
        waiting=info.num_waiting,
        oldest_unacked_sequence=oldest[0] if oldest else None,
        oldest_unacked_time=oldest[1] if oldest else None,
        oldest_unacked_age=(server_now(info) - oldest[1]) if oldest else None,
    )
