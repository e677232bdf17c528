"""Acks and pulls on the fast path: queued, then written promptly in one write.

A consumer loop that hands out buffered messages never yields to the event
loop, so nats-py's flusher task does not run meanwhile; acks are written at
once when ``ACK_WRITE_BYTES`` are queued, together with whatever was queued
before them, in order; ``Conn.write_queued`` writes the queue at once (after a
pull request). Driven against an unconnected nats-py client whose transport
records the writes.
"""

from __future__ import annotations

import asyncio

import pytest
from nats.aio.client import Client as NatsClient
from nats.aio.transport import TcpTransport

from aiojetstream import _conn
from aiojetstream._errors import ConnectionClosedError, DisconnectedError

REPLY = b"$JS.ACK.ORDERS.worker.1.42.7.1700000000123456789.3"
ACK_CMD = b"PUB " + REPLY + b" 4\r\n+ACK\r\n"


class RecordingTransport(TcpTransport):
    """nats-py's TCP transport (written to directly), recording the writes."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.writes: list[bytes] = []

    def writelines(self, payload: list[bytes]) -> None:
        self.writes.append(b"".join(payload))


class OtherTransport:
    """Not the TCP transport (as nats-py's websocket one, which sends in drain())."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def writelines(self, payload: list[bytes]) -> None:
        self.writes.append(b"".join(payload))


def connected(
    transport: RecordingTransport | OtherTransport | None = None,
) -> tuple[_conn.Conn, NatsClient, RecordingTransport | OtherTransport]:
    nc = NatsClient()
    transport = transport or RecordingTransport()
    nc._status = NatsClient.CONNECTED
    nc._transport = transport  # type: ignore[assignment]
    nc._flush_queue = asyncio.Queue()
    conn = _conn.Conn.__new__(_conn.Conn)
    conn.nc = nc
    conn.fast = True
    conn.loop = None  # (as Conn.__init__ outside a loop: unknown)
    return conn, nc, transport


async def test_an_ack_is_queued_and_wakes_the_flusher_once() -> None:
    conn, nc, transport = connected()
    conn.ack_nowait(REPLY, b"+ACK")
    conn.ack_nowait(REPLY, b"-NAK")
    assert nc._pending == [ACK_CMD, b"PUB " + REPLY + b" 4\r\n-NAK\r\n"]
    assert nc._pending_data_size == 2 * len(ACK_CMD)
    assert nc._flush_queue is not None
    assert nc._flush_queue.qsize() == 1
    assert transport.writes == []
    assert nc.stats["out_msgs"] == 2
    assert nc.stats["out_bytes"] == 8


async def test_other_payloads_are_framed_too() -> None:
    conn, nc, _ = connected()
    conn.ack_nowait(REPLY, b'-NAK {"delay": 5}')
    conn.ack_nowait(REPLY, b"+TERM why")
    assert nc._pending == [
        b"PUB " + REPLY + b' 17\r\n-NAK {"delay": 5}\r\n',
        b"PUB " + REPLY + b" 9\r\n+TERM why\r\n",
    ]


async def test_acks_are_written_at_once_when_enough_are_queued() -> None:
    conn, nc, transport = connected()
    nc._pending.append(b"PUB earlier 1\r\nx\r\n")  # queued before: written first
    nc._pending_data_size += 18
    count = 0
    while not transport.writes:
        conn.ack_nowait(REPLY, b"+ACK")
        count += 1
    assert count == -(-(_conn.ACK_WRITE_BYTES - 18) // len(ACK_CMD))
    assert transport.writes == [b"PUB earlier 1\r\nx\r\n" + ACK_CMD * count]
    assert nc._pending == []
    assert nc._pending_data_size == 0
    conn.ack_nowait(REPLY, b"+ACK")  # the next batch starts over
    assert nc._pending == [ACK_CMD]
    assert len(transport.writes) == 1


@pytest.mark.parametrize("status", [NatsClient.RECONNECTING, NatsClient.CONNECTING])
async def test_while_disconnected_acks_wait_in_the_reconnect_buffer(status: int) -> None:
    conn, nc, transport = connected()
    nc._status = status
    nc._max_pending_size = 4 * _conn.ACK_WRITE_BYTES
    for _ in range(2 * _conn.ACK_WRITE_BYTES // len(ACK_CMD)):
        conn.ack_nowait(REPLY, b"+ACK")
    assert transport.writes == []
    assert nc._pending_data_size >= 2 * _conn.ACK_WRITE_BYTES - len(ACK_CMD)


async def test_a_full_reconnect_buffer_refuses_the_ack() -> None:
    conn, nc, _ = connected()
    nc._status = NatsClient.RECONNECTING
    nc._max_pending_size = len(ACK_CMD)
    conn.ack_nowait(REPLY, b"+ACK")
    with pytest.raises(DisconnectedError):
        conn.ack_nowait(REPLY, b"+ACK")


async def test_a_closed_connection_refuses_the_ack() -> None:
    conn, nc, transport = connected()
    nc._status = NatsClient.CLOSED
    with pytest.raises(ConnectionClosedError):
        conn.ack_nowait(REPLY, b"+ACK")
    assert nc._pending == []
    assert transport.writes == []


async def test_write_queued_writes_everything_in_order_at_once() -> None:
    conn, nc, transport = connected()
    conn.ack_nowait(REPLY, b"+ACK")
    conn.publish_nowait(b"$JS.API.CONSUMER.MSG.NEXT.S.C", b'{"batch":5}', b"_INBOX.x")
    conn.write_queued()
    assert transport.writes == [
        ACK_CMD + b'PUB $JS.API.CONSUMER.MSG.NEXT.S.C _INBOX.x 11\r\n{"batch":5}\r\n'
    ]
    assert nc._pending == []
    assert nc._pending_data_size == 0
    conn.write_queued()  # nothing queued: nothing written
    assert len(transport.writes) == 1


PULL = b'PUB $JS.API.CONSUMER.MSG.NEXT.S.C _INBOX.x 11\r\n{"batch":5}\r\n'


async def test_publish_now_writes_the_queue_and_the_pull_without_waking_the_flusher() -> None:
    conn, nc, transport = connected()
    conn.ack_nowait(REPLY, b"+ACK")
    assert nc._flush_queue is not None
    while not nc._flush_queue.empty():  # the ack's wake-up (the flusher would take it)
        nc._flush_queue.get_nowait()
    out_msgs = nc.stats["out_msgs"]
    conn.publish_now(b"$JS.API.CONSUMER.MSG.NEXT.S.C", b'{"batch":5}', b"_INBOX.x")
    assert transport.writes == [ACK_CMD + PULL]
    assert nc._pending == []
    assert nc._pending_data_size == 0
    assert nc._flush_queue.empty()
    assert nc.stats["out_msgs"] == out_msgs + 1
    conn.publish_now(b"$JS.API.CONSUMER.MSG.NEXT.S.C", b'{"batch":5}', b"_INBOX.x")
    assert transport.writes == [ACK_CMD + PULL, PULL]
    assert nc._flush_queue.empty()


@pytest.mark.parametrize("status", [NatsClient.RECONNECTING, NatsClient.CLOSED])
async def test_publish_now_queues_or_refuses_when_it_can_not_write(status: int) -> None:
    conn, nc, transport = connected()
    nc._status = status
    nc._max_pending_size = 1024
    if status == NatsClient.CLOSED:
        with pytest.raises(ConnectionClosedError):
            conn.publish_now(b"$JS.API.CONSUMER.MSG.NEXT.S.C", b'{"batch":5}', b"_INBOX.x")
        assert nc._pending == []
    else:
        conn.publish_now(b"$JS.API.CONSUMER.MSG.NEXT.S.C", b'{"batch":5}', b"_INBOX.x")
        assert nc._pending == [PULL]  # the reconnect buffer
    assert transport.writes == []


async def test_publish_now_over_another_transport_wakes_the_flusher() -> None:
    other = OtherTransport()
    conn, nc, _ = connected(other)
    conn.publish_now(b"$JS.API.CONSUMER.MSG.NEXT.S.C", b'{"batch":5}', b"_INBOX.x")
    assert other.writes == []
    assert nc._pending == [PULL]
    assert nc._flush_queue is not None
    assert nc._flush_queue.qsize() == 1


async def test_write_queued_leaves_the_reconnect_buffer_alone() -> None:
    conn, nc, transport = connected()
    nc._status = NatsClient.RECONNECTING
    nc._max_pending_size = 1024
    conn.ack_nowait(REPLY, b"+ACK")
    conn.write_queued()
    assert transport.writes == []
    assert nc._pending == [ACK_CMD]


async def test_write_queued_does_nothing_on_the_fallback() -> None:
    conn, nc, transport = connected()
    nc._pending.append(ACK_CMD)
    conn.fast = False
    conn.write_queued()
    assert transport.writes == []
    assert nc._pending == [ACK_CMD]


async def test_other_transports_are_left_to_the_flusher() -> None:
    # nats-py's websocket transport sends what is written in its drain(): acks and
    # pulls stay queued for the flusher task, which is woken as usual.
    other = OtherTransport()
    conn, nc, _ = connected(other)
    for _ in range(2 * _conn.ACK_WRITE_BYTES // len(ACK_CMD)):
        conn.ack_nowait(REPLY, b"+ACK")
    conn.write_queued()
    assert other.writes == []
    assert len(nc._pending) == 2 * _conn.ACK_WRITE_BYTES // len(ACK_CMD)
    assert nc._flush_queue is not None
    assert nc._flush_queue.qsize() == 1
