"""Security and hostile input against a real nats-server (RELIABILITY G1 and G2).

G1: no subject, name, key, header key or value, TTL or option a caller passes
can put anything on the wire besides the PUB/HPUB the library means to send.
Every public entry point that turns caller text into protocol is called with
hostile input (hypothesis-generated text holding CR, LF, NUL, space, tab,
other control characters, Unicode line separators and lone surrogates, a
classic battery of injections, ``str``/``int`` subclasses that override their
own formatting, and values that are not strings at all) through a loopback
proxy that parses the client's bytes strictly: every call must fail with the
library's typed error and nothing but PING/PONG may leave meanwhile. The
client is created with nats-py's ``skip_subject_validation=True``, on the fast
path, on the nats-py fallback path (``AIOJETSTREAM_FAST_PATH=0``) and as a
wrapped nats-py client, so the library's own checks are what is tested.

G2: ``tls://`` to a plaintext server (or any URL with a TLS option, a
discovered server on reconnect included), an untrusted certificate and a
hostname mismatch each raise ``TLSError`` promptly (and nothing, credentials
included, is sent in the clear); a server that offers TLS without requiring it
is upgraded; user/password, token, nkey seed and creds file (JWT)
work against a server that requires them, and wrong or missing credentials
raise ``AuthorizationError`` promptly after at most two connection attempts,
with no secret in the message. Certificates, nkeys and JWTs are made at test
time, offline (tests/credentials.py).
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import os
import re
import ssl
import string
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats
import nkeys  # type: ignore[import-untyped]  # no type hints
import pytest
import pytest_asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aiojetstream
from aiojetstream import (
    AuthorizationError,
    ConnectionClosedError,
    ConnectionFailedError,
    ConsumerConfig,
    Counter,
    InvalidHeaderError,
    InvalidKeyError,
    InvalidNameError,
    InvalidOptionError,
    InvalidScheduleError,
    InvalidSubjectError,
    InvalidTTLError,
    JetStreamContext,
    KeyValue,
    KeyValueConfig,
    ObjectStore,
    ObjectStoreConfig,
    Schedule,
    Stream,
    StreamConfig,
    TLSError,
    _conn,
)
from aiojetstream._conn import CONNECT_ATTEMPTS
from aiojetstream.testing import NatsServer
from aiojetstream.testing import _free_port as free_port
from credentials import CertificateAuthority, Operator, new_nkey, public_key, seed_text
from docblocks import BLOCK_TIMEOUT, DOCS, fresh_js, python_blocks, run_block
from helpers import unique_name, wait_until
from hostile import INJECTION, EvilInt, EvilStr
from proxy import HOST, ApiCountingProxy

#: How long a refused connection may take (two attempts 250 ms apart, on a loaded machine).
PROMPT = 5.0
#: Bound of one probe call (a refused call sends nothing and returns at once).
STEP = 10.0

# --------------------------------------------------------------------------- the wire

_TOKEN_KEY = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_DIGITS = re.compile(rb"[0-9]+")
#: (operation, words, position of the empty one) of nats-py's canonical lines.
_EMPTY_OK = {(b"PUB", 4, 2), (b"HPUB", 5, 2), (b"SUB", 4, 2), (b"UNSUB", 3, 2)}
#: The longest control line a client may send before its CRLF (CONNECT included).
_MAX_LINE = 64 * 1024


@dataclass(frozen=True)
class Frame:
    """One client-to-server protocol operation."""

    verb: str
    args: tuple[str, ...] = ()
    header: bytes | None = None
    payload: bytes = b""

    def __str__(self) -> str:
        return f"{self.verb} {' '.join(self.args)}".strip()


class ClientStream:
    """A strict parser of the bytes one client sent: anything unexpected is a violation.

    Control lines are ``CONNECT {json}``, ``PING``, ``PONG``, ``SUB subject
    [queue] sid``, ``UNSUB sid [max]``, ``PUB subject [reply] size`` and
    ``HPUB subject [reply] header_size total_size``, single spaces between
    arguments, no control character, each argument valid UTF-8; a PUB/HPUB
    subject holds no wildcard or empty token; the payload is followed by CRLF;
    a header block is ``NATS/1.0`` then ``Key: value`` lines (RFC 7230 token
    keys, values without CR, LF or NUL) and an empty line. The first violation
    stops the parser (the framing is lost).
    """

    def __init__(self) -> None:
        self.buf = bytearray()
        self.frames: list[Frame] = []
        self.violation: str | None = None
        self.raw = bytearray()

    def feed(self, data: bytes) -> None:
        """Parse what arrived (before it is forwarded to the server)."""
        self.raw += data
        if self.violation is not None:
            return
        self.buf += data
        while self.violation is None:
            frame = self._next()
            if frame is None:
                break
            self.frames.append(frame)

    def _fail(self, why: str) -> None:
        self.violation = why

    def _next(self) -> Frame | None:
        buf = self.buf
        end = buf.find(b"\r\n")
        if end < 0:
            if len(buf) > _MAX_LINE or b"\n" in buf or b"\x00" in buf:
                self._fail(f"a line without CRLF: {bytes(buf[:200])!r}")
            return None
        line = bytes(buf[:end])
        if line.startswith(b"CONNECT "):
            try:
                options = json.loads(line[8:])
            except ValueError:
                self._fail(f"CONNECT with invalid JSON: {line[:200]!r}")
                return None
            if not isinstance(options, dict):
                self._fail(f"CONNECT without an object: {line[:200]!r}")
                return None
            del buf[: end + 2]
            return Frame("CONNECT")
        if any(b < 0x20 or b == 0x7F for b in line):
            self._fail(f"a control character in {line!r}")
            return None
        words = line.split(b" ")
        if b"" in words:
            # nats-py writes an empty reply or queue as an empty argument, and
            # UNSUB without a maximum with a trailing space; nothing else.
            if words.count(b"") != 1 or (words[0], len(words), words.index(b"")) not in _EMPTY_OK:
                self._fail(f"an empty argument (extra space) in {line!r}")
                return None
            words.remove(b"")
        try:
            args = tuple(w.decode() for w in words[1:])
        except UnicodeDecodeError:
            self._fail(f"an argument that is not UTF-8 in {line!r}")
            return None
        verb = words[0].decode(errors="replace")
        if verb in ("PING", "PONG"):
            if args:
                self._fail(f"{verb} with arguments: {line!r}")
                return None
            del buf[: end + 2]
            return Frame(verb)
        if verb == "SUB":
            if len(args) not in (2, 3) or not _DIGITS.fullmatch(words[-1]):
                self._fail(f"malformed SUB: {line!r}")
                return None
            del buf[: end + 2]
            return Frame(verb, args)
        if verb == "UNSUB":
            if len(args) not in (1, 2) or not all(_DIGITS.fullmatch(w) for w in words[1:]):
                self._fail(f"malformed UNSUB: {line!r}")
                return None
            del buf[: end + 2]
            return Frame(verb, args)
        if verb == "PUB":
            return self._message(line, end, args, headers=False)
        if verb == "HPUB":
            return self._message(line, end, args, headers=True)
        self._fail(f"an unexpected operation: {line!r}")
        return None

    def _message(
        self, line: bytes, end: int, args: tuple[str, ...], *, headers: bool
    ) -> Frame | None:
        sizes = 2 if headers else 1
        if len(args) not in (sizes + 1, sizes + 2) or not all(
            _DIGITS.fullmatch(a.encode()) for a in args[-sizes:]
        ):
            self._fail(f"malformed {'HPUB' if headers else 'PUB'}: {line!r}")
            return None
        subject = args[0]
        if any(token in ("", "*", ">") for token in subject.split(".")):
            self._fail(f"a publish to a wildcard or empty token: {line!r}")
            return None
        total = int(args[-1])
        start = end + 2
        if len(self.buf) < start + total + 2:
            return None  # the payload is not all here yet
        body = bytes(self.buf[start : start + total])
        if self.buf[start + total : start + total + 2] != b"\r\n":
            self._fail(f"the payload of {line!r} is not followed by CRLF")
            return None
        header: bytes | None = None
        payload = body
        if headers:
            size = int(args[-2])
            if size > total:
                self._fail(f"a header block larger than the message: {line!r}")
                return None
            header, payload = body[:size], body[size:]
            problem = _header_problem(header)
            if problem is not None:
                self._fail(f"{problem} in the headers of {line!r}: {header!r}")
                return None
        del self.buf[: start + total + 2]
        return Frame("HPUB" if headers else "PUB", args[: len(args) - sizes], header, payload)


def _header_problem(block: bytes) -> str | None:
    if not block.startswith(b"NATS/1.0\r\n") or not block.endswith(b"\r\n\r\n"):
        return "a header block not framed as NATS/1.0 ... CRLF CRLF"
    for line in block[10:-4].split(b"\r\n") if len(block) > 14 else []:
        key, sep, value = line.partition(b": ")
        if not sep or not _TOKEN_KEY.fullmatch(key):
            return f"a header line {line!r} that is not 'Key: value'"
        if b"\n" in value or b"\r" in value or b"\x00" in value:
            return f"a header value with CR, LF or NUL: {line!r}"
        try:
            value.decode()
        except UnicodeDecodeError:
            return f"a header value that is not UTF-8: {line!r}"
    return None


class WireCapture(ApiCountingProxy):
    """The tests' :class:`ApiCountingProxy`, also recording and strictly parsing raw bytes.

    Every client connection gets a :class:`ClientStream`; bytes are parsed
    before they are forwarded, so once the server answers a PING, everything
    the client sent before it has been seen. ``strict=False`` only records
    (TLS connections carry no readable protocol).
    """

    def __init__(self, upstream_port: int, *, strict: bool = True) -> None:
        super().__init__(upstream_port)
        self.strict = strict
        self.streams: list[ClientStream] = []

    async def __aenter__(self) -> WireCapture:
        await super().__aenter__()
        return self

    @property
    def connections(self) -> int:
        """How many client connections reached the server through the proxy."""
        return len(self.streams)

    def frames(self) -> list[Frame]:
        """Every operation parsed so far, connection after connection."""
        return [frame for stream in self.streams for frame in stream.frames]

    def violations(self) -> list[str]:
        """What broke the protocol, per connection."""
        return [s.violation for s in self.streams if s.violation is not None]

    def raw(self) -> bytes:
        """Every byte the clients sent."""
        return b"".join(bytes(stream.raw) for stream in self.streams)

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, parse: bool
    ) -> None:
        if not parse:
            await super()._pipe(reader, writer, parse=False)
            return
        stream = ClientStream()
        self.streams.append(stream)
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                if self.strict:
                    stream.feed(data)
                else:
                    stream.raw += data
                writer.write(data)
                await writer.drain()


def _hpub(subject: bytes, block: bytes, payload: bytes) -> bytes:
    size = len(block)
    return b"HPUB %b %d %d\r\n%b%b\r\n" % (subject, size, size + len(payload), block, payload)


def test_the_parser_flags_injections() -> None:
    """The strict parser itself: clean traffic passes, each kind of injection is flagged."""
    clean = ClientStream()
    clean.feed(
        b'CONNECT {"verbose": false, "name": "a b"}\r\nPING\r\nSUB _INBOX.x.* 1\r\n'
        b"PUB a.b 2\r\nhi\r\nPUB a.b _INBOX.x.1 0\r\n\r\n"
        + _hpub(b"a.b", b"NATS/1.0\r\nK: v w\r\n\r\n", b"hi")
        + b"UNSUB 1\r\nPONG\r\n"
    )
    assert clean.violation is None
    assert [f.verb for f in clean.frames] == [
        "CONNECT", "PING", "SUB", "PUB", "PUB", "HPUB", "UNSUB", "PONG"
    ]  # fmt: skip
    for evil in (
        b"PUB a\r\nPUB evil 0\r\n\r\n 2\r\nhi\r\n",  # CRLF in a subject
        b"PUB a b c 2\r\nhi\r\n",  # a space in a subject
        b"PUB a\tb 2\r\nhi\r\n",  # a tab
        b"PUB a\x00b 2\r\nhi\r\n",  # NUL
        b"PUB a.* 2\r\nhi\r\n",  # a wildcard publish
        b"PUB a 2\r\nhi!\r\n",  # a payload longer than announced
        _hpub(b"a", b"NATS/1.0\r\nK\r\n\r\n", b""),  # a header line without ': '
        _hpub(b"a", b"NATS/1.0\r\nK: a\nb\r\n\r\n", b""),  # a bare LF in a value
        _hpub(b"a", b"NATS/1.0\r\nK: a\x00b\r\n\r\n", b""),  # NUL in a value
        _hpub(b"a", b"NATS/1.0 503\r\n\r\n", b""),  # a status line from a client
        b"PUB a 0\r\n\r\nUNSUB 1 2 3\r\n",  # a malformed operation after a good one
        b"SUB a 1\r\nMSG a 1 0\r\n\r\n",  # a server operation from the client
        b"PUB a 0\r\n\r\nPING \r\n",  # a trailing space
    ):
        stream = ClientStream()
        stream.feed(evil)
        assert stream.violation is not None, evil


# --------------------------------------------------------------------------- hostile input

SAFE = st.text(alphabet=string.ascii_letters + string.digits + "-_", min_size=1, max_size=6)
#: What ends or splits a protocol line, or cannot be encoded.
LINE_BREAKERS = ["\r", "\n", "\r\n", "\x00", "\x0b", "\x0c", "\x1b", "\x7f", "\x85", "\u2028"]
LINE_BREAKERS += ["\u2029", "\ud800", "\udfff", INJECTION, "\r\n\r\n", "\r\nUNSUB 1\r\n"]
#: Refused in subjects, names and keys too (a header value may hold them).
BLANKS = [" ", "\t", "\xa0", "\u3000", " PUB evil 0"]
#: Also refused in names: each would address another API subject.
NAME_BREAKERS = [".", "*", ">", "/", "\\"]


@st.composite
def _hostile(draw: st.DrawFn, pieces: list[str]) -> str:
    parts = [draw(SAFE)]
    for _ in range(draw(st.integers(1, 3))):
        parts.extend([draw(st.sampled_from(pieces)), draw(SAFE)])
    return "".join(parts)


NOT_STR = st.one_of(
    st.none(),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.binary(max_size=6),
    st.binary(max_size=6).map(bytearray),
    st.lists(SAFE, max_size=2),
    st.builds(object),
)
#: Hostile as a subject, filter, name, key and header key alike.
TEXT_HOSTILE = st.one_of(_hostile(LINE_BREAKERS + BLANKS), NOT_STR)
#: Hostile as a stream, consumer or bucket name (fine in a subject).
NAME_HOSTILE = _hostile(NAME_BREAKERS)
#: Header values and other header-bound text (spaces and tabs are fine there).
VALUE_HOSTILE = st.one_of(_hostile(LINE_BREAKERS), NOT_STR)
#: TTLs (numbers are valid TTLs).
TTL_HOSTILE = st.one_of(
    _hostile(LINE_BREAKERS),
    _hostile(BLANKS),
    NOT_STR.filter(lambda v: not isinstance(v, int | float) or isinstance(v, bool)),
)

#: Fixed batteries, besides the generated input.
CLASSIC_NOT_STR: list[object] = [None, 7, -1, 1.5, b"ok", bytearray(b"ok"), ["ok"], object()]
CLASSIC_BREAKERS = [
    INJECTION,
    "a\r\nPUB evil 0\r\n\r\n",
    "a\nb",
    "a\rb",
    "a\r",
    "\n",
    "a\x00b",
    "a\u2028b",
    "a\u2029b",
    "a\x85b",
    "a\ud800b",
]
CLASSIC_TEXT: list[object] = [*CLASSIC_BREAKERS, "a b", "a\tb", " ", "\t", "", *CLASSIC_NOT_STR]
CLASSIC_VALUE: list[object] = [*CLASSIC_BREAKERS, *CLASSIC_NOT_STR]
CLASSIC_TTL: list[object] = [*CLASSIC_BREAKERS, "1 h", "6\t0", "", " ", None, -1, b"60", ["60"]]
#: Shapes a subject to publish to (or a key) may not have; filters refuse the empty tokens.
WILDCARDS = ["*", ">", "a.*", "a.>", "a.*.b"]
EMPTY_TOKENS = ["a..b", ".a", "a.", ".", "a.>.b"]


# --------------------------------------------------------------------------- probes


@dataclass
class Wire:
    """A client connected through a :class:`WireCapture`, with something to call."""

    proxy: WireCapture
    js: JetStreamContext
    nc: Any
    subject: str  #: a subject of the stream (the stream captures ``<prefix>.>``)
    stream_name: str
    stream: Stream
    counter: Counter
    counter_subject: str
    kv: KeyValue
    obj: ObjectStore
    extra: dict[str, Any] = field(default_factory=dict)


Call = Callable[[Wire, Any], Awaitable[object]]


@dataclass(frozen=True)
class Probe:
    """One public entry point given one hostile argument.

    ``kind`` says what the argument is: ``publish`` (a subject to publish to),
    ``filter``, ``name`` (stream, consumer, bucket, domain), ``key``,
    ``key_filter``, ``header_key``, or ``value`` / ``ttl`` (header-bound).
    """

    kind: str
    name: str
    call: Call
    error: type[InvalidOptionError]
    #: Which values it is tried with (others are valid there, or break the probe itself).
    accepts: Callable[[object], bool] = lambda value: True


def _sync(fn: Callable[[], object]) -> Awaitable[object]:
    async def run() -> object:
        return fn()

    return run()


async def _drain(items: AsyncIterator[Any]) -> None:
    async for _ in items:
        pass


async def _watch(kv: KeyValue, keys: list[Any]) -> None:
    async with kv.watch(keys):
        pass


def _str_only(value: object) -> bool:
    return isinstance(value, str)


def _not_none(value: object) -> bool:
    return value is not None


def _hashable(value: object) -> bool:
    return isinstance(value, Hashable)


def _not_a_sequence_number(value: object) -> bool:
    return isinstance(value, bool) or not isinstance(value, int) or value < 0


def _not_a_list(value: object) -> bool:
    return value is not None and not isinstance(value, list)


TEXT_PROBES: list[Probe] = [
    # Subjects to publish to.
    Probe("publish", "publish", lambda w, v: w.js.publish(v, b"x"), InvalidSubjectError),
    Probe(
        "publish", "publish_async", lambda w, v: w.js.publish_async(v, b"x"), InvalidSubjectError
    ),
    Probe(
        "publish", "batch.add", lambda w, v: w.js.atomic_batch().add(v, b"x"), InvalidSubjectError
    ),
    Probe(
        "publish",
        "batch.commit",
        lambda w, v: w.js.atomic_batch().commit(v, b"x"),
        InvalidSubjectError,
    ),
    Probe("publish", "counter.add", lambda w, v: w.counter.add(v, 1), InvalidSubjectError),
    Probe("publish", "counter.get", lambda w, v: w.counter.get(v), InvalidSubjectError),
    Probe("publish", "cancel_schedule", lambda w, v: w.js.cancel_schedule(v), InvalidSubjectError),
    Probe(
        "publish",
        "schedule_target",
        lambda w, v: w.js.publish(w.subject + "s", schedule=Schedule.every(60), schedule_target=v),
        InvalidScheduleError,
        _not_none,
    ),
    Probe(
        "publish",
        "api_prefix",
        lambda w, v: _sync(lambda: JetStreamContext(w.nc, api_prefix=v)),
        InvalidSubjectError,
        lambda v: v != "a.",  # a trailing dot is dropped: "a"
    ),
    # Subject filters.
    Probe(
        "filter",
        "consumer filter_subject",
        lambda w, v: w.js.create_consumer(
            w.stream_name, ConsumerConfig(durable_name="f", filter_subject=v)
        ),
        InvalidSubjectError,
        lambda v: isinstance(v, str) and v != "",  # "" means no filter
    ),
    Probe(
        "filter",
        "stream.purge",
        lambda w, v: w.stream.purge(subject=v),
        InvalidSubjectError,
        _not_none,
    ),
    Probe(
        "filter",
        "stream.get_last",
        lambda w, v: w.stream.get_last_msg_for_subject(v),
        InvalidSubjectError,
    ),
    Probe(
        "filter",
        "stream.info",
        lambda w, v: w.stream.info(subjects_filter=v),
        InvalidSubjectError,
        _not_none,
    ),
    Probe(
        "filter",
        "stream.get_batch",
        lambda w, v: _drain(w.stream.get_batch(5, subject=v)),
        InvalidSubjectError,
        _not_none,
    ),
    Probe(
        "filter",
        "stream.get_last_msgs_for",
        lambda w, v: _drain(w.stream.get_last_msgs_for([v])),
        InvalidSubjectError,
    ),
    Probe(
        "filter",
        "counter.get_many",
        lambda w, v: _drain(w.counter.get_many([v])),
        InvalidSubjectError,
    ),
    Probe(
        "filter",
        "stream_name_by_subject",
        lambda w, v: w.js.stream_name_by_subject(v),
        InvalidSubjectError,
    ),
    Probe(
        "filter",
        "stream_names",
        lambda w, v: _drain(w.js.stream_names(v)),
        InvalidSubjectError,
        _not_none,
    ),
    Probe(
        "filter",
        "list_streams",
        lambda w, v: _drain(w.js.list_streams(v)),
        InvalidSubjectError,
        _not_none,
    ),
    # Stream and consumer names (in API subjects).
    Probe("name", "stream", lambda w, v: w.js.stream(v), InvalidNameError),
    Probe("name", "delete_stream", lambda w, v: w.js.delete_stream(v), InvalidNameError),
    Probe(
        "name",
        "create_stream",
        lambda w, v: w.js.create_stream(StreamConfig(name=v, subjects=["sec.never"])),
        InvalidNameError,
        _str_only,
    ),
    Probe("name", "consumer(stream)", lambda w, v: w.js.consumer(v, "d"), InvalidNameError),
    Probe("name", "consumer(name)", lambda w, v: w.js.consumer(w.stream_name, v), InvalidNameError),
    Probe(
        "name",
        "delete_consumer",
        lambda w, v: w.js.delete_consumer(w.stream_name, v),
        InvalidNameError,
    ),
    Probe(
        "name",
        "create_consumer(stream)",
        lambda w, v: w.js.create_consumer(v, ConsumerConfig(durable_name="x")),
        InvalidNameError,
    ),
    Probe(
        "name",
        "create_consumer(durable_name)",
        lambda w, v: w.js.create_consumer(w.stream_name, ConsumerConfig(durable_name=v)),
        InvalidNameError,
        _str_only,
    ),
    Probe(
        "name",
        "create_consumer(name)",
        lambda w, v: w.js.create_consumer(w.stream_name, ConsumerConfig(name=v)),
        InvalidNameError,
        lambda v: isinstance(v, str) and v != "",  # "" means an unnamed (ephemeral) consumer
    ),
    Probe(
        "name",
        "pause_consumer",
        lambda w, v: w.js.pause_consumer(w.stream_name, v, 60),
        InvalidNameError,
    ),
    Probe("name", "resume_consumer", lambda w, v: w.js.resume_consumer(v, "d"), InvalidNameError),
    Probe("name", "ordered_consumer", lambda w, v: w.js.ordered_consumer(v), InvalidNameError),
    Probe("name", "list_consumers", lambda w, v: _drain(w.js.list_consumers(v)), InvalidNameError),
    Probe("name", "consumer_names", lambda w, v: _drain(w.js.consumer_names(v)), InvalidNameError),
    Probe("name", "stream.consumer", lambda w, v: w.stream.consumer(v), InvalidNameError),
    Probe(
        "name", "stream.delete_consumer", lambda w, v: w.stream.delete_consumer(v), InvalidNameError
    ),
    Probe("name", "counter(stream)", lambda w, v: _sync(lambda: w.js.counter(v)), InvalidNameError),
    Probe(
        "name",
        "domain",
        lambda w, v: _sync(lambda: JetStreamContext(w.nc, domain=v)),
        InvalidNameError,
        _not_none,
    ),
    # Buckets.
    Probe("name", "key_value", lambda w, v: w.js.key_value(v), InvalidNameError),
    Probe("name", "delete_key_value", lambda w, v: w.js.delete_key_value(v), InvalidNameError),
    Probe("name", "object_store", lambda w, v: w.js.object_store(v), InvalidNameError),
    Probe(
        "name", "delete_object_store", lambda w, v: w.js.delete_object_store(v), InvalidNameError
    ),
    # Keys.
    Probe("key", "kv.put", lambda w, v: w.kv.put(v, b"x"), InvalidKeyError),
    Probe("key", "kv.create", lambda w, v: w.kv.create(v, b"x"), InvalidKeyError),
    Probe("key", "kv.update", lambda w, v: w.kv.update(v, b"x", 1), InvalidKeyError),
    Probe("key", "kv.delete", lambda w, v: w.kv.delete(v), InvalidKeyError),
    Probe("key", "kv.purge", lambda w, v: w.kv.purge(v), InvalidKeyError),
    Probe("key", "kv.get", lambda w, v: w.kv.get(v), InvalidKeyError),
    Probe("key", "kv.history", lambda w, v: w.kv.history(v), InvalidKeyError),
    Probe(
        "key_filter",
        "kv.watch",
        lambda w, v: _watch(w.kv, [v]),
        InvalidKeyError,
        lambda v: not (isinstance(v, str) and v in ("*", ">", "a.*", "a.>")),  # valid filters
    ),
    # Header keys.
    Probe(
        "header_key",
        "publish header key",
        lambda w, v: w.js.publish(w.subject, b"x", headers={v: "x"}),
        InvalidHeaderError,
        _hashable,
    ),
    Probe(
        "header_key",
        "publish_async header key",
        lambda w, v: w.js.publish_async(w.subject, b"x", headers={v: "x"}),
        InvalidHeaderError,
        _hashable,
    ),
    Probe(
        "header_key",
        "batch.add header key",
        lambda w, v: w.js.atomic_batch().add(w.subject, b"x", headers={v: "x"}),
        InvalidHeaderError,
        _hashable,
    ),
    Probe(
        "header_key",
        "obj.put header key",
        lambda w, v: w.obj.put("o", b"x", headers={v: "x"}),
        InvalidHeaderError,
        _hashable,
    ),
]

VALUE_PROBES: list[Probe] = [
    Probe(
        "value",
        "publish header value",
        lambda w, v: w.js.publish(w.subject, b"x", headers={"K": v}),
        InvalidHeaderError,
    ),
    Probe(
        "value",
        "publish msg_id",
        lambda w, v: w.js.publish(w.subject, msg_id=v),
        InvalidHeaderError,
        _not_none,
    ),
    Probe(
        "value",
        "publish expected_stream",
        lambda w, v: w.js.publish(w.subject, expected_stream=v),
        InvalidHeaderError,
        _not_none,
    ),
    Probe(
        "value",
        "publish expected_last_msg_id",
        lambda w, v: w.js.publish(w.subject, expected_last_msg_id=v),
        InvalidHeaderError,
        _not_none,
    ),
    Probe(
        "value",
        "publish expected_last_sequence",
        lambda w, v: w.js.publish(w.subject, expected_last_sequence=v),
        InvalidOptionError,
        lambda v: v is not None and _not_a_sequence_number(v),
    ),
    Probe(
        "value",
        "publish expected_last_subject_sequence",
        lambda w, v: w.js.publish(w.subject, expected_last_subject_sequence=v),
        InvalidOptionError,
        lambda v: v is not None and _not_a_sequence_number(v),
    ),
    Probe(
        "value",
        "publish_async header value",
        lambda w, v: w.js.publish_async(w.subject, headers={"K": v}),
        InvalidHeaderError,
    ),
    Probe(
        "value",
        "publish_async msg_id",
        lambda w, v: w.js.publish_async(w.subject, msg_id=v),
        InvalidHeaderError,
        _not_none,
    ),
    Probe(
        "value",
        "batch.add header value",
        lambda w, v: w.js.atomic_batch().add(w.subject, headers={"K": v}),
        InvalidHeaderError,
    ),
    Probe(
        "value",
        "batch.add msg_id",
        lambda w, v: w.js.atomic_batch().add(w.subject, msg_id=v),
        InvalidHeaderError,
        _not_none,
    ),
    Probe(
        "value",
        "batch.commit msg_id",
        lambda w, v: w.js.atomic_batch().commit(w.subject, msg_id=v),
        InvalidHeaderError,
        _not_none,
    ),
    Probe(
        "value",
        "kv.update last_revision",
        lambda w, v: w.kv.update("k", b"x", v),
        InvalidOptionError,
        _not_a_sequence_number,
    ),
    Probe(
        "value",
        "counter.add delta",
        lambda w, v: w.counter.add(w.counter_subject, v),
        InvalidOptionError,
        lambda v: isinstance(v, bool) or not isinstance(v, int),
    ),
    Probe(
        "value",
        "obj.put header value",
        lambda w, v: w.obj.put("o", b"x", headers={"K": v}),
        InvalidHeaderError,
        _not_a_list,
    ),
    Probe(
        "value",
        "cron time_zone",
        lambda w, v: w.js.publish(
            w.subject + "s",
            schedule=Schedule.cron("@hourly", time_zone=v),
            schedule_target=w.subject,
        ),
        InvalidScheduleError,
        _not_none,
    ),
]

TTL_PROBES: list[Probe] = [
    Probe(
        "ttl",
        "publish ttl",
        lambda w, v: w.js.publish(w.subject, ttl=v),
        InvalidTTLError,
        _not_none,
    ),
    Probe(
        "ttl",
        "publish_async ttl",
        lambda w, v: w.js.publish_async(w.subject, ttl=v),
        InvalidTTLError,
        _not_none,
    ),
    Probe(
        "ttl",
        "batch.add ttl",
        lambda w, v: w.js.atomic_batch().add(w.subject, ttl=v),
        InvalidTTLError,
        _not_none,
    ),
    Probe(
        "ttl",
        "kv.create ttl",
        lambda w, v: w.kv.create("t", b"x", ttl=v),
        InvalidTTLError,
        _not_none,
    ),
    Probe("ttl", "kv.purge ttl", lambda w, v: w.kv.purge("t", ttl=v), InvalidTTLError, _not_none),
    Probe(
        "ttl",
        "schedule_ttl",
        lambda w, v: w.js.publish(
            w.subject + "s",
            schedule=Schedule.every(60),
            schedule_target=w.subject,
            schedule_ttl=v,
        ),
        InvalidTTLError,
        _not_none,
    ),
]


async def refused_silently(w: Wire, value: object, probes: list[Probe]) -> None:
    """Call every probe that takes ``value``: each must raise its typed error, nothing may leave.

    Once the calls are done a PING is answered: everything sent before it
    went through the proxy, which must have seen nothing but PING and PONG,
    and no protocol violation.
    """
    mark = len(w.proxy.frames())
    wrong: list[str] = []
    for probe in probes:
        if not probe.accepts(value):
            continue
        try:
            result = await asyncio.wait_for(probe.call(w, value), STEP)
        except probe.error:
            continue
        except Exception as exc:  # reported below, with the probe and the value
            wrong.append(f"{probe.name}({value!r}): {type(exc).__name__}: {exc}")
            continue
        if isinstance(result, asyncio.Future):
            result.cancel()
        wrong.append(f"{probe.name}({value!r}) was accepted")
    await w.nc.flush(timeout=int(STEP))
    sent = [str(f) for f in w.proxy.frames()[mark:] if f.verb not in ("PING", "PONG")]
    assert not wrong, "\n".join(wrong)
    assert not sent, f"sent for {value!r}: {sent}"
    assert not w.proxy.violations(), w.proxy.violations()


# --------------------------------------------------------------------------- fixture


@pytest_asyncio.fixture(params=["connect", "fallback", "wrapped"])
async def wire(
    request: pytest.FixtureRequest, nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Wire]:
    """A context on a client made with ``skip_subject_validation=True``, through a capture.

    ``connect``: ``aiojetstream.connect`` on the fast path; ``fallback``: the
    same with ``AIOJETSTREAM_FAST_PATH=0`` (nats-py's own publish, request and
    subscribe); ``wrapped``: a ``JetStreamContext`` on a nats-py client.
    """
    if request.param == "fallback":
        monkeypatch.setenv("AIOJETSTREAM_FAST_PATH", "0")
    async with WireCapture(nats_server.port) as proxy:
        nc: Any
        if request.param == "wrapped":
            nc = await nats.connect(proxy.url, skip_subject_validation=True)
            js = JetStreamContext(nc)
        else:
            js = await aiojetstream.connect(proxy.url, skip_subject_validation=True)
            nc = js.nc
        names: list[str] = []
        try:
            if request.param == "fallback":
                assert not js._conn.fast  # the path under test
            name = unique_name("SEC")
            prefix = name.lower()
            stream = await js.create_stream(
                StreamConfig(
                    name=name,
                    subjects=[f"{prefix}.>"],
                    allow_msg_ttl=True,
                    allow_atomic=True,
                    allow_msg_schedules=True,
                    allow_direct=True,
                )
            )
            names.append(name)
            counter_name = unique_name("SECC")
            await js.create_stream(
                StreamConfig(
                    name=counter_name,
                    subjects=[f"{counter_name.lower()}.>"],
                    allow_msg_counter=True,
                    allow_direct=True,
                )
            )
            names.append(counter_name)
            await js.create_consumer(name, ConsumerConfig(durable_name="d"))
            bucket = unique_name("secb")
            kv = await js.create_key_value(KeyValueConfig(bucket=bucket, limit_marker_ttl=60))
            names.append(f"KV_{bucket}")
            obj_bucket = unique_name("seco")
            obj = await js.create_object_store(ObjectStoreConfig(bucket=obj_bucket))
            names.append(f"OBJ_{obj_bucket}")
            await js.api_level()  # known from now on: no feature check sends a request
            await nc.flush()
            yield Wire(
                proxy=proxy,
                js=js,
                nc=nc,
                subject=f"{prefix}.a",
                stream_name=name,
                stream=stream,
                counter=js.counter(counter_name),
                counter_subject=f"{counter_name.lower()}.c",
                kv=kv,
                obj=obj,
            )
            assert not proxy.violations(), proxy.violations()
        finally:
            for stream_name in names:
                with contextlib.suppress(aiojetstream.StreamNotFoundError):
                    await js.delete_stream(stream_name)
            await js.close()
            if request.param == "wrapped":
                await nc.close()


# --------------------------------------------------------------------------- G1 tests

SETTINGS = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


TEXT_KINDS = ("publish", "filter", "name", "key", "key_filter", "header_key")


def _of(*kinds: str) -> list[Probe]:
    return [p for p in TEXT_PROBES + VALUE_PROBES + TTL_PROBES if p.kind in kinds]


@SETTINGS
@given(value=TEXT_HOSTILE)
async def test_hostile_subjects_names_keys_never_reach_the_wire(wire: Wire, value: object) -> None:
    await refused_silently(wire, value, _of(*TEXT_KINDS))


@SETTINGS
@given(value=NAME_HOSTILE)
async def test_names_that_would_change_an_api_subject_never_reach_the_wire(
    wire: Wire, value: object
) -> None:
    await refused_silently(wire, value, _of("name"))


@SETTINGS
@given(value=VALUE_HOSTILE)
async def test_hostile_header_values_and_options_never_reach_the_wire(
    wire: Wire, value: object
) -> None:
    await refused_silently(wire, value, _of("value"))


@SETTINGS
@given(value=TTL_HOSTILE)
async def test_hostile_ttls_never_reach_the_wire(wire: Wire, value: object) -> None:
    await refused_silently(wire, value, _of("ttl"))


async def test_the_classic_batteries_never_reach_the_wire(wire: Wire) -> None:
    for value in CLASSIC_TEXT:
        await refused_silently(wire, value, _of(*TEXT_KINDS))
    for value in CLASSIC_VALUE:
        await refused_silently(wire, value, _of("value"))
    for value in CLASSIC_TTL:
        await refused_silently(wire, value, _of("ttl"))
    for value in ["a.b", "a-b.c", *WILDCARDS, *EMPTY_TOKENS]:
        await refused_silently(wire, value, _of("name"))
    for value in [*WILDCARDS, *EMPTY_TOKENS]:
        await refused_silently(wire, value, _of("publish", "key"))
    for value in EMPTY_TOKENS:
        await refused_silently(wire, value, _of("filter", "key_filter"))


async def test_str_and_int_subclasses_send_only_their_value(wire: Wire) -> None:
    """A subclass that overrides encode/__format__/__str__ is sent as its value, not its text."""
    mark = len(wire.proxy.frames())
    ack = await wire.js.publish(
        EvilStr(wire.subject),
        b"x",
        headers={EvilStr("K"): EvilStr("v")},
        msg_id=EvilStr("id-1"),
        expected_stream=EvilStr(wire.stream_name),
    )
    await wire.js.publish(
        wire.subject, b"y", expected_last_sequence=EvilInt(ack.seq), msg_id=EvilStr("id-2")
    )
    fut = await wire.js.publish_async(EvilStr(wire.subject), b"z")
    await fut
    await wire.kv.put(EvilStr("key"), b"v")
    assert (await wire.kv.get(EvilStr("key"))).value == b"v"
    await wire.counter.add(EvilStr(wire.counter_subject), EvilInt(3))
    assert await wire.counter.get(EvilStr(wire.counter_subject)) == 3
    stream = await wire.js.stream(EvilStr(wire.stream_name))
    assert stream.name == wire.stream_name
    await wire.nc.flush()
    frames = wire.proxy.frames()[mark:]
    assert not wire.proxy.violations(), wire.proxy.violations()
    assert b"evil" not in wire.proxy.raw()
    published = [f for f in frames if f.verb in ("PUB", "HPUB") and f.args[0] == wire.subject]
    assert len(published) == 3
    assert published[0].header == (
        b"NATS/1.0\r\nK: v\r\nNats-Msg-Id: id-1\r\n"
        + f"Nats-Expected-Stream: {wire.stream_name}\r\n\r\n".encode()
    )
    assert published[1].header is not None
    assert f"Nats-Expected-Last-Sequence: {ack.seq}\r\n".encode() in published[1].header
    increments = [f for f in frames if f.args and f.args[0] == wire.counter_subject]
    assert [f.header for f in increments] == [b"NATS/1.0\r\nNats-Incr: +3\r\n\r\n"]


async def test_object_names_are_encoded_not_refused(wire: Wire) -> None:
    """Object names may be any text: they travel base64url-encoded, so the wire stays clean."""
    mark = len(wire.proxy.frames())
    name = "report\r\nPUB evil.injected 5\r\nhello\r\n \t\x00\u2028.*>"
    info = await wire.obj.put(name, b"payload")
    assert info.name == name
    assert await wire.obj.get_bytes(name) == b"payload"
    await wire.nc.flush()
    assert not wire.proxy.violations(), wire.proxy.violations()
    sent = [f for f in wire.proxy.frames()[mark:] if f.verb in ("PUB", "HPUB")]
    assert sent  # the chunks, the info and the requests did go out
    # The name is only ever inside a payload (JSON) or base64url in a subject.
    assert not [f for f in sent if any("evil" in arg for arg in f.args)]
    with pytest.raises(InvalidNameError):
        await wire.obj.put("a\ud800b", b"x")


async def test_the_capture_sees_an_intended_publish(wire: Wire) -> None:
    """Control: a valid publish shows up as exactly one HPUB with its headers."""
    mark = len(wire.proxy.frames())
    await wire.js.publish(wire.subject, b"hello", headers={"K": "a b\tc"}, msg_id="m1")
    sent = [f for f in wire.proxy.frames()[mark:] if f.verb in ("PUB", "HPUB")]
    assert len(sent) == 1
    assert sent[0].verb == "HPUB"
    assert sent[0].args[0] == wire.subject
    assert sent[0].header == b"NATS/1.0\r\nK: a b\tc\r\nNats-Msg-Id: m1\r\n\r\n"
    assert sent[0].payload == b"hello"


async def test_the_capture_catches_nats_py_without_validation(nats_server: NatsServer) -> None:
    """Control: the same capture flags what nats-py alone sends with validation skipped."""
    async with WireCapture(nats_server.port) as proxy:
        nc = await nats.connect(proxy.url, skip_subject_validation=True)
        try:
            await nc.publish("sec.x\r\nPUB evil.injected 5\r\nhello", b"x")
            await nc.flush()
        finally:
            await nc.close()
        assert proxy.violations(), "the injected PUB went unnoticed"


# --------------------------------------------------------------------------- G2: TLS


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A CA, a valid server certificate for 127.0.0.1 and one for another host name."""
    directory = tmp_path_factory.mktemp("tls")
    ca = CertificateAuthority(directory)
    return {
        "ca": ca,
        "good": ca.issue("good", "IP:127.0.0.1,DNS:localhost"),
        "elsewhere": ca.issue("elsewhere", "DNS:elsewhere.invalid"),
    }


def _tls_config(cert: Any) -> dict[str, Any]:
    return {"tls": {"cert_file": str(cert.cert_file), "key_file": str(cert.key_file)}}


def _trusting(ca: CertificateAuthority) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca.cert_file))


async def _refused(
    error: type[Exception], url: str, **options: Any
) -> tuple[pytest.ExceptionInfo[Exception], float]:
    """Connect, expecting ``error`` within PROMPT seconds; return it and the time taken."""
    started = time.monotonic()
    with pytest.raises(error) as info:
        await asyncio.wait_for(_connect_and_close(url, options), PROMPT)
    return info, time.monotonic() - started


async def _connect_and_close(url: str, options: dict[str, Any]) -> None:
    js = await aiojetstream.connect(url, **options)
    await js.close()


async def test_tls_url_to_a_plaintext_server_sends_nothing(nats_server: NatsServer) -> None:
    async with WireCapture(nats_server.port) as proxy:
        url = f"tls://alice:s3cret@{HOST}:{proxy.port}"
        info, took = await _refused(TLSError, url)
        assert "does not offer TLS" in str(info.value)
        assert took < PROMPT
        # Nothing went out: no CONNECT, so no credentials in the clear.
        assert proxy.connections >= 1
        assert proxy.raw() == b""
        assert "s3cret" not in str(info.value)


@pytest.mark.parametrize("option", ["tls", "tls_hostname"])
async def test_a_tls_option_with_a_nats_url_to_a_plaintext_server_sends_nothing(
    nats_server: NatsServer, option: str
) -> None:
    """A TLS option means TLS whatever the URL's scheme (nats.go's Secure(), RootCAs())."""
    value = ssl.create_default_context() if option == "tls" else HOST
    async with WireCapture(nats_server.port) as proxy:
        url = f"nats://{HOST}:{proxy.port}"
        info, took = await _refused(
            TLSError, url, user="alice", password="s3cret", **{option: value}
        )
        assert "does not offer TLS but a TLS option was given" in str(info.value)
        assert took < PROMPT
        # Nothing went out: no CONNECT, so no credentials in the clear.
        assert proxy.connections >= 1
        assert proxy.raw() == b""
        assert "s3cret" not in str(info.value)


def _over_tls(js: JetStreamContext) -> bool:
    transport = _conn._asyncio_transport(js.nc)
    return transport is not None and "SSL" in type(transport).__name__


async def test_a_server_that_offers_tls_without_requiring_it_is_upgraded(
    certificates: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``allow_non_tls``: INFO says ``tls_available``, not ``tls_required``.

    A ``tls://`` URL or a TLS option upgrades (as nats.go does when TLS is
    wanted and available); with neither, the connection stays plaintext, as
    the server allows.
    """
    ca = certificates["ca"]
    config = {
        **_tls_config(certificates["good"]),
        "allow_non_tls": True,
        "authorization": {"user": "alice", "password": "s3cret"},
    }
    # The default context of a bare tls:// URL trusts the test CA.
    monkeypatch.setenv("SSL_CERT_FILE", str(ca.cert_file))
    async with (
        NatsServer(jetstream=False, config=config) as server,
        WireCapture(server.port, strict=False) as proxy,
    ):
        for url, options in (
            (f"tls://{HOST}:{proxy.port}", {}),
            (f"tls://{HOST}:{proxy.port}", {"tls": _trusting(ca)}),
            (f"nats://{HOST}:{proxy.port}", {"tls": _trusting(ca)}),
            (f"nats://{HOST}:{proxy.port}", {"tls_hostname": HOST}),
        ):
            js = await asyncio.wait_for(
                aiojetstream.connect(url, user="alice", password="s3cret", **options), PROMPT
            )
            try:
                await js.nc.flush()
                assert _over_tls(js), (url, options)
            finally:
                await js.close()
        assert proxy.connections == 4
        assert b"CONNECT" not in proxy.raw()
        assert b"s3cret" not in proxy.raw()
        # Control: without tls:// or a TLS option, nats-py's own rule (plaintext here).
        js = await aiojetstream.connect(
            f"nats://{HOST}:{proxy.port}", user="alice", password="s3cret"
        )
        try:
            await js.nc.flush()
            assert not _over_tls(js)
        finally:
            await js.close()
        assert b"CONNECT" in proxy.raw()


async def test_a_tls_option_holds_for_a_discovered_server_on_reconnect(
    certificates: dict[str, Any],
) -> None:
    """A plaintext cluster member learnt from INFO is refused on reconnect, before CONNECT.

    The client is given only the TLS node's ``nats://`` URL and a TLS option;
    the plaintext node advertises the capture proxy in front of it.
    """
    routes = [free_port(), free_port()]
    plain_port = free_port()
    name = unique_name("C")

    def cluster(index: int) -> dict[str, Any]:
        return {
            "name": name,
            "listen": f"{HOST}:{routes[index]}",
            "routes": [f"nats-route://{HOST}:{routes[1 - index]}"],
        }

    async with WireCapture(plain_port) as proxy:
        plain = NatsServer(
            jetstream=False,
            port=plain_port,
            server_name="plain",
            config={
                "cluster": cluster(1),
                "client_advertise": f"{HOST}:{proxy.port}",
            },
        )
        secure = NatsServer(
            jetstream=False,
            server_name="secure",
            config={**_tls_config(certificates["good"]), "cluster": cluster(0)},
        )
        loop = asyncio.get_running_loop()
        refused: asyncio.Future[Exception] = loop.create_future()
        reconnected: asyncio.Future[None] = loop.create_future()

        async def error_cb(exc: Exception) -> None:
            if isinstance(exc, nats.errors.SecureConnRequiredError) and not refused.done():
                refused.set_result(exc)

        async def reconnected_cb() -> None:
            if not reconnected.done():
                reconnected.set_result(None)

        async with plain, secure:
            js = await aiojetstream.connect(
                f"nats://{HOST}:{secure.port}",
                tls=_trusting(certificates["ca"]),
                user="alice",
                password="s3cret",
                error_cb=error_cb,
                reconnected_cb=reconnected_cb,
                reconnect_time_wait=0.1,
            )
            try:
                assert _over_tls(js)
                await wait_until(
                    lambda: any(u.port == proxy.port for u in js.nc.discovered_servers),
                    timeout=10,
                )
                await secure.stop()
                either: list[asyncio.Future[Any]] = [refused, reconnected]
                done, _ = await asyncio.wait(
                    either, timeout=10, return_when=asyncio.FIRST_COMPLETED
                )
                assert refused in done, "reconnected to the plaintext server"
                assert f"{HOST}:{proxy.port} does not offer TLS" in str(refused.result())
                assert proxy.connections >= 1
                assert proxy.raw() == b""  # no CONNECT: no credentials in the clear
            finally:
                await js.close()


async def test_untrusted_certificate_is_a_prompt_tls_error(certificates: dict[str, Any]) -> None:
    async with (
        NatsServer(jetstream=False, config=_tls_config(certificates["good"])) as server,
        WireCapture(server.port, strict=False) as proxy,
    ):
        tls_url = f"tls://{HOST}:{proxy.port}"
        info, took = await _refused(TLSError, tls_url)
        assert "certificate verify failed" in str(info.value)
        # A nats:// URL to a server that requires TLS upgrades, and verifies, too.
        info, _ = await _refused(TLSError, f"nats://{HOST}:{proxy.port}")
        assert "certificate verify failed" in str(info.value)
        assert took < PROMPT
        assert proxy.connections == 2  # once each: a failed handshake is not retried
        # Control: the same server with the CA trusted.
        js = await aiojetstream.connect(tls_url, tls=_trusting(certificates["ca"]))
        await js.nc.flush()
        assert js.nc.is_connected
        await js.close()


async def test_hostname_mismatch_is_a_prompt_tls_error(certificates: dict[str, Any]) -> None:
    ca = certificates["ca"]
    async with NatsServer(jetstream=False, config=_tls_config(certificates["elsewhere"])) as server:
        info, took = await _refused(TLSError, f"tls://{HOST}:{server.port}", tls=_trusting(ca))
        assert "mismatch" in str(info.value)
        assert took < PROMPT
        # Control: the certificate is otherwise fine for the name it carries.
        js = await aiojetstream.connect(
            f"tls://{HOST}:{server.port}", tls=_trusting(ca), tls_hostname="elsewhere.invalid"
        )
        await js.nc.flush()
        await js.close()


async def test_jetstream_over_tls(certificates: dict[str, Any]) -> None:
    async with NatsServer(config=_tls_config(certificates["good"])) as server:
        js = await aiojetstream.connect(
            f"tls://{HOST}:{server.port}", tls=_trusting(certificates["ca"])
        )
        try:
            name = unique_name("TLS")
            await js.create_stream(StreamConfig(name=name, subjects=[f"{name.lower()}.>"]))
            ack = await js.publish(f"{name.lower()}.a", b"secret")
            assert ack.seq == 1
            msg = await (await js.stream(name)).get_msg(1)
            assert msg.data == b"secret"
            # The router reads the TLS transport's bytes where they arrive, as over TCP.
            router = _conn._ROUTERS[js.nc]
            transport = _conn._asyncio_transport(js.nc)
            assert transport is not None
            assert "SSL" in type(transport).__name__
            assert router._reads is not None
            assert transport.get_protocol() is router._reads
        finally:
            await js.close()


async def test_closing_a_tls_client_while_it_reconnects(certificates: dict[str, Any]) -> None:
    """The server went away (TLS close_notify): closing the client still closes it.

    A client that only published asynchronously gives its transport protocol
    back when closing; the TLS transport, closed twice by then, has none.
    """
    server = NatsServer(config=_tls_config(certificates["good"]))
    await server.start()
    url = f"tls://{HOST}:{server.port}"
    try:
        admin = await aiojetstream.connect(url, tls=_trusting(certificates["ca"]))
        name = unique_name("TLSC")
        await admin.create_stream(StreamConfig(name=name, subjects=[f"{name.lower()}.>"]))
        await admin.close()
        js = await aiojetstream.connect(
            url, tls=_trusting(certificates["ca"]), reconnect_time_wait=5
        )
        for _ in range(3):
            await (await js.publish_async(f"{name.lower()}.a", b"x"))
        assert _conn._REQUESTS.get(js.nc) is None, "no request: the router can be released"
    finally:
        await server.stop()
    await wait_until(lambda: js.nc.is_reconnecting, timeout=10)
    await js.close()
    assert js.nc.is_closed


# --------------------------------------------------------------------------- G2: credentials


@dataclass
class Scheme:
    """A way to authenticate: the server's settings, good and bad client options."""

    server: dict[str, Any]
    good: dict[str, Any]
    bad: list[dict[str, Any]]
    secrets: list[str]


def _user_password(tmp: Path) -> Scheme:
    return Scheme(
        {"authorization": {"user": "alice", "password": "s3cret-pw"}},
        {"user": "alice", "password": "s3cret-pw"},
        [
            {"user": "alice", "password": "wrong-pw"},
            {"user": "mallory", "password": "s3cret-pw"},
            {},
        ],
        ["s3cret-pw", "wrong-pw"],
    )


def _token(tmp: Path) -> Scheme:
    return Scheme(
        {"authorization": {"token": "t0ken-s3cret"}},
        {"token": "t0ken-s3cret"},
        [{"token": "t0ken-wrong"}, {}],
        ["t0ken-s3cret", "t0ken-wrong"],
    )


def _nkey(tmp: Path) -> Scheme:
    user = new_nkey(nkeys.PREFIX_BYTE_USER)
    stranger = new_nkey(nkeys.PREFIX_BYTE_USER)
    seed_file = tmp / "user.nk"
    seed_file.write_text(seed_text(user))
    stranger_file = tmp / "stranger.nk"
    stranger_file.write_text(seed_text(stranger))
    return Scheme(
        {"authorization": {"users": [{"nkey": public_key(user)}]}},
        {"nkeys_seed": str(seed_file)},
        [{"nkeys_seed": str(stranger_file)}, {"nkeys_seed_str": seed_text(stranger)}, {}],
        [seed_text(user), seed_text(stranger)],
    )


def _creds(tmp: Path) -> Scheme:
    operator = Operator(tmp)
    forged = operator.user_creds("mallory", signer=new_nkey(nkeys.PREFIX_BYTE_ACCOUNT))
    expired = operator.user_creds("bob", expires=int(time.time()) - 3600)
    return Scheme(
        operator.server_config(),
        {"user_credentials": str(operator.user_creds("alice"))},
        [{"user_credentials": str(forged)}, {"user_credentials": str(expired)}, {}],
        [],
    )


SCHEMES: dict[str, Callable[[Path], Scheme]] = {
    "user_password": _user_password,
    "token": _token,
    "nkey": _nkey,
    "creds": _creds,
}


@pytest.mark.parametrize("scheme_name", list(SCHEMES))
async def test_credentials(scheme_name: str, tmp_path: Path) -> None:
    scheme = SCHEMES[scheme_name](tmp_path)
    async with (
        NatsServer(config=scheme.server) as server,
        WireCapture(server.port, strict=False) as proxy,
    ):
        js = await aiojetstream.connect(proxy.url, **scheme.good)
        try:
            name = unique_name("AUTH")
            await js.create_stream(StreamConfig(name=name, subjects=[f"{name.lower()}.>"]))
            assert (await js.publish(f"{name.lower()}.a", b"x")).seq == 1
            await js.delete_stream(name)
        finally:
            await js.close()
        for bad in scheme.bad:
            before = proxy.connections
            info, took = await _refused(AuthorizationError, proxy.url, **bad)
            assert took < PROMPT
            # Bounded: each server is tried at most CONNECT_ATTEMPTS times, then it stops.
            assert 1 <= proxy.connections - before <= CONNECT_ATTEMPTS
            assert "Authorization Violation" in str(info.value)
            for secret in scheme.secrets:
                assert secret not in str(info.value)


async def test_credentials_in_the_url_stay_out_of_errors(nats_server: NatsServer) -> None:
    """A refused URL with user:password is reported without them."""
    async with NatsServer(
        config={"authorization": {"user": "alice", "password": "pw-1"}}
    ) as server:
        info, _ = await _refused(AuthorizationError, f"nats://alice:not-pw-1@{HOST}:{server.port}")
        assert "not-pw-1" not in str(info.value)
        assert "***@" in str(info.value)
        js = await aiojetstream.connect(f"nats://alice:pw-1@{HOST}:{server.port}")
        await js.close()


# --------------------------------------------------------------------------- G2: malformed .creds

#: Connects with each .creds file given, printing one JSON line per file: [path, error, text].
_TRY_CREDS = """
import asyncio, json, sys
import aiojetstream

async def main():
    for path in sys.argv[2:]:
        try:
            js = await aiojetstream.connect(sys.argv[1], user_credentials=path)
        except Exception as exc:
            print(json.dumps([path, type(exc).__name__, str(exc)]), flush=True)
        else:
            await js.close()
            print(json.dumps([path, None, ""]), flush=True)

asyncio.run(main())
"""

#: How long the subprocess may take for all its files (a loaded machine: imports, servers).
_CREDS_BOUND = 60.0


@pytest.mark.parametrize("auth", ["nkey", "jwt"])
async def test_a_malformed_creds_file_fails_at_once(auth: str, tmp_path: Path) -> None:
    """A .creds file that is none fails with ``InvalidOptionError`` naming it, quoting nothing.

    nats-py reads the file only when the server sends a nonce (nkey or JWT
    auth), in the event loop: without a ``BEGIN NATS USER JWT`` line it spun
    forever (100 % CPU; no timeout ends a loop that never awaits), otherwise a
    bare ``TypeError``; a missing file came out as a ``ConnectionFailedError``.
    In a subprocess with a bound, so that a regression fails here rather than
    hanging the run.
    """
    user = new_nkey(nkeys.PREFIX_BYTE_USER)
    seed = seed_text(user)
    operator = Operator(tmp_path)
    good = operator.user_creds("alice")
    if auth == "nkey":
        config: dict[str, Any] = {"authorization": {"users": [{"nkey": public_key(user)}]}}
    else:
        config = operator.server_config()
    texts = {
        "empty": "",
        "seed": seed + "\n",
        "seedonly": f"-----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n",
        "jwtonly": good.read_text().split("*" * 25)[0],
    }
    files = []
    for name, text in texts.items():
        files.append(tmp_path / f"bad-{name}.creds")
        files[-1].write_text(text)
    files.append(tmp_path / "missing.creds")
    async with NatsServer(config=config) as server:
        run = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-c", _TRY_CREDS, server.url, *map(str, files), str(good)],
            capture_output=True,
            text=True,
            timeout=_CREDS_BOUND,
            env={**os.environ, "PYTHONPATH": str(Path(aiojetstream.__file__).parents[1])},
        )
    assert run.returncode == 0, run.stderr
    results = [json.loads(line) for line in run.stdout.splitlines()]
    assert [path for path, _, _ in results] == [*map(str, files), str(good)]
    for path, error, text in results[:-1]:
        assert error == "InvalidOptionError", (path, error, text)
        assert text.startswith(f".creds file {path!r}")
        assert "cannot be read" in text if path.endswith("missing.creds") else "it " in text
        assert seed not in text
        assert seed[:20] not in text
    # The control: a good file, on the JWT server (the nkey server knows no such user).
    assert results[-1][1] == (None if auth == "jwt" else "AuthorizationError"), results[-1]


#: Connects with a good .creds file, then replaces it with one without a JWT line and
#: restarts the server: the reconnects must fail (reported), not spin in the event loop;
#: with the good file back the client reconnects. Prints one JSON line.
_CREDS_GONE_BAD = """
import asyncio, json, sys
import aiojetstream
from aiojetstream.testing import NatsServer

async def main():
    config, path, bad = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
    good = open(path).read()
    errors, reconnected = [], asyncio.Event()
    refused = asyncio.Event()

    async def error_cb(exc):
        errors.append(str(exc))
        if ".creds file" in str(exc):
            refused.set()

    async def reconnected_cb():
        reconnected.set()

    async with NatsServer(config=config) as server:
        js = await aiojetstream.connect(
            server.url, user_credentials=path, error_cb=error_cb,
            reconnected_cb=reconnected_cb, reconnect_time_wait=0.2,
        )
        open(path, "w").write(bad)
        await server.restart()
        await asyncio.wait_for(refused.wait(), 30)
        open(path, "w").write(good)
        await asyncio.wait_for(reconnected.wait(), 30)
        await js.create_stream(aiojetstream.StreamConfig(name="GONEBAD", subjects=["gonebad"]))
        seq = (await js.publish("gonebad", b"x")).seq
        await js.close()
    print(json.dumps({"errors": errors, "seq": seq}), flush=True)

asyncio.run(main())
"""


async def test_a_creds_file_gone_bad_fails_the_reconnect_without_hanging(tmp_path: Path) -> None:
    """nats-py re-reads ``user_credentials`` on every reconnect, in the event loop.

    A file replaced by one without a JWT line while connected made the next
    reconnect spin for ever (the whole event loop stuck at 100 % CPU). Each
    attempt now reads the file first: it fails, saying why (to ``error_cb``),
    and the client reconnects once the file is good again. In a subprocess
    with a bound, so that a regression fails here rather than hanging the run.
    """
    operator = Operator(tmp_path)
    path = operator.user_creds("alice")
    seed = path.read_text().split("*" * 25)[-1]
    bad = "".join(line + "\n" for line in path.read_text().splitlines() if "JWT" not in line)
    run = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "-c",
            _CREDS_GONE_BAD,
            json.dumps(operator.server_config()),
            str(path),
            bad,
        ],
        capture_output=True,
        text=True,
        timeout=_CREDS_BOUND,
        env={**os.environ, "PYTHONPATH": str(Path(aiojetstream.__file__).parents[1])},
    )
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["seq"] == 1
    gone_bad = [e for e in result["errors"] if ".creds file" in e]
    assert gone_bad, result["errors"]
    assert f".creds file {str(path)!r}: it has no" in gone_bad[0]
    assert all(seed.strip()[:20] not in e for e in result["errors"])


async def test_an_nkey_seed_file_gone_fails_the_reconnect_saying_so(tmp_path: Path) -> None:
    """nats-py reads ``nkeys_seed`` again on every reconnect: a file gone was reported
    as "the signature_cb given failed", a callback the user never gave."""
    user = new_nkey(nkeys.PREFIX_BYTE_USER)
    seed = tmp_path / "user.nk"
    seed.write_text(seed_text(user))
    errors: list[BaseException] = []
    told = asyncio.Event()

    async def error_cb(exc: BaseException) -> None:
        errors.append(exc)
        if "user.nk" in str(exc):
            told.set()

    config = {"authorization": {"users": [{"nkey": public_key(user)}]}}
    async with NatsServer(config=config) as server:
        js = await aiojetstream.connect(
            server.url, nkeys_seed=str(seed), error_cb=error_cb, reconnect_time_wait=0.2
        )
        try:
            seed.unlink()
            await server.restart()
            await asyncio.wait_for(told.wait(), 20)
        finally:
            await js.close()
    text = next(str(e) for e in errors if "user.nk" in str(e))
    assert text.startswith(f"NKey seed file {str(seed)!r} cannot be read"), text
    assert not any("given" in str(e) for e in errors), errors
    assert all(seed_text(user)[:20] not in str(e) for e in errors)


async def test_a_malformed_nkey_seed_is_an_invalid_option(tmp_path: Path) -> None:
    """A mistyped ``nkeys_seed_str`` or an ``nkeys_seed`` file without a seed escaped
    ``connect`` as an untyped ``nkeys.ErrInvalidSeed``: now ``InvalidOptionError``
    before connecting, quoting no seed."""
    user = new_nkey(nkeys.PREFIX_BYTE_USER)
    good = seed_text(user)
    # One character in the middle: the last one also carries two padding bits, and
    # a typo there may decode to the same seed (B, C or D for A: 3 keys in 32).
    middle = len(good) // 2
    mistyped = good[:middle] + ("A" if good[middle] != "A" else "B") + good[middle + 1 :]
    garbage = tmp_path / "user.nk"
    garbage.write_text("not a seed at all\n")
    config = {"authorization": {"users": [{"nkey": public_key(user)}]}}
    async with NatsServer(config=config) as server:
        cases: list[dict[str, Any]] = [
            {"nkeys_seed_str": mistyped},
            {"nkeys_seed_str": good[:20]},
            {"nkeys_seed": str(garbage)},
        ]
        for options in cases:
            with pytest.raises(InvalidOptionError) as info:
                await asyncio.wait_for(aiojetstream.connect(server.url, **options), PROMPT)
            text = str(info.value)
            assert "NKey user seed" in text, text
            assert good[:20] not in text
            assert mistyped[-20:] not in text
        js = await aiojetstream.connect(server.url, nkeys_seed_str=good)
        await js.close()


async def test_an_inbox_prefix_that_would_break_the_sub_line_is_refused(
    nats_server: NatsServer,
) -> None:
    """``inbox_prefix`` starts every reply subject and the ``SUB`` of the reply inbox:
    whitespace (``SUB a b.<id>.* 1``), a wildcard or an empty token is refused before
    anything is sent; a trailing ``.`` is dropped."""
    async with WireCapture(nats_server.port, strict=False) as proxy:
        for bad in ("a b", "_INBOX\r\nPUB x 1", "_INBOX.*", "a.>", "a..b", "", b"\xff", 7):
            with pytest.raises(InvalidSubjectError, match="inbox_prefix"):
                await aiojetstream.connect(proxy.url, inbox_prefix=bad)
        assert proxy.connections == 0
        js = await aiojetstream.connect(proxy.url, inbox_prefix="_INBOX_x.")
        try:
            assert js.nc.new_inbox().startswith("_INBOX_x.")
            await js.account_info()  # a request: its reply comes under the prefix
        finally:
            await js.close()


async def test_a_signing_callback_that_raises_is_named_not_taken_for_a_bad_info(
    tmp_path: Path,
) -> None:
    """A ``signature_cb`` raising ``TypeError`` was reported as "an invalid INFO"."""

    def signature_cb(nonce: str) -> bytes:
        raise TypeError("the signer is broken")

    operator = Operator(tmp_path)
    async with NatsServer(config=operator.server_config()) as server:
        with pytest.raises(ConnectionFailedError) as failed:
            await aiojetstream.connect(
                server.url, signature_cb=signature_cb, user_jwt_cb=lambda: b"x.y.z"
            )
    text = str(failed.value)
    assert "the signature_cb given failed (TypeError: the signer is broken)" in text
    assert "INFO" not in text
    assert "(tried twice)" in text


# --------------------------------------------------------------------------- docs/security.md

SECURITY_PAGE = DOCS / "security.md"


async def test_security_page_blocks() -> None:
    """Every block of docs/security.md compiles; those of its first section run in order.

    The TLS and credentials examples name files and hosts of their own (the
    tests above do the same against real servers), so they are compiled only.
    """
    text = SECURITY_PAGE.read_text(encoding="utf-8")
    blocks = python_blocks(text)
    for index, src in enumerate(blocks, 1):
        compile(src, f"security.md block {index}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    runnable = python_blocks(text[: text.index("\n## TLS\n")])
    assert len(runnable) >= 2
    async with fresh_js() as js:
        namespace: dict[str, Any] = {
            "__name__": "security_doc",
            "js": js,
            "aiojetstream": aiojetstream,
        }
        for index, src in enumerate(runnable, 1):
            await asyncio.wait_for(
                run_block(src, index, namespace, SECURITY_PAGE.name), BLOCK_TIMEOUT
            )


async def test_spark_tls_options_refuse_a_plaintext_server(
    nats_server: NatsServer, certificates: dict[str, Any]
) -> None:
    """``tlsCaFile`` with a ``nats://`` URL: the Spark source dials ``tls://``.

    nats-py upgrades a ``nats://`` connection only when the server asks for TLS;
    a plaintext server (or a man in the middle) would get the token in clear.
    """
    from aiojetstream.spark._options import parse_source_options
    from aiojetstream.spark._runtime import Session

    ca_file = str(certificates["ca"].cert_file)
    async with WireCapture(nats_server.port) as proxy:
        options = {"stream": "S", "tlsCaFile": ca_file, "token": "s3cret"}
        opts = parse_source_options(
            {**options, "servers": f"nats://{HOST}:{proxy.port}"}, streaming=False
        )
        with pytest.raises(ConnectionClosedError, match="TLS"):
            await asyncio.to_thread(Session, opts.connect)
        assert proxy.connections >= 1
        assert proxy.raw() == b""  # no CONNECT: the token never left
    # Control: a server with TLS, reached through the same kind of nats:// URL.
    async with NatsServer(config=_tls_config(certificates["good"])) as server:
        opts = parse_source_options(
            {"stream": "S", "tlsCaFile": ca_file, "servers": f"nats://{HOST}:{server.port}"},
            streaming=False,
        )
        session = await asyncio.to_thread(Session, opts.connect)
        try:
            assert session.js.nc.is_connected
        finally:
            await asyncio.to_thread(session.close)
