"""One duration syntax (issue 26): the parser, against a reference, and every place that takes it.

Forms: a ``timedelta``, seconds as a number, or a string: a Go duration
(``time.ParseDuration``: ns, us/µs, ms, s, m, h), with ``d`` and ``w`` as the
``nats`` CLI has them, or plain seconds (``"90"``, as ADR-43's header and a
command line write a number). The library's entry points and the CLI read a
string through ``aiojetstream._duration``, so each takes the same strings and
refuses a bad one with the same words, in its own typed error.

The parser is imported inside the tests that use it, so that the behaviour
tests here also run (and fail) against a library without it.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta
from fractions import Fraction
from typing import Any

import pytest
import typer
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from aiojetstream import (
    ConsumerConfig,
    InvalidOptionError,
    InvalidScheduleError,
    InvalidTTLError,
    KeyValueConfig,
    ObjectStoreConfig,
    OrderedConsumerConfig,
    Schedule,
    StreamConfig,
)
from aiojetstream._admin import _age, _until
from aiojetstream._consumer import secs as _secs
from aiojetstream._headers import format_go_duration, ttl_header_value
from aiojetstream._message import _delay_ns
from aiojetstream._models import duration_to_ns, to_wire
from aiojetstream._publish import duration_seconds, hold_seconds
from aiojetstream.cli._units import format_duration, parse_duration, parse_ttl

NS = 1_000_000_000
UNIT_NS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "μs": 1_000,
    "ms": 1_000_000,
    "s": NS,
    "m": 60 * NS,
    "h": 3_600 * NS,
    "d": 86_400 * NS,
    "w": 604_800 * NS,
}
#: timedelta's keyword for each unit it has (ns: added to the nanoseconds).
TIMEDELTA_KEY = {
    "us": "microseconds",
    "µs": "microseconds",
    "μs": "microseconds",
    "ms": "milliseconds",
    "s": "seconds",
    "m": "minutes",
    "h": "hours",
    "d": "days",
    "w": "weeks",
}
MAX_NS = 2**63 - 1


def text_ns(text: str) -> int:
    from aiojetstream._duration import text_ns as parse

    return parse(text)


# --------------------------------------------------------------------------- the reference

PARTS = st.lists(
    st.tuples(st.integers(min_value=0, max_value=10_000), st.sampled_from(sorted(UNIT_NS))),
    min_size=1,
    max_size=6,
)


@given(PARTS, st.sampled_from(["", "+"]))
def test_whole_components_are_their_timedelta_sum(parts: list[tuple[int, str]], sign: str) -> None:
    """Components formatted as a duration string parse to the timedelta sum, exactly."""
    text = sign + "".join(f"{n}{unit}" for n, unit in parts)
    expected = timedelta(0)
    nanoseconds = 0
    for n, unit in parts:
        if unit == "ns":
            nanoseconds += n
        else:
            expected += timedelta(**{TIMEDELTA_KEY[unit]: n})
    total = duration_to_ns(expected) + nanoseconds
    assert text_ns(text) == total
    parsed = coerce(text)
    assert duration_to_ns(parsed) == total
    if nanoseconds % 1_000 == 0:
        assert parsed == expected + timedelta(microseconds=nanoseconds // 1_000)


@given(PARTS)
def test_a_minus_sign_negates(parts: list[tuple[int, str]]) -> None:
    text = "".join(f"{n}{unit}" for n, unit in parts)
    assert text_ns("-" + text) == -text_ns(text)


FRACTIONS = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=99_999),
        st.text(alphabet="0123456789", max_size=12),
        st.sampled_from(sorted(UNIT_NS)),
    ),
    min_size=1,
    max_size=4,
)


@given(FRACTIONS)
def test_fractions_are_exact_then_truncated_to_the_nanosecond(
    parts: list[tuple[int, str, str]],
) -> None:
    """``1.5h`` is 90 minutes; each part's fraction below a nanosecond is dropped (as Go)."""
    text = "".join(f"{whole}.{frac}{unit}" for whole, frac, unit in parts)
    expected = sum(
        math.floor(Fraction(f"{whole}.{frac or '0'}") * UNIT_NS[unit])
        for whole, frac, unit in parts
    )
    assert text_ns(text) == expected


@given(
    st.integers(min_value=0, max_value=MAX_NS // NS - 1),
    st.integers(min_value=0, max_value=999_999),
)
def test_plain_seconds_are_seconds(whole: int, micro: int) -> None:
    text = f"{whole}.{micro:06d}"
    assert coerce(text) == timedelta(seconds=whole, microseconds=micro)
    assert coerce(str(whole)) == timedelta(seconds=whole)


@given(st.integers(min_value=0, max_value=MAX_NS // 1_000))
def test_go_formatting_round_trips(us: int) -> None:
    """What the library writes (Go's ``Duration.String()``: ``@every``) reads back exactly."""
    value = timedelta(microseconds=us)
    assert coerce(format_go_duration(value)) == value


@given(st.integers(min_value=1, max_value=10**9))
def test_the_clis_formatting_round_trips(seconds: int) -> None:
    """What the CLI shows (``2d3h``) is what it and the library read."""
    value = timedelta(seconds=seconds)
    assert coerce(format_duration(value)) == value == parse_duration(format_duration(value))


def coerce(text: str) -> timedelta:
    from aiojetstream._models import coerce_duration

    return coerce_duration(text)


# --------------------------------------------------------------------------- Go's grammar


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("1h30m", 5_400 * NS),
        ("500ms", 500_000_000),
        ("1.5h", 5_400 * NS),
        ("2m0.5s", 120_500_000_000),
        ("1h1h", 7_200 * NS),  # (Go adds repeated units, in any order)
        ("1s1h", 3_601 * NS),
        ("1.s", NS),
        (".5s", NS // 2),
        ("1µs", 1_000),  # U+00B5
        ("1μs", 1_000),  # U+03BC
        ("1us", 1_000),
        ("0", 0),
        ("-0", 0),
        ("+5s", 5 * NS),
        ("-1m", -60 * NS),
        (" 10s ", 10 * NS),
        ("0.000000001s", 1),
        ("0.0000000019s", 1),  # below the nanosecond: dropped
        ("9223372036854775807ns", MAX_NS),
        ("-9223372036854775808ns", -MAX_NS - 1),
        ("2562047h47m16.854775807s", MAX_NS),
        ("0." + "1" * 5000 + "s", 111_111_111),  # long fractions: no int-digit limit
        ("0" * 5000 + "1s", NS),
        # the nats CLI's units, and seconds as text
        ("2d", 172_800 * NS),
        ("1w", 604_800 * NS),
        ("1.5d", 129_600 * NS),
        ("1w2d3h", (9 * 86_400 + 3 * 3_600) * NS),
        ("90", 90 * NS),
        ("1", NS),
        ("1.5", NS * 3 // 2),
    ],
)
def test_accepted(text: str, ns: int) -> None:
    assert text_ns(text) == ns


REFUSED = [
    "",
    "   ",
    "1x",
    "1h-30m",
    "1h+30m",
    "h",
    ".s",
    ".",
    "-",
    "+",
    "1.2.3s",
    "1e3s",
    "1e3",
    "nan",
    "inf",
    "1_000s",
    "1 h",
    "1H",  # Go's units are lower case
    "1S",
    "\u0661s",  # ARABIC-INDIC DIGIT ONE: a digit, but not an ASCII one
    "10s!",
    "PT30S",
    "soon",
    "ms",
]


@pytest.mark.parametrize("text", REFUSED)
def test_refused_with_the_forms_named(text: str) -> None:
    from aiojetstream._duration import text_ns as parse

    with pytest.raises(InvalidOptionError, match=r"is not a duration: give seconds \(90, 1\.5\)"):
        parse(text, InvalidOptionError)


@pytest.mark.parametrize("text", ["1M", "1y", "2Y", "3mo", "1mon", "1h1M"])
def test_months_and_years_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="months and years have no fixed length"):
        text_ns(text)


@pytest.mark.parametrize(
    "text", ["9" * 5000 + "s", "1" + "0" * 31 + "ns", "1" + "0" * 30 + "w", "999999999999999w" * 9]
)
def test_a_string_too_long_to_read_is_too_long(text: str) -> None:
    """No giant number is built (nor the int-digit limit's error raised)."""
    with pytest.raises(ValueError, match=r"is too long: the server's durations are int64"):
        text_ns(text)


@pytest.mark.parametrize("text", ["2562048h", "106752d", "15251w", "9223372037s", "9223372037"])
def test_past_int64_nanoseconds_the_bounds_apply_as_to_a_number(text: str) -> None:
    """A string is the duration it equals: refused where that number is, in the same words."""
    from aiojetstream._models._ranges import check_config_ranges

    number = text_ns(text) / NS
    assert text_ns(text) > MAX_NS
    config = ConsumerConfig(ack_wait=text)  # built, as with ack_wait=1e10
    with pytest.raises(InvalidOptionError, match=r"ConsumerConfig\.ack_wait \(.* s\) is too long"):
        check_config_ranges(config)
    with pytest.raises(InvalidOptionError) as as_number:
        check_config_ranges(ConsumerConfig(ack_wait=number))
    with pytest.raises(InvalidOptionError) as as_text:
        check_config_ranges(config)
    assert str(as_text.value) == str(as_number.value)
    with pytest.raises(InvalidOptionError, match="must be at most 9,223,372,036 s"):
        _secs(text, "expires")
    with pytest.raises(InvalidScheduleError, match="longer than a Go duration"):
        Schedule.every(text)
    with pytest.raises(InvalidOptionError, match="int64"):
        _delay_ns(text)
    with pytest.raises(InvalidOptionError, match="age"):
        _age(text)


def test_a_long_bad_string_is_cut_in_the_message() -> None:
    with pytest.raises(ValueError, match="is not a duration") as info:
        text_ns("x" * 10_000)
    assert len(str(info.value)) < 300


# --------------------------------------------------------------------------- everywhere


DURATION_FIELDS = [
    (ConsumerConfig, "ack_wait"),
    (ConsumerConfig, "idle_heartbeat"),
    (ConsumerConfig, "max_expires"),
    (ConsumerConfig, "inactive_threshold"),
    (ConsumerConfig, "priority_timeout"),
    (OrderedConsumerConfig, "inactive_threshold"),
    (StreamConfig, "max_age"),
    (StreamConfig, "duplicate_window"),
    (StreamConfig, "subject_delete_marker_ttl"),
    (KeyValueConfig, "ttl"),
    (KeyValueConfig, "limit_marker_ttl"),
    (ObjectStoreConfig, "ttl"),
]
REQUIRED: dict[type[Any], dict[str, Any]] = {
    StreamConfig: {"name": "S"},
    KeyValueConfig: {"bucket": "B"},
    ObjectStoreConfig: {"bucket": "B"},
}


@pytest.mark.parametrize(("model", "field"), DURATION_FIELDS)
def test_every_config_duration_takes_a_string(model: type[Any], field: str) -> None:
    config = model(**REQUIRED.get(model, {}), **{field: "1h30m"})
    assert getattr(config, field) == timedelta(hours=1, minutes=30)
    assert model(**REQUIRED.get(model, {}), **{field: "2d"}) == model(
        **REQUIRED.get(model, {}), **{field: 172_800}
    )


def test_the_wire_gets_nanoseconds() -> None:
    config = ConsumerConfig(ack_wait="30s", backoff=["1s", "1m", "250ns"], max_expires="1.5s")
    wire = to_wire(config)
    assert wire["ack_wait"] == 30 * NS
    assert wire["backoff"] == [NS, 60 * NS, 250]
    assert wire["max_expires"] == 1_500_000_000
    assert to_wire(StreamConfig(name="S", max_age="1w"))["max_age"] == 604_800 * NS


@pytest.mark.parametrize("bad", ["1x", "1h-30m", "", "1M", "9999999999d", "-1s"])
def test_a_bad_string_in_a_config_is_a_validation_error_in_the_librarys_words(bad: str) -> None:
    """At construction, as every other wrong type there; the message is the CLI's too."""
    with pytest.raises(ValidationError) as info:
        ConsumerConfig(ack_wait=bad)
    with pytest.raises(typer.BadParameter) as cli:
        parse_duration(bad)
    assert str(cli.value.message) in str(info.value)


def test_publish_ttls_take_the_same_strings() -> None:
    assert ttl_header_value("1d") == "86400"
    assert ttl_header_value("1w") == "604800"
    assert ttl_header_value("1.5h") == "5400"
    assert ttl_header_value("1h30m") == "5400"
    assert ttl_header_value("90") == "90"
    assert ttl_header_value(" never ") == "never"
    assert parse_ttl("2d") == ttl_header_value("2d") == "172800"


@pytest.mark.parametrize("bad", ["1x", "1h-30m", "", "1y", "500ms", "-1h", "9" * 40 + "s"])
def test_a_bad_ttl_is_the_same_error_in_the_library_and_the_cli(bad: str) -> None:
    with pytest.raises(InvalidTTLError) as library:
        ttl_header_value(bad)
    with pytest.raises(typer.BadParameter) as cli:
        parse_ttl(bad)
    assert cli.value.message == str(library.value)


def test_ttl_messages() -> None:
    with pytest.raises(InvalidTTLError, match=r"^'soon' is not a TTL: give seconds .*'never'"):
        ttl_header_value("soon")
    with pytest.raises(InvalidTTLError, match=r"^'500ms' is under 1 second"):
        ttl_header_value("500ms")
    with pytest.raises(InvalidTTLError, match=r"is too long.*use 'never'"):
        ttl_header_value("9" * 40 + "s")
    # Past the server's clock: refused when published, as the same number is.
    assert ttl_header_value("2562048h") == ttl_header_value(2_562_048 * 3_600)


def test_schedule_every_takes_a_string() -> None:
    assert Schedule.every("1h30m") == Schedule.every(5_400)
    assert Schedule.every("1d").spec == "@every 24h0m0s"
    assert Schedule.every("90") == Schedule.every(90)
    with pytest.raises(InvalidScheduleError, match="'1x' is not a duration"):
        Schedule.every("1x")
    with pytest.raises(InvalidScheduleError, match="whole number of seconds"):
        Schedule.every("1.5s")
    # Positive but below a timedelta's microsecond: not called "not positive".
    for tiny in ("999ns", 1e-7):
        with pytest.raises(InvalidScheduleError, match="at least 1 microsecond"):
            Schedule.every(tiny)
    with pytest.raises(InvalidScheduleError, match="must be positive"):
        Schedule.every("0s")


def test_pull_options_take_a_string() -> None:
    assert _secs("30s", "expires") == 30.0
    assert _secs("500ms", "heartbeat") == 0.5
    assert _secs(timedelta(seconds=2), "expires") == 2.0
    with pytest.raises(InvalidOptionError, match="expires '1x' is not a duration"):
        _secs("1x", "expires")
    with pytest.raises(InvalidOptionError, match="must not be negative"):
        _secs("-1s", "expires")


def test_waits_and_ages_take_a_string() -> None:
    assert hold_seconds("1m") == 60.0
    assert duration_seconds("1.5s", "timeout") == 1.5
    with pytest.raises(InvalidOptionError, match="hold_when_full '1x' is not a duration"):
        hold_seconds("1x")
    assert _delay_ns("1m30s") == 90 * NS
    assert _delay_ns("250ns") == 250
    with pytest.raises(InvalidOptionError, match="nak delay '1x' is not a duration"):
        _delay_ns("1x")
    assert _age("1h") == _age(3600) == timedelta(hours=1)
    assert _until("10m") == _until(600) == timedelta(minutes=10)
    with pytest.raises(InvalidOptionError, match="age '1x' is not a duration"):
        _age("1x")


def test_the_public_parser_is_the_librarys() -> None:
    """``aiojetstream.parse_duration``: what the CLI (a client of the public API) reads with."""
    import aiojetstream

    assert aiojetstream.parse_duration("1h30m") == timedelta(hours=1, minutes=30)
    assert aiojetstream.parse_duration(90) == timedelta(seconds=90)
    assert aiojetstream.parse_duration(timedelta(days=1)) == timedelta(days=1)
    assert aiojetstream.parse_duration("2d", ttl=True) == timedelta(days=2)
    assert aiojetstream.parse_duration("1.9", ttl=True) == timedelta(seconds=1)
    assert aiojetstream.parse_duration("never", ttl=True) is None
    for bad in ("1x", -1, True, None, float("nan"), "1M", "9999999999d"):
        with pytest.raises(InvalidOptionError):
            aiojetstream.parse_duration(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidTTLError, match="under 1 second"):
        aiojetstream.parse_duration("500ms", ttl=True)
    # Past timedelta.max but within what the header takes: an OverflowError was raised.
    for huge in ("100000000000h", 10**15, 1e300):
        with pytest.raises(InvalidTTLError, match="longer than a timedelta holds"):
            aiojetstream.parse_duration(huge, ttl=True)


def test_client_side_timeouts_take_every_duration_form() -> None:
    """``timeout=`` of a network call takes the durations of the rest of the API.

    It took seconds only ("timeout must be a number of seconds" for ``"2s"``),
    while ``publish_async_complete(timeout)`` and the Spark ``timeout`` option
    took every form.
    """
    from aiojetstream._validation import check_timeout

    assert check_timeout(None) is None
    assert check_timeout(2) == 2.0
    assert check_timeout(0.25) == 0.25
    assert check_timeout("2s") == 2.0
    assert check_timeout("1.5") == 1.5
    assert check_timeout("500ms") == 0.5
    assert check_timeout("1m30s") == 90.0
    assert check_timeout(timedelta(seconds=1.5)) == 1.5
    # The same rules as a number: positive, finite, at most int64 nanoseconds.
    for bad, message in (
        ("0s", "must be positive"),
        (timedelta(0), "must be positive"),
        ("-1s", "must not be negative"),
        ("1x", "is not a duration"),
        ("1H", "is not a duration"),
        ("1M", "months and years"),
        ("300y", "months and years"),
        ("2562048h", "at most 9,223,372,036 s"),
        (True, "must be a number of seconds, a timedelta or a string"),
        ([2], "must be a number of seconds, a timedelta or a string"),
    ):
        with pytest.raises(InvalidOptionError, match=re.escape(message)):
            check_timeout(bad)


def test_a_number_timeout_is_not_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The usual ``timeout=2`` costs what it did: no duration parsing for a number."""
    from aiojetstream import _duration
    from aiojetstream._validation import check_timeout

    def no_parsing(*args: object, **kwargs: object) -> int:
        raise AssertionError("a number was parsed as a duration string")

    monkeypatch.setattr(_duration, "text_ns", no_parsing)
    assert check_timeout(2) == 2.0
    assert check_timeout(2.5) == 2.5
    with pytest.raises(AssertionError, match="parsed"):
        check_timeout("2s")
