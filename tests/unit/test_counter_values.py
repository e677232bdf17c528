"""Counters (ADR-49), pure parts: increment headers and the values in acks and messages."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiojetstream import InvalidOptionError, InvalidResponseError, PubAck
from aiojetstream._counter import ack_value, counter_value, increment_header

BIG = st.integers(min_value=-(10**40), max_value=10**40)


@given(BIG)
def test_increment_header_round_trips(delta: int) -> None:
    text = increment_header(delta)
    assert text[0] in "+-"
    assert int(text) == delta


@pytest.mark.parametrize("bad", [1.5, "1", True, None])
def test_increment_must_be_an_int(bad: object) -> None:
    with pytest.raises(InvalidOptionError):
        increment_header(bad)


@given(BIG)
def test_values_of_any_size(total: int) -> None:
    assert counter_value(json.dumps({"val": str(total)}).encode()) == total
    ack = PubAck.model_validate_json(json.dumps({"stream": "C", "seq": 1, "val": str(total)}))
    assert ack_value(ack) == total


@pytest.mark.parametrize("body", [b"", b"x", b"[]", b'{"val": 3}', b'{"val": "1.5"}', b"{}"])
def test_message_without_value(body: bytes) -> None:
    with pytest.raises(InvalidResponseError):
        counter_value(body)


def test_duplicate_ack_has_no_value() -> None:
    ack = PubAck.model_validate_json('{"stream":"C","seq":7,"duplicate":true}')
    with pytest.raises(InvalidResponseError):
        ack_value(ack)
