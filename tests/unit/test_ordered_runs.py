"""The ordered consumer's run check: messages handed out a buffered run at a time.

``OrderedSource.take`` checks a run of buffered messages at its two ends
(first consumer sequence ``expected``, last ``expected + count - 1``) instead
of parsing every reply subject, and parses the stream sequence of the last
message handed out only when the cursor is asked for. These tests drive it
with a stand-in for the pull driver: what comes out must be exactly what the
per-message check lets through, gaps must stop it, and the cursor must be
right wherever the consumer stops.
"""

from __future__ import annotations

from collections import deque
from typing import Any, cast

from hypothesis import given, settings
from hypothesis import strategies as st

from aiojetstream import OrderedConsumerConfig
from aiojetstream._message import Msg
from aiojetstream._ordered import OrderedConsumer, OrderedSource


class _Acker:
    timeout = 5.0


class _Driver:
    """The pull driver's buffer, as the ordered source uses it."""

    def __init__(self, messages: list[Msg]) -> None:
        self.buffer = deque(messages)
        self.stopped = False
        self.whole_takes = 0

    def buffer_ends(self) -> tuple[int, Msg | None, Msg | None]:
        if not self.buffer:
            return 0, None, None
        return len(self.buffer), self.buffer[0], self.buffer[-1]

    def take(self) -> Msg | None:
        return self.buffer.popleft() if self.buffer else None

    def stop(self) -> None:
        self.stopped = True


def _msg(stream_seq: int, consumer_seq: int, reply: bytes | None = None) -> Msg:
    if reply is None:
        reply = b"$JS.ACK.S.C.1.%d.%d.1764297600000000000.0" % (stream_seq, consumer_seq)
    return Msg(b"s", reply, b"%d" % stream_seq, None, cast(Any, _Acker()))


def _source(messages: list[Msg], expected: int = 1) -> tuple[OrderedSource, OrderedConsumer]:
    owner = OrderedConsumer(cast(Any, None), "S", OrderedConsumerConfig())
    owner._expected = expected
    source = OrderedSource(owner, cast(Any, None), None)
    source._driver = cast(Any, _Driver(messages))
    return source, owner


def _drain(source: OrderedSource) -> list[Msg]:
    out = []
    while (msg := source.take()) is not None:
        out.append(msg)
    return out


def test_a_run_in_order_is_handed_out_whole() -> None:
    messages = [_msg(10 + i, 1 + i) for i in range(5)]
    source, owner = _source(messages)
    assert source.take() is messages[0]
    assert source._in_order == 4, "checked at its ends, not one by one"
    assert owner.cursor == 10
    assert _drain(source) == messages[1:]
    assert owner.cursor == 14
    assert owner._expected == 6
    assert not owner._needs_reset


def test_a_gap_stops_before_it() -> None:
    messages = [_msg(1, 1), _msg(2, 2), _msg(4, 4), _msg(5, 5)]
    source, owner = _source(messages)
    assert _drain(source) == messages[:2]
    assert owner._needs_reset
    assert owner.cursor == 2


def test_a_stale_first_message_is_not_taken_for_a_run() -> None:
    # Ends 4 and 7 with 3 messages would fit expected 5 at the last one only.
    messages = [_msg(4, 4), _msg(6, 6), _msg(7, 7)]
    source, owner = _source(messages, expected=5)
    assert _drain(source) == []
    assert owner._needs_reset


def test_the_cursor_of_a_consumer_stopped_in_a_run() -> None:
    messages = [_msg(100 + 3 * i, 1 + i) for i in range(6)]
    source, owner = _source(messages)
    for _ in range(3):
        source.take()
    assert owner.cursor == 106
    # A reset starts after it: the next consumer's config asks for 107 on.
    assert owner._consumer_config().opt_start_seq == 107


def test_a_forged_reply_at_a_run_end_is_caught() -> None:
    """The ends of a run are parsed whole: a forged one there stops the consumer before it."""
    messages = [_msg(1, 1), _msg(2, 2), _msg(3, 3, b"_INBOX.not.an.ack")]
    source, owner = _source(messages)
    assert _drain(source) == messages[:2]
    assert owner._needs_reset
    messages = [_msg(1, 1, b"$JS.ACK.S.C.1.1.1.x.0"), _msg(2, 2), _msg(3, 3)]
    source, owner = _source(messages)
    assert _drain(source) == []
    assert owner._needs_reset


def test_a_stream_sequence_going_back_at_a_run_end_is_a_gap() -> None:
    """A server never delivers a stream sequence again: at the run's end, checked one by one."""
    messages = [_msg(1, 1), _msg(2, 2), _msg(1, 3)]
    source, owner = _source(messages)
    assert _drain(source) == messages[:2]
    assert owner._needs_reset
    assert owner.cursor == 2


def test_a_run_starting_at_the_cursor_is_a_gap() -> None:
    """A new consumer's first delivery at (or below) the cursor: nothing handed out."""
    source, owner = _source([_msg(5, 1), _msg(6, 2)])
    owner._cursor_value = 5  # 5 was handed out (from an earlier consumer)
    assert _drain(source) == []
    assert owner._needs_reset
    assert owner.cursor == 5


def test_a_single_message_after_a_run_is_checked_against_its_last() -> None:
    """The last of a run handed out unparsed is the cursor the next message is checked with."""
    messages = [_msg(10, 1), _msg(11, 2), _msg(12, 3)]
    source, owner = _source(messages)
    assert _drain(source) == messages
    assert owner._cursor_msg is not owner._cursor_parsed  # not parsed yet
    driver = cast(_Driver, source._driver)
    driver.buffer.append(_msg(11, 4))  # one message: not a run
    assert source.take() is None
    assert owner._needs_reset
    assert owner.cursor == 12


def test_a_message_checked_alone_whose_stream_sequence_goes_back_is_a_gap() -> None:
    """The fetch / next path (``_accept``): not handed out, the next fetch resets."""
    owner = OrderedConsumer(cast(Any, None), "S", OrderedConsumerConfig())
    assert owner._accept(_msg(7, 1)) is True
    assert owner._accept(_msg(7, 2)) is False
    assert owner._needs_reset
    assert owner.cursor == 7


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(min_value=1, max_value=3), min_size=1, max_size=40),
    st.integers(min_value=1, max_value=5),
    st.lists(st.integers(min_value=0, max_value=6), max_size=5),
)
def test_runs_hand_out_what_the_message_check_does(
    steps: list[int], expected: int, takes: list[int]
) -> None:
    """Consumer sequences growing by random steps (1: in order), taken in random amounts.

    Whatever the gaps, what comes out is the longest run in order from
    ``expected`` (as checking each message gives), and the cursor is the
    stream sequence of the last message taken whenever it is asked for.
    """
    # The first message's step counts from expected - 1 (1: it is the next one).
    sequences = []
    cseq = expected - 1
    for step in steps:
        cseq += step
        sequences.append(cseq)
    messages = [_msg(1000 + 2 * c, c) for c in sequences]
    want: list[Msg] = []
    for msg, c in zip(messages, sequences, strict=True):
        if c != expected + len(want):
            break
        want.append(msg)
    source, owner = _source(messages, expected)
    got: list[Msg] = []
    for amount in takes:  # stop now and then and look at the cursor
        for _ in range(amount):
            taken = source.take()
            if taken is None:
                break
            got.append(taken)
        assert owner.cursor == (int(got[-1].data) if got else 0)
    got += _drain(source)
    assert got == want
    assert owner.cursor == (int(got[-1].data) if got else 0)
    assert owner._needs_reset == (len(want) < len(messages))
