"""The Spark runtime's connections survive idle time longer than the server's stale check.

Spark calls the source's offset methods and drives the partition generators
from plain threads; between two calls a connection must still answer the
server's pings, or the server closes it as stale (``ping_interval x
ping_max``, 4-6 minutes by default: a long trigger interval, a partition
generator paused by slow work downstream). Here the server pings every
second and closes a connection after one unanswered ping; raw clients that
never answer show when that has happened (see wait_for_a_stale_connection).
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from aiojetstream import ConnectionClosedError, JetStreamContext, StreamConfig
from aiojetstream.spark._options import parse_source_options
from aiojetstream.spark._read import read_range
from aiojetstream.spark._runtime import Session, run_once
from aiojetstream.spark._source import StreamReader
from aiojetstream.testing import NatsServer
from helpers import unique_name

STALE_CONFIG = {"ping_interval": "1s", "ping_max": 1}


def wait_for_a_stale_connection(server: NatsServer) -> None:
    """Return once a connection as idle as the caller's was closed as stale by the server.

    A client that never answers a PING is closed after about two ping
    intervals, but the server's ping timers of two connections are not in
    step: the second such client, connected after the first was closed, ends
    after any connection that went idle before the first one started.
    """
    for _ in range(2):
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as silent:
            silent.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\n')
            while silent.recv(4096):  # INFO, then PINGs; b"" once the server closed it
                pass


@pytest.fixture
def server() -> Iterator[NatsServer]:
    with NatsServer(config=STALE_CONFIG) as srv:
        yield srv


def fill(url: str, n: int) -> str:
    stream = unique_name("IDLE")
    opts = parse_source_options({"servers": url, "stream": stream}, streaming=False)

    async def work(js: JetStreamContext) -> None:
        await js.create_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"]))
        for i in range(n):
            await js.publish_async(f"{stream}.x", b"%d" % i)
        await js.publish_async_complete()

    run_once(opts.connect, work)
    return stream


def test_stream_reader_offsets_after_an_idle_trigger_interval(server: NatsServer) -> None:
    stream = fill(server.url, 10)
    opts = parse_source_options(
        {"servers": server.url, "stream": stream, "startingOffsets": "earliest"}, streaming=True
    )
    reader = StreamReader(opts)
    try:
        start = reader.initialOffset()
        end = {"stream": stream, "seq": 11, "created": start["created"], "from": 1}
        assert reader.latestOffset(start) == end
        wait_for_a_stale_connection(server)
        # Was: JetStreamTimeoutError (the server had closed the unserved connection).
        assert reader.latestOffset(start) == end
    finally:
        reader.stop()


def test_partition_generator_paused_longer_than_the_stale_check(server: NatsServer) -> None:
    stream = fill(server.url, 5000)  # several batches (the first one has 2,000 rows)
    opts = parse_source_options({"servers": server.url, "stream": stream}, streaming=False)
    batches = read_range(opts, 1, 5001)
    seqs = next(batches).column("seq").to_pylist()
    wait_for_a_stale_connection(server)  # Spark busy downstream, the generator paused
    for batch in batches:  # was: DisconnectedError
        seqs += batch.column("seq").to_pylist()
    assert seqs == list(range(1, 5001))


def test_closed_session_refuses_work_and_close_is_idempotent(server: NatsServer) -> None:
    opts = parse_source_options({"servers": server.url, "stream": "ANY"}, streaming=False)
    session = Session(opts.connect)
    session.close()
    session.close()

    async def nothing() -> int:
        return 1

    with pytest.raises(ConnectionClosedError):
        session.run(nothing())
    with pytest.raises(ConnectionClosedError):
        _ = session.js


def test_abandoned_session_finalized_on_its_own_loop_thread(server: NatsServer) -> None:
    """A garbage collection on the session's thread may finalize it: no wait on itself."""
    opts = parse_source_options({"servers": server.url, "stream": "ANY"}, streaming=False)
    session = Session(opts.connect)
    js, thread = session.js, session._thread

    async def collected_here() -> None:
        with pytest.raises(RuntimeError, match="own loop thread"):
            session.run(nothing())
        session._closer()  # what weakref.finalize runs when the session is collected

    async def nothing() -> int:
        return 1

    asyncio.run_coroutine_threadsafe(collected_here(), session._loop).result(10)
    thread.join(10)  # was: the loop blocked 10 s on its own close, which never ran
    assert not thread.is_alive()
    assert js.nc.is_closed
    assert session._loop.is_closed()


def test_an_abandoned_session_is_finalized_without_waiting(server: NatsServer) -> None:
    """A garbage collection runs the finalizer in whatever thread it happens on, an
    event loop's too: it waited there for the connection's close on the session's loop
    and for the thread's end, as long as that loop was busy (up to 10 s each), with
    the event loop standing still. In an event loop's thread it only schedules them
    now; the thread ends by itself."""
    opts = parse_source_options({"servers": server.url, "stream": "ANY"}, streaming=False)
    session = Session(opts.connect)
    js, thread = session.js, session._thread
    busy = threading.Event()

    def hold_the_loop() -> None:
        busy.set()
        time.sleep(1.5)  # the session's loop is busy (a slow synchronous step)

    session._loop.call_soon_threadsafe(hold_the_loop)
    assert busy.wait(10)

    async def collected_in_an_event_loop() -> float:
        began = time.monotonic()
        session._closer()  # what weakref.finalize runs when the session is collected
        return time.monotonic() - began

    assert asyncio.run(collected_in_an_event_loop()) < 0.5  # waited 1.5 s before
    thread.join(10)
    assert not thread.is_alive()
    assert js.nc.is_closed


_EXIT_CHILD = """
import sys
from aiojetstream.spark import _runtime
from aiojetstream.spark._options import parse_source_options

url, marker = sys.argv[1], sys.argv[2]
opts = parse_source_options({"servers": url, "stream": "ANY"}, streaming=False)
js = _runtime.shared_session(opts.connect).js
close = js.close


async def closing(*args, **kwargs):
    await close(*args, **kwargs)
    open(marker, "w").write("closed")


js.close = closing
"""


def test_a_session_left_open_is_closed_at_exit(server: NatsServer, tmp_path: Path) -> None:
    """At interpreter exit weakref.finalize's own hook runs the finalizer before the
    shared sessions are closed: when it only scheduled the close (to spare an event
    loop's thread), the process ended before the connection was closed."""
    marker = tmp_path / "closed"
    done = subprocess.run(
        [sys.executable, "-c", _EXIT_CHILD, server.url, str(marker)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert marker.read_text() == "closed"
