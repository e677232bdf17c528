"""G1 (pure part): caller text that could inject protocol is refused with a typed error.

Every check that runs before a subject, name, key or header reaches the wire
is fuzzed here with hypothesis: text carrying a character that breaks the
NATS protocol line (CR, LF, NUL, space, tab, other controls, Unicode line
separators, lone surrogates) and values that are not strings at all. A
``str`` or ``int`` subclass that overrides ``encode``/``__format__``/``__str__``
must not get its own text onto the wire either: the validators hand back
exact ``str`` values and numbers are formatted by ``int`` itself. The same
inputs are sent through a real server in tests/integration/test_security.py.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiojetstream import (
    InvalidHeaderError,
    InvalidKeyError,
    InvalidNameError,
    InvalidOptionError,
    InvalidScheduleError,
    InvalidSubjectError,
    InvalidTTLError,
    Schedule,
)
from aiojetstream import _publish as P
from aiojetstream._batch import BatchState
from aiojetstream._counter import increment_header
from aiojetstream._direct import last_msgs_request
from aiojetstream._headers import encode_headers, ttl_header_value, validate_header
from aiojetstream._kv import validate_key, validate_key_filter
from aiojetstream._schedule import schedule_headers
from aiojetstream._validation import (
    exact_str,
    validate_api_prefix,
    validate_filter_subject,
    validate_name,
    validate_publish_subject,
)
from hostile import INJECTION, EvilInt, EvilStr

#: Characters that end or split a protocol line, or cannot be encoded.
LINE_BREAKERS = ["\r", "\n", "\r\n", "\x00", "\x0b", "\x0c", "\x1b", "\x7f", "\x85", "\u2028"]
LINE_BREAKERS += ["\u2029", "\ud800", "\udfff", INJECTION]
#: Also refused in subjects, names and keys (but fine inside a header value).
BLANKS = [" ", "\t", "\xa0", "\u3000"]

SAFE = st.text(alphabet=string.ascii_letters + string.digits + "-_", min_size=1, max_size=8)


@st.composite
def hostile_text(draw: st.DrawFn, pieces: list[str]) -> str:
    """Safe text with one or more bad pieces inside (never only at an end)."""
    parts = [draw(SAFE)]
    for _ in range(draw(st.integers(1, 3))):
        parts.append(draw(st.sampled_from(pieces)))
        parts.append(draw(SAFE))
    return "".join(parts)


NOT_STR = st.one_of(
    st.none(),
    st.integers(),
    st.floats(allow_nan=True),
    st.binary(max_size=8),
    st.binary(max_size=8).map(bytearray),
    st.lists(SAFE, max_size=2),
    st.tuples(SAFE),
    st.builds(object),
)

IN_SUBJECTS = hostile_text(LINE_BREAKERS + BLANKS)
IN_VALUES = hostile_text(LINE_BREAKERS)


def _no_injection(text: str) -> None:
    assert "\r" not in text
    assert "\n" not in text
    assert "evil" not in text


# --------------------------------------------------------------------------- subjects and names

SUBJECT_CHECKS: list[tuple[Callable[[object], str], type[InvalidOptionError]]] = [
    (validate_publish_subject, InvalidSubjectError),
    (validate_filter_subject, InvalidSubjectError),
    (validate_api_prefix, InvalidSubjectError),
    (validate_name, InvalidNameError),
    (validate_key, InvalidKeyError),
    (validate_key_filter, InvalidKeyError),
]


@pytest.mark.parametrize(("check", "error"), SUBJECT_CHECKS)
@given(text=IN_SUBJECTS)
def test_subjects_names_and_keys_refuse_line_breakers_and_blanks(
    check: Callable[[object], str], error: type[InvalidOptionError], text: str
) -> None:
    with pytest.raises(error):
        check(text)


@pytest.mark.parametrize(("check", "error"), SUBJECT_CHECKS)
@given(value=NOT_STR)
def test_subjects_names_and_keys_refuse_non_strings(
    check: Callable[[object], str], error: type[InvalidOptionError], value: object
) -> None:
    with pytest.raises(error):
        check(value)


@pytest.mark.parametrize(("check", "error"), SUBJECT_CHECKS)
def test_a_str_subclass_comes_back_as_an_exact_str(
    check: Callable[[object], str], error: type[InvalidOptionError]
) -> None:
    checked = check(EvilStr("orders"))
    assert type(checked) is str
    assert checked == "orders"
    assert checked.encode() == b"orders"
    assert f"{checked}" == "orders"


@given(st.text(min_size=1))
def test_exact_str_keeps_the_text(text: str) -> None:
    assert exact_str(text) is text
    copy = exact_str(EvilStr(text))
    assert type(copy) is str
    assert str.__eq__(copy, text)


@given(name=hostile_text([".", "*", ">", "/", "\\"]))
def test_names_refuse_what_changes_an_api_subject(name: str) -> None:
    with pytest.raises(InvalidNameError):
        validate_name(name)


@given(subject=st.text(max_size=30))
def test_an_accepted_subject_is_one_protocol_token(subject: str) -> None:
    """Whatever passes is a single, encodable, non-empty token of the PUB line."""
    try:
        checked = validate_publish_subject(subject)
    except InvalidSubjectError:
        return
    raw = checked.encode()
    assert raw
    assert raw.split() == [raw]
    assert not any(b < 0x20 or b == 0x7F for b in raw)


def test_api_prefix_rules() -> None:
    assert validate_api_prefix("$JS.hub.API.") == "$JS.hub.API"
    for bad in ("", ".", "$JS.*.API", "$JS..API", "$JS.API >"):
        with pytest.raises(InvalidSubjectError):
            validate_api_prefix(bad)


# --------------------------------------------------------------------------- headers


@given(key=st.one_of(IN_SUBJECTS, hostile_text([":"])))
def test_header_keys_refuse_line_breakers_blanks_and_colons(key: str) -> None:
    with pytest.raises(InvalidHeaderError):
        validate_header(key, "v")


@given(value=IN_VALUES)
def test_header_values_refuse_line_breakers(value: str) -> None:
    with pytest.raises(InvalidHeaderError):
        validate_header("K", value)


@given(key=NOT_STR, value=NOT_STR)
def test_headers_refuse_non_strings(key: object, value: object) -> None:
    with pytest.raises(InvalidHeaderError):
        validate_header(key, "v")
    with pytest.raises(InvalidHeaderError):
        validate_header("K", value)


def test_header_values_may_hold_spaces_and_tabs() -> None:
    assert validate_header("K", "a b\tc") == ("K", "a b\tc")


def test_str_subclass_headers_are_sent_as_their_text() -> None:
    key, value = validate_header(EvilStr("K"), EvilStr("v"))
    assert type(key) is str
    assert type(value) is str
    assert encode_headers({EvilStr("K"): EvilStr("v")}) == b"NATS/1.0\r\nK: v\r\n\r\n"
    headers = P.build_headers(
        {EvilStr("K"): EvilStr("v")}, EvilStr("id"), None, EvilStr("S"), None, None, EvilStr("m")
    )
    block = P.header_block(headers)
    assert block is not None
    assert block.count(b"\r\n") == 6  # the NATS/1.0 line, four headers, the blank line
    _no_injection(block.decode()[:-4].replace("\r\n", "|"))


@given(
    headers=st.dictionaries(st.text(max_size=8), st.text(max_size=12), max_size=4),
    msg_id=st.one_of(st.none(), st.text(max_size=12)),
    expected_stream=st.one_of(st.none(), st.text(max_size=12)),
    expected_last_msg_id=st.one_of(st.none(), st.text(max_size=12)),
)
def test_publish_headers_are_refused_or_one_line_each(
    headers: dict[str, str],
    msg_id: str | None,
    expected_stream: str | None,
    expected_last_msg_id: str | None,
) -> None:
    """Any text at all: a typed refusal, or a header block of exactly one line per header."""
    try:
        built = P.build_headers(
            headers, msg_id, None, expected_stream, None, None, expected_last_msg_id
        )
    except InvalidOptionError:
        return
    block = P.header_block(built)
    if block is None:
        assert built is None
        return
    assert built is not None
    lines = block.split(b"\r\n")
    assert lines[0] == b"NATS/1.0"
    assert lines[-2:] == [b"", b""]
    assert len(lines) == len(built) + 3
    for line, (key, value) in zip(lines[1:-2], built.items(), strict=True):
        assert line == f"{key}: {value.strip()}".encode()
        assert not set(line) & {0x0A, 0x0D, 0x00}


@given(value=st.one_of(IN_VALUES, NOT_STR.filter(lambda v: v is not None)))
def test_publish_options_refuse_bad_header_values(value: object) -> None:
    bad: Any = value
    with pytest.raises(InvalidHeaderError):
        P.build_headers(None, bad, None, None, None, None, None)
    with pytest.raises(InvalidHeaderError):
        P.build_headers(None, None, None, bad, None, None, None)
    with pytest.raises(InvalidHeaderError):
        P.build_headers(None, None, None, None, None, None, bad)


@pytest.mark.parametrize("header", ["Nats-Msg-Id", "Nats-Expected-Last-Msg-Id"])
@pytest.mark.parametrize("value", ["", " ", "\t", "a ", " a", "a\t"])
def test_ids_given_as_headers_refuse_what_the_arguments_refuse(header: str, value: str) -> None:
    # Sent stripped, "a " would be the id "a", and a blank one no id at all.
    with pytest.raises(InvalidOptionError, match="whitespace"):
        P.build_headers({header: value}, None, None, None, None, None, None)
    with pytest.raises(InvalidOptionError, match="whitespace"):
        P.build_headers({header: value}, "id", None, None, None, None, "m")
    assert P.build_headers({header.lower(): value}, None, None, None, None, None, None) == {
        header.lower(): value  # another header to the server (it reads the exact name)
    }


def test_a_held_publish_generates_an_id_for_a_blank_msg_id_header() -> None:
    assert P.held_msg_id("given", {"Nats-Msg-Id": "h"}) == "given"
    assert P.held_msg_id(None, {"Nats-Msg-Id": "h"}) is None  # the header is the id
    assert P.held_msg_id(None, {"Nats-Msg-Id": " h "}) is None  # refused by build_headers
    for blank in ("", " ", "\t "):
        generated = P.held_msg_id(None, {"Nats-Msg-Id": blank})
        assert isinstance(generated, str)
        assert generated.strip() == generated != ""


@given(value=st.one_of(IN_SUBJECTS, NOT_STR.filter(lambda v: v is not None)))
def test_expected_sequences_refuse_anything_but_ints(value: object) -> None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return
    with pytest.raises(InvalidOptionError):
        P.build_headers(None, None, None, None, value, None, None)  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError):
        P.build_headers(None, None, None, None, None, value, None)  # type: ignore[arg-type]


def test_int_subclasses_are_sent_as_their_digits() -> None:
    headers = P.build_headers(None, None, None, None, EvilInt(7), EvilInt(8), None)
    assert headers == {
        "Nats-Expected-Last-Sequence": "7",
        "Nats-Expected-Last-Subject-Sequence": "8",
    }
    assert increment_header(EvilInt(5)) == "+5"
    assert increment_header(EvilInt(-5)) == "-5"


@given(headers=st.one_of(st.integers(), st.text(), st.lists(st.text(max_size=3), max_size=3)))
def test_non_mapping_headers_are_refused(headers: object) -> None:
    with pytest.raises(InvalidHeaderError):
        P.build_headers(headers, None, None, None, None, None, None)  # type: ignore[arg-type]
    with pytest.raises(InvalidHeaderError):
        schedule_headers("s.a", headers, Schedule.every(5), "s.b", None)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- TTLs, schedules


@given(ttl=st.one_of(IN_VALUES, hostile_text(BLANKS)))
def test_ttl_strings_refuse_line_breakers(ttl: str) -> None:
    with pytest.raises(InvalidTTLError):
        ttl_header_value(ttl)


@given(ttl=st.text(max_size=12))
def test_an_accepted_ttl_is_digits_or_never(ttl: str) -> None:
    try:
        value = ttl_header_value(ttl)
    except InvalidTTLError:
        return
    assert value == "never" or (value.isascii() and value.isdigit())


@given(target=IN_SUBJECTS)
def test_schedule_targets_refuse_line_breakers(target: str) -> None:
    with pytest.raises(InvalidScheduleError):
        schedule_headers("s.sched", None, Schedule.every(5), target, None)


@given(expr=IN_VALUES)
def test_cron_expressions_and_time_zones_refuse_line_breakers(expr: str) -> None:
    with pytest.raises(InvalidScheduleError):
        Schedule.cron(expr + " * * * * *")
    with pytest.raises(InvalidScheduleError):
        Schedule.cron("@hourly", time_zone=expr)


def test_a_hand_made_schedule_is_checked_as_a_header() -> None:
    headers = schedule_headers("s.sched", None, Schedule(INJECTION), "s.target", None)
    with pytest.raises(InvalidHeaderError):
        P.build_headers(headers, None, None, None, None, None, None)


@given(batch_id=st.one_of(IN_VALUES, NOT_STR))
def test_batch_ids_refuse_line_breakers_and_non_strings(batch_id: object) -> None:
    with pytest.raises(InvalidOptionError):
        BatchState(batch_id)  # type: ignore[arg-type]


def test_a_str_subclass_batch_id_is_kept_as_its_text() -> None:
    assert type(BatchState(EvilStr("b1")).batch_id) is str


@given(subjects=st.one_of(st.integers(), st.floats(), st.none(), st.binary(min_size=1)))
def test_batch_get_subjects_refuse_non_iterables(subjects: object) -> None:
    with pytest.raises(InvalidSubjectError):
        last_msgs_request(subjects)  # type: ignore[arg-type]
