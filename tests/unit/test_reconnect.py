"""The reconnect server choice (aiojetstream._conn.NextServer), as pure logic.

nats-py calls the handler with a snapshot of its server pool (in its random
order) while ``_current_server`` is the server just lost, or, on later
calls of the same disconnect, the one that just failed; its ``last_attempt``
is when it was last tried. ``stats["reconnects"]`` counts the reconnects
that succeeded.
"""

from __future__ import annotations

import time
from urllib.parse import urlparse

from nats.aio.client import Client as NatsClient
from nats.aio.client import Server, Srv

from aiojetstream._conn import NextServer


def pool(*ports: int) -> list[Server]:
    return [Server(uri=urlparse(f"nats://127.0.0.1:{p}")) for p in ports]


class Client:
    """A nats-py client that is never connected, to drive the handler."""

    def __init__(self, wait: float = 2.0) -> None:
        self.nc = NatsClient()
        self.nc.options["reconnect_time_wait"] = wait
        self.choose = NextServer()
        self.choose.attach(self.nc)

    def lost(self, port: int, last_attempt: float) -> None:
        """``port`` was lost or just failed, last tried at ``last_attempt``."""
        self.nc._current_server = Srv(
            uri=urlparse(f"nats://127.0.0.1:{port}"), last_attempt=last_attempt
        )

    def next(self, servers: list[Server]) -> tuple[int | None, float]:
        server, delay = self.choose(servers, {})
        assert server is not None
        return server.uri.port, delay


def test_never_starts_with_the_server_just_lost() -> None:
    client = Client()
    client.lost(4222, last_attempt=time.monotonic() - 60)
    assert client.next(pool(4222, 4223, 4224)) == (4223, 0.0)


def test_tries_every_other_server_before_the_lost_one() -> None:
    client = Client(wait=2.0)
    servers = pool(4222, 4223, 4224)
    client.lost(4222, last_attempt=time.monotonic() - 60)  # connected a minute ago
    assert client.next(servers) == (4223, 0.0)
    client.lost(4223, last_attempt=time.monotonic())  # that failed
    assert client.next(servers) == (4224, 0.0)
    client.lost(4224, last_attempt=time.monotonic())  # that failed too
    assert client.next(servers) == (4222, 0.0)  # tried longest ago, more than 2 s back


def test_waits_reconnect_time_wait_when_every_server_was_just_tried() -> None:
    client = Client(wait=2.0)
    servers = pool(4222, 4223)
    start = time.monotonic()
    client.lost(4222, last_attempt=start)
    assert client.next(servers) == (4223, 0.0)
    client.lost(4223, last_attempt=time.monotonic())
    port, delay = client.next(servers)
    assert port == 4222
    assert 2.0 - (time.monotonic() - start) <= delay <= 2.0


def test_a_new_disconnect_starts_over() -> None:
    client = Client(wait=2.0)
    servers = pool(4222, 4223, 4224)
    client.lost(4222, last_attempt=time.monotonic())
    assert client.next(servers) == (4223, 0.0)
    client.nc.stats["reconnects"] += 1  # 4223 took the connection
    client.lost(4223, last_attempt=time.monotonic())  # and is lost in turn
    assert client.next(servers) == (4222, 0.0)  # tried in the last disconnect, not this one


def test_a_single_server_is_retried_once_per_wait() -> None:
    client = Client(wait=1.5)
    servers = pool(4222)
    client.lost(4222, last_attempt=time.monotonic() - 60)
    assert client.next(servers) == (4222, 0.0)
    client.lost(4222, last_attempt=time.monotonic())
    port, delay = client.next(servers)
    assert port == 4222
    assert 1.0 <= delay <= 1.5
