"""A bare-socket JetStream publisher: what the server stores and acknowledges, with no client.

No nats-py and no aiojetstream: an ``asyncio.Protocol`` per connection writes
``CONNECT``, a ``SUB`` to its reply inbox and then ``PUB <subject> <inbox>``
commands of one ready-made payload, keeping ``window`` messages in flight (as
many as the library's publish window, ``publish_async_max_pending``): every
acknowledgement that comes back lets one more out. It counts the replies
(``{"stream":...,"seq":...}``) and looks into them only for ``"error"``; a
``HMSG`` reply (no responders) is an error too.

The rate is ``count`` over the time from the first ``PUB`` to the last
acknowledgement. ``make bench`` (``benchmarks/run.py``) uses it as the ceiling of
``publish_many_vs_socket`` (one connection) and ``spark_write_vs_server`` (one
connection a Spark partition, each with its own window, as each Spark task has).

``python benchmarks/bare_publisher.py --url nats://127.0.0.1:4222 --subject S --count N
[--window 4000] [--connections 1]``: a stream must capture the subject.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import time
import uuid
from typing import Any, Final

from bare_socket import BareConnection, host_port

PAYLOAD: Final = b"x" * 128
#: The library's default publish window (``publish_async_max_pending``; the
#: ``publish`` group, ``cases/publish.py``, checks it).
WINDOW: Final = 4000


class _Publisher(BareConnection):
    """One connection publishing ``count`` messages with ``window`` in flight."""

    def __init__(self, subject: str, count: int, window: int, payload: bytes) -> None:
        super().__init__()
        self.done: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        inbox = b"_BP." + uuid.uuid4().hex.encode()
        self.inbox = inbox
        self.command = b"PUB %b %b %d\r\n%b\r\n" % (subject.encode(), inbox, len(payload), payload)
        self.count = count
        self.window = window
        self.sent = 0
        self.acked = 0

    def subscriptions(self) -> bytes:
        return b"SUB " + self.inbox + b" 1\r\n"

    def futures(self) -> tuple[asyncio.Future[Any] | None, ...]:
        return (self.ready, self.done)

    def start(self) -> None:
        """Send the first window of messages."""
        if self.count <= 0:
            self.done.set_result(time.perf_counter())
            return
        self._send(min(self.window, self.count))

    def _send(self, n: int) -> None:
        assert self.transport is not None
        self.transport.write(self.command * n)
        self.sent += n

    def data_received(self, data: bytes) -> None:
        buf = self.buffer + data if self.buffer else data
        pos = 0
        end = len(buf)
        acks = 0
        while pos < end:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                break
            head = buf[pos : pos + 4]
            if head == b"MSG " or head == b"HMSG":
                stop = eol + 2 + int(buf[buf.rfind(b" ", pos, eol) + 1 : eol])
                if stop + 2 > end:
                    break
                if head == b"HMSG" or b'"error"' in buf[eol + 2 : stop]:
                    self.fail(RuntimeError(f"publish failed: {buf[pos : stop + 2]!r}"))
                    return
                acks += 1
                pos = stop + 2
                continue
            if not self.control(buf[pos:eol]):
                return  # -ERR: failed
            pos = eol + 2
        self.buffer = buf[pos:]
        if acks:
            self.acked += acks
            more = min(acks, self.count - self.sent)
            if more > 0:
                self._send(more)
            if self.acked >= self.count and not self.done.done():
                self.done.set_result(time.perf_counter())


async def publish(
    url: str,
    subject: str,
    count: int,
    window: int = WINDOW,
    connections: int = 1,
    payload: bytes = PAYLOAD,
) -> float:
    """Acknowledged messages a second: ``count`` publishes over ``connections`` connections.

    Each connection sends its share with ``window`` messages in flight; the
    clock runs from the first ``PUB`` to the last acknowledgement.
    """
    loop = asyncio.get_running_loop()
    host, port = host_port(url)
    shares = [count * (i + 1) // connections - count * i // connections for i in range(connections)]
    conns: list[_Publisher] = []
    try:
        for share in shares:
            _, conn = await loop.create_connection(
                functools.partial(_Publisher, subject, share, window, payload), host, port
            )
            conns.append(conn)
            await asyncio.wait_for(conn.ready, 10)
        start = time.perf_counter()
        for conn in conns:
            conn.start()
        ends = await asyncio.wait_for(asyncio.gather(*(c.done for c in conns)), 600)
        return count / (max(ends) - start)
    finally:
        for conn in conns:
            if conn.transport is not None:
                conn.transport.close()


def main() -> None:
    """Run one publish and print its rate."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="nats://127.0.0.1:4222")
    parser.add_argument("--subject", required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--window", type=int, default=WINDOW)
    parser.add_argument("--connections", type=int, default=1)
    args = parser.parse_args()
    rate = asyncio.run(publish(args.url, args.subject, args.count, args.window, args.connections))
    print(
        f"{rate:,.0f} acknowledged msgs/s ({args.count:,} messages, window {args.window}, "
        f"{args.connections} connection(s))"
    )


if __name__ == "__main__":
    main()
