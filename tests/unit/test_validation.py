"""Name, subject and header validation: typed ValueErrors before anything is sent."""

from __future__ import annotations

import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiojetstream import (
    InvalidHeaderError,
    InvalidNameError,
    InvalidSubjectError,
)
from aiojetstream._headers import decode_headers, encode_headers, validate_header
from aiojetstream._validation import (
    validate_filter_subject,
    validate_name,
    validate_publish_subject,
)

NAME_CHARS = string.ascii_letters + string.digits + "-_"
TOKEN = st.text(alphabet=NAME_CHARS, min_size=1, max_size=12)
FORBIDDEN_IN_NAMES = [".", "*", ">", " ", "\t", "\r", "\n", "\x00", "/", "\\"]
FORBIDDEN_IN_SUBJECTS = [" ", "\t", "\r", "\n", "\x00", "\x7f"]


@given(st.text(alphabet=NAME_CHARS, min_size=1, max_size=255))
def test_valid_names(name: str) -> None:
    assert validate_name(name) == name


@given(
    st.text(alphabet=NAME_CHARS, max_size=20),
    st.sampled_from(FORBIDDEN_IN_NAMES),
    st.text(alphabet=NAME_CHARS, max_size=20),
)
def test_names_with_forbidden_characters(prefix: str, bad: str, suffix: str) -> None:
    with pytest.raises(InvalidNameError) as info:
        validate_name(prefix + bad + suffix, "consumer")
    assert isinstance(info.value, ValueError)
    assert "consumer" in str(info.value)


@pytest.mark.parametrize("name", ["", None, 5, "x" * 256])
def test_bad_name_values(name: object) -> None:
    with pytest.raises(InvalidNameError):
        validate_name(name)


@given(st.lists(TOKEN, min_size=1, max_size=6))
def test_valid_publish_subjects(tokens: list[str]) -> None:
    subject = ".".join(tokens)
    assert validate_publish_subject(subject) == subject


@given(
    st.lists(TOKEN, min_size=1, max_size=4),
    st.sampled_from(FORBIDDEN_IN_SUBJECTS),
    st.integers(min_value=0, max_value=40),
)
def test_publish_subjects_with_whitespace_or_control(
    tokens: list[str], bad: str, where: int
) -> None:
    subject = ".".join(tokens)
    where = min(where, len(subject))
    with pytest.raises(InvalidSubjectError):
        validate_publish_subject(subject[:where] + bad + subject[where:])


@given(st.lists(TOKEN, min_size=0, max_size=4), st.sampled_from(["*", ">"]))
def test_publish_subjects_with_wildcards(tokens: list[str], wildcard: str) -> None:
    with pytest.raises(InvalidSubjectError, match="wildcard"):
        validate_publish_subject(".".join([*tokens, wildcard]))


@pytest.mark.parametrize("subject", ["", "a..b", ".a", "a.", None, 1])
def test_bad_publish_subject_values(subject: object) -> None:
    with pytest.raises(InvalidSubjectError):
        validate_publish_subject(subject)


@pytest.mark.parametrize("subject", ["a.*", "a.>", "*.b", ">", "a.*.c"])
def test_filters_allow_wildcards(subject: str) -> None:
    assert validate_filter_subject(subject) == subject


@pytest.mark.parametrize("subject", ["a.>.b", "", "a b", "a\r\nPUB x 1"])
def test_bad_filters(subject: str) -> None:
    with pytest.raises(InvalidSubjectError):
        validate_filter_subject(subject)


HEADER_KEY = st.text(alphabet=string.ascii_letters + string.digits + "-_.", min_size=1, max_size=20)
# Any text but control characters (tab aside), line separators and lone surrogates.
HEADER_VALUE = st.text(
    alphabet=st.one_of(
        st.characters(blacklist_categories=["Cs", "Cc", "Zl", "Zp"]),
        st.just("\t"),
    ),
    max_size=40,
)


@given(st.dictionaries(HEADER_KEY, HEADER_VALUE, max_size=5))
def test_headers_encode_and_decode(headers: dict[str, str]) -> None:
    block = encode_headers(headers)
    assert block.startswith(b"NATS/1.0\r\n")
    assert block.endswith(b"\r\n\r\n") or not headers
    decoded, status, _ = decode_headers(block)
    assert status is None
    # Only the ASCII blanks around a value go (a value holds no others but tab).
    expected = {k: v.strip(" \t") for k, v in headers.items()}
    assert (decoded or {}) == expected


def test_decoded_headers_keep_what_is_not_an_ascii_blank() -> None:
    """str.strip() also took U+00A0, U+3000 and \x1c-\x1f from keys and values, which
    nats-py (bytes.strip) and nats.go keep: a value stored by nats.go read differently."""
    block = "NATS/1.0\r\nA: v\u00a0\r\nB: \u3000v\r\nC: v\x1f\r\nD:\t\x1cv \r\n\r\n"
    decoded, _, _ = decode_headers(block.encode())
    assert decoded == {"A": "v\u00a0", "B": "\u3000v", "C": "v\x1f", "D": "\x1cv"}


@given(HEADER_KEY, HEADER_VALUE, st.sampled_from(["\r", "\n", "\x00", "\r\n"]), st.booleans())
def test_headers_with_crlf_or_nul(key: str, value: str, bad: str, in_key: bool) -> None:
    if in_key:
        key = key + bad
    else:
        value = value + bad + "PUB injected 0"
    with pytest.raises(InvalidHeaderError) as info:
        validate_header(key, value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(("key", "value"), [("", "v"), ("a b", "v"), ("a:b", "v"), ("k", 1)])
def test_bad_headers(key: str, value: object) -> None:
    with pytest.raises(InvalidHeaderError):
        validate_header(key, value)


def test_decode_status_headers() -> None:
    headers, status, description = decode_headers(
        b"NATS/1.0 409 Consumer Deleted\r\nNats-Pending-Messages: 5\r\n\r\n"
    )
    assert status == "409"
    assert description == "Consumer Deleted"
    assert headers == {"Nats-Pending-Messages": "5"}
    assert decode_headers(b"NATS/1.0 100\r\n\r\n") == (None, "100", None)
