"""TTL parsing and formatting (ADR-43): the client sends whole seconds or ``never``."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiojetstream import InvalidTTLError
from aiojetstream._headers import parse_go_duration, parse_ttl_header, ttl_header_value

_UNITS = {"h": 3600, "m": 60, "s": 1, "ms": 0.001, "us": 1e-6, "ns": 1e-9}


@pytest.mark.parametrize(
    ("ttl", "expected"),
    [
        (1, "1"),
        (60, "60"),
        (1.9, "1"),
        (3600.0, "3600"),
        (timedelta(seconds=1), "1"),
        (timedelta(hours=1, minutes=30), "5400"),
        ("1h30m", "5400"),
        ("1h", "3600"),
        ("90s", "90"),
        ("1.5s", "1"),
        ("1500ms", "1"),
        ("2m0.5s", "120"),
        ("60", "60"),
        ("never", "never"),
        ("NEVER", "never"),
        (" 5s ", "5"),
    ],
)
def test_valid_ttls(ttl: int | float | timedelta | str, expected: str) -> None:
    assert ttl_header_value(ttl) == expected


@pytest.mark.parametrize(
    "ttl",
    [
        0,
        0.0,
        0.999,
        -1,
        -60,
        timedelta(0),
        timedelta(milliseconds=999),
        timedelta(seconds=-5),
        "0",
        "0s",
        "500ms",
        "-1h",
        "",
        "   ",
        "junk",
        "1x",
        "h",
        "1h 30m",
        "1.2.3s",
        "forever",
        float("nan"),
        float("inf"),
        True,
        False,
        None,
        b"60",
        [60],
    ],
)
def test_invalid_ttls(ttl: object) -> None:
    with pytest.raises(InvalidTTLError) as info:
        ttl_header_value(ttl)  # type: ignore[arg-type]
    assert isinstance(info.value, ValueError)


def test_invalid_ttl_message_is_clear() -> None:
    with pytest.raises(InvalidTTLError, match="at least 1 second"):
        ttl_header_value(0.5)
    with pytest.raises(InvalidTTLError, match="Go duration"):
        ttl_header_value("soon")


@given(st.integers(min_value=1, max_value=10**10))
def test_whole_seconds_round_trip(seconds: int) -> None:
    assert ttl_header_value(seconds) == str(seconds)
    assert ttl_header_value(timedelta(seconds=seconds)) == str(seconds)
    assert ttl_header_value(str(seconds)) == str(seconds)
    assert parse_ttl_header(ttl_header_value(seconds)) == timedelta(seconds=seconds)


@given(st.floats(min_value=1.0, max_value=1e9, allow_nan=False))
def test_float_seconds_truncate(seconds: float) -> None:
    assert ttl_header_value(seconds) == str(int(seconds))


@given(st.floats(max_value=0.9999999, allow_nan=False) | st.integers(max_value=0))
def test_anything_under_one_second_is_rejected(seconds: float) -> None:
    with pytest.raises(InvalidTTLError):
        ttl_header_value(seconds)


@given(
    st.lists(
        st.tuples(st.integers(min_value=0, max_value=10_000), st.sampled_from(sorted(_UNITS))),
        min_size=1,
        max_size=5,
    )
)
def test_go_durations(parts: list[tuple[int, str]]) -> None:
    text = "".join(f"{n}{unit}" for n, unit in parts)
    expected = sum(n * _UNITS[unit] for n, unit in parts)
    assert math.isclose(parse_go_duration(text), expected, rel_tol=1e-9, abs_tol=1e-9)
    if expected >= 1.0 + 1e-6:
        assert ttl_header_value(text) == str(int(expected + 1e-9))
    elif expected < 1.0 - 1e-6:
        with pytest.raises(InvalidTTLError):
            ttl_header_value(text)


@given(st.text(alphabet=st.characters(blacklist_categories=["Nd"]), min_size=1))
def test_text_without_digits_is_never_a_ttl(text: str) -> None:
    if text.strip().lower() == "never":
        return
    with pytest.raises(InvalidTTLError):
        ttl_header_value(text)


def test_parse_ttl_header() -> None:
    assert parse_ttl_header("never") is None
    assert parse_ttl_header("1") == timedelta(seconds=1)
    assert parse_ttl_header("1h") == timedelta(hours=1)
    with pytest.raises(ValueError, match="not a duration"):
        parse_ttl_header("x")
