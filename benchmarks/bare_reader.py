"""A bare-socket JetStream reader: what the server delivers, with next to no client at all.

No nats-py and no aiojetstream: an ``asyncio.Protocol`` per connection writes
the NATS protocol by hand (``CONNECT``, ``SUB`` to an inbox, ``PUB`` of the
JSON API requests) and reads nothing but message boundaries. For each of
``consumers`` connections it creates an ``AckNone`` pull consumer on the
stream (memory storage, one replica, starting at its own sequence: the range
``[first, first + count)`` is cut into contiguous parts, as ``format("jetstream")``
cuts its partitions), then pulls (``$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>``
with ``batch`` and ``expires``; :data:`IN_FLIGHT` pulls of :data:`BATCH` messages
in flight) and counts ``MSG``/``HMSG`` frames that carry a reply subject (stored
messages; status frames have none) until its part is in. A pull that ends
short (a ``408``/``409`` status) is replaced. The payloads are never looked at.

The rate is ``count`` over the time from the first pull to the last message
(consumer creation and deletion are outside it). ``make bench`` uses it as
the ceiling of ``messages_vs_socket`` (one consumer) and
``spark_read_vs_server`` (as many consumers as Spark has partitions).

``python benchmarks/bare_reader.py --url nats://127.0.0.1:4222 --stream S --count N
[--consumers 2] [--first 1]``: the stream must hold the messages already.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
import uuid
from collections import deque
from typing import Any, Final

from bare_socket import BareConnection, host_port

#: Messages a pull asks for, and pulls in flight per consumer: the fastest tried here
#: (pulls of 500 to 50,000 messages, 2 or 4 in flight; larger pulls were slower).
BATCH = 1_000
IN_FLIGHT = 2
#: A pull's ``expires`` in nanoseconds (it never waits when the messages are there).
EXPIRES_NS: Final = 5_000_000_000
#: The consumers' ``inactive_threshold`` (an abandoned run cleans up after itself).
INACTIVE_NS: Final = 60_000_000_000
_API_SID: Final = b"1"
_MSG_SID: Final = b"2"


class _Reader(BareConnection):
    """One connection: API requests and replies on sid 1, the consumer's messages on sid 2."""

    def __init__(self) -> None:
        super().__init__()
        self.reply: asyncio.Future[bytes] | None = None
        self.done: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self.inbox = b"_BR." + uuid.uuid4().hex.encode()
        self.pull_subject = b""
        self.want = 0  # messages this connection must receive
        self.got = 0
        self.asked = 0  # messages asked for by pulls sent so far
        self.pulls: deque[list[int]] = deque()  # [size, received] of the pulls in flight

    # ---------------------------------------------------------------- protocol

    def subscriptions(self) -> bytes:
        return b"SUB " + self.inbox + b".api 1\r\nSUB " + self.inbox + b".msg 2\r\n"

    def futures(self) -> tuple[asyncio.Future[Any] | None, ...]:
        return (self.ready, self.reply, self.done)

    def data_received(self, data: bytes) -> None:
        buf = self.buffer + data if self.buffer else data
        pos = 0
        end = len(buf)
        counted = 0
        while pos < end:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                break
            head = buf[pos : pos + 4]
            if head == b"MSG " or head == b"HMSG":
                args = buf[pos:eol].split(b" ")
                stop = eol + 2 + int(args[-1])
                if stop + 2 > end:
                    break  # the payload is not all here yet
                sid = args[2]
                if sid == _MSG_SID:
                    # A stored message has a reply subject ($JS.ACK...); a status none.
                    if len(args) == (6 if head == b"HMSG" else 5):
                        counted += 1
                    else:
                        self._status(buf[eol + 2 : eol + 14])
                elif sid == _API_SID and self.reply is not None and not self.reply.done():
                    self.reply.set_result(buf[eol + 2 : stop])
                pos = stop + 2
                continue
            self.control(buf[pos:eol])
            pos = eol + 2
        self.buffer = buf[pos:]
        if counted:
            self._received(counted)

    # ---------------------------------------------------------------- pulls

    def _received(self, n: int) -> None:
        self.got += n
        pulls = self.pulls
        while n and pulls:
            pull = pulls[0]
            take = min(n, pull[0] - pull[1])
            pull[1] += take
            n -= take
            if pull[1] == pull[0]:
                pulls.popleft()
                self._pull()
        if self.got >= self.want and not self.done.done():
            self.done.set_result(time.perf_counter())

    def _status(self, head: bytes) -> None:
        # "NATS/1.0 408 ..." (the pull expired) or 409 (ended): it delivers no more.
        if head[9:12] in (b"408", b"409") and self.pulls:
            size, received = self.pulls.popleft()
            self.asked -= size - received
            self._pull()

    def _pull(self) -> None:
        """Send a pull for what is not asked for yet (at most :data:`BATCH`)."""
        size = min(BATCH, self.want - self.asked)
        if size <= 0:
            return
        body = b'{"batch":%d,"expires":%d}' % (size, EXPIRES_NS)
        assert self.transport is not None
        self.transport.write(
            b"PUB %b %b.msg %d\r\n%b\r\n" % (self.pull_subject, self.inbox, len(body), body)
        )
        self.asked += size
        self.pulls.append([size, 0])

    # ---------------------------------------------------------------- requests

    async def request(self, subject: str, body: dict[str, object]) -> bytes:
        """One JSON API request; its reply (raises on an ``"error"`` in it)."""
        assert self.transport is not None
        self.reply = asyncio.get_running_loop().create_future()
        payload = json.dumps(body).encode()
        self.transport.write(
            b"PUB %b %b.api %d\r\n%b\r\n" % (subject.encode(), self.inbox, len(payload), payload)
        )
        reply = await asyncio.wait_for(self.reply, 10)
        if b'"error"' in reply:
            raise RuntimeError(f"{subject}: {reply.decode(errors='replace')}")
        return reply

    def start(self, stream: str, consumer: str, want: int) -> None:
        """Pull ``want`` messages (two pulls in flight)."""
        self.pull_subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}".encode()
        self.want = want
        if want <= 0:
            self.done.set_result(time.perf_counter())
            return
        for _ in range(IN_FLIGHT):
            self._pull()


async def read(url: str, stream: str, count: int, consumers: int = 1, first: int = 1) -> float:
    """Messages a second that ``consumers`` AckNone consumers receive of ``[first, first + count)``.

    One connection a consumer, each consumer starting at its own part of the
    range; the clock runs from the first pull to the last message.
    """
    loop = asyncio.get_running_loop()
    host, port = host_port(url)
    conns: list[_Reader] = []
    names: list[str] = []
    try:
        for _ in range(consumers):
            _, conn = await loop.create_connection(_Reader, host, port)
            conns.append(conn)
            await asyncio.wait_for(conn.ready, 10)
        bounds = [first + count * i // consumers for i in range(consumers + 1)]
        for i, conn in enumerate(conns):
            name = f"bare_{uuid.uuid4().hex[:12]}"
            config = {
                "name": name,
                "ack_policy": "none",
                "deliver_policy": "by_start_sequence",
                "opt_start_seq": bounds[i],
                "mem_storage": True,
                "num_replicas": 1,
                "inactive_threshold": INACTIVE_NS,
            }
            await conn.request(
                f"$JS.API.CONSUMER.CREATE.{stream}.{name}",
                {"stream_name": stream, "config": config, "action": "create"},
            )
            names.append(name)
        start = time.perf_counter()
        for i, conn in enumerate(conns):
            conn.start(stream, names[i], bounds[i + 1] - bounds[i])
        ends = await asyncio.wait_for(asyncio.gather(*(c.done for c in conns)), 300)
        return count / (max(ends) - start)
    finally:
        for conn, name in zip(conns, names, strict=False):
            # (On failure the consumer's inactive threshold removes it.)
            with contextlib.suppress(RuntimeError, ConnectionError, TimeoutError):
                await conn.request(f"$JS.API.CONSUMER.DELETE.{stream}.{name}", {})
        for conn in conns:
            if conn.transport is not None:
                conn.transport.close()


def main() -> None:
    """Run one read and print its rate."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="nats://127.0.0.1:4222")
    parser.add_argument("--stream", required=True)
    parser.add_argument("--count", type=int, required=True, help="messages to read in all")
    parser.add_argument("--consumers", type=int, default=1)
    parser.add_argument("--first", type=int, default=1, help="the first stream sequence")
    args = parser.parse_args()
    rate = asyncio.run(read(args.url, args.stream, args.count, args.consumers, args.first))
    print(f"{rate:,.0f} msgs/s ({args.count:,} messages, {args.consumers} consumers)")


if __name__ == "__main__":
    main()
