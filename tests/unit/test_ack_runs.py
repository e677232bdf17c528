"""The publisher's runs of plain acknowledgements (``_publish.AckRuns``) against size framing.

On the fast path the publisher's reply sink counts the plain
acknowledgements of a span (one reply subject for the publishes of one
``send_many``) by runs: one regular expression with every size written
into it matches them all at once. These tests compare it with a plain
size-based parser that classifies each reply as the publisher does.
"""

from __future__ import annotations

import re

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from aiojetstream._publish import AckRun, AckRuns

PREFIX = b"_INBOX.abc."
SID = b"5"
HEAD = b"MSG _INBOX.abc.z1f 5 "

PAYLOAD = (
    st.sampled_from(
        [
            b'{"stream":"S","seq":1}',
            b'{"stream":"S","seq":12345678901234567890}',
            b'{"stream":"S","seq":0123}',
            b'{"stream":"ORDERS","seq":7}',
            b'{"stream":"S","seq":7,"domain":"hub"}',
            b'{"stream":"S","seq":7,"duplicate":true}',
            b'{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"}}',
            b'{"stream":"a\r\nb","seq":1}',
            b'{"stream":"S","seq":1} ',
            b'{"stream":"S","seq":}',
            b"",
            b"\r\n",
        ]
    )
    | st.builds(
        lambda n, duplicate: (
            b'{"stream":"S","seq":%d%b}' % (n, b',"duplicate":true' if duplicate else b"")
        ),
        st.integers(0, 2**64 - 1),
        st.booleans(),
    )
    | st.binary(max_size=30)
)
LINE_HEAD = st.sampled_from(
    [HEAD] * 8
    + [
        b"MSG _INBOX.abc.z20 5 ",  # another span
        b"MSG _INBOX.abc.1f0 5 ",  # a publish_async token
        b"MSG _INBOX.abc.z1f 6 ",  # another subscription
        b"MSG _INBOX.abc.z1f  5 ",  # two blanks
    ]
)
#: How a size is written: mostly as it is, sometimes as the protocol's digits do not say it.
SIZE = st.sampled_from([b"%d"] * 10 + [b"0%d", b"+%d"])


def _plain(payload: bytes, stream: bytes, tail: bytes) -> bool:
    # nats-server's sequence: from 1, no leading zero; 20 digits (maybe past 2**64 - 1),
    # 0 and a leading zero are left to the full parse.
    shape = rb'\{"stream":"%b","seq":[1-9][0-9]{0,18}%b\}' % (
        re.escape(stream),
        re.escape(tail),
    )
    return re.fullmatch(shape, payload) is not None


def _kind(payload: bytes) -> tuple[bytes, bytes] | None:
    """The stream of a plain acknowledgement or a duplicate's, and its duplicate flag (or b"")."""
    found = re.match(rb'\{"stream":"([^"\\\r\n ]{1,255})","seq":', payload)
    if found is None:
        return None
    for tail in (b"", b',"duplicate": true', b',"duplicate":true'):
        if _plain(payload, found.group(1), tail):
            return found.group(1), tail
    return None


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(LINE_HEAD, SIZE, PAYLOAD), min_size=1, max_size=30),
    st.integers(0, 60),
)
@example([(HEAD, b"%d", b'{"stream":"S","seq":1}')] * 3, 0)
@example([(HEAD, b"%d", b'{"stream":"S","seq":1}'), (HEAD, b"0%d", b'{"stream":"S","seq":2}')], 0)
def test_a_run_is_the_leading_plain_acks_of_the_first_span(
    replies: list[tuple[bytes, bytes, bytes]], cut: int
) -> None:
    frames = [b"%b%b\r\n%b\r\n" % (head, size % len(p), p) for head, size, p in replies]
    view = b"".join(frames)
    size = max(0, len(view) - cut)
    first_end = len(frames[0])
    if first_end > size:
        return  # the router frames a first message only once it is all in
    run = AckRuns(PREFIX, b"z")(view, 0, size, SID, first_end)
    # The reference: what framing by sizes reads, classified as the publisher does.
    head0, _, payload0 = replies[0]
    kind = _kind(payload0)
    span = re.fullmatch(rb"MSG _INBOX\.abc\.(z[0-9a-f]+) 5 ", head0)
    expected, pos, payload_bytes = 0, 0, 0
    for frame, (head, size_form, payload) in zip(frames, replies, strict=True):
        pos += len(frame)
        if (
            pos > size
            or head != head0
            or span is None
            or size_form != b"%d"
            or kind is None
            or not _plain(payload, *kind)
        ):
            break
        expected += 1
        payload_bytes += len(payload)
    if not expected:
        assert run is None
        return
    assert isinstance(run, AckRun)
    assert span is not None
    assert kind is not None
    assert (run.token, run.count, run.duplicate) == (span.group(1), expected, bool(kind[1]))
    assert run.end == sum(len(f) for f in frames[:expected])
    assert run.payload_bytes == payload_bytes


def test_a_long_stream_name_whose_sizes_change_width_is_left_to_the_loop() -> None:
    stream = b"S" * 70  # sizes 91..110: two and three digits
    payload = b'{"stream":"%b","seq":1}' % stream
    frame = b"%b%d\r\n%b\r\n" % (HEAD, len(payload), payload)
    assert AckRuns(PREFIX, b"z")(frame * 3, 0, 3 * len(frame), SID, len(frame)) is None
    stream = b"S" * 50
    payload = b'{"stream":"%b","seq":1}' % stream
    frame = b"%b%d\r\n%b\r\n" % (HEAD, len(payload), payload)
    run = AckRuns(PREFIX, b"z")(frame * 3, 0, 3 * len(frame), SID, len(frame))
    assert run is not None
    assert run.count == 3


def test_the_router_counts_runs_and_hands_the_rest_on_one_by_one() -> None:
    """Spans' plain acks and duplicates by runs; a domain, another token, a status one by one."""
    from typing import Any

    from aiojetstream import _conn

    router = object.__new__(_conn._Router)
    router.routes, router.internal, router.sinks = {}, {}, {}
    router.last_subject = b""
    router.stats = {"in_msgs": 0, "in_bytes": 0}
    router._awaiting = 0
    events: list[Any] = []

    def one(subject: bytes, reply: bytes, data: bytes, hdr: bytes | None, context: Any) -> None:
        events.append(("one", subject[len(PREFIX) :], data))

    def run(item: object) -> None:
        if isinstance(item, AckRun):
            events.append(("run", item.token, item.count, item.duplicate))

    router.internal[5] = lambda s, r, d, h: events.append(("handler", s[len(PREFIX) :], h))
    router.sinks[5] = _conn.RawSink(run, one, None, lambda n: None, AckRuns(PREFIX, b"z"))

    def ack(token: bytes, payload: bytes) -> bytes:
        return b"MSG %b%b 5 %d\r\n%b\r\n" % (PREFIX, token, len(payload), payload)

    plain = [b'{"stream":"S","seq":%d}' % n for n in (9, 10, 11, 12, 13, 14, 15)]
    duplicate = b'{"stream":"S","seq":12,"duplicate": true}'  # as nats-server writes it
    domain = b'{"stream":"S","seq":16,"domain":"hub"}'
    view = b"".join(
        [
            *(ack(b"z1", p) for p in plain[:3]),
            ack(b"z1", duplicate),
            ack(b"z1", domain),
            *(ack(b"z1", p) for p in plain[3:5]),
            *(ack(b"z2", p) for p in plain[5:]),
            ack(b"a3", plain[0]),
            b"HMSG %bz2 5 16 16\r\nNATS/1.0 503\r\n\r\n\r\n" % PREFIX,
        ]
    )
    pos, _, what, _ = router._scan(view, 0, len(view))
    assert (pos, what) == (len(view), _conn._SCAN_END)
    assert events == [
        ("run", b"z1", 3, False),
        ("run", b"z1", 1, True),
        ("one", b"z1", domain),
        ("run", b"z1", 2, False),
        ("run", b"z2", 2, False),
        ("one", b"a3", plain[0]),
        ("handler", b"z2", b"NATS/1.0 503\r\n\r\n"),
    ]
    assert router.stats["in_msgs"] == 11
    assert router.stats["in_bytes"] == (
        sum(map(len, plain)) + len(duplicate) + len(domain) + len(plain[0])
    )
