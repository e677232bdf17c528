"""Column mode's bulk framing (``_columns``) against the size-based framing it stands for.

``frame`` takes the bytes after a sink's plain message and returns the
longest run of messages whose framing by CRLFs is the protocol's (framing by
sizes): these tests compare it with a plain size-based parser on random
messages, and pin where a run must stop.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")

from aiojetstream import _columns, _conn  # noqa: E402
from aiojetstream._message import Msg  # noqa: E402

Message = tuple[bytes, bytes, bytes]  # subject, reply, payload


def _frames(messages: list[Message], sid: bytes = b"7") -> bytes:
    return b"".join(b"MSG %b %b %b %d\r\n%b\r\n" % (s, sid, r, len(p), p) for s, r, p in messages)


def _canonical(message: Message) -> bool:
    """What a run may hold: fields without whitespace, no CRLF in the payload."""
    subject, reply, payload = message
    blanks = b" \t\n\x0b\x0c\r"
    fields_ok = all(f and not any(c in blanks for c in f) for f in (subject, reply))
    return fields_ok and b"\r\n" not in payload


def _run_messages(run: _columns.Run) -> list[Message]:
    return list(
        zip(run.subjects.to_pylist(), run.replies.to_pylist(), run.data.to_pylist(), strict=True)
    )


SUBJECT = st.binary(min_size=1, max_size=12) | st.sampled_from([b"a.b", b"orders.>", b"\xff"])
REPLY = st.binary(min_size=1, max_size=20) | st.just(b"$JS.ACK.S.C.1.5.5.1767225600123456789.0")
PAYLOAD = st.binary(max_size=40) | st.sampled_from(
    [b"", b"\r\n", b"a\r\n", b"\r\nMSG ", b"MSG s 7 r 1\r\nx\r\n", b"\r", b"\n", b"x" * 3000]
)
MESSAGES = st.lists(st.tuples(SUBJECT, REPLY, PAYLOAD), min_size=1, max_size=30)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(MESSAGES, st.integers(min_value=0, max_value=200), st.integers(min_value=1, max_value=8))
@example([(b"s", b"r", b"x\r\n")], 0, 8)
@example([(b"s", b"r", b""), (b"s", b"r", b"\r\nMSG s 7 r 0\r\n")], 0, 8)
def test_a_run_is_the_size_framing_of_its_messages(
    messages: list[Message], cut: int, window_shift: int
) -> None:
    """The run holds the first messages exactly as sent, up to the first one it may not hold.

    It stops at a message that is not canonical (whitespace in a field, a
    CRLF in the payload), at a read cut short (``cut`` bytes missing) or at
    the window's end; it never holds a wrong message.
    """
    data = _frames(messages)
    size = len(data) - cut if cut < len(data) else len(data)
    end = min(size, 1 << (4 + 2 * window_shift))
    run = _columns.frame(data, 0, end, b"7")
    got = [] if run is None else _run_messages(run)
    assert got == messages[: len(got)]
    # The longest run allowed: canonical messages wholly before `end`.
    allowed, pos = 0, 0
    for message in messages:
        pos += len(_frames([message]))
        if pos > end or not _canonical(message):
            break
        allowed += 1
    assert len(got) == allowed
    if run is not None:
        assert run.end == len(_frames(messages[: len(got)]))
        assert run.payload_bytes == sum(len(p) for _, _, p in got)
        assert run.count == len(got)


def test_a_run_stops_at_another_sid_a_header_message_or_odd_lines() -> None:
    plain = b"MSG s 7 r 2\r\nhi\r\n"
    for other in (
        b"MSG s 8 r 2\r\nhi\r\n",  # another subscription
        b"MSG s 07 r 2\r\nhi\r\n",  # the sid written otherwise
        b"HMSG s 7 r 12 14\r\nNATS/1.0\r\n\r\nhi\r\n",
        b"MSG s 7 2\r\nhi\r\n",  # no reply
        b"MSG s 7 r +2\r\nhi\r\n",
        b"MSG s\t7 r 2\r\nhi\r\n",
        b"MSG s 7 r  2\r\nhi\r\n",
        b"MSG s 7 r 2 \r\nhi\r\n",
        b"MSG s 7 r\x0b 2\r\nhi\r\n",
        b"PING\r\n",
    ):
        run = _columns.frame(plain * 3 + other + plain, 0, 10_000, b"7")
        assert run is not None, other
        assert run.count == 3, other
        assert run.end == 3 * len(plain)
    assert _columns.frame(plain, 0, len(plain), b"+7") is None  # only a sid of digits


def test_the_framer_backs_off_after_failures_and_runs_reset_it() -> None:
    framer = _columns.Framer()
    bad = b"MSG s 7 r 3\r\na\r\n\r\n"  # a CRLF in the payload: no run
    good = b"MSG s 7 r 1\r\nx\r\n" * 5
    calls = [framer(bad, 0, len(bad), b"7", len(bad)) for _ in range(8)]
    # Tried, skipped once, tried, skipped 3 times, tried, ...
    assert [c is None for c in calls] == [True] * 8
    assert framer._backoff[0] == 7
    while framer._skip[0]:
        assert framer(good, 0, len(good), b"7", 16) is None
    run = framer(good, 0, len(good), b"7", 16)
    assert run is not None
    assert run.count == 5
    assert (framer._backoff[0], framer._skip[0]) == (0, 0)
    # A run of one (the read holds no more) is no failure.
    framer(bad, 0, len(bad), b"7", len(bad))
    assert (framer._backoff[0], framer._skip[0]) == (1, 1)
    framer(good, 0, len(good), b"7", 16)  # skipped
    one = framer(good, 0, 16, b"7", 16)
    assert one is not None
    assert one.count == 1
    assert (framer._backoff[0], framer._skip[0]) == (0, 0)


def test_the_router_hands_a_sink_whole_runs() -> None:
    """One read of 500 plain messages: one run, counted as 500, around a header message."""
    router = object.__new__(_conn._Router)
    router.routes, router.internal, router.sinks = {}, {}, {}
    router.last_subject = b""
    router.stats = {"in_msgs": 0, "in_bytes": 0}
    router._awaiting = 0
    items: list[Any] = []
    counts: list[int] = []
    handled: list[bytes] = []
    router.sinks[7] = _conn.RawSink(items.append, Msg, None, counts.append, _columns.Framer())
    router.routes[7] = lambda subject, reply, data, hdr: handled.append(data)
    plain = b"MSG s 7 $JS.ACK.S.C.1.1.1.1.0 3\r\nabc\r\n"
    header = b"HMSG s 7 r 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"
    view = plain * 500 + header + plain * 2
    pos, _, what, _ = router._scan(view, 0, len(view))
    assert (pos, what) == (len(view), _conn._SCAN_END)
    assert [type(i) for i in items] == [_columns.Run, _columns.Run]
    assert [len(i) for i in items] == [500, 2]
    assert counts == [500, 2]  # handed on before the header message, and at the end
    assert handled == [b"hi"]
    assert router.stats == {"in_msgs": 503, "in_bytes": 503 * 3 - 1}


def test_build_keeps_order_headers_and_undecodable_subjects() -> None:
    run = _columns.frame(b"MSG a.b 7 r1 1\r\nx\r\nMSG \xff 7 r2 0\r\n\r\n", 0, 100, b"7")
    assert run is not None
    assert run.count == 2
    with_headers = Msg(b"h", b"r3", b"y", b"NATS/1.0\r\nK: 1\r\nK: 2\r\n\r\n", None)  # type: ignore[arg-type]
    plain = Msg(b"p", b"r4", b"z", None, None)  # type: ignore[arg-type]
    batch = _columns.build([run, with_headers, plain])
    assert batch.schema == _columns.COLUMNS
    assert batch.column("subject").to_pylist() == ["a.b", "\ufffd", "h", "p"]
    assert batch.column("reply").to_pylist() == ["r1", "r2", "r3", "r4"]
    assert batch.column("data").to_pylist() == [b"x", b"", b"y", b"z"]
    assert batch.column("headers").to_pylist() == [None, None, [("K", "1, 2")], None]
    assert _columns.build([]).num_rows == 0
    msgs = run.messages(None)  # type: ignore[arg-type]
    assert [(m._subject, m._reply, m.data) for m in msgs] == [
        (b"a.b", b"r1", b"x"),
        (b"\xff", b"r2", b""),
    ]
    run.truncate(1)
    assert len(run) == 1
    assert run.tail_size(1) == len(b"a.b") + len(b"r1") + 1


# --------------------------------------------------------------------------- publishing


def test_pub_commands_are_those_of_pub_command() -> None:
    payloads = [b"", b"abc", b"\r\n", bytes(range(256))]
    data = pa.array(payloads, pa.binary())
    commands, size = _columns.pub_commands(b"s.a", b"_I.z1", data)
    assert commands == b"".join(_conn.pub_command(b"s.a", b"_I.z1", p, None) for p in payloads)
    assert size == sum(map(len, payloads))
    subjects = [b"a", b"bb", b"c", b"d"]
    commands, _ = _columns.pub_commands(pa.array(subjects, pa.binary()), b"r", data.slice(0))
    assert commands == b"".join(
        _conn.pub_command(s, b"r", p, None) for s, p in zip(subjects, payloads, strict=True)
    )
    sliced, _ = _columns.pub_commands(b"s", b"r", data.slice(1, 2))
    assert sliced == b"".join(_conn.pub_command(b"s", b"r", p, None) for p in payloads[1:3])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.from_regex(r"[\x21-\x7e]{1,40}", fullmatch=True),
            st.binary(max_size=40) | st.sampled_from([b"", b"\r\n", b"\r\n\r\n"]),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_hpub_commands_with_msg_ids_are_those_of_pub_command(rows: list[tuple[str, bytes]]) -> None:
    """Plain msg ids as a column: the HPUB commands the per-message path builds, byte for byte."""
    from aiojetstream import _publish as P

    ids = _columns.plain_msg_ids([i for i, _ in rows])
    assert ids is not None
    data = pa.array([p for _, p in rows], pa.binary())
    commands, size = _columns.pub_commands(b"s.a", b"_I.z1", data, ids)
    expected = b"".join(
        _conn.pub_command(
            b"s.a",
            b"_I.z1",
            p,
            P.header_block(P.build_headers(None, i, None, None, None, None, None)),
        )
        for i, p in rows
    )
    assert commands == expected
    assert size == sum(len(p) for _, p in rows)
    sizes = [len(p) + len(_columns.msg_id_block(i)) for i, p in rows]
    assert _columns.longest_message(data, ids) == max(sizes)


def test_only_plain_msg_ids_are_taken_as_a_column() -> None:
    assert _columns.plain_msg_ids(["a-1", "b"]) is not None
    assert _columns.plain_msg_ids(pa.array(["x"], pa.large_string())) is not None
    # Judged one by one (their errors, or header_block's stripping): not plain.
    for ids in (["a b"], [" a"], [""], [None], [1], ["é"], ["a\r\nb"], ["a\t"]):
        assert _columns.plain_msg_ids(ids) is None, ids


def test_the_sinks_msg_ids() -> None:
    """dedupe=auto: <prefix>-<row> where the msg_id column is null (as before, as a column)."""
    pytest.importorskip("pyspark")
    from aiojetstream.spark._write import IdPrefix, _msg_ids

    plain = pa.RecordBatch.from_pydict({"data": [b"a", b"b", b"c"]})
    assert _msg_ids(plain, None, 7).ids is None
    ids: Any = _msg_ids(plain, IdPrefix("w", 3), 7).ids
    assert ids.to_pylist() == ["w-3-7", "w-3-8", "w-3-9"]
    given = pa.RecordBatch.from_pydict({"data": [b"a", b"b"], "msg_id": ["x", None]})
    ids = _msg_ids(given, IdPrefix("w", 3), 0).ids
    assert ids.to_pylist() == ["x", "w-3-1"]
    ids = _msg_ids(given, None, 0).ids
    assert ids.to_pylist() == ["x", None]


def _ids_in_batches(
    rows: Sequence[tuple[str | None, int | None]], cuts: list[int], partition: int = 1
) -> list[str]:
    """dedupe=auto ids of ``rows`` (stream, seq) written in batches split at ``cuts``,
    by the task of ``partition`` of micro-batch 0 of query ``q``."""
    from aiojetstream.spark._write import IdPrefix, _msg_ids, _Run

    run = _Run()
    out: list[str] = []
    bounds = [0, *sorted({c for c in cuts if 0 < c < len(rows)}), len(rows)]
    for lo, hi in itertools.pairwise(bounds):
        if lo == hi:
            continue  # (the writer sends no empty batch)
        part = rows[lo:hi]
        batch = pa.RecordBatch.from_pydict(
            {
                "data": [b"x"] * len(part),
                "stream": pa.array([r[0] for r in part], pa.string()),
                "seq": pa.array([r[1] for r in part], pa.int64()),
            }
        )
        ids: Any = _msg_ids(batch, IdPrefix("q-0", partition), lo, None, run).ids
        out += ids.to_pylist()
    return out


def test_the_sinks_ids_from_a_reads_stream_and_seq() -> None:
    """dedupe=auto with a read's ``stream`` and ``seq``: ids name the message, not the
    row's position; rows in a row from one message (an explode) are told apart."""
    pytest.importorskip("pyspark")
    rows: list[tuple[str | None, int | None]] = [
        ("S", 1),
        ("S", 2),
        ("S", 2),
        ("S", 2),
        ("T-1", 2),
        (None, 5),
        ("S", None),
        ("S", 3),
    ]
    expected = [
        "q-0-S:1",
        "q-0-S:2",
        "q-0-S:2.1",
        "q-0-S:2.2",
        "q-0-T-1:2",
        "q-0-1-5",  # no stream: its position in partition 1's task
        "q-0-1-6",
        "q-0-S:3",
    ]
    assert _ids_in_batches(rows, []) == expected
    for cut in range(1, len(rows)):  # the same whatever the task's batches
        assert _ids_in_batches(rows, [cut]) == expected, cut
    # Out of message order (S 5 again after S 6): positions from that batch on.
    assert _ids_in_batches([("S", 5), ("S", 6), ("S", 5)], []) == ["q-0-1-0", "q-0-1-1", "q-0-1-2"]
    assert _ids_in_batches([("S", 5), ("S", 6), ("S", 5)], [2]) == [
        "q-0-S:5",
        "q-0-S:6",
        "q-0-1-2",
    ]


def test_a_copys_id_wins_over_the_nats_msg_id_in_its_headers() -> None:
    """A copy of a read that keeps ``headers`` (dedupe=auto): the copied Nats-Msg-Id was
    sent as the copy's id, so messages the source stored with one id apart (beyond its
    duplicate_window) collapsed into one in the copy, and the write reported success.
    The copy's id wins; the header's value moves to Source-Nats-Msg-Id (``moved``)."""
    pytest.importorskip("pyspark")
    from aiojetstream.spark._write import IdPrefix, _header_ids, _msg_ids, _Run

    headers = pa.array(
        [
            [("Nats-Msg-Id", "h0")],
            [("Nats-Msg-Id", "same")],
            [("Nats-Msg-Id", "same")],
            [("X", "1")],
            [("Nats-Msg-Id", "h4")],
            None,
        ],
        pa.map_(pa.string(), pa.string()),
    )
    batch = pa.RecordBatch.from_pydict(
        {
            "data": [b"x"] * 6,
            "headers": headers,
            "msg_id": ["m0", None, None, None, None, None],
            "stream": pa.array(["S", "S", "S", "S", None, None], pa.string()),
            "seq": pa.array([1, 2, 3, 4, None, None], pa.int64()),
        }
    )
    ids = _msg_ids(batch, IdPrefix("q-0", 1), 0, _header_ids(headers), _Run())
    assert ids.ids is not None
    assert ids.moved is not None
    assert ids.ids.to_pylist() == [
        "m0",  # the msg_id column wins over everything
        "q-0-S:2",  # a copy's id over its header's
        "q-0-S:3",
        "q-0-S:4",
        "h4",  # not a copy: the header's id is the row's own
        "q-0-1-5",
    ]
    assert ids.moved.to_pylist() == [False, True, True, False, False, False]
    # No row of a copy with a header id: nothing moves.
    plain = batch.select(["data", "stream", "seq"])
    assert _msg_ids(plain, IdPrefix("q-0", 1), 0, None, _Run()).moved is None


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(min_value=1, max_value=3), min_size=1, max_size=30),
    st.data(),
)
def test_a_retry_missing_a_message_keeps_the_others_ids(
    repeats: list[int], data: st.DataObject
) -> None:
    """A retried task that reads one message fewer (removed from the source meanwhile)
    gives every other row the id it had: with positions, each later row took the id of
    the row before it, and a row never stored was dropped as a duplicate."""
    pytest.importorskip("pyspark")
    rows = [("S", seq) for seq, n in enumerate(repeats, 1) for _ in range(n)]
    first = _ids_in_batches(rows, data.draw(st.lists(st.integers(0, len(rows)), max_size=3)))
    assert len(set(first)) == len(first)  # every row its own id
    gone = data.draw(st.integers(1, len(repeats)))
    kept = [(i, r) for i, r in enumerate(rows) if r[1] != gone]
    again = _ids_in_batches(
        [r for _, r in kept], data.draw(st.lists(st.integers(0, len(kept)), max_size=3))
    )
    assert again == [first[i] for i, _ in kept]


def _ids_in_partitions(
    rows: Sequence[tuple[str | None, int | None]], parts: list[int]
) -> list[str]:
    """The ids of ``rows`` written by one task per partition, cut at ``parts``."""
    bounds = [0, *sorted({p for p in parts if 0 < p < len(rows)}), len(rows)]
    out: list[str] = []
    for partition, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        out += _ids_in_batches(rows[lo:hi], [], partition)
    return out


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(min_value=1, max_value=3), min_size=1, max_size=30),
    st.lists(st.integers(0, 90), max_size=4),
    st.lists(st.integers(0, 90), max_size=4),
)
def test_a_replay_cut_into_other_partitions_keeps_the_ids(
    repeats: list[int], first: list[int], again: list[int]
) -> None:
    """A replayed micro-batch whose ranges are cut elsewhere (the source's first
    sequence moved with failOnDataLoss=false, or another numPartitions): the ids held
    the partition, so every message that changed partitions was stored again."""
    pytest.importorskip("pyspark")
    rows = [("S", seq) for seq, n in enumerate(repeats, 1) for _ in range(n)]

    def cuts(at: list[int]) -> list[int]:  # a read cuts between messages, never inside one
        return [i for i in at if 0 < i < len(rows) and rows[i][1] != rows[i - 1][1]]

    assert _ids_in_partitions(rows, cuts(first)) == _ids_in_partitions(rows, cuts(again))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["S", "T", "S-1", "0", "1", None]),
            st.one_of(st.none(), st.integers(1, 6)),
        ),
        max_size=30,
    ),
    st.lists(st.integers(0, 30), max_size=4),
)
def test_the_sinks_ids_are_unique_in_any_order(
    rows: list[tuple[str | None, int | None]], cuts: list[int]
) -> None:
    """Rows whose ``stream`` / ``seq`` repeat apart (a shuffle after an explode, or
    columns of another meaning) got one id twice: the stream dropped the second row."""
    pytest.importorskip("pyspark")
    ids = _ids_in_batches(rows, cuts)
    assert len(set(ids)) == len(ids)


# --------------------------------------------------------------------------- one header each

HeaderMessage = tuple[bytes, bytes, bytes, bytes]  # subject, reply, header block, payload

HEADER_BLOCK = st.sampled_from(
    [
        b"NATS/1.0\r\nNats-Msg-Id: id-1\r\n\r\n",
        b"NATS/1.0\r\nX: a b\r\n\r\n",
        b"NATS/1.0\r\nK:v\r\n\r\n",  # read by decode_headers as K: v, but not as written
        b"NATS/1.0\r\nK: v \r\n\r\n",
        b"NATS/1.0\r\nA: 1\r\nB: 2\r\n\r\n",
        b"NATS/1.0 100 Idle Heartbeat\r\n\r\n",
        b"NATS/1.0\r\n\r\n",
    ]
) | st.builds(lambda v: b"NATS/1.0\r\nNats-Msg-Id: %b\r\n\r\n" % v, st.binary(max_size=8))


def _hframes(messages: list[HeaderMessage]) -> bytes:
    return b"".join(
        b"HMSG %b 7 %b %d %d\r\n%b%b\r\n" % (s, r, len(h), len(h) + len(p), h, p)
        for s, r, h, p in messages
    )


def _one_header(block: bytes) -> bool:
    import re

    line = block[len(b"NATS/1.0\r\n") : -4]
    return (
        block.startswith(b"NATS/1.0\r\n")
        and block.endswith(b"\r\n\r\n")
        and re.fullmatch(
            rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+: [\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?", line
        )
        is not None
    )


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(SUBJECT, REPLY, HEADER_BLOCK, PAYLOAD), min_size=1, max_size=20),
    st.integers(min_value=0, max_value=200),
)
def test_a_run_with_headers_is_the_size_framing_of_its_messages(
    messages: list[HeaderMessage], cut: int
) -> None:
    """One header each: the run holds the first messages exactly, their headers as decoded."""
    from aiojetstream._headers import decode_headers

    data = _hframes(messages)
    size = len(data) - cut if cut < len(data) else len(data)
    run = _columns.frame_headers(data, 0, size, b"7")
    msgs = [] if run is None else run.messages(cast(Any, None))
    got = [(m._subject, m._reply, m._hdr or b"", m.data) for m in msgs]
    assert all(m._hdr for m in msgs)
    assert got == messages[: len(got)]
    allowed, pos = 0, 0
    for message in messages:
        pos += len(_hframes([message]))
        subject, reply, block, payload = message
        if pos > size or not _canonical((subject, reply, payload)) or not _one_header(block):
            break
        allowed += 1
    assert len(got) == allowed
    if run is not None:
        assert run.end == len(_hframes(messages[: len(got)]))
        assert run.payload_bytes == sum(len(p) for *_, p in got)
        batch = _columns.build([run])
        assert [dict(h) for h in batch.column("headers").to_pylist()] == [
            decode_headers(h)[0] for _, _, h, _ in got
        ]
        assert run.tail_size(run.count) == sum(
            len(s) + len(r) + len(h) + len(p) for s, r, h, p in got
        )


FIELD = st.binary(max_size=6) | st.sampled_from(
    [
        b"",
        b"MSG",
        b"MSGS",
        b"M",
        b"7",
        b"07",
        b"a.b",
        b"\xff",
        b"\xc3\xa9",
        b"1" * 18,
        b"1" * 19,
        b"\xd9\xa3",
    ]
)
LINE = st.lists(FIELD, min_size=1, max_size=7).map(b" ".join) | st.builds(
    lambda s, r, n: b"MSG %b 7 %b %b" % (s, r, n),
    FIELD,
    FIELD,
    st.sampled_from([b"0", b"12", b"1" * 18, b"1" * 19, b"", b"+1", b"1 ", b"\t1", b"\xd9\xa3"]),
)


@settings(max_examples=500, deadline=None)
@given(st.lists(LINE, min_size=1, max_size=8))
@example([b"MSG s 7 r 1"] * 3)
@example([b"MSG s 7 r 1", b"MSG \xff 7 r 1"])  # not ASCII: the regex decides
@example([b"MSG s 7 r 1", b"MSG s 7 r 1" + b"1" * 18])
@example([b"MSG s 7 r 1", b"MSG  7 r 1"])  # no subject (two blanks)
@example([b"MSG s 7  1"])  # no reply
@example([b"MSGS s 7 r 1"])
@example([b"MSG s 7 r \xd9\xa3"])  # a digit that is not ASCII
def test_the_column_wide_line_check_is_the_regex(lines: list[bytes]) -> None:
    """``_all_plain_lines`` accepts the lines exactly when the regex accepts every one."""
    column = pa.array(lines, pa.binary())
    fields = pa.compute.split_pattern(column, b" ")
    regex = f"^MSG {_columns._TOKEN} 7 {_columns._TOKEN} [0-9]{{1,18}}$"
    every = all(pa.compute.match_substring_regex(column, regex).to_pylist())
    tokens = _columns._all_plain_lines(column, fields, b"7")
    if not every:
        assert tokens is None
        return
    if tokens is not None:
        subjects, replies, sizes = (t.to_pylist() for t in tokens)
        assert [b"MSG %b 7 %b %b" % t for t in zip(subjects, replies, sizes, strict=True)] == lines
    else:  # only for bytes that are no printable ASCII (left to the regex)
        assert any(any(c < 0x20 or c > 0x7E for c in line) for line in lines)


def test_a_msg_id_with_a_lone_surrogate_is_left_to_the_per_id_checks() -> None:
    """pa.array raised UnicodeEncodeError for it, out of publish_many untyped (a list
    of payloads raised InvalidHeaderError)."""
    assert _columns.plain_msg_ids(["ok", "bad\ud800id"]) is None
