"""Message schedules (ADR-51) on a real server: at, every, cron, cancel, every error code."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from aiojetstream import (
    FeatureNotSupportedError,
    InvalidOptionError,
    InvalidScheduleError,
    JetStreamContext,
    MessageNotFoundError,
    MessageScheduleError,
    MessageTTLDisabledError,
    Schedule,
    SchedulePatternInvalidError,
    SchedulerInvalidError,
    ScheduleRollupInvalidError,
    SchedulesDisabledError,
    ScheduleSourceInvalidError,
    ScheduleTargetInvalidError,
    ScheduleTimeZoneInvalidError,
    ScheduleTTLInvalidError,
    Stream,
    StreamConfig,
    StreamConfigError,
)
from aiojetstream._direct import time_ns
from aiojetstream._models import parse_timestamp
from helpers import unique_name, wait_until


async def schedule_stream(js: JetStreamContext, *, ttl: bool = True) -> tuple[Stream, str]:
    name = unique_name("SCH")
    p = name.lower()
    stream = await js.create_stream(
        StreamConfig(
            name=name,
            subjects=[f"{p}.sched.>", f"{p}.orders.>"],
            allow_msg_schedules=True,
            allow_msg_ttl=ttl,
        )
    )
    return stream, p


async def count(stream: Stream, subject: str) -> int:
    info = await stream.info(subjects_filter=subject)
    return (info.state.subjects or {}).get(subject, 0)


async def test_at_fires_once_with_headers_and_ttl(js: JetStreamContext) -> None:
    stream, p = await schedule_stream(js)
    assert stream.cached_info.config.allow_rollup_hdrs  # the server turns it on
    ack = await js.publish(
        f"{p}.sched.one",
        b"payload",
        headers={"X-App": "keep"},
        schedule=Schedule.at(datetime.now(UTC) + timedelta(seconds=1)),
        schedule_target=f"{p}.orders.one",
        schedule_ttl=timedelta(minutes=5),
    )
    assert ack.stream == stream.name
    await wait_until(lambda: _at_least(stream, f"{p}.orders.one", 1), timeout=10)

    async def schedule_gone() -> bool:
        try:
            await stream.get_last_msg_for_subject(f"{p}.sched.one")
        except MessageNotFoundError:
            return True
        return False

    await wait_until(schedule_gone, timeout=10)
    msg = await stream.get_last_msg_for_subject(f"{p}.orders.one")
    assert msg.data == b"payload"
    assert msg.headers is not None
    assert msg.headers["X-App"] == "keep"
    assert msg.headers["Nats-Scheduler"] == f"{p}.sched.one"
    assert msg.headers["Nats-Schedule-Next"] == "purge"
    assert msg.headers["Nats-TTL"] in {"300", "5m"}


async def test_every_repeats_until_cancelled(js: JetStreamContext) -> None:
    stream, p = await schedule_stream(js)
    fut = await js.publish_async(
        f"{p}.sched.tick",
        b"tick",
        schedule=Schedule.every(1),
        schedule_target=f"{p}.orders.tick",
    )
    await fut
    await wait_until(lambda: _at_least(stream, f"{p}.orders.tick", 2), timeout=10)
    assert await js.cancel_schedule(f"{p}.sched.tick") is True
    assert await js.cancel_schedule(f"{p}.sched.tick") is False
    with pytest.raises(MessageNotFoundError):
        await stream.get_last_msg_for_subject(f"{p}.sched.tick")


async def test_every_counts_from_when_the_schedule_was_stored(js: JetStreamContext) -> None:
    """Not from whole multiples of the interval (as the docs said): the firings are the
    schedule's store time rounded to the nearest second plus 1, 2, ... intervals."""
    stream, p = await schedule_stream(js)
    await js.publish(
        f"{p}.sched.tick", b"", schedule=Schedule.every(3), schedule_target=f"{p}.orders.tick"
    )
    stored = time_ns((await stream.get_last_msg_for_subject(f"{p}.sched.tick")).time)
    anchor = (stored + 500_000_000) // 10**9 * 10**9  # Go's Round(time.Second)
    await wait_until(lambda: _at_least(stream, f"{p}.orders.tick", 1), timeout=10)
    await js.cancel_schedule(f"{p}.sched.tick")
    fired = await stream.get_last_msg_for_subject(f"{p}.orders.tick")
    assert fired.headers is not None
    assert time_ns(parse_timestamp(fired.headers["Nats-Schedule-Next"])) == anchor + 6 * 10**9
    assert anchor + 3 * 10**9 <= time_ns(fired.time) < anchor + 6 * 10**9


async def test_cancel_schedule_refuses_a_subject_that_holds_no_schedule(
    js: JetStreamContext,
) -> None:
    """Given the target subject (or any other) by mistake, cancel_schedule purges nothing."""
    stream, p = await schedule_stream(js)
    await js.publish(f"{p}.orders.kept", b"data")
    with pytest.raises(InvalidOptionError, match="holds no schedule"):
        await js.cancel_schedule(f"{p}.orders.kept")
    assert (await stream.get_last_msg_for_subject(f"{p}.orders.kept")).data == b"data"


async def test_cancel_schedule_purges_up_to_the_schedule(js: JetStreamContext) -> None:
    """Older messages on the schedule subject go with it; the purge stops at the schedule."""
    stream, p = await schedule_stream(js)
    await js.publish(f"{p}.sched.later", b"old")
    await js.publish(
        f"{p}.sched.later",
        b"later",
        schedule=Schedule.at(datetime.now(UTC) + timedelta(hours=1)),
        schedule_target=f"{p}.orders.later",
    )
    assert await js.cancel_schedule(f"{p}.sched.later") is True
    assert await count(stream, f"{p}.sched.later") == 0
    assert await js.cancel_schedule(f"{p}.sched.later") is False


async def _at_least(stream: Stream, subject: str, n: int) -> bool:
    return await count(stream, subject) >= n


async def test_cron_with_time_zone_fires(js: JetStreamContext) -> None:
    """A cron for the current minute in Asia/Kolkata (UTC+05:30, no daylight saving)
    fires; the same cron in UTC names a time 5.5 hours away and does not."""
    stream, p = await schedule_stream(js)
    now = datetime.now(ZoneInfo("Asia/Kolkata"))
    soon = now + timedelta(minutes=1)  # in case the minute ends before the server looks
    cron = f"* {now.minute},{soon.minute} {now.hour},{soon.hour} * * *"
    for zone, target in (("Asia/Kolkata", "kolkata"), ("UTC", "utc")):
        await js.publish(
            f"{p}.sched.{target}",
            b"c",
            schedule=Schedule.cron(cron, time_zone=zone),
            schedule_target=f"{p}.orders.{target}",
        )
    await wait_until(lambda: _at_least(stream, f"{p}.orders.kolkata", 2), timeout=10)
    assert await count(stream, f"{p}.orders.utc") == 0  # fired twice meanwhile in Kolkata
    await js.cancel_schedule(f"{p}.sched.kolkata")
    await js.cancel_schedule(f"{p}.sched.utc")


async def test_shorthand_is_accepted(js: JetStreamContext) -> None:
    stream, p = await schedule_stream(js)
    for shorthand in ("@hourly", "@daily", "@weekly", "@monthly", "@yearly"):
        ack = await js.publish(
            f"{p}.sched.{shorthand[1:]}",
            b"",
            schedule=Schedule.cron(shorthand),
            schedule_target=f"{p}.orders.s",
        )
        stored = await stream.get_msg(ack.seq)
        assert stored.subject == f"{p}.sched.{shorthand[1:]}"
        assert stored.headers is not None
        assert stored.headers["Nats-Schedule"] == shorthand
        assert stored.headers["Nats-Schedule-Target"] == f"{p}.orders.s"
    assert (await stream.info()).state.messages == 5  # five schedules, all held


async def test_client_side_checks(js: JetStreamContext) -> None:
    _, p = await schedule_stream(js)
    with pytest.raises(InvalidScheduleError):
        await js.publish(f"{p}.sched.x", b"", schedule=Schedule.every(1))
    with pytest.raises(InvalidScheduleError):
        await js.publish(
            f"{p}.sched.x", b"", schedule=Schedule.every(1), schedule_target=f"{p}.sched.x"
        )
    with pytest.raises(InvalidScheduleError):
        await js.publish(f"{p}.sched.x", b"", schedule_target=f"{p}.orders.x")


async def test_server_error_codes(js: JetStreamContext) -> None:
    _, p = await schedule_stream(js)
    sched, target = f"{p}.sched.e", f"{p}.orders.e"
    # Through the API: a target outside the stream, a time zone the server does not know.
    with pytest.raises(ScheduleTargetInvalidError) as outside:
        await js.publish(sched, b"", schedule=Schedule.every(1), schedule_target="elsewhere.x")
    assert outside.value.err_code == 10190
    with pytest.raises(ScheduleTimeZoneInvalidError) as zone:
        await js.publish(
            sched,
            b"",
            schedule=Schedule.cron("0 0 5 * * *", time_zone="Mars/Olympus_Mons"),
            schedule_target=target,
        )
    assert zone.value.err_code == 10223
    # Hand-made headers reach the server's own checks.
    cases: list[tuple[dict[str, str], type[MessageScheduleError], int]] = [
        ({"Nats-Schedule": "@every 500ms"}, SchedulePatternInvalidError, 10189),
        ({"Nats-Schedule": "bogus"}, SchedulePatternInvalidError, 10189),
        ({"Nats-Schedule": "0 0 5 * *"}, SchedulePatternInvalidError, 10189),
        (
            {"Nats-Schedule": "@every 1s", "Nats-Schedule-Time-Zone": "Europe/Amsterdam"},
            SchedulePatternInvalidError,
            10189,
        ),
        ({"Nats-Schedule-TTL": "abc"}, ScheduleTTLInvalidError, 10191),
        ({"Nats-Schedule-Rollup": "all"}, ScheduleRollupInvalidError, 10192),
        ({"Nats-Schedule-Source": f"{p}.orders.*"}, ScheduleSourceInvalidError, 10203),
    ]
    for extra, cls, code in cases:
        headers = {"Nats-Schedule": "@every 1s", "Nats-Schedule-Target": target, **extra}
        with pytest.raises(cls) as info:
            await js.publish(sched, b"", headers=headers)
        assert info.value.err_code == code, extra
    with pytest.raises(ScheduleTargetInvalidError):
        await js.publish(sched, b"", headers={"Nats-Schedule": "@every 1s"})
    with pytest.raises(SchedulerInvalidError) as scheduler:
        await js.publish(
            sched, b"", headers={"Nats-Scheduler": sched, "Nats-Schedule-Next": "purge"}
        )
    assert scheduler.value.err_code == 10212
    # A schedule TTL without allow_msg_ttl is the TTL error, 10166.
    _, q = await schedule_stream(js, ttl=False)
    with pytest.raises(MessageTTLDisabledError):
        await js.publish(
            f"{q}.sched.t",
            b"",
            schedule=Schedule.every(1),
            schedule_target=f"{q}.orders.t",
            schedule_ttl=60,
        )
    # Schedules on a stream without them.
    plain = unique_name("PLAIN")
    await js.create_stream(StreamConfig(name=plain, subjects=[f"{plain}.>"]))
    with pytest.raises(SchedulesDisabledError) as disabled:
        await js.publish(
            f"{plain}.s", b"", schedule=Schedule.every(1), schedule_target=f"{plain}.t"
        )
    assert disabled.value.err_code == 10188


async def test_stream_config_rules(js: JetStreamContext) -> None:
    name = unique_name("LATE")
    await js.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
    # Enabled by an update...
    updated = await js.update_stream(
        StreamConfig(name=name, subjects=[f"{name}.>"], allow_msg_schedules=True)
    )
    assert updated.cached_info.config.allow_msg_schedules is True
    # ...never disabled.
    with pytest.raises(StreamConfigError) as info:
        await js.update_stream(
            updated.cached_info.config.model_copy(update={"allow_msg_schedules": False})
        )
    assert info.value.err_code == 10052


async def test_old_server_is_refused(js: JetStreamContext) -> None:
    _, p = await schedule_stream(js)
    js._api.level = 1
    try:
        at = Schedule.at(datetime.now(UTC) + timedelta(hours=1))
        with pytest.raises(FeatureNotSupportedError) as info:
            await js.publish(f"{p}.sched.x", b"", schedule=at, schedule_target=f"{p}.orders.x")
        assert info.value.server_version == "2.12"
        with pytest.raises(FeatureNotSupportedError):
            await js.cancel_schedule(f"{p}.sched.x")
    finally:
        js._api.level = None


@pytest.mark.parametrize("level", [2, 3])
@pytest.mark.parametrize(
    "schedule",
    [
        Schedule.every(60),
        Schedule.cron("@hourly"),
        Schedule.cron("0 0 5 * * *", "Europe/Amsterdam"),
    ],
    ids=repr,
)
@pytest.mark.parametrize("how", ["publish", "publish_async"])
async def test_intervals_and_cron_need_2_14(
    js: JetStreamContext, level: int, schedule: Schedule, how: str
) -> None:
    """nats-server 2.12 (API level 2, 3 from 2.12.8) takes ``@at`` schedules only:
    ``every`` and ``cron`` were sent and refused as an invalid pattern (10189); they
    came with 2.14 (level 4)."""
    _, p = await schedule_stream(js)
    js._api.level = level
    try:
        with pytest.raises(FeatureNotSupportedError) as info:
            await getattr(js, how)(
                f"{p}.sched.x", b"", schedule=schedule, schedule_target=f"{p}.orders.x"
            )
        assert info.value.server_version == "2.14"
        assert "every" in str(info.value)
        # @at is what 2.12 takes
        when = datetime.now(UTC) + timedelta(hours=1)
        sent = await getattr(js, how)(
            f"{p}.sched.y", b"", schedule=Schedule.at(when), schedule_target=f"{p}.orders.y"
        )
        if how == "publish_async":
            sent = await sent
        assert sent.seq == 1
    finally:
        js._api.level = None


async def test_the_cron_forms_the_client_takes_are_taken_by_the_server(
    js: JetStreamContext,
) -> None:
    """Names, ranges, lists and ``?`` pass both checks (L, W and # pass neither)."""
    stream, p = await schedule_stream(js)
    forms = ["0 30 9 * * MON-FRI", "0 0 0 * jan-mar *", "0 0 0 ? JUL WED,sat", "*/5 1-3 * * * ?"]
    for i, expr in enumerate(forms):
        await js.publish(
            f"{p}.sched.c{i}", b"x", schedule=Schedule.cron(expr), schedule_target=f"{p}.orders.c"
        )
    assert (await stream.info()).state.messages == len(forms)
    for quartz in ("0 0 0 L * *", "0 0 0 15W * *", "0 0 0 * * 5#3"):
        with pytest.raises(InvalidScheduleError):
            Schedule.cron(quartz)
