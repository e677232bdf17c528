"""Held publishes (``hold_when_full``) are resent one at a time, whatever order replies come in.

The publisher's held queue is driven here by hand-fed replies, so that a
first attempt's "stream full" refusal can arrive after another held
message's resend went out: an order a single real server does not produce on
demand (the integration tests in ``tests/integration/test_pulsar_admin.py``
cover the orders it does).
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiojetstream import ConnectionClosedError
from aiojetstream._publish import AsyncPublisher
from helpers import wait_until

FULL = b'{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"}}'
PREFIX = b"_INBOX.test."


class _NatsClient:
    is_draining_pubs = False


class FakeConn:
    """The part of Conn the publisher uses; records the reply token of every send."""

    fast = True

    def __init__(self) -> None:
        self.nc = _NatsClient()
        self.sent: list[bytes] = []
        self.loop = asyncio.get_running_loop()  # the connection's event loop

    def publish_nowait(self, subject: bytes, payload: bytes, reply: bytes, *args: Any) -> None:
        self.sent.append(reply.removeprefix(PREFIX))

    def on_own_loop(self) -> bool:
        return asyncio.get_running_loop() is self.loop


def started(conn: FakeConn, ack_timeout: float) -> AsyncPublisher:
    publisher = AsyncPublisher(conn, 100, ack_timeout)  # type: ignore[arg-type]
    publisher._started = True
    publisher._prefix = PREFIX
    publisher._prefix_len = len(PREFIX)
    return publisher


async def test_a_late_refusal_does_not_start_a_second_resend() -> None:
    conn = FakeConn()
    publisher = started(conn, ack_timeout=0.5)

    def refuse(token: bytes) -> None:
        publisher._on_reply(PREFIX + token, b"", FULL, None)

    a = publisher.send("s.a", b"A", None, None, hold=30)
    b = publisher.send("s.b", b"B", None, None, hold=30)
    assert conn.sent == [b"1", b"2"]  # both sent: nothing was held yet
    refuse(b"1")  # A is held and resent after the backoff
    await wait_until(lambda: len(conn.sent) == 3, timeout=5)
    assert conn.sent[2] == b"1"
    refuse(b"2")  # B's first refusal arrives while A's resend is out
    # A's resend gets no reply: after its ack timeout (0.5 s) A goes again, before
    # B (was: B was resent within the backoff, two resends in flight at once).
    await wait_until(lambda: len(conn.sent) == 4, timeout=5)
    assert conn.sent[3] == b"1"
    for fut in (a, b):
        fut.cancel()
    publisher._fail_all(ConnectionClosedError, "test over")  # its timers cancelled
