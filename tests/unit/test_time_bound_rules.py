"""Times and durations past what the server holds: refused before anything is sent (pure).

The server counts time in int64 nanoseconds since 1970 (Go's ``UnixNano``,
which wraps outside 1677-09-21T00:12:43.145224192Z .. 2262-04-11T23:47:16.854775807Z)
and durations in int64 nanoseconds. Each test pins a boundary: its last
representable value accepted, the next one refused with the library's error.
The integration tests (tests/integration/test_time_bounds.py) show what the
server did with the refused values.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from pydantic import ValidationError

from aiojetstream import (
    ConsumerConfig,
    DeliverPolicy,
    InvalidOptionError,
    InvalidScheduleError,
    InvalidStreamConfigError,
    InvalidTTLError,
    KeyValueConfig,
    ObjectStoreConfig,
    OrderedConsumerConfig,
    Schedule,
    StreamConfig,
)
from aiojetstream._admin import _age
from aiojetstream._direct import batch_request, last_msgs_request
from aiojetstream._headers import ttl_header_value
from aiojetstream._kv import kv_stream_config
from aiojetstream._models import NanoDatetime, NanoTimedelta, from_wire, to_wire
from aiojetstream._models._ranges import (
    CLOCK_MARGIN_SECONDS,
    MAX_DURATION_NS,
    MAX_SERVER_TIME_NS,
    MAX_SERVER_TIME_TEXT,
    MIN_SERVER_TIME_NS,
    MIN_SERVER_TIME_TEXT,
    check_config_ranges,
    check_from_now,
    check_server_duration,
    check_server_time,
    seconds_left_on_server_clock,
    unix_ns,
)
from aiojetstream._object import object_stream_config
from aiojetstream._publish import build_headers
from aiojetstream._schedule import schedule_headers
from aiojetstream._ttl_rules import check_stream_config

#: The last instant of the server's clock, and the next one (a nanosecond later).
LAST = NanoDatetime(2262, 4, 11, 23, 47, 16, 854775, UTC, nanosecond=807)
PAST_LAST = NanoDatetime(2262, 4, 11, 23, 47, 16, 854775, UTC, nanosecond=808)
#: The first instant of the server's clock, and the one before it.
FIRST = NanoDatetime(1677, 9, 21, 0, 12, 43, 145224, UTC, nanosecond=192)
BEFORE_FIRST = NanoDatetime(1677, 9, 21, 0, 12, 43, 145224, UTC, nanosecond=191)
#: The longest duration (2**63 - 1 ns) and one nanosecond more.
LONGEST = NanoTimedelta(microseconds=MAX_DURATION_NS // 1000, nanoseconds=807)
TOO_LONG = NanoTimedelta(microseconds=MAX_DURATION_NS // 1000, nanoseconds=808)


def test_the_clock_and_duration_bounds_are_go_int64() -> None:
    assert MAX_DURATION_NS == MAX_SERVER_TIME_NS == 2**63 - 1
    assert MIN_SERVER_TIME_NS == -(2**63)
    assert unix_ns(LAST) == 2**63 - 1
    assert unix_ns(FIRST) == -(2**63)
    assert to_wire(ConsumerConfig(opt_start_time=LAST))["opt_start_time"] == MAX_SERVER_TIME_TEXT
    assert to_wire(ConsumerConfig(opt_start_time=FIRST))["opt_start_time"] == MIN_SERVER_TIME_TEXT
    assert to_wire(ConsumerConfig(ack_wait=LONGEST))["ack_wait"] == 2**63 - 1


def test_server_time_boundaries() -> None:
    for ok in (
        LAST,
        FIRST,
        datetime(2262, 4, 11, 23, 47, 16, 854775, UTC),
        datetime(1970, 1, 1, tzinfo=UTC),
    ):
        assert check_server_time(ok, "t") is ok
    for bad in (
        PAST_LAST,
        BEFORE_FIRST,
        datetime(2262, 4, 11, 23, 47, 16, 854776, UTC),
        datetime(1677, 9, 21, 0, 12, 43, 145224, UTC),
        datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC),
        datetime(1, 1, 1, tzinfo=UTC),  # Go's zero time: the server wraps it too
        datetime(2300, 1, 1, tzinfo=timezone(timedelta(hours=5))),
    ):
        with pytest.raises(InvalidOptionError, match="int64 nanoseconds since 1970"):
            check_server_time(bad, "t")


def test_server_time_in_another_zone_counts_in_utc() -> None:
    # 2262-04-12T01:47:16+02:00 is 23:47:16Z: within the clock.
    plus_two = timezone(timedelta(hours=2))
    assert check_server_time(datetime(2262, 4, 12, 1, 47, 16, tzinfo=plus_two), "t")
    with pytest.raises(InvalidOptionError):
        check_server_time(datetime(2262, 4, 11, 23, 0, tzinfo=timezone(timedelta(hours=-1))), "t")
    # Past datetime's own range once in UTC: refused, not OverflowError.
    with pytest.raises(InvalidOptionError):
        check_server_time(datetime(9999, 12, 31, 23, 0, tzinfo=timezone(timedelta(hours=-23))), "t")
    with pytest.raises(InvalidOptionError):
        check_server_time(datetime(1, 1, 1, 1, 0, tzinfo=timezone(timedelta(hours=23))), "t")


def test_naive_and_non_datetimes_are_refused() -> None:
    for bad in (datetime(2030, 1, 1), "2030-01-01T00:00:00Z", 0, None):
        with pytest.raises(InvalidOptionError, match="timezone-aware"):
            check_server_time(bad, "t")


def test_duration_boundaries() -> None:
    assert check_server_duration(LONGEST, "d") is LONGEST
    assert check_server_duration(timedelta(seconds=-5), "d")  # server data may be negative
    for bad in (TOO_LONG, timedelta(days=999_999_999), timedelta(seconds=2**63 // 10**9 + 1)):
        with pytest.raises(InvalidOptionError, match="int64 nanoseconds"):
            check_server_duration(bad, "d")


def test_seconds_left_on_the_clock_keep_a_day_clear() -> None:
    now = 1_800_000_000 * 10**9
    assert seconds_left_on_server_clock(now) == (2**63 - 1 - now) // 10**9 - CLOCK_MARGIN_SECONDS
    left = seconds_left_on_server_clock()
    check_from_now(left - 5, "x")
    with pytest.raises(InvalidOptionError, match="end of the server's clock"):
        check_from_now(left + 5, "x")


# --------------------------------------------------------------------------- configs


@pytest.mark.parametrize(
    ("config", "field"),
    [
        (
            ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=PAST_LAST),
            "ConsumerConfig.opt_start_time",
        ),
        (
            ConsumerConfig(
                deliver_policy=DeliverPolicy.BY_START_TIME,
                opt_start_time=datetime(2262, 4, 12, tzinfo=UTC),
            ),
            "ConsumerConfig.opt_start_time",
        ),
        (
            ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=BEFORE_FIRST),
            "ConsumerConfig.opt_start_time",
        ),
        (ConsumerConfig(ack_wait=TOO_LONG), "ConsumerConfig.ack_wait"),
        (ConsumerConfig(ack_wait=1e10), "ConsumerConfig.ack_wait"),
        (ConsumerConfig(backoff=[1, 2, timedelta(days=200_000)]), r"ConsumerConfig.backoff\[2\]"),
        (ConsumerConfig(inactive_threshold=1e10), "ConsumerConfig.inactive_threshold"),
        (ConsumerConfig(idle_heartbeat=1e10), "ConsumerConfig.idle_heartbeat"),
        (ConsumerConfig(max_expires=1e10), "ConsumerConfig.max_expires"),
        (ConsumerConfig(priority_timeout=1e10), "ConsumerConfig.priority_timeout"),
        (StreamConfig(name="S", max_age=TOO_LONG), "StreamConfig.max_age"),
        (StreamConfig(name="S", duplicate_window=1e10), "StreamConfig.duplicate_window"),
        (
            StreamConfig(name="S", subject_delete_marker_ttl=1e10),
            "StreamConfig.subject_delete_marker_ttl",
        ),
        (
            StreamConfig(
                name="S", sources=[{"name": "A"}, {"name": "B", "opt_start_time": PAST_LAST}]
            ),
            r"StreamConfig.sources\[1\].opt_start_time",
        ),
        (
            StreamConfig(name="S", mirror={"name": "A", "opt_start_time": "9999-01-01T00:00:00Z"}),
            "StreamConfig.mirror.opt_start_time",
        ),
        (
            StreamConfig(name="S", consumer_limits={"inactive_threshold": 1e10}),
            "StreamConfig.consumer_limits.inactive_threshold",
        ),
    ],
)
def test_configs_out_of_range_name_the_field(
    config: ConsumerConfig | StreamConfig, field: str
) -> None:
    with pytest.raises(InvalidOptionError, match=field):
        check_config_ranges(config)


def test_configs_at_the_bounds_pass() -> None:
    check_config_ranges(
        ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_TIME,
            opt_start_time=LAST,
            ack_wait=LONGEST,
            backoff=[LONGEST, LONGEST],
            inactive_threshold=LONGEST,
            idle_heartbeat=LONGEST,
            max_expires=LONGEST,
            priority_timeout=LONGEST,
        )
    )
    check_config_ranges(
        StreamConfig(
            name="S",
            max_age=LONGEST,
            duplicate_window=LONGEST,
            sources=[{"name": "A", "opt_start_time": FIRST}],
            consumer_limits={"inactive_threshold": LONGEST},
        )
    )


def test_pause_until_is_kept_as_a_time_by_the_server() -> None:
    # The server compares pause_until as a time.Time (never UnixNano): any year works.
    check_config_ranges(ConsumerConfig(pause_until=datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)))


def test_a_number_set_by_model_copy_is_checked_as_seconds() -> None:
    # model_copy(update=...) skips validation; the bare number is sent as seconds.
    config = StreamConfig(name="S").model_copy(update={"max_age": 10**10})
    with pytest.raises(InvalidOptionError, match=r"StreamConfig\.max_age"):
        check_config_ranges(config)
    check_config_ranges(StreamConfig(name="S").model_copy(update={"max_age": 9_223_372_036}))


def test_a_config_read_from_the_server_passes() -> None:
    info = from_wire(
        StreamConfig,
        {"name": "S", "max_age": 2**63 - 1, "duplicate_window": 120_000_000_000, "unknown": 1},
    )
    check_config_ranges(info)


@pytest.mark.parametrize("freq", ["0", "50", "50%", "100%", "100", ""])
def test_sample_freq_percentages(freq: str) -> None:
    check_config_ranges(ConsumerConfig(sample_freq=freq))


@pytest.mark.parametrize("freq", ["101", "4294967346%", "2147483648", "-1", "50 %", "x", "1e3"])
def test_sample_freq_outside_0_to_100(freq: str) -> None:
    # The server keeps it in an int32: 4294967346% wrapped to 50%.
    with pytest.raises(InvalidOptionError, match="sample_freq must be a percentage"):
        check_config_ranges(ConsumerConfig(sample_freq=freq))


def test_kv_and_object_store_configs_reach_the_stream_check() -> None:
    with pytest.raises(InvalidOptionError, match=r"StreamConfig\.max_age"):
        check_config_ranges(kv_stream_config(KeyValueConfig(bucket="b", ttl=1e10)))
    with pytest.raises(InvalidOptionError, match=r"StreamConfig\.max_age"):
        check_config_ranges(object_stream_config(ObjectStoreConfig(bucket="b", ttl=1e10)))
    check_config_ranges(kv_stream_config(KeyValueConfig(bucket="b", ttl=LONGEST)))


def test_ordered_consumer_start_time() -> None:
    config = OrderedConsumerConfig(
        deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=PAST_LAST
    )
    with pytest.raises(InvalidOptionError, match="opt_start_time"):
        check_config_ranges(config)


# --------------------------------------------------------------------------- marker TTL


def test_marker_ttl_must_end_before_the_server_clock() -> None:
    left = seconds_left_on_server_clock()
    check_stream_config(StreamConfig(name="S", subject_delete_marker_ttl=left - 60))
    for too_long in (left + 60, 9_223_372_036, LONGEST):
        with pytest.raises(InvalidStreamConfigError, match="subject_delete_marker_ttl"):
            check_stream_config(StreamConfig(name="S", subject_delete_marker_ttl=too_long))


def test_kv_limit_marker_ttl_is_the_stream_marker_ttl() -> None:
    left = seconds_left_on_server_clock()
    config = kv_stream_config(KeyValueConfig(bucket="b", limit_marker_ttl=left + 60))
    with pytest.raises(InvalidStreamConfigError, match="end of the server's clock"):
        check_stream_config(config)


# --------------------------------------------------------------------------- TTL headers


def ttl_sent(ttl: object) -> str:
    """The ``Nats-TTL`` a publish sends for ``ttl``."""
    headers = build_headers(None, None, ttl, None, None, None, None)  # type: ignore[arg-type]
    assert headers is not None
    return headers["Nats-TTL"]


def test_message_ttl_must_end_before_the_server_clock() -> None:
    left = seconds_left_on_server_clock()
    assert ttl_sent(left - 60) == str(left - 60)
    assert ttl_sent(timedelta(seconds=left - 60)) == str(left - 60)
    assert ttl_sent("never") == "never"
    for too_long in (
        left + 60,
        9_223_372_036,
        9_223_372_037,
        "99999999999999999999",  # the server's parseInt64 wrapped it
        f"{(left + 3600) // 3600}h",
        1e300,
        timedelta(days=999_999_999),
    ):
        with pytest.raises(InvalidTTLError, match="use 'never'"):
            ttl_sent(too_long)
    # The header's own rules stay pure (no clock: the pull engine imports them).
    assert ttl_header_value(9_223_372_037) == "9223372037"


# --------------------------------------------------------------------------- schedules


def test_schedule_at_boundaries() -> None:
    assert Schedule.at(LAST).spec == f"@at {MAX_SERVER_TIME_TEXT}"
    assert Schedule.at(FIRST).spec == f"@at {MIN_SERVER_TIME_TEXT}"
    for bad in (
        PAST_LAST,
        BEFORE_FIRST,
        datetime(2300, 1, 1, tzinfo=UTC),  # fired at once
        datetime(1600, 1, 1, tzinfo=UTC),  # never fired
    ):
        with pytest.raises(InvalidScheduleError, match="int64 nanoseconds since 1970"):
            Schedule.at(bad)


def test_schedule_every_must_first_fire_before_the_server_clock_ends() -> None:
    left = seconds_left_on_server_clock()
    whole_hours = (left // 3600) * 3600
    assert Schedule.every(whole_hours).spec == f"@every {whole_hours // 3600}h0m0s"
    with pytest.raises(InvalidScheduleError, match="end of the server's clock"):
        Schedule.every(left + 3600)


def test_schedule_headers_check_the_clock_again() -> None:
    # A Schedule made with its constructor is not checked; the publish checks it.
    for spec in ("@at 2300-01-01T00:00:00Z", "@at 1600-01-01T00:00:00Z", "@every 2500000h"):
        with pytest.raises(InvalidScheduleError):
            schedule_headers("s", None, Schedule(spec), "t", None)
    headers = schedule_headers("s", None, Schedule(f"@at {MAX_SERVER_TIME_TEXT}"), "t", None)
    assert headers["Nats-Schedule"] == f"@at {MAX_SERVER_TIME_TEXT}"


def test_schedule_ttl_is_a_message_ttl() -> None:
    with pytest.raises(InvalidTTLError):
        schedule_headers("s", None, Schedule.every(60), "t", 9_223_372_037)


# --------------------------------------------------------------------------- gets and resets


def test_get_batch_start_time_within_the_clock() -> None:
    assert batch_request(5, start_time=LAST)["start_time"] == MAX_SERVER_TIME_TEXT
    for bad in (PAST_LAST, datetime(2300, 1, 1, tzinfo=UTC), BEFORE_FIRST):
        with pytest.raises(InvalidOptionError, match="start_time"):
            batch_request(5, start_time=bad)


def test_last_msgs_up_to_time_within_the_clock() -> None:
    assert last_msgs_request("a.>", up_to_time=LAST)["up_to_time"] == MAX_SERVER_TIME_TEXT
    for bad in (PAST_LAST, BEFORE_FIRST):
        with pytest.raises(InvalidOptionError, match="up_to_time"):
            last_msgs_request("a.>", up_to_time=bad)


def test_skip_older_than_age_within_a_duration() -> None:
    assert _age(timedelta(days=365 * 200)) == timedelta(days=365 * 200)
    # 400 years back is before 1677: the server wrapped it and everything was skipped.
    for bad in (timedelta(days=365 * 400), 10**10, TOO_LONG):
        with pytest.raises(InvalidOptionError, match="age"):
            _age(bad)


def test_giant_ints_are_the_librarys_errors_not_overflow_errors() -> None:
    """``float(10**400)`` and ``math.isfinite(10**400)`` raise OverflowError."""
    for giant in (10**400, 10**5000):
        with pytest.raises(InvalidTTLError, match="too long"):
            ttl_header_value(giant)
        with pytest.raises(InvalidScheduleError, match="out of range"):
            Schedule.every(giant)
        with pytest.raises(InvalidOptionError, match="out of range"):
            _age(giant)


def test_a_giant_int_duration_in_a_config_is_worded() -> None:
    with pytest.raises(
        ValidationError, match="duration out of range: an int of about 5,001 digits"
    ):
        ConsumerConfig(ack_wait=10**5000)


def test_a_giant_int_as_a_batch_get_time_is_invalid_option_error() -> None:
    """check_server_time quoted the value with repr(): a giant int raised Python's
    own ValueError from the message instead of InvalidOptionError."""
    from aiojetstream import InvalidOptionError
    from aiojetstream._models._ranges import check_server_time

    with pytest.raises(InvalidOptionError, match="digits"):
        check_server_time(10**5000, "start_time")


@pytest.mark.parametrize(
    "seconds", [10**14, 2**64, 10**5000, 1e300], ids=["1e14", "2**64", "giant", "1e300"]
)
def test_a_config_duration_past_timedelta_s_range_is_refused_naming_the_field(
    seconds: float,
) -> None:
    """Seconds set with model_copy beyond timedelta's range were skipped by the check
    (the serialiser then failed with PydanticSerializationError, or a bound in the
    wrong unit)."""
    from aiojetstream import ConsumerConfig, InvalidOptionError
    from aiojetstream._models._ranges import check_config_ranges

    config = ConsumerConfig(durable_name="d").model_copy(update={"ack_wait": seconds})
    with pytest.raises(InvalidOptionError, match=r"ConsumerConfig\.ack_wait .* too long"):
        check_config_ranges(config, "ConsumerConfig")


def test_the_short_ttl_path_still_checks_long_ttls() -> None:
    """Up to 9 digits a TTL skips the clock (31.7 years end before 2262 until ~2230);
    ten digits are checked against it."""
    from aiojetstream import InvalidTTLError
    from aiojetstream._models._ranges import check_ttl_from_now

    assert check_ttl_from_now("999999999") == "999999999"
    assert check_ttl_from_now("never") == "never"
    with pytest.raises(InvalidTTLError, match="end of the server's clock"):
        check_ttl_from_now("9999999999")


def test_durations_and_times_in_messages_are_readable_not_reprs() -> None:
    """``got datetime.timedelta(microseconds=500000)`` was shown to the command line's users."""
    from aiojetstream._admin import _until
    from aiojetstream._bounds import shown
    from aiojetstream._ttl_rules import check_stream_config

    assert shown(timedelta(microseconds=500_000)) == "0.5 s"
    assert shown(timedelta(days=300_000)) == "25,920,000,000 s"
    assert shown(timedelta(microseconds=1)) == "0.000001 s"
    assert shown(timedelta(seconds=-2)) == "-2 s"
    assert shown(datetime(1, 1, 1, tzinfo=UTC)) == "0001-01-01T00:00:00+00:00"
    config = StreamConfig(name="S", subject_delete_marker_ttl=timedelta(milliseconds=500))
    with pytest.raises(InvalidStreamConfigError, match=r"at least 1 second, got 0\.5 s \("):
        check_stream_config(config)
    with pytest.raises(ValidationError, match=r"at least 1 second \(ADR-48\), got 0\.5 s;"):
        KeyValueConfig(bucket="B", limit_marker_ttl=timedelta(milliseconds=500))
    with pytest.raises(
        InvalidOptionError, match=r"^pause until: 0001-01-01T00:00:00\+00:00 is not in the future$"
    ):
        _until(datetime(1, 1, 1, tzinfo=UTC))
    with pytest.raises(InvalidOptionError, match=r"^pause until: 2000-01-01T00:00:00\+00:00 is"):
        _until(datetime(2000, 1, 1, tzinfo=UTC))
