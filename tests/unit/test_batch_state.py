"""Atomic batch publish (ADR-50), pure parts: sequence, limits, closing, the commit's ack."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiojetstream import (
    AtomicPublishDisabledError,
    BatchClosedError,
    BatchDuplicateMsgIdError,
    BatchTooLargeError,
    FeatureNotSupportedError,
    InvalidOptionError,
    InvalidResponseError,
)
from aiojetstream._batch import MAX_BATCH_MESSAGES, BatchState, batch_ack, check_first_reply


def take(state: BatchState, **kwargs: int) -> int:
    seq = state.check(**kwargs)
    state.sent()
    return seq


@given(st.integers(min_value=0, max_value=MAX_BATCH_MESSAGES))
def test_sequences_and_the_limit(n: int) -> None:
    state = BatchState("b")
    assert [take(state) for _ in range(n)] == list(range(1, n + 1))
    assert state.size == n
    if n == MAX_BATCH_MESSAGES:
        with pytest.raises(BatchTooLargeError) as info:
            state.check()
        assert info.value.err_code == 10199
        assert state.size == n  # nothing counted
    else:
        assert state.check() == n + 1


def test_check_does_not_count() -> None:
    state = BatchState("b")
    assert state.check() == 1
    assert state.check() == 1
    assert state.size == 0


@given(st.integers(min_value=1, max_value=50))
def test_expected_last_sequence_only_first(n: int) -> None:
    state = BatchState("b")
    assert take(state, expected_last_sequence=7) == 1
    for _ in range(n - 1):
        take(state)
    with pytest.raises(InvalidOptionError):
        state.check(expected_last_sequence=7)


def test_closed_batch_refuses() -> None:
    state = BatchState("b")
    state.closed = True
    with pytest.raises(BatchClosedError):
        state.check()


@pytest.mark.parametrize("bad", ["", "x" * 65, "a\r\nb"])
def test_batch_id_rules(bad: str) -> None:
    with pytest.raises(InvalidOptionError):
        BatchState(bad)


def test_headers() -> None:
    state = BatchState("b1")
    assert state.headers({"X": "1"}, 3, commit=True) == {
        "X": "1",
        "Nats-Batch-Id": "b1",
        "Nats-Batch-Sequence": "3",
        "Nats-Batch-Commit": "1",
    }
    assert "Nats-Batch-Commit" not in state.headers(None, 1)


def test_ack() -> None:
    ack = batch_ack(b'{"stream":"AB","seq":4,"batch":"b1","count":4,"domain":"hub"}')
    assert (ack.stream, ack.seq, ack.batch_id, ack.batch_size, ack.domain) == (
        "AB",
        4,
        "b1",
        4,
        "hub",
    )
    error = {"error": {"code": 400, "err_code": 10201, "description": "dup"}, "seq": 0}
    with pytest.raises(BatchDuplicateMsgIdError):
        batch_ack(json.dumps(error).encode())
    with pytest.raises(InvalidResponseError):
        batch_ack(b'{"stream":"AB","seq":4}')


def test_the_first_reply_of_an_open_batch_is_empty() -> None:
    check_first_reply(b"")  # the batch is open on the server: nothing to say


def test_a_refused_first_message_raises_its_typed_error() -> None:
    refusal = {"error": {"code": 400, "err_code": 10174, "description": "disabled"}}
    with pytest.raises(AtomicPublishDisabledError):
        check_first_reply(json.dumps(refusal).encode())


def test_a_first_message_stored_alone_means_an_old_server() -> None:
    """A plain acknowledgement: a server without atomic batches stored the message."""
    with pytest.raises(FeatureNotSupportedError) as info:
        check_first_reply(b'{"stream":"S","seq":7}')
    assert info.value.required_level == 2
    assert any("stored the batch's first message alone" in n for n in info.value.__notes__)
    assert "reports API level 0" not in str(info.value)  # the level was not known
    assert any("level is unknown" in n for n in info.value.__notes__)


def test_a_first_message_stored_alone_with_a_level_names_the_meta_leader() -> None:
    """A level was read (the meta leader's, in a cluster): an older node stored it alone."""
    with pytest.raises(FeatureNotSupportedError) as info:
        check_first_reply(b'{"stream":"S","seq":7}', 5)
    assert info.value.server_level == 5
    assert "reports API level" not in str(info.value)
    assert any("meta leader" in n for n in info.value.__notes__)
