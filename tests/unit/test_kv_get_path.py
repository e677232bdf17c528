"""The pieces of ``kv.get``'s fast path give what the general path gives.

``_kv.plain_reply`` reads only nats-server's canonical header block of a plain
value and must agree with ``_stream.direct_fields`` (plus the operation check)
wherever it answers; ``kv_entry`` builds without validation what the validated
constructor builds. The round trip itself is tested against a real server in
``tests/integration/test_kv.py``.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from aiojetstream import InvalidResponseError, JetStreamError, KeyValueEntry, KeyValueOp, _kv
from aiojetstream._models._base import NanoDatetime, parse_timestamp
from aiojetstream._models.kv import kv_entry
from aiojetstream._stream import direct_fields
from helpers import assert_same_model

SUBJECT = "$KV.B.key"


def canonical(
    subject: str = SUBJECT, seq: str = "42", stamp: str = "2026-11-24T09:30:50.123456789Z"
) -> bytes:
    """The header block nats-server sends with a direct get of a value stored without headers."""
    return (
        f"NATS/1.0\r\nNats-Stream: KV_B\r\nNats-Subject: {subject}\r\n"
        f"Nats-Sequence: {seq}\r\nNats-Time-Stamp: {stamp}\r\n\r\n"
    ).encode()


def general(block: bytes, subject: str) -> tuple[int, datetime] | None:
    """What the general path makes of a block: a PUT's revision and time, else None."""
    try:
        found, seq, created, headers = direct_fields(b"", block, subject)
    except JetStreamError:
        return None
    if found != subject or _kv.entry_operation(headers) is not KeyValueOp.PUT:
        return None
    return seq, created


def test_canonical_reply() -> None:
    plain = _kv.plain_reply(canonical(), SUBJECT.encode())
    assert plain is not None
    assert plain == general(canonical(), SUBJECT)
    seq, created = plain
    assert seq == 42
    assert isinstance(created, NanoDatetime)
    assert created.nanosecond == 789
    assert created == datetime(2026, 11, 24, 9, 30, 50, 123456, UTC)


@pytest.mark.parametrize(
    "block",
    [
        canonical(subject="$KV.B.other"),  # another key's revision
        b"NATS/1.0 404 Message Not Found\r\n\r\n",
        b"NATS/1.0 408 Request Timeout\r\n\r\n",
        canonical().replace(b"NATS/1.0\r\n", b"NATS/1.0\r\nKV-Operation: DEL\r\n"),
        canonical().replace(b"NATS/1.0\r\n", b"NATS/1.0\r\nNats-Marker-Reason: MaxAge\r\n"),
        canonical().replace(b"NATS/1.0\r\n", b"NATS/1.0\r\nNats-TTL: 60\r\n"),  # user headers
        canonical().replace(b"Nats-Subject: ", b"Nats-Subject:  "),  # blanks to strip
        canonical().replace(b"\r\n\r\n", b"\r\nNats-Subject: $KV.B.key\r\n\r\n"),  # twice
        canonical(seq="4x2"),
        canonical(stamp="2026-13-24T09:30:50Z"),  # out of range: the general path says so
        canonical(stamp="2026-11-24T09:30:50+01:00"),
        canonical()[:-2],  # truncated
    ],
)
def test_other_blocks_take_the_general_path(block: bytes) -> None:
    assert _kv.plain_reply(block, SUBJECT.encode()) is None


def test_an_invalid_time_is_still_an_error() -> None:
    block = canonical(stamp="2026-13-24T09:30:50Z")
    with pytest.raises(InvalidResponseError):
        direct_fields(b"", block, SUBJECT)


_LINES = st.sampled_from(
    [
        b"Nats-Stream: KV_B",
        b"Nats-Subject: $KV.B.key",
        b"Nats-Subject: $KV.B.key ",
        b" Nats-Subject: $KV.B.key",
        b"Nats-Subject: $KV.B.other",
        b"Nats-Sequence: 7",
        b"Nats-Sequence: 0007",
        b"Nats-Sequence:7",
        b"Nats-Time-Stamp: 2026-11-24T09:30:50.1Z",
        b"Nats-Time-Stamp: 2026-11-24T09:30:50.000000001Z",
        b"Nats-Time-Stamp: 2026-11-24T09:30:50Z",
        b"Nats-Time-Stamp: 0001-01-01T00:00:00Z",
        b"KV-Operation: PURGE",
        b"Nats-Marker-Reason: Remove",
        b"Nats-TTL: 5s",
        b"no colon",
        b"",
    ]
)


@given(
    status=st.sampled_from([b"NATS/1.0", b"NATS/1.0 404 Message Not Found", b"NATS/1.0 "]),
    lines=st.lists(_LINES, max_size=8),
    end=st.sampled_from([b"\r\n\r\n", b"\r\n", b""]),
)
def test_plain_reply_agrees_with_the_general_path(
    status: bytes, lines: list[bytes], end: bytes
) -> None:
    block = b"\r\n".join([status, *lines]) + end
    plain = _kv.plain_reply(block, SUBJECT.encode())
    if plain is not None:
        assert plain == general(block, SUBJECT)


@given(
    seq=st.integers(min_value=1, max_value=2**64 - 1),
    moment=st.datetimes(
        min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31), timezones=st.just(UTC)
    ),
    ns=st.integers(min_value=0, max_value=999),
    digits=st.integers(min_value=0, max_value=9),
)
def test_canonical_blocks_take_the_fast_path(
    seq: int, moment: datetime, ns: int, digits: int
) -> None:
    fraction = f"{moment.microsecond * 1000 + ns:09d}"[:digits]
    stamp = (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}T"
        f"{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}"
        + (f".{fraction}" if digits else "")
        + "Z"
    )
    block = canonical(seq=str(seq), stamp=stamp)
    plain = _kv.plain_reply(block, SUBJECT.encode())
    assert plain is not None
    assert plain == general(block, SUBJECT)
    assert plain[1] == parse_timestamp(stamp)


def test_kv_entry_is_the_validated_entry() -> None:
    created = parse_timestamp("2026-11-24T09:30:50.123456789Z")
    for op in KeyValueOp:
        fast = kv_entry("B", "key", b"value", 7, created, 3, op)
        slow = KeyValueEntry(
            bucket="B",
            key="key",
            value=b"value",
            revision=7,
            created=created,
            delta=3,
            operation=op,
        )
        assert_same_model(fast, slow, {"delta": 0})
        assert hash(fast) == hash(slow)
        assert fast.created.nanosecond == 789  # type: ignore[attr-defined]
        with pytest.raises(ValidationError):
            fast.key = "other"  # type: ignore[misc]
    assert kv_entry("B", "k", b"", 1, created) == KeyValueEntry(
        bucket="B", key="k", revision=1, created=created, delta=0, operation=KeyValueOp.PUT
    )
