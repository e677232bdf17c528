"""RELIABILITY G3: the raw router survives any byte stream and parses it as nats-py does.

The router (``_conn._Router``) replaces nats-py's ``Parser.parse`` while the
library has raw subscriptions. Each example feeds the same bytes, cut into the
same random chunks, to nats-py's own parser (the reference) and to a parser
hooked by the router, and compares what comes out: the messages (sid,
subject, reply, payload, header block, in order; routed sids through the
router's handlers, the rest through nats-py's ``_process_msg``), the other
protocol operations (PING, PONG, INFO, -ERR) and where parsing failed.

The one allowed difference is the kind of failure: nats-py's parser lets a
few malformed lines raise something else than ``ProtocolError`` (a bare
``-ERR``, an ``INFO`` that is not a JSON object), which ends nats-py's read
loop; the router raises ``ProtocolError`` for them, which nats-py answers
with a reconnect.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from types import SimpleNamespace
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from nats.aio.client import Client as NatsClient
from nats.errors import ProtocolError
from nats.protocol.parser import HMSG_RE

from aiojetstream import _conn
from aiojetstream._message import Msg, PlainRun
from aiojetstream._status import is_status, parse_status

try:  # column mode's bulk framing needs pyarrow (not in the light install)
    from aiojetstream import _columns
except ImportError:  # pragma: no cover - the light install
    _columns = None  # type: ignore[assignment]

Event = tuple[Any, ...]

ROUTED = (1, 2, 3)
INTERNAL = (4, 5)
OTHER = (6, 7, 70000)
#: Routed sids with a RawSink: the fast loop buffers their plain messages itself.
#: Those of BULK frame them in bulk too (column mode: ``_columns``), in windows
#: of at most 64 bytes (10: runs cut short everywhere) or of the default size (11).
BULK = (10, 11) if _columns is not None else ()
#: Those of FILLED buffer Msg objects the fast loop fills in itself (RawSink.fill).
FILLED = (12,)
#: Those of RUNS gather runs of reply subjects and payloads (RawSink.runs, PlainRun).
RUNS = (13,)
SUNK = (8, 9, *BULK, *FILLED, *RUNS)
BLANKS = b" \t\n\r\x0b\x0c"


# --------------------------------------------------------------------------- clients


def _reference(events: list[Event]) -> NatsClient:
    """An unconnected nats-py client whose protocol callbacks record what they get."""
    nc = NatsClient()

    async def process_msg(sid: int, subject: bytes, reply: bytes, data: bytes, hdr: Any) -> None:
        events.append(("msg", sid, bytes(subject), bytes(reply), bytes(data), hdr or None))

    async def ping() -> None:
        events.append(("ping",))

    async def pong() -> None:
        events.append(("pong",))

    async def info(info: Any, initial_connection: bool = False) -> None:
        events.append(("info", json.dumps(info, sort_keys=True)))

    async def err(message: str) -> None:
        events.append(("err", message))

    nc._process_msg = process_msg  # type: ignore[method-assign,assignment]
    nc._process_ping = ping  # type: ignore[method-assign]
    nc._process_pong = pong  # type: ignore[method-assign]
    nc._process_info = info  # type: ignore[method-assign]
    nc._process_err = err  # type: ignore[method-assign,assignment]
    return nc


def _routed(events: list[Event]) -> NatsClient:
    """The same client with the router's parser hook and some routed sids."""
    return _router(events)[0]


def _router(events: list[Event]) -> tuple[NatsClient, _conn._Router]:
    nc = _reference(events)
    router = _conn._Router(nc)
    assert router.ps is nc._ps, "the parser hook is installed"
    # What sinks buffered and did not hand on yet: nothing else may happen meanwhile.
    unhanded: list[Event] = []

    def handler(sid: int) -> _conn.RawHandler:
        def handle(subject: bytes, reply: bytes, data: bytes, hdr: bytes | None) -> None:
            assert not unhanded, "a sink's count is handed on before any other message"
            assert type(subject) is bytes
            assert type(data) is bytes
            assert hdr is None or type(hdr) is bytes
            events.append(("msg", sid, subject, reply, data, hdr))
            if hdr is not None and is_status(hdr):
                parse_status(hdr)  # what the pull driver does with it (must not raise)

        return handle

    for sid in ROUTED + SUNK:
        router.routes[sid] = handler(sid)
    for sid in INTERNAL:
        router.internal[sid] = handler(sid)
    for sid in SUNK:
        router.sinks[sid] = _sink(sid, events, unhanded)
    for name in ("_process_ping", "_process_pong", "_process_info", "_process_err"):
        setattr(nc, name, _checked(getattr(nc, name), unhanded))
    original = router._original()
    assert original is not None
    checked_original = _checked(original, unhanded)
    router._original = lambda: checked_original
    parse = nc._ps.parse

    async def parse_and_check(data: bytes = b"") -> None:
        try:
            await parse(data)
        finally:
            assert not unhanded, "a sink's count is handed on by the end of each read"

    nc._ps.parse = parse_and_check
    return nc, router


def _checked(callback: Any, unhanded: list[Event]) -> Any:
    async def checked(*args: Any, **kwargs: Any) -> Any:
        assert not unhanded, "a sink's count is handed on before anything that may await"
        return await callback(*args, **kwargs)

    return checked


def _sink(sid: int, events: list[Event], unhanded: list[Event]) -> _conn.RawSink:
    """A sink whose messages become events in the same list, in order."""

    def make(subject: bytes, reply: bytes, data: bytes, hdr: bytes | None, context: Any) -> Event:
        assert context == ("context", sid)
        assert hdr is None
        assert type(subject) is bytes
        assert type(data) is bytes
        return ("msg", sid, subject, reply, data, hdr)

    def append(event: Event) -> None:
        assert all(e[1] == sid for e in unhanded), "another sink's count was handed on first"
        unhanded.append(event)
        events.append(event)

    def arrived(count: int) -> None:
        assert count == len(unhanded), "the count is what the sink buffered"
        unhanded.clear()

    def bulk(view: bytes, pos: int, size: int, sid_text: bytes, first_end: int) -> Any:
        window = 64 if sid == BULK[0] else _columns.WINDOW
        framing = _columns.frame_headers if view.startswith(b"HMSG", pos) else _columns.frame
        run = framing(view, pos, min(size, max(pos + window, first_end)), sid_text)
        if run is not None:
            assert run.count == len(run.subjects) == len(run.replies) == len(run.data) > 0
            assert pos < run.end <= size
        return run

    def append_any(item: Any) -> None:
        if _columns is not None and type(item) is _columns.Run:
            # A run: its messages, in order, as the events the loop or handler would make.
            msgs = item.messages(None)  # type: ignore[arg-type]
            assert item.payload_bytes == sum(len(m.data) for m in msgs)
            for m in msgs:
                append(("msg", sid, m._subject, m._reply, m.data, m._hdr))
        else:
            append(item)

    def append_msg(msg: Msg) -> None:
        # Filled in by the fast loop or built by Msg(): the same either way.
        assert type(msg) is Msg
        context: Any = ("context", sid)
        built = Msg(msg._subject, msg._reply, msg.data, None, context)
        for name in Msg.__slots__:
            assert getattr(msg, name, None) == getattr(built, name, None), name
        assert type(msg._subject) is bytes
        assert type(msg.data) is bytes
        append(("msg", sid, msg._subject, msg._reply, msg.data, msg._hdr))

    runs: deque[PlainRun] = deque()

    def start_run(subject: bytes) -> PlainRun:
        assert type(subject) is bytes
        run = PlainRun(subject, ("context", sid))  # type: ignore[arg-type]
        runs.append(run)
        return run

    def arrived_in_runs(count: int) -> None:
        # What the runs gathered since the last count, in order: the Msg objects a
        # consumer takes from them, equal to those Msg() builds.
        taken = 0
        while runs:
            run = runs[0]
            assert len(run.replies) == len(run.payloads) >= len(run) > 0
            msg = run.take(runs)
            built = Msg(msg._subject, msg._reply, msg.data, None, ("context", sid))  # type: ignore[arg-type]
            for name in Msg.__slots__:
                assert getattr(msg, name, None) == getattr(built, name, None), name
            assert type(msg._reply) is bytes
            assert type(msg.data) is bytes
            events.append(("msg", sid, msg._subject, msg._reply, msg.data, msg._hdr))
            taken += 1
        assert taken == count, "the count is what the runs gathered"

    if sid in RUNS:
        return _conn.RawSink(
            append, make, ("context", sid), arrived_in_runs, fill=True, runs=start_run
        )
    if sid in BULK:
        return _conn.RawSink(append_any, make, ("context", sid), arrived, bulk)
    if sid in FILLED:
        return _conn.RawSink(append_msg, Msg, ("context", sid), arrived, fill=True)
    return _conn.RawSink(append, make, ("context", sid), arrived)


async def _run(nc: NatsClient, chunks: list[bytes], events: list[Event]) -> Exception | None:
    """Feed the chunks as nats-py's read loop does; stop at the first failure."""
    for index, chunk in enumerate(chunks):
        try:
            await nc._ps.parse(chunk)
        except Exception as exc:
            events.append(("failed at chunk", index))
            return exc
    return None


def _nats_py_misreads(stream: bytes) -> bool:
    r"""True when nats-py's HMSG pattern reads a control line on past its CRLF.

    ``HMSG_RE`` allows any whitespace, CR LF included, between the header size
    and the total size, and prefers a reply: ``HMSG s 1 3 3\r\n5\r\n\r\n``
    (a 3-byte header ``5\r\n``, which nats-server relays as is) reads as reply
    ``3``, header size 3, size 5, and the rest of the stream is misframed. The
    router reads the line up to its CRLF, as the protocol says; see
    :func:`test_a_header_starting_with_digits_is_framed_correctly`.
    """
    pos = stream.find(b"HMSG")
    while pos >= 0:
        match = HMSG_RE.match(stream[pos:])
        if match is not None and b"\r\n" in match.group(0)[:-2]:
            return True
        pos = stream.find(b"HMSG", pos + 1)
    return False


async def _compare(stream: bytes, cuts: list[int]) -> tuple[list[Event], Exception | None]:
    chunks = _split(stream, cuts)
    expected: list[Event] = []
    ref_error = await _run(_reference(expected), chunks, expected)
    events: list[Event] = []
    error = await _run(_routed(events), chunks, events)
    assert error is None or type(error) is ProtocolError, repr(error)
    if _nats_py_misreads(stream):
        return events, error  # nats-py's own framing bug: nothing to compare with
    assert events == expected
    assert (error is None) == (ref_error is None), (error, ref_error)
    if ref_error is not None and not isinstance(ref_error, ProtocolError):
        assert error is not None
        cause = error.__cause__
        assert type(cause) is type(ref_error)
        assert str(cause) == str(ref_error)
    return events, error


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c for c in cuts if 0 < c < len(data)})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


# --------------------------------------------------------------------------- frames

SEP = st.sampled_from([b" "] * 6 + [b"  ", b"\t", b" \t", b"\x0b", b"\x0c"])
NAME = st.from_regex(rb"[A-Za-z0-9_$>*.-]{1,16}", fullmatch=True) | st.binary(
    min_size=1, max_size=10
).map(lambda b: bytes(c for c in b if c not in BLANKS) or b"x")
SID = st.sampled_from(ROUTED + INTERNAL + OTHER + SUNK)
PAYLOAD = st.binary(max_size=40) | st.sampled_from(
    [b"", b"\r\n", b"MSG a 1 2\r\nxx\r\n", b"PING\r\n", b"\r\n\r\n"]
)
STATUS_BLOCKS = st.sampled_from(
    [
        b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 3\r\nNats-Last-Stream: 7\r\n\r\n",
        b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 5\r\n"
        b"Nats-Pending-Bytes: 9\r\n\r\n",
        b"NATS/1.0 409 Consumer Deleted\r\n\r\n",
        b"NATS/1.0 404 No Messages\r\n\r\n",
        b"NATS/1.0 503\r\n\r\n",
        b"NATS/1.0 503\r\nNats-Subject:",
        b"NATS/1.0 \xff\xfe\r\n\r\n",
        b"NATS/1.0\r\nNats-Msg-Id: 1\r\nX: a\r\nX: b\r\n\r\n",
    ]
)
HEADERS = STATUS_BLOCKS | st.binary(min_size=1, max_size=30) | st.just(b"")


CANONICAL = st.just(b"%d")
#: How a number is written in a mutated stream: mostly canonical, sometimes a
#: form int() reads and the protocol's digits do not (or reads as another size).
NUMBER = st.sampled_from([b"%d"] * 12 + [b"0%d", b"+%d", b"%d_0", b"-%d"])


@st.composite
def msg_frame(draw: st.DrawFn, numbers: st.SearchStrategy[bytes] = CANONICAL) -> bytes:
    parts: list[bytes] = [b"MSG", draw(NAME), draw(numbers) % draw(SID)]
    if draw(st.booleans()):
        parts.append(draw(NAME))
    payload = draw(PAYLOAD)
    parts.append(draw(numbers) % len(payload))
    line = b"".join(p + draw(SEP) for p in parts[:-1]) + parts[-1]
    return line + b"\r\n" + payload + b"\r\n"


@st.composite
def hmsg_frame(draw: st.DrawFn) -> bytes:
    parts = [b"HMSG", draw(NAME), b"%d" % draw(SID)]
    if draw(st.booleans()):
        parts.append(draw(NAME))
    hdr = draw(HEADERS)
    payload = draw(PAYLOAD)
    parts += [b"%d" % len(hdr), b"%d" % (len(hdr) + len(payload))]
    line = b"".join(p + draw(SEP) for p in parts[:-1]) + parts[-1]
    return line + b"\r\n" + hdr + payload + b"\r\n"


CONTROL = st.sampled_from(
    [
        b"PING\r\n",
        b"PONG\r\n",
        b"+OK\r\n",
        b'INFO {"server_id":"x","max_payload":1048576}\r\n',
        b"-ERR 'Permissions Violation for Publish to \"x\"'\r\n",
    ]
)
FRAME = st.one_of(msg_frame(), msg_frame(), hmsg_frame(), hmsg_frame(), CONTROL)
STREAM = st.lists(FRAME, min_size=1, max_size=12).map(b"".join)
CUTS = st.lists(st.integers(min_value=1, max_value=2000), max_size=30)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(FRAME, min_size=1, max_size=12), CUTS)
async def test_well_formed_streams_parse_as_nats_py(frames: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(frames)
    # Where nats-py misframes, so does the router once it has handed the rest of
    # a read to nats-py's parser (after a line it leaves to it, "MSG\t..." say).
    assume(not _nats_py_misreads(stream))
    events, error = await _compare(stream, cuts)
    assert error is None
    # Every frame came out (+OK has no event).
    assert len(events) == sum(1 for f in frames if not f.startswith(b"+OK"))


# --------------------------------------------------------------------------- bulk runs

#: Payloads of a run: anything, and what may look like the protocol to a bulk framer.
RUN_PAYLOAD = st.binary(max_size=60) | st.sampled_from(
    [
        b"",
        b"\r\n",
        b"\r",
        b"\n",
        b"\r\nMSG ",
        b"x\r\nMSG s 10 r 1\r\ny",
        b"MSG s 10 r 2\r\nhi\r\n",
        b"MSG s 11 r 2\r\nhi",
        b"\r\n\r\n",
    ]
)
RUN_SUBJECT = st.sampled_from([b"a.b", b"orders.1", b"\xff\xfe"]) | NAME
RUN_REPLY = st.sampled_from([b"$JS.ACK.S.C.1.2.3.1767225600123456789.0", b"r"]) | NAME


#: One header line: mostly what a run takes, sometimes what decode_headers reads otherwise.
RUN_HEADER = st.sampled_from(
    [
        *(b"Nats-Msg-Id: id-1", b"X: y", b"K: a b", b"Nats-Msg-Id: " + b"z" * 40),
        *(b"K:v", b"K:  v", b"K: v ", b"K: ", b": v", b"K K: v", b"K: \xff", b"K: \tv"),
    ]
)


@st.composite
def hmsg_run_frame(draw: st.DrawFn) -> bytes:
    """A message with one header of a bulk sink (a msg id, say): runs of them frame in bulk."""
    payload = draw(RUN_PAYLOAD)
    sid = draw(st.sampled_from(BULK or (8,)))
    block = b"NATS/1.0\r\n%b\r\n\r\n" % draw(RUN_HEADER)
    if draw(st.integers(0, 9)) == 0:
        block = draw(
            st.sampled_from([b"NATS/1.0 100 Idle\r\n\r\n", b"NATS/1.0\r\nA: 1\r\nB: 2\r\n\r\n"])
        )
    subject, reply = draw(RUN_SUBJECT), draw(RUN_REPLY)
    return b"HMSG %b %d %b %d %d\r\n%b%b\r\n" % (
        subject,
        sid,
        reply,
        len(block),
        len(block) + len(payload),
        block,
        payload,
    )


@st.composite
def run_frame(draw: st.DrawFn) -> bytes:
    """A plain message of a bulk sink, mostly canonical (a run of them frames in bulk)."""
    payload = draw(RUN_PAYLOAD)
    sid = draw(st.sampled_from(BULK or (8,)))
    subject, reply = draw(RUN_SUBJECT), draw(RUN_REPLY)
    return b"MSG %b %d %b %d\r\n%b\r\n" % (subject, sid, reply, len(payload), payload)


RUN_FRAMES = st.lists(
    st.one_of(
        *[run_frame()] * 6, *[hmsg_run_frame()] * 4, msg_frame(NUMBER), hmsg_frame(), CONTROL
    ),
    min_size=1,
    max_size=40,
)


@pytest.mark.skipif(not BULK, reason="needs pyarrow")
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(RUN_FRAMES, CUTS)
@example([b"MSG s 10 r 3\r\na\r\n\r\n", b"MSG s 10 r 0\r\n\r\n"], [])  # CRLF ends a payload
@example([b"MSG s 11 r 5\r\nx\r\nMSG\r\n", b"MSG s 11 r 1\r\ny\r\n"], [])
@example([b"MSG s 11 r 2\r\nhi\r\n" * 30, b"MSG s 11 r 2\r\nhi\r\nPING\r\n"], [7, 333])
async def test_runs_framed_in_bulk_parse_as_nats_py(frames: list[bytes], cuts: list[int]) -> None:
    """Plain messages framed in bulk (column mode) come out as nats-py's parser reads them.

    Runs of them with any subject, reply and payload (empty, CRLF inside or
    at the end, text that looks like a MSG line), other frames in between,
    cut into random reads: the same messages in the same order.
    """
    stream = b"".join(frames)
    assume(not _nats_py_misreads(stream))
    await _compare(stream, cuts)  # (a mutated number may fail both the same way)


@st.composite
def sink_run_frame(draw: st.DrawFn) -> bytes:
    """A plain message of a sink: consecutive ones on one subject are a run of the fast loop.

    Mostly canonical, with the odd separator, number or size among them.
    """
    payload = draw(RUN_PAYLOAD | st.sampled_from([b"xx", b"abc"]))
    sid = draw(st.sampled_from((8, *FILLED, *RUNS)))
    parts = [b"MSG", draw(st.sampled_from([b"a.b", b"s"])), b"%d" % sid]
    if draw(st.integers(min_value=0, max_value=5)):
        parts.append(draw(RUN_REPLY))
    parts.append(draw(NUMBER) % len(payload))
    seps = [draw(SEP) if draw(st.integers(min_value=0, max_value=7)) == 0 else b" " for _ in parts]
    line = b"".join(p + sep for p, sep in zip(parts[:-1], seps, strict=False)) + parts[-1]
    return line + b"\r\n" + payload + b"\r\n"


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(*[sink_run_frame()] * 8, msg_frame(NUMBER), CONTROL), max_size=40), CUTS)
@example([b"MSG s 12 r 2\r\nhi\r\n", b"MSG s 12 r 3\r\nhey\r\n", b"MSG s 12 r 2\r\nho\r\n"], [])
@example([b"MSG s 12 r 2\r\nhi\r\n", b"MSG s 12 r 02\r\nhi\r\n", b"MSG s 12 2\r\nho\r\n"], [])
@example([b"MSG s 12 r 2\r\nhi\r\n", b"MSG s 12 r  2\r\nhi\r\n", b"MSG s 12 r\t2\r\nho\r\n"], [])
@example([b"MSG s 12 r 2\r\nhi\r\n", b"MSG s 12 \x0br 2\r\nhi\r\n", b"MSG s 12 r 2 \r\nho\r\n"], [])
@example([b"MSG s 13 r 2\r\nhi\r\n", b"MSG s 13 r  2\r\nhi\r\n", b"MSG s 13 r 2\r\nho\r\n"], [])
@example([b"MSG s 13 r 2\r\nhi\r\n", b"MSG s 13 r  2\r\nho\r\n"], [])  # one reply "r "
@example([b"MSG s 13 r 2\r\nhi\r\n", b"MSG s 13 a\tb 2\r\nhi\r\n", b"MSG s 13 r 3\r\nhey\r\n"], [])
@example([b"MSG s 13 r 2\r\nhi\r\n", b"MSG s 13 a\nb 2\r\nhi\r\n", b"MSG s 13 2\r\nho\r\n"], [])
@example([b"MSG s 13 r 2\r\nhi\r\n", b"MSG s 13 r 2\n\r\nhi\r\n", b"MSG s 13 r 02\r\nho\r\n"], [])
async def test_sink_runs_parse_as_nats_py(frames: list[bytes], cuts: list[int]) -> None:
    """Runs of a sink's plain messages come out as nats-py's parser reads them.

    The fast loop's run (one subject and sid after another, one size mostly)
    parses canonical lines itself and leaves any other to the checks of the
    first message: the same messages in the same order, filled-in Msg objects
    equal to those Msg() builds.
    """
    stream = b"".join(frames)
    assume(not _nats_py_misreads(stream))
    await _compare(stream, cuts)


# --------------------------------------------------------------------------- direct reads


class _StreamReader(asyncio.Protocol):
    """Stands for nats-py's stream reader protocol: keeps what it is given."""

    def __init__(self) -> None:
        self.buffer = bytearray()

    def data_received(self, data: bytes) -> None:
        self.buffer += data


def _in_front(
    router: _conn._Router, transport: Any = None
) -> tuple[_conn._DirectReads, _StreamReader]:
    """The router's direct reads in front of a stand-in stream reader (no transport: None)."""
    reader = _StreamReader()
    reads = _conn._DirectReads(router, cast(asyncio.Transport, transport), reader)
    router._reads = reads
    return reads, reader


async def _run_direct(
    chunks: list[bytes], loop_runs: list[bool], read_size: int, events: list[Event]
) -> Exception | None:
    """Deliver the chunks as the socket does, with :class:`_conn._DirectReads` in front.

    After chunk *i* nats-py's read loop runs when ``loop_runs[i]`` (reading
    what the stream reader holds, ``read_size`` bytes a read), and at the end.
    Returns the read loop's failure.
    """
    nc, router = _router(events)
    # No transport here: the router's reads match a client without one.
    reads, reader = _in_front(router)

    async def read_loop() -> None:
        while reader.buffer:
            data = bytes(reader.buffer[:read_size])
            del reader.buffer[:read_size]
            await nc._ps.parse(data)

    try:
        for index, chunk in enumerate(chunks):
            reads.data_received(chunk)
            assert reads.handed == len(reader.buffer), "handed counts what the reader holds"
            if index < len(loop_runs) and loop_runs[index]:
                await read_loop()
        await read_loop()
    except Exception as exc:
        return exc
    assert reads.handed == 0
    return None


class _SizedTransport:
    """A selector socket transport's read size (``max_size``), and nothing else."""

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size


async def test_direct_reads_read_more_while_reads_come_full() -> None:
    """Up to READ_SIZE while reads come full; the transport's own size once one would do."""
    from aiojetstream._conn._reads import READ_SIZE

    events: list[Event] = []
    _, router = _router(events)
    base = 256 * 1024
    transport = _SizedTransport(base)
    reads, reader = _in_front(router, transport)
    assert reads.base == base
    # Full, full at READ_SIZE, short but over the base, under the base, full again,
    # under the base twice: the reads of one large message.
    chunks = (base, READ_SIZE, READ_SIZE - 1, base - 1, base, 10, base // 2)
    payload = b"x" * (sum(chunks) - len(b"MSG s 8 r 1234567\r\n") - 2)  # a 7-digit size
    stream = b"MSG s 8 r %d\r\n%b\r\n" % (len(payload), payload)
    assert len(stream) == sum(chunks)
    sizes = []
    pos = 0
    for size in chunks:
        reads.data_received(stream[pos : pos + size])
        pos += size
        sizes.append(transport.max_size)
    assert sizes == [READ_SIZE, READ_SIZE, READ_SIZE, base, READ_SIZE, base, base]
    assert events == [("msg", 8, b"s", b"r", payload, None)]
    assert not reader.buffer


def test_direct_reads_leave_other_transports_read_size_alone() -> None:
    from aiojetstream._conn._reads import READ_SIZE

    for transport in (None, _SizedTransport(READ_SIZE), _SizedTransport(2 * READ_SIZE)):
        reads, _ = _in_front(_router([])[1], transport)
        assert reads.base == 0
        reads.data_received(b"PING\r\n")
        if transport is not None:
            assert transport.max_size >= READ_SIZE


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(FRAME, min_size=1, max_size=12),
    CUTS,
    st.lists(st.booleans(), max_size=30),
    st.sampled_from([1, 7, 64, 32768]),
)
async def test_direct_reads_parse_as_nats_py(
    frames: list[bytes], cuts: list[int], loop_runs: list[bool], read_size: int
) -> None:
    """Bytes scanned where the socket delivers them, or by the read loop: the same events.

    Whatever the chunks, whenever nats-py's read loop gets to run and however
    much it reads at a time, every frame comes out once and in order, as
    nats-py's parser reads the stream.
    """
    stream = b"".join(frames)
    assume(not _nats_py_misreads(stream))
    expected: list[Event] = []
    assert await _run(_reference(expected), [stream], expected) is None
    events: list[Event] = []
    error = await _run_direct(_split(stream, cuts), loop_runs, read_size, events)
    assert error is None
    assert events == expected


async def test_direct_reads_take_replies_and_hand_on_the_rest() -> None:
    """Routed messages are handled at once; a PING and what follows it go to the read loop."""
    events: list[Event] = []
    nc, router = _router(events)
    reads, reader = _in_front(router)
    reads.data_received(b"MSG a 1 2\r\nhi\r\nMSG b 4 2\r\nho\r\nMSG c 1 5\r\nhel")
    assert events == [("msg", 1, b"a", b"", b"hi", None), ("msg", 4, b"b", b"", b"ho", None)]
    assert not reader.buffer, "a message not all in waits in the parser's buffer"
    reads.data_received(b"lo\r\nPING\r\nMSG d 2 1\r\nx\r\n")
    assert events[2:] == [("msg", 1, b"c", b"", b"hello", None)]
    assert bytes(reader.buffer) == b"PING\r\nMSG d 2 1\r\nx\r\n"
    # While the read loop has bytes to read, everything goes to it, in order.
    reads.data_received(b"MSG e 1 1\r\ny\r\n")
    assert len(events) == 3
    await nc._ps.parse(bytes(reader.buffer))
    reader.buffer.clear()
    assert events[3:] == [
        ("ping",),
        ("msg", 2, b"d", b"", b"x", None),
        ("msg", 1, b"e", b"", b"y", None),
    ]
    assert reads.handed == 0
    reads.data_received(b"MSG f 5 1\r\nz\r\n")
    assert events[6:] == [("msg", 5, b"f", b"", b"z", None)]


async def test_direct_reads_wait_while_the_read_loop_awaits() -> None:
    """Bytes arriving while the read loop awaits inside the parser go to it, after the rest."""
    events: list[Event] = []
    nc, router = _router(events)
    gate = asyncio.Event()
    waiting = asyncio.Event()

    async def slow(sid: int, subject: bytes, reply: bytes, data: bytes, hdr: Any) -> None:
        events.append(("msg", sid, subject, reply, data, hdr))
        waiting.set()
        await gate.wait()  # nats-py's own processing, blocked (a full pending queue, say)

    router._original = lambda: slow
    reads, reader = _in_front(router)
    reads.data_received(b"MSG a 6 1\r\nx\r\nMSG b 1 1\r\ny\r\n")
    data = bytes(reader.buffer)
    reader.buffer.clear()
    parsing = asyncio.create_task(nc._ps.parse(data))
    await waiting.wait()
    assert reads.handed == 0
    reads.data_received(b"MSG c 1 1\r\nz\r\n")
    assert len(events) == 1, "nothing overtakes the message the read loop is busy with"
    gate.set()
    await parsing
    await nc._ps.parse(bytes(reader.buffer))
    assert [e[2] for e in events] == [b"a", b"b", b"c"]


class _Transport:
    """What the direct reads need of a transport: abort and is_closing (and a protocol)."""

    def __init__(self, protocol: Any = None, *, closing: bool = False) -> None:
        self.protocol = protocol
        self.closing = closing
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True

    def is_closing(self) -> bool:
        return self.closing

    def get_protocol(self) -> Any:
        if self.protocol is None:
            raise AttributeError("'NoneType' object has no attribute '_app_protocol'")
        return self.protocol

    def set_protocol(self, protocol: Any) -> None:
        self.protocol = protocol


async def test_a_size_int_refuses_goes_to_the_read_loop() -> None:
    """More digits than int() takes: nats-py's parser reports it (a reconnect), no exception."""
    events: list[Event] = []
    nc, router = _router(events)
    transport = _Transport()
    reads, reader = _in_front(router, transport)
    huge = b"MSG s 1 r " + b"9" * 5000 + b"\r\n"
    reads.data_received(b"MSG a 1 2\r\nhi\r\n" + huge)
    assert events == [("msg", 1, b"a", b"", b"hi", None)]
    assert bytes(reader.buffer) == huge
    assert not transport.aborted
    with pytest.raises(ProtocolError):
        await nc._ps.parse(bytes(reader.buffer))


async def test_a_failing_direct_scan_drops_the_connection(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing escapes data_received (it would end nats-py's read loop without a reconnect)."""
    events: list[Event] = []
    _, router = _router(events)
    transport = _Transport()
    reads, _ = _in_front(router, transport)

    def broken(data: bytes) -> bytes:
        raise ValueError("scanner bug")

    monkeypatch.setattr(router, "direct", broken)
    with caplog.at_level(logging.WARNING, logger="aiojetstream"):
        reads.data_received(b"MSG a 1 2\r\nhi\r\n")
    assert transport.aborted, "nats-py sees the connection end and reconnects"
    assert "scanner bug" in caplog.text


async def test_restore_with_a_closed_transport() -> None:
    """A TLS transport closed twice has no protocol: restoring must not ask it for one."""
    events: list[Event] = []
    nc, router = _router(events)
    closed = _Transport(closing=True)  # get_protocol() raises, as on a closed TLS transport
    _in_front(router, closed)
    router.restore(nc)
    assert "parse" not in vars(nc._ps)
    assert router._reads is None
    # An open one gets its stream reader protocol back.
    nc, router = _router(events)
    open_ = _Transport(asyncio.Protocol())
    reads = _conn._DirectReads.install(router, cast(asyncio.Transport, open_))
    assert reads is None, "only in front of a StreamReaderProtocol"
    open_.protocol = asyncio.StreamReaderProtocol(asyncio.StreamReader())
    inner_protocol = open_.protocol
    reads = _conn._DirectReads.install(router, cast(asyncio.Transport, open_))
    assert reads is not None
    assert open_.protocol is reads
    router._reads = reads
    router.restore(nc)
    assert open_.protocol is inner_protocol


def test_abort_reaches_any_event_loop_transport() -> None:
    """Another event loop's transport (uvloop's is no asyncio.Transport) is still aborted."""
    nc = NatsClient()
    other = _Transport()
    nc._transport = SimpleNamespace(_io_writer=SimpleNamespace(transport=other))  # type: ignore[assignment]
    assert _conn._asyncio_transport(nc) is None, "no direct reads there"
    _conn._abort_transport(nc)
    assert other.aborted


# --------------------------------------------------------------------------- mutations

ODD = st.sampled_from(
    [
        *(b" ", b"\r", b"\n", b"\r\n", b"\t", b"0", b"9", b"-", b"+", b"_", b"x", b"\x00"),
        *(b"\xff", b"MSG ", b"HMSG ", b"\xd9\xa3", b"99999", b"-ERR \r\n", b"INFO [1]\r\n"),
        *(b"INFO {\r\n", b"PING\r\n", b"PONG\r\n", b"+OK\r\n", b"PING \r\n", b"+OK"),
    ]
)


ODD_FRAME = st.one_of(msg_frame(NUMBER), msg_frame(NUMBER), hmsg_frame(), hmsg_frame(), CONTROL)


@st.composite
def mutated_stream(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.lists(ODD_FRAME, min_size=1, max_size=12).map(b"".join)))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        pos = draw(st.integers(min_value=0, max_value=len(data)))
        op = draw(st.sampled_from(["insert", "replace", "delete"]))
        if op == "delete":
            del data[pos : pos + draw(st.integers(min_value=1, max_value=3))]
        else:
            odd = draw(ODD)
            data[pos : pos + (len(odd) if op == "replace" else 0)] = odd
    return bytes(data)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_stream(), CUTS)
@example(b"HMSG s 1 10 4\r\nNATS/1.0\r\n\r\nPING\r\n", [])  # header larger than the message
@example(b"MSG s 1 5 \r\nhello\r\n", [])  # a trailing blank
@example(b"MSG s 1 r\n5\r\nhello\r\n", [])  # a lone LF before the size
@example(b"MSG s 1 +5\r\nhello\r\n", [])  # a sign
@example(b"MSG s 1 \xd9\xa3\r\nabc\r\n", [])  # a non-ASCII digit
@example(b"MSG s x 5\r\nhello\r\n", [])  # a sid that is not a number
@example(b"MSG s 1 3\r\nabc\r\n-ERR \r\n", [])  # nats-py: AttributeError
@example(b"MSG s 1 3\r\nabc\r\nINFO [1]\r\n", [])  # nats-py: TypeError
@example(b"MSG s 1 3\r\nabc\r\nINFO {\r\n", [])  # nats-py: JSONDecodeError
@example(b"-ERR '\xff'\r\n", [])  # nats-py: UnicodeDecodeError
@example(b"PING\r\n\r\nMSG s 1 2\r\nhi\r\n", [])  # nats-py: the blank line is the PING's
@example(b"MSG s 1 2\r\nhi\r\nPONG\r\n", [15])  # a PONG at the end of a read
@example(b"MSG s 8 r 2\r\nhi\r\nMSG s 8 r +2\r\nhi\r\n", [])  # a sign in a sink's run
@example(b"MSG s 8 r 2\r\nhi\r\nMSG s 08 r 2\r\nho\r\n", [])  # the sid written otherwise
@example(b"MSG s 8 r 2\r\nhi\r\nMSG s 9 2\r\nho\r\nMSG s 8 r 2\r\nhu\r\n", [])
@example(b"MSG s 8 r 2\r\nhi\r\nMSG s 8 r\r2\r\nhi\r\n", [])  # a lone CR in a sink's run
@example(b"MSG s 8 r 2\r\nhi\r\nMSG s 8 r\n2\r\nhi\r\n", [])  # a lone LF
@example(b"MSG s 8 r 2\r\nhi\r\nMSG s 8 r\t2\r\nho\r\nMSG s 8 2 \r\nhu\r\n", [])
async def test_mutated_streams_parse_as_nats_py(stream: bytes, cuts: list[int]) -> None:
    await _compare(stream, cuts)


@settings(max_examples=500, deadline=None)
@given(
    st.sampled_from([b"", b"MSG ", b"HMSG ", b"MSG s 1 ", b"HMSG s 1 ", b"PING\r\n"]),
    st.binary(max_size=80),
    CUTS,
)
async def test_random_bytes_parse_as_nats_py(prefix: bytes, data: bytes, cuts: list[int]) -> None:
    await _compare(prefix + data, cuts)


async def test_a_header_starting_with_digits_is_framed_correctly() -> None:
    # nats-server relays this frame as is (an HPUB with the header block b"5\r\n").
    stream = b"HMSG s 1 3 3\r\n5\r\n\r\nPONG\r\nMSG t 2 2\r\nok\r\n"
    assert _nats_py_misreads(stream)
    events: list[Event] = []
    assert await _run(_routed(events), [stream], events) is None
    assert events == [
        ("msg", 1, b"s", b"", b"", b"5\r\n"),
        ("pong",),
        ("msg", 2, b"t", b"", b"ok", None),
    ]
    # nats-py 2.16's parser takes "3" for a reply and the header for the size.
    expected: list[Event] = []
    await _run(_reference(expected), [stream], expected)
    assert expected != events


# --------------------------------------------------------------------------- the read loop


async def test_a_failing_handler_does_not_stop_the_parser(
    caplog: pytest.LogCaptureFixture,
) -> None:
    events: list[Event] = []
    nc, router = _router(events)

    def broken(subject: bytes, reply: bytes, data: bytes, hdr: bytes | None) -> None:
        raise RuntimeError("handler bug")

    router.routes[ROUTED[0]] = broken
    stream = b"MSG a 1 2\r\nhi\r\nMSG b 2 2\r\nho\r\n"
    with caplog.at_level(logging.ERROR, logger="aiojetstream"):
        assert await _run(nc, [stream], events) is None
    assert events == [("msg", 2, b"b", b"", b"ho", None)]
    assert "handler bug" in caplog.text


async def test_a_failing_nats_py_callback_does_not_stop_the_parser(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # nats-py 2.16 raises UnicodeDecodeError for a subject that is not UTF-8
    # (Msg.subject is a str) and stops its read loop; the router logs it.
    events: list[Event] = []
    nc = NatsClient()
    router = _conn._Router(nc)
    router.routes[1] = lambda s, r, d, h: events.append(("msg", 1, s, r, d, h))

    async def process_msg(sid: int, subject: bytes, reply: bytes, data: bytes, hdr: Any) -> None:
        subject.decode()

    router._original = lambda: process_msg
    stream = b"MSG \xff 6 2\r\nhi\r\nMSG ok 1 2\r\nho\r\n"
    with caplog.at_level(logging.ERROR, logger="aiojetstream"):
        assert await _run(nc, [stream], events) is None
    assert events == [("msg", 1, b"ok", b"", b"ho", None)]
    assert "UnicodeDecodeError" in caplog.text
