"""Message schedules (ADR-51), pure parts: Schedule values and the scheduled publish's headers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiojetstream import InvalidOptionError, InvalidScheduleError, InvalidTTLError, Schedule
from aiojetstream._headers import format_go_duration, parse_go_duration
from aiojetstream._models._ranges import seconds_left_on_server_clock
from aiojetstream._schedule import PREDEFINED, schedule_headers

DURATIONS = st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=400))


@given(DURATIONS)
def test_go_duration_round_trips(delta: timedelta) -> None:
    text = format_go_duration(delta)
    assert abs(parse_go_duration(text) - delta.total_seconds()) < 1e-6


@pytest.mark.parametrize(
    ("delta", "text"),
    [
        (timedelta(0), "0s"),
        (timedelta(seconds=1), "1s"),
        (timedelta(seconds=90), "1m30s"),
        (timedelta(hours=1), "1h0m0s"),
        (timedelta(seconds=1.5), "1.5s"),
        (timedelta(milliseconds=500), "500ms"),
        (timedelta(days=1, seconds=5), "24h0m5s"),
    ],
)
def test_go_duration_matches_go(delta: timedelta, text: str) -> None:
    assert format_go_duration(delta) == text


@given(st.integers(min_value=1, max_value=365 * 86_400))
def test_every_accepts_whole_seconds_from_one(seconds: int) -> None:
    delta = timedelta(seconds=seconds)
    spec = Schedule.every(delta).spec
    assert spec.startswith("@every ")
    assert parse_go_duration(spec[7:]) == seconds
    assert Schedule.every(seconds) == Schedule.every(float(seconds)) == Schedule.every(delta)


@given(
    st.timedeltas(min_value=timedelta(seconds=1), max_value=timedelta(days=365)).filter(
        lambda d: d.microseconds != 0
    )
)
def test_every_refuses_a_fraction_of_a_second(delta: timedelta) -> None:
    """The server takes ``@every 1.5s`` but fires every 2 s: refused before sending."""
    with pytest.raises(InvalidScheduleError, match="whole number of seconds"):
        Schedule.every(delta)
    with pytest.raises(InvalidScheduleError, match="whole number of seconds"):
        Schedule.every(delta.total_seconds())


def test_every_whole_and_fractional_seconds() -> None:
    assert Schedule.every(2.0).spec == "@every 2s"
    assert Schedule.every(timedelta(seconds=2)).spec == "@every 2s"
    assert Schedule.every(timedelta(milliseconds=3000)).spec == "@every 3s"
    for bad in (1.5, 2.5, 1.0000001, timedelta(seconds=1.5), timedelta(seconds=2, microseconds=1)):
        with pytest.raises(InvalidScheduleError, match="whole number of seconds"):
            Schedule.every(bad)
    for huge in (1e300, 10**30):  # beyond timedelta: a typed error, not OverflowError
        with pytest.raises(InvalidScheduleError):
            Schedule.every(huge)
    # Within a timedelta but over a Go duration (the server refused the pattern).
    for long in (10**10, timedelta(days=365 * 300)):
        with pytest.raises(InvalidScheduleError, match="Go duration"):
            Schedule.every(long)
    # The longest: the first firing (now + interval) within the server's clock, less a day;
    # a Go duration past it (9,223,372,036 s) fired at once and over and over.
    longest = seconds_left_on_server_clock() - 60
    assert Schedule.every(longest).spec.startswith("@every ")
    with pytest.raises(InvalidScheduleError, match="end of the server's clock"):
        Schedule.every(9_223_372_036)


@given(st.timedeltas(min_value=timedelta(days=-5), max_value=timedelta(microseconds=999_999)))
def test_every_refuses_under_one_second(delta: timedelta) -> None:
    with pytest.raises(InvalidScheduleError):
        Schedule.every(delta)


def test_every_takes_seconds() -> None:
    assert Schedule.every(90) == Schedule.every(timedelta(seconds=90))
    assert Schedule.every(90).spec == "@every 1m30s"
    assert Schedule.every("1m30s") == Schedule.every("90") == Schedule.every(90)
    assert Schedule.every("1d").spec == "@every 24h0m0s"
    for bad in (0.5, float("nan"), float("inf"), True, "1x", "1.5s", "500ms", "1h-30m"):
        with pytest.raises(InvalidScheduleError):
            Schedule.every(bad)


def test_at_is_sent_in_utc() -> None:
    when = datetime(2030, 1, 1, 2, 0, tzinfo=timezone(timedelta(hours=2)))
    assert Schedule.at(when).spec == "@at 2030-01-01T00:00:00Z"
    with pytest.raises(InvalidScheduleError):
        Schedule.at(datetime(2030, 1, 1))  # naive


FIELD = st.sampled_from(["*", "0", "*/5", "1-5", "1,2,3", "?", "MON", "JAN"])


@given(st.lists(FIELD, min_size=6, max_size=6))
def test_cron_with_six_fields(fields: list[str]) -> None:
    expr = " ".join(fields)
    assert Schedule.cron(f"  {expr} ").spec == expr


@given(st.lists(FIELD, min_size=0, max_size=9).filter(lambda f: len(f) != 6))
def test_cron_needs_six_fields(fields: list[str]) -> None:
    with pytest.raises(InvalidScheduleError):
        Schedule.cron(" ".join(fields))


def test_cron_shorthands_and_time_zone() -> None:
    for name in PREDEFINED:
        assert Schedule.cron(name.upper()).spec == name
    cron = Schedule.cron("0 0 5 * * *", time_zone="Europe/Amsterdam")
    assert cron.time_zone == "Europe/Amsterdam"
    for zone in ("", "Europe/ Amsterdam", "a\r\nb", "+02:00"):
        with pytest.raises(InvalidScheduleError):
            Schedule.cron("0 0 5 * * *", time_zone=zone)
    with pytest.raises(InvalidScheduleError):
        Schedule.cron("0 0 5 * * * ;")


@pytest.mark.parametrize("zone", ["Local", "local", "LOCAL"])
def test_cron_refuses_the_local_time_zone(zone: str) -> None:
    """nats-server reads "Local" (Go's time.LoadLocation) as its own host's zone, not the
    user's: it was accepted and fired at the server's local time."""
    with pytest.raises(InvalidScheduleError, match="host's zone"):
        Schedule.cron("0 0 5 * * *", time_zone=zone)
    assert Schedule.cron("@daily", time_zone="UTC").time_zone == "UTC"  # Go's UTC, as None


def test_schedule_is_immutable_and_hashable() -> None:
    s = Schedule.every(5)
    with pytest.raises(AttributeError):
        s.spec = "x"
    assert len({s, Schedule.every(5)}) == 1


def test_headers() -> None:
    cron = Schedule.cron("0 0 5 * * *", time_zone="Europe/Amsterdam")
    headers = schedule_headers("sched.a", {"X-App": "keep"}, cron, "orders.a", "5m")
    assert headers == {
        "X-App": "keep",
        "Nats-Schedule": "0 0 5 * * *",
        "Nats-Schedule-Target": "orders.a",
        "Nats-Schedule-Time-Zone": "Europe/Amsterdam",
        "Nats-Schedule-TTL": "300",
    }
    never = schedule_headers("s", None, Schedule.every(1), "t", "never")
    assert never["Nats-Schedule-TTL"] == "never"


@pytest.mark.parametrize(
    ("schedule", "target", "ttl", "error"),
    [
        (None, "t", None, InvalidScheduleError),  # target without schedule
        (None, None, 5, InvalidScheduleError),  # ttl without schedule
        ("@every 1s", "t", None, InvalidScheduleError),  # not a Schedule
        (Schedule.every(1), None, None, InvalidScheduleError),  # no target
        (Schedule.every(1), "orders.*", None, InvalidScheduleError),  # wildcard
        (Schedule.every(1), "orders.>", None, InvalidScheduleError),
        (Schedule.every(1), "sched.a", None, InvalidScheduleError),  # the subject itself
        (Schedule("@every 1s", "Europe/Amsterdam"), "t", None, InvalidScheduleError),
        (Schedule.every(1), "t", 0.5, InvalidTTLError),
    ],
)
def test_headers_refuse(
    schedule: object, target: str | None, ttl: float | None, error: type[Exception]
) -> None:
    with pytest.raises(error) as info:
        schedule_headers("sched.a", None, schedule, target, ttl)  # type: ignore[arg-type]
    assert isinstance(info.value, InvalidOptionError)


def test_at_keeps_fraction() -> None:
    when = datetime(2030, 1, 1, 0, 0, 0, 500000, tzinfo=UTC)
    assert Schedule.at(when).spec == "@at 2030-01-01T00:00:00.5Z"


@pytest.mark.parametrize(
    "expr", ["0 0 0 L * *", "0 0 0 15W * *", "0 0 0 LW * *", "0 0 0 * * 5#3", "0 0 0 * * 5L"]
)
def test_cron_refuses_quartz_forms_the_server_refuses(expr: str) -> None:
    """L, W and # (Quartz) pass no nats-server check (10189): refused before sending."""
    with pytest.raises(InvalidScheduleError, match=r"L, W or #|no L or W"):
        Schedule.cron(expr)


def test_cron_takes_month_and_weekday_names() -> None:
    for expr in ("0 30 9 * * MON-FRI", "0 0 0 * jan-mar *", "0 0 0 ? JUL WED,sat"):
        assert Schedule.cron(expr).spec == expr
