"""Msg: lazy decoding, size, ADR-15 acks against a fake connection, ack-subject metadata."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiojetstream import (
    ConnectionClosedError,
    InvalidOptionError,
    JetStreamTimeoutError,
    MessageAlreadyAckedError,
    NotJetStreamMessageError,
)
from aiojetstream._message import (
    Acker,
    Msg,
    MsgMetadata,
    SequencePair,
    ack_sequences,
    next_in_order,
    parse_metadata,
    total_size,
)

REPLY = b"$JS.ACK.ORDERS.worker.1.42.7.1700000000123456789.3"


@dataclass
class FakeAcker:
    """Records every (subject, payload); request waits, fails or answers as told."""

    timeout: float = 5.0
    sent: list[tuple[bytes, bytes]] = field(default_factory=list)
    requests: list[tuple[bytes, bytes, float]] = field(default_factory=list)
    request_error: BaseException | None = None
    send_error: BaseException | None = None
    hang: bool = False
    nowait: bool = False  # queue in send_nowait (the fast path) instead of send

    def send_nowait(self, subject: bytes, payload: bytes) -> bool:
        if not self.nowait:
            return False
        if self.send_error is not None:
            raise self.send_error
        self.sent.append((subject, payload))
        return True

    async def send(self, subject: bytes, payload: bytes) -> None:
        if self.send_error is not None:
            raise self.send_error
        self.sent.append((subject, payload))

    async def request(self, subject: bytes, payload: bytes, timeout: float) -> bytes:
        self.requests.append((subject, payload, timeout))
        if self.hang:
            await asyncio.sleep(timeout)
            raise TimeoutError
        if self.request_error is not None:
            raise self.request_error
        return b""


def test_fake_acker_is_an_acker() -> None:
    acker: Acker = FakeAcker()  # checked by mypy
    assert acker.timeout == 5.0


def make(
    acker: FakeAcker | None = None,
    *,
    reply: bytes = REPLY,
    hdr: bytes | None = None,
    data: bytes = b"hello",
) -> tuple[Msg, FakeAcker]:
    acker = acker or FakeAcker()
    return Msg(b"orders.new", reply, data, hdr, acker), acker


# --------------------------------------------------------------------------- content


def test_lazy_properties() -> None:
    msg, _ = make(hdr=b"NATS/1.0\r\nA: 1\r\nA: 2\r\nB: x\r\n\r\n")
    assert msg.subject == "orders.new"
    assert msg.reply == REPLY.decode()
    assert msg.data == b"hello"
    headers = msg.headers
    assert headers == {"A": "1, 2", "B": "x"}
    assert msg.headers is headers  # cached
    meta = msg.metadata
    assert meta.stream == "ORDERS"
    assert msg.metadata is meta  # cached
    assert not msg.acked
    assert "orders.new" in repr(msg)


@pytest.mark.parametrize("hdr", [None, b"", b"NATS/1.0\r\n\r\n"])
def test_no_headers(hdr: bytes | None) -> None:
    msg, _ = make(hdr=hdr)
    assert msg.headers is None


def test_size_is_what_the_server_counts() -> None:
    hdr = b"NATS/1.0\r\nA: 1\r\n\r\n"
    msg, _ = make(hdr=hdr, data=b"x" * 10)
    assert msg.size == len(b"orders.new") + len(REPLY) + len(hdr) + 10
    bare, _ = make(reply=b"", data=b"")
    assert bare.size == len(b"orders.new")


def test_metadata_of_a_non_jetstream_message() -> None:
    msg, _ = make(reply=b"_INBOX.abc")
    with pytest.raises(NotJetStreamMessageError):
        _ = msg.metadata


# --------------------------------------------------------------------------- acks


@pytest.mark.parametrize(
    ("call", "payload"),
    [
        ("ack", b"+ACK"),
        ("nak", b"-NAK"),
        ("term", b"+TERM"),
    ],
)
@pytest.mark.parametrize("nowait", [False, True])
async def test_each_ack_kind_sends_exact_bytes(call: str, payload: bytes, nowait: bool) -> None:
    msg, acker = make(FakeAcker(nowait=nowait))
    await getattr(msg, call)()
    assert acker.sent == [(REPLY, payload)]
    assert msg.acked


ACKS = ["ack", "nak", "term", "double_ack", "in_progress"]


@pytest.mark.parametrize("first", ["ack", "nak", "term", "double_ack"])
@pytest.mark.parametrize("second", ACKS)
@pytest.mark.parametrize("nowait", [False, True])
async def test_acking_twice_raises(first: str, second: str, nowait: bool) -> None:
    msg, acker = make(FakeAcker(nowait=nowait))
    await getattr(msg, first)()
    sent = list(acker.sent)
    with pytest.raises(MessageAlreadyAckedError):
        await getattr(msg, second)()
    assert acker.sent == sent
    assert msg.acked


@pytest.mark.parametrize("nowait", [False, True])
async def test_in_progress_is_repeatable(nowait: bool) -> None:
    msg, acker = make(FakeAcker(nowait=nowait))
    await msg.in_progress()
    await msg.in_progress()
    assert not msg.acked
    await msg.ack()
    assert acker.sent == [(REPLY, b"+WPI"), (REPLY, b"+WPI"), (REPLY, b"+ACK")]


async def test_double_ack_waits_for_the_confirmation() -> None:
    msg, acker = make(FakeAcker(timeout=2.5))
    await msg.double_ack()
    assert acker.requests == [(REPLY, b"+ACK", 2.5)]
    assert acker.sent == []
    assert msg.acked
    msg2, acker2 = make()
    await msg2.double_ack(timeout=0.5)
    assert acker2.requests == [(REPLY, b"+ACK", 0.5)]


async def test_double_ack_timeout_does_not_mark_acked() -> None:
    acker = FakeAcker(request_error=JetStreamTimeoutError("no reply"))
    msg, _ = make(acker)
    with pytest.raises(JetStreamTimeoutError):
        await msg.double_ack(timeout=0.01)
    assert not msg.acked
    acker.request_error = None
    await msg.double_ack()  # may be retried
    assert msg.acked


async def test_double_ack_translates_a_bare_timeout() -> None:
    msg, _ = make(FakeAcker(hang=True))
    with pytest.raises(JetStreamTimeoutError):
        await msg.double_ack(timeout=0.01)
    assert not msg.acked


async def test_double_ack_other_errors_allow_retry() -> None:
    acker = FakeAcker(request_error=ConnectionClosedError("closed"))
    msg, _ = make(acker)
    with pytest.raises(ConnectionClosedError):
        await msg.double_ack()
    assert not msg.acked
    await msg.ack()
    assert msg.acked


async def test_acks_during_a_double_ack_in_flight_raise() -> None:
    msg, acker = make(FakeAcker(hang=True))
    task = asyncio.create_task(msg.double_ack(timeout=10))
    await asyncio.sleep(0)
    with pytest.raises(MessageAlreadyAckedError):
        await msg.ack()
    with pytest.raises(MessageAlreadyAckedError):
        await msg.in_progress()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not msg.acked
    await msg.ack()
    assert acker.sent == [(REPLY, b"+ACK")]


@pytest.mark.parametrize("timeout", [0, -1.0, float("nan"), True])
async def test_double_ack_rejects_bad_timeouts(timeout: float) -> None:
    msg, acker = make()
    with pytest.raises(InvalidOptionError):
        await msg.double_ack(timeout=timeout)
    assert acker.requests == []
    assert not msg.acked


@pytest.mark.parametrize("nowait", [False, True])
async def test_failed_send_allows_retry(nowait: bool) -> None:
    acker = FakeAcker(send_error=ConnectionClosedError("closed"), nowait=nowait)
    msg, _ = make(acker)
    with pytest.raises(ConnectionClosedError):
        await msg.ack()
    assert not msg.acked
    acker.send_error = None
    await msg.ack()
    assert msg.acked


@pytest.mark.parametrize(
    ("delay", "payload"),
    [
        (None, b"-NAK"),
        (0, b'-NAK {"delay": 0}'),
        (5, b'-NAK {"delay": 5000000000}'),
        (1.5, b'-NAK {"delay": 1500000000}'),
        (0.001, b'-NAK {"delay": 1000000}'),
        (timedelta(seconds=2), b'-NAK {"delay": 2000000000}'),
        (timedelta(days=1, microseconds=7), b'-NAK {"delay": 86400000007000}'),
        (timedelta(milliseconds=250), b'-NAK {"delay": 250000000}'),
        ("1s", b'-NAK {"delay": 1000000000}'),
        ("1m30.5s", b'-NAK {"delay": 90500000000}'),
        ("1d", b'-NAK {"delay": 86400000000000}'),
        ("250ns", b'-NAK {"delay": 250}'),
    ],
)
async def test_nak_delay_in_nanoseconds(
    delay: float | timedelta | str | None, payload: bytes
) -> None:
    msg, acker = make()
    await msg.nak(delay)
    assert acker.sent == [(REPLY, payload)]


@pytest.mark.parametrize(
    "delay",
    [-1, -0.5, timedelta(seconds=-1), float("inf"), float("nan"), True, "1x", "-1s", 1e300, 2**63],
)
async def test_nak_rejects_bad_delays(delay: object) -> None:
    msg, acker = make()
    with pytest.raises(InvalidOptionError):
        await msg.nak(delay)  # type: ignore[arg-type]
    assert acker.sent == []
    assert not msg.acked


async def test_term_reason() -> None:
    msg, acker = make()
    await msg.term("bad payload: ünïcode")
    assert acker.sent == [(REPLY, "+TERM bad payload: ünïcode".encode())]


@pytest.mark.parametrize("reason", ["a\r\nb", "line\n", "\r"])
async def test_term_reason_without_crlf(reason: str) -> None:
    msg, acker = make()
    with pytest.raises(InvalidOptionError):
        await msg.term(reason)
    assert acker.sent == []
    assert not msg.acked


@pytest.mark.parametrize(
    ("reason", "match"),
    [(123, "expected a string"), (b"bytes", "expected a string"), ("lone \ud800", "UTF-8")],
)
async def test_term_reason_of_the_wrong_kind(reason: object, match: str) -> None:
    """term(123) said "must not contain CR or LF"; a lone surrogate raised UnicodeEncodeError."""
    msg, acker = make()
    with pytest.raises(InvalidOptionError, match=match):
        await msg.term(reason)  # type: ignore[arg-type]
    assert acker.sent == []
    assert not msg.acked


@pytest.mark.parametrize("call", ACKS)
@pytest.mark.parametrize("nowait", [False, True])
async def test_no_reply_subject(call: str, nowait: bool) -> None:
    msg, acker = make(FakeAcker(nowait=nowait), reply=b"")
    with pytest.raises(NotJetStreamMessageError):
        await getattr(msg, call)()
    assert acker.sent == []
    assert acker.requests == []


# --------------------------------------------------------------------------- metadata

TOKEN = st.text(
    alphabet=st.characters(exclude_characters=". *>\r\n\t\x00", exclude_categories=["Cs"]),
    min_size=1,
    max_size=16,
)
UINT64 = st.integers(min_value=0, max_value=2**64 - 1)


@st.composite
def replies(draw: st.DrawFn) -> tuple[str, MsgMetadata]:
    stream, consumer = draw(TOKEN), draw(TOKEN)
    delivered, sseq, cseq, ts, pending = (draw(UINT64) for _ in range(5))
    numbers = f"{delivered}.{sseq}.{cseq}.{ts}.{pending}"
    v2 = draw(st.booleans())
    domain: str | None = None
    account: str | None = None
    if v2:
        domain = draw(st.none() | TOKEN.filter(lambda t: t != "_"))
        account = draw(TOKEN)
        extra = draw(st.lists(TOKEN, min_size=1, max_size=3))
        subject = f"$JS.ACK.{domain or '_'}.{account}.{stream}.{consumer}.{numbers}." + ".".join(
            extra
        )
    else:
        subject = f"$JS.ACK.{stream}.{consumer}.{numbers}"
    expected = MsgMetadata(
        stream=stream,
        consumer=consumer,
        domain=domain,
        sequence=SequencePair(stream=sseq, consumer=cseq),
        num_delivered=delivered,
        num_pending=pending,
        timestamp=datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=ts // 1000),
        account_hash=account,
    )
    return subject, expected


@given(replies())
def test_metadata_round_trip(case: tuple[str, MsgMetadata]) -> None:
    subject, expected = case
    assert parse_metadata(subject) == expected
    raw = subject.encode()
    assert parse_metadata(raw) == expected
    assert ack_sequences(raw) == (
        expected.sequence.stream,
        expected.sequence.consumer,
        expected.num_delivered,
    )


def test_v1_example() -> None:
    meta = parse_metadata("$JS.ACK.ORDERS.worker.2.42.7.1700000000123456789.3")
    assert meta == MsgMetadata(
        stream="ORDERS",
        consumer="worker",
        domain=None,
        sequence=SequencePair(stream=42, consumer=7),
        num_delivered=2,
        num_pending=3,
        timestamp=datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=UTC),
        account_hash=None,
    )
    assert meta.timestamp.tzinfo is UTC


def test_v2_example() -> None:
    meta = parse_metadata("$JS.ACK.hub.ACCHASH.ORDERS.worker.1.42.7.1700000000000000000.0.rnd")
    assert (meta.domain, meta.account_hash, meta.stream, meta.consumer) == (
        "hub",
        "ACCHASH",
        "ORDERS",
        "worker",
    )
    assert meta.sequence == SequencePair(42, 7)
    no_domain = parse_metadata("$JS.ACK._.ACCHASH.ORDERS.worker.1.42.7.1700000000000000000.0.r")
    assert no_domain.domain is None
    assert ack_sequences(b"$JS.ACK.hub.H.S.C.4.42.7.1700000000000000000.0.r.x.y") == (42, 7, 4)
    # Without the random last token (11): nats.go and nats.js take it (the server may
    # drop the token); it was refused, and every metadata call would have failed.
    eleven = "$JS.ACK.hub.H.S.C.4.42.7.1700000000000000000.3"
    assert parse_metadata(eleven).sequence == SequencePair(42, 7)
    assert parse_metadata(eleven).num_pending == 3
    assert ack_sequences(eleven.encode()) == (42, 7, 4)


MALFORMED = [
    "",
    "foo",
    "$JS.ACK",
    "$JS.ACK.S.C.1.2.3.4",  # 8 tokens
    "$JS.ACK.d.h.S.C.1.2.3.4",  # 10 tokens (a v2 subject without its pending)
    "$JS.ACK.S.C.1.2.3.4.5.6",  # 10 tokens
    "$JS.NAK.S.C.1.2.3.4.5",
    "$js.ack.S.C.1.2.3.4.5",
    "JS.ACK.S.C.1.2.3.4.5",
    "$JS.ACK..C.1.2.3.4.5",  # empty stream
    "$JS.ACK.S..1.2.3.4.5",  # empty consumer
    "$JS.ACK.S.C.x.2.3.4.5",
    "$JS.ACK.S.C.1.-2.3.4.5",
    "$JS.ACK.S.C.1.2.+3.4.5",
    "$JS.ACK.S.C.1.2.3. 4.5",
    "$JS.ACK.S.C.1.2.3.4.1_0",
    "$JS.ACK.S.C.1.2.3.4.",
    "$JS.ACK.S.C.1.2.3.\u0663.5",  # Arabic-Indic digit
    "$JS.ACK.S.C.1.2.3.4.5\u00b2",  # superscript two
    f"$JS.ACK.S.C.1.2.3.{2**64}.5",
    f"$JS.ACK.S.C.{2**64}.2.3.4.5",
    "$JS.ACK.d.h.S.C.1.2.3.4.x.r",
    "$JS.ACK.d.h..C.1.2.3.4.5.r",
]


@pytest.mark.parametrize("subject", MALFORMED)
def test_malformed_subjects(subject: str) -> None:
    with pytest.raises(NotJetStreamMessageError):
        parse_metadata(subject)
    with pytest.raises(ValueError, match=r"\$JS\.ACK|number"):
        parse_metadata(subject.encode())
    assert ack_sequences(subject.encode()) is None


def test_largest_values() -> None:
    top = 2**64 - 1
    meta = parse_metadata(f"$JS.ACK.S.C.{top}.{top}.{top}.{top}.{top}")
    assert meta.sequence == SequencePair(top, top)
    assert meta.timestamp.year == 2554
    assert ack_sequences(f"$JS.ACK.S.C.{top}.{top}.{top}.{top}.{top}".encode()) == (top, top, top)
    assert ack_sequences(f"$JS.ACK.S.C.1.2.3.{'0' * 30}4.5".encode()) == (2, 3, 1)


@given(
    st.lists(
        st.one_of(
            st.sampled_from(["$JS", "ACK", "_", "", "1", "0", "-1", "x", "18446744073709551616"]),
            st.integers(0, 2**70).map(str),
            st.text(max_size=4),
        ),
        max_size=14,
    )
)
def test_ack_sequences_agrees_with_parse_metadata(tokens: list[str]) -> None:
    for subject in (".".join(tokens), ".".join(["$JS", "ACK", *tokens])):
        raw = subject.encode("utf-8", "surrogatepass")
        try:
            meta = parse_metadata(raw)
        except NotJetStreamMessageError:
            assert ack_sequences(raw) is None
        else:
            assert ack_sequences(raw) == (
                meta.sequence.stream,
                meta.sequence.consumer,
                meta.num_delivered,
            )


def _agrees_with_ack_sequences(raw: bytes, expected: int) -> None:
    seqs = ack_sequences(raw)
    msg = Msg(b"s", raw, b"", None, FakeAcker())
    want = seqs[0] if seqs is not None and seqs[1] == expected else -1
    assert next_in_order(msg, expected) == want


@given(replies(), st.integers(-1, 2**65), st.booleans())
def test_next_in_order_agrees_with_ack_sequences(
    case: tuple[str, MsgMetadata], other: int, right: bool
) -> None:
    subject, meta = case
    _agrees_with_ack_sequences(subject.encode(), meta.sequence.consumer if right else other)


ODD_TOKENS = ["", "x", "+1", "-1", "1_0", " 1", "\u0663", "1\u00b2", str(2**64), str(2**64 - 1)]


@given(replies())
def test_next_in_order_rejects_what_ack_sequences_rejects(case: tuple[str, MsgMetadata]) -> None:
    subject, meta = case
    tokens = subject.split(".")
    for index in range(len(tokens)):
        for odd in [*ODD_TOKENS, "0" * 25 + "1", "0" * 25 + str(2**64)]:
            raw = ".".join([*tokens[:index], odd, *tokens[index + 1 :]]).encode()
            _agrees_with_ack_sequences(raw, meta.sequence.consumer)
            seqs = ack_sequences(raw)
            if seqs is not None:
                _agrees_with_ack_sequences(raw, seqs[1])


@given(
    st.lists(
        st.one_of(
            st.sampled_from(["$JS", "ACK", "_", "", "1", "0", "7", "x", "18446744073709551616"]),
            st.integers(0, 2**70).map(str),
            st.text(max_size=4),
        ),
        max_size=14,
    ),
    st.sampled_from([0, 1, 7, 2**64 - 1, 2**64]),
)
def test_next_in_order_agrees_with_ack_sequences_on_anything(
    tokens: list[str], expected: int
) -> None:
    for subject in (".".join(tokens), ".".join(["$JS", "ACK", *tokens])):
        _agrees_with_ack_sequences(subject.encode("utf-8", "surrogatepass"), expected)
    for raw in MALFORMED:
        _agrees_with_ack_sequences(raw.encode(), expected)
    top = 2**64 - 1
    _agrees_with_ack_sequences(f"$JS.ACK.S.C.{top}.{top}.{top}.{top}.{top}".encode(), expected)


@given(st.binary(max_size=80))
def test_random_bytes_never_raise_anything_else(data: bytes) -> None:
    for raw in (data, b"$JS.ACK." + data):
        with contextlib.suppress(NotJetStreamMessageError):
            parse_metadata(raw)
        ack_sequences(raw)
        next_in_order(Msg(b"s", raw, b"", None, FakeAcker()), 1)


@given(
    st.lists(
        st.tuples(
            st.binary(min_size=1, max_size=30),
            st.binary(max_size=60),
            st.binary(max_size=200),
            st.none() | st.binary(min_size=1, max_size=50),
        ),
        max_size=20,
    )
)
def test_total_size_is_the_sum_of_sizes(
    parts: list[tuple[bytes, bytes, bytes, bytes | None]],
) -> None:
    msgs = [Msg(subject, reply, data, hdr, FakeAcker()) for subject, reply, data, hdr in parts]
    assert total_size(msgs) == sum(m.size for m in msgs)
    assert total_size(iter(msgs)) == total_size(msgs)
