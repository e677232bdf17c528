"""Batch direct get, pure parts: frame classification, request bodies, the batch cursor."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiojetstream import (
    APIError,
    BadRequestError,
    DirectBatchGapError,
    InvalidOptionError,
    InvalidResponseError,
    NoRespondersError,
    TooManyResultsError,
)
from aiojetstream._direct import (
    BatchCursor,
    DirectFrame,
    FrameKind,
    batch_request,
    build_message,
    classify_frame,
    last_msgs_request,
    status_error,
    time_ns,
)
from aiojetstream._models import NanoDatetime

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "direct_batch_frames.json"


def frames(name: str) -> list[dict[str, str]]:
    data: dict[str, Any] = json.loads(FIXTURE.read_text())
    result: list[dict[str, str]] = data[name]["frames"]
    return result


def classify(raw: dict[str, str]) -> DirectFrame:
    return classify_frame(raw["header_block"].encode() or None)


def test_batch_frames_are_messages_then_eob() -> None:
    raw = frames("batch")
    kinds = [classify(f).kind for f in raw]
    assert kinds == [FrameKind.MESSAGE] * 3 + [FrameKind.EOB]
    msgs = [build_message(classify(f), f["payload"].encode()) for f in raw[:3]]
    assert [m.seq for m in msgs] == [1, 2, 3]
    assert msgs[0].headers == {"X-User": "u1"}  # stored headers kept, metadata moved out
    assert msgs[1].headers is None
    assert all(m.time.tzinfo is not None for m in msgs)
    eob = classify(raw[3])
    assert eob.headers["Nats-Last-Sequence"] == "3"
    assert eob.description == "EOB"


def test_multi_last_eob_carries_up_to_sequence() -> None:
    raw = frames("multi_last_page")
    eob = classify(raw[-1])
    assert eob.kind is FrameKind.EOB
    assert int(eob.headers["Nats-UpTo-Sequence"]) >= int(eob.headers["Nats-Last-Sequence"])


@pytest.mark.parametrize("name", ["not_found", "no_results"])
def test_both_404_texts_are_not_found(name: str) -> None:
    assert classify(frames(name)[0]).kind is FrameKind.NOT_FOUND


@pytest.mark.parametrize(
    ("name", "cls", "code"),
    [
        ("empty_request", BadRequestError, 408),
        ("bad_request", BadRequestError, 408),
        ("too_many", TooManyResultsError, 413),
    ],
)
def test_error_statuses_are_typed(name: str, cls: type[APIError], code: int) -> None:
    frame = classify(frames(name)[0])
    assert frame.kind is FrameKind.ERROR
    err = status_error(frame, "DG")
    assert type(err) is cls
    assert isinstance(err, APIError)
    assert err.code == code


def test_no_responders_is_classified_by_status_only() -> None:
    frame = classify(frames("no_direct")[0])
    assert frame.kind is FrameKind.ERROR
    err = status_error(frame, "NODIRECT")
    assert isinstance(err, NoRespondersError)
    assert "allow_direct" in str(err)


def test_unknown_status_is_a_plain_api_error() -> None:
    err = status_error(classify_frame(b"NATS/1.0 412 Required Api Level\r\n\r\n"), "S")
    assert type(err) is APIError
    assert err.code == 412


def test_message_without_metadata_is_invalid() -> None:
    with pytest.raises(InvalidResponseError):
        build_message(classify_frame(None), b"x")


@given(st.binary(max_size=64))
def test_classify_never_raises(block: bytes) -> None:
    classify_frame(block)


def test_timestamps_keep_nanoseconds() -> None:
    frame = classify_frame(
        b"NATS/1.0\r\nNats-Subject: a\r\nNats-Sequence: 1\r\n"
        b"Nats-Time-Stamp: 2026-11-21T06:15:59.44113052Z\r\n\r\n"
    )
    msg = build_message(frame, b"")
    assert isinstance(msg.time, NanoDatetime)
    assert msg.time.nanosecond == 520
    assert time_ns(msg.time) % 1_000_000_000 == 441130520


# --------------------------------------------------------------------------- requests


def test_batch_request_defaults_to_seq_1() -> None:
    assert batch_request(5) == {"seq": 1, "batch": 5}
    assert batch_request(5, seq=3, subject="foo.>", max_bytes=10) == {
        "seq": 3,
        "batch": 5,
        "next_by_subj": "foo.>",
        "max_bytes": 10,
    }


def test_batch_request_start_time_replaces_seq() -> None:
    t = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=2)))
    assert batch_request(2, start_time=t) == {"start_time": "2026-01-02T01:04:05Z", "batch": 2}


def test_batch_request_does_not_send_up_to() -> None:
    body = batch_request(2, up_to_seq=4)
    assert "up_to_seq" not in body


@pytest.mark.parametrize(
    "kwargs",
    [
        {"batch": 0},
        {"batch": True},
        {"batch": 1, "seq": 0},
        {"batch": 1, "seq": 1, "start_time": datetime.now(UTC)},
        {"batch": 1, "start_time": datetime(2026, 1, 1)},  # naive
        {"batch": 1, "max_bytes": 0},
        {"batch": 1, "subject": "foo bar"},
        {"batch": 1, "up_to_seq": 1, "up_to_time": datetime.now(UTC)},
        {"batch": 1, "up_to_seq": 0},
    ],
)
def test_batch_request_refuses(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidOptionError):
        batch_request(**kwargs)


def test_last_msgs_request() -> None:
    assert last_msgs_request("foo.*") == {"multi_last": ["foo.*"]}
    t = datetime(2026, 1, 1, tzinfo=UTC)
    assert last_msgs_request(["a", "b.>"], up_to_time=t, batch=2) == {
        "multi_last": ["a", "b.>"],
        "up_to_time": "2026-01-01T00:00:00Z",
        "batch": 2,
    }
    assert last_msgs_request(["a"], up_to_seq=9)["up_to_seq"] == 9
    for bad in ([], ["a b"]):
        with pytest.raises(InvalidOptionError):
            last_msgs_request(bad)
    with pytest.raises(InvalidOptionError):
        last_msgs_request(["a"], up_to_seq=1, up_to_time=t)


# --------------------------------------------------------------------------- cursor

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@given(
    st.lists(st.integers(min_value=1, max_value=5), min_size=1, max_size=30),
    st.integers(min_value=1, max_value=200),
)
def test_cursor_delivers_exactly_up_to_seq(steps: list[int], up_to: int) -> None:
    """Messages in order are delivered while seq <= up_to_seq; the first beyond ends it."""
    seqs: list[int] = []
    seq = 0
    for step in steps:
        seq += step
        seqs.append(seq)
    cursor = BatchCursor(up_to_seq=up_to)
    delivered = []
    previous = 0
    for s in seqs:
        if not cursor.on_message(s, previous, T0):
            break
        delivered.append(s)
        previous = s
    assert delivered == [s for s in seqs if s <= up_to]


@given(st.integers(min_value=0, max_value=10**6), st.integers(min_value=0, max_value=10**6))
def test_cursor_up_to_time_compares_nanoseconds(a_ns: int, b_ns: int) -> None:
    def at(ns: int) -> datetime:
        us, rest = divmod(ns, 1000)
        base = T0 + timedelta(microseconds=us)
        return NanoDatetime(
            base.year,
            base.month,
            base.day,
            base.hour,
            base.minute,
            base.second,
            base.microsecond,
            UTC,
            nanosecond=rest,
        )

    cursor = BatchCursor(up_to_time=at(b_ns))
    assert cursor.on_message(1, 0, at(a_ns)) is (a_ns < b_ns)


@given(
    st.lists(st.integers(min_value=1, max_value=1000), min_size=2, max_size=20, unique=True),
    st.data(),
)
def test_cursor_detects_any_dropped_reply(raw: list[int], data: st.DataObject) -> None:
    seqs = sorted(raw)
    # Drop any one reply, the first and the last included: the next one names a
    # predecessor never received (the first reply names 0), or the EOB does.
    drop = data.draw(st.integers(min_value=0, max_value=len(seqs) - 1), label="drop")
    cursor = BatchCursor()

    def replay() -> None:
        previous = 0
        for i, s in enumerate(seqs):
            if i != drop:
                cursor.on_message(s, previous, T0)
            previous = s
        cursor.on_eob(previous)

    with pytest.raises(DirectBatchGapError):
        replay()


def test_cursor_accepts_a_complete_batch_and_eob() -> None:
    cursor = BatchCursor()
    previous = 0
    for s in (2, 4, 5):
        assert cursor.on_message(s, previous, T0)
        previous = s
    cursor.on_eob(5)
    assert cursor.delivered == 3
    assert cursor.last_seq == 5


def test_cursor_refuses_a_reply_without_last_sequence() -> None:
    with pytest.raises(InvalidResponseError, match=r"2\.11"):
        BatchCursor().on_message(1, None, T0)


def test_raw_message_is_the_validated_message() -> None:
    """The batch get's unvalidated constructor builds what validation would."""
    from pydantic import ValidationError

    from aiojetstream._models import RawStreamMessage, parse_timestamp
    from aiojetstream._models.message import raw_message
    from helpers import assert_same_model

    time = parse_timestamp("2026-11-24T09:30:50.123456789Z")
    for headers in (None, {"a": "1", "b": "2"}):
        fast = raw_message("s.x", 7, headers, b"data", time)
        slow = RawStreamMessage(subject="s.x", seq=7, headers=headers, data=b"data", time=time)
        assert_same_model(fast, slow, {"seq": 8})
        assert fast.time.nanosecond == 789  # type: ignore[attr-defined]
        with pytest.raises(ValidationError):
            fast.seq = 9  # type: ignore[misc]
