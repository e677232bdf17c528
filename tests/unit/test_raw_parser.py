"""The raw router's MSG/HMSG fast path parses exactly what nats-py's parser parses.

Both run on unconnected nats-py clients fed the same bytes in arbitrary chunks:
routed sids must reach the raw handler, everything else nats-py's own
``_process_msg``, PING / PONG / INFO / +OK nats-py's handlers, in order.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nats.aio.client import Client as NatsClient
from nats.errors import ProtocolError

from aiojetstream import _conn

Event = tuple[Any, ...]

ROUTED = 7
INTERNAL = 9
OTHER = 3

STREAM = b"".join(
    [
        b"MSG orders.new 7 5\r\nhello\r\n",
        b"MSG orders.new 7 _INBOX.abc.1 0\r\n\r\n",
        b"HMSG orders.hdr 7 $JS.ACK.S.C.1.2.3.4.5 22 27\r\nNATS/1.0\r\nX-Key: v\r\n\r\nworld\r\n",
        b"HMSG orders.status 7 16 16\r\nNATS/1.0 408\r\n\r\n\r\n",
        b"PING\r\n",
        b"MSG not.ours 3 4\r\nabcd\r\n",
        b"MSG _INBOX.mux.4 9 2\r\n{}\r\n",
        b"+OK\r\n",
        b"MSG orders.bin 7 4\r\n\r\n\r\n\r\n",
        b"HMSG not.ours.h 3 reply.x 12 15\r\nNATS/1.0\r\n\r\nxyz\r\n",
        b'INFO {"server_id":"x","max_payload":1048576}\r\n',
        b"MSG  orders.spaces   7   reply.y   3\r\nabc\r\n",
        b"PONG\r\n",
        b"MSG orders.last 7 6\r\n123456\r\n",
    ]
)


def _client(events: list[Event]) -> NatsClient:
    nc = NatsClient()

    async def process_msg(sid: int, subject: bytes, reply: bytes, data: bytes, hdr: Any) -> None:
        events.append(("msg", sid, bytes(subject), bytes(reply), bytes(data), hdr or None))

    async def ping() -> None:
        events.append(("ping",))

    async def pong() -> None:
        events.append(("pong",))

    async def info(info: dict[str, Any], initial_connection: bool = False) -> None:
        events.append(("info", info["server_id"]))

    nc._process_msg = process_msg  # type: ignore[method-assign,assignment]
    nc._process_ping = ping  # type: ignore[method-assign]
    nc._process_pong = pong  # type: ignore[method-assign]
    nc._process_info = info  # type: ignore[method-assign]
    return nc


def _routed_client(events: list[Event]) -> tuple[NatsClient, _conn._Router]:
    nc = _client(events)
    router = _conn._Router(nc)
    assert router.ps is nc._ps, "the parser hook is installed"

    def handler(subject: bytes, reply: bytes, data: bytes, hdr: bytes | None) -> None:
        assert type(subject) is bytes
        assert type(data) is bytes
        events.append(("msg", ROUTED, subject, reply, data, hdr))

    def internal(subject: bytes, reply: bytes, data: bytes, hdr: bytes | None) -> None:
        events.append(("msg", INTERNAL, subject, reply, data, hdr))

    router.routes[ROUTED] = handler
    router.internal[INTERNAL] = internal
    return nc, router


async def _feed(nc: NatsClient, chunks: list[bytes]) -> None:
    for chunk in chunks:
        await nc._ps.parse(chunk)


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c for c in cuts if 0 < c < len(data)})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


async def _expected() -> list[Event]:
    events: list[Event] = []
    await _feed(_client(events), [STREAM])
    return events


async def test_whole_buffer_matches_nats_py() -> None:
    expected = await _expected()
    assert [e[0] for e in expected].count("msg") == 10
    events: list[Event] = []
    nc, _ = _routed_client(events)
    await _feed(nc, [STREAM])
    assert events == expected
    assert nc.stats["in_msgs"] == 8  # routed and internal ones (nats-py's own are not stubbed)


async def test_every_two_way_split_matches_nats_py() -> None:
    expected = await _expected()
    for cut in range(1, len(STREAM)):
        events: list[Event] = []
        nc, _ = _routed_client(events)
        await _feed(nc, _split(STREAM, [cut]))
        assert events == expected, f"split at {cut}"
        assert not nc._ps.buf


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=len(STREAM) - 1), max_size=40))
async def test_any_chunking_matches_nats_py(cuts: list[int]) -> None:
    expected = await _expected()
    events: list[Event] = []
    nc, _ = _routed_client(events)
    await _feed(nc, _split(STREAM, cuts))
    assert events == expected


async def test_byte_by_byte() -> None:
    events: list[Event] = []
    nc, _ = _routed_client(events)
    await _feed(nc, [STREAM[i : i + 1] for i in range(len(STREAM))])
    assert events == await _expected()


@pytest.mark.parametrize(
    "line",
    [
        b"MSG subj x 5\r\nhello\r\n",
        b"MSG subj 7 five\r\nhello\r\n",
        b"HMSG subj 7 a 5\r\nhello\r\n",
        # A header size past int()'s 4,300 digits: the router's scanner raised ValueError.
        b"HMSG subj %d " % ROUTED + b"9" * 5000 + b" 5\r\nhello\r\n",
    ],
)
async def test_malformed_msg_is_a_protocol_error(line: bytes) -> None:
    nc, _ = _routed_client([])
    with pytest.raises(ProtocolError):
        await nc._ps.parse(line)


async def test_restore_gives_the_parser_back() -> None:
    events: list[Event] = []
    nc, router = _routed_client(events)
    router.routes.clear()
    router.internal.clear()
    _conn._ROUTERS[nc] = router
    _conn._release_router(nc, router)
    assert "parse" not in vars(nc._ps)
    await _feed(nc, [STREAM])
    assert events == await _expected()


class _CountingBuffer(bytearray):
    """nats-py's read buffer, counting the bytes the router copies out of it."""

    copied = 0

    def __bytes__(self) -> bytes:
        _CountingBuffer.copied += len(self)
        return bytes(memoryview(self))


async def test_a_message_larger_than_a_read_is_copied_a_bounded_number_of_times() -> None:
    """A 4 MiB message arriving in 64 KiB reads: the router copied the whole buffer
    and parsed the control line again on every read (quadratic: ~128 MiB copied
    here, seconds for a 32 MiB message); it now waits until the payload is all in."""
    events: list[Event] = []
    nc, _ = _routed_client(events)
    nc._ps.buf = _CountingBuffer()
    payload = bytes(range(256)) * (4 * 1024 * 1024 // 256)
    data = b"MSG orders.big 7 %d\r\n%b\r\nMSG orders.next 7 2\r\nok\r\n" % (len(payload), payload)
    _CountingBuffer.copied = 0
    await _feed(nc, [data[i : i + 65536] for i in range(0, len(data), 65536)])
    assert [(e[2], len(e[4])) for e in events] == [
        (b"orders.big", len(payload)),
        (b"orders.next", 2),
    ]
    assert events[0][4] == payload
    assert _CountingBuffer.copied < 3 * len(data), _CountingBuffer.copied
