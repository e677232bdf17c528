"""The Spark runtime: one connection per worker process, refused requests, consumer clean-up."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from aiojetstream import AuthorizationError, JetStreamTimeoutError, StreamConfig
from aiojetstream.spark import _read, _runtime
from aiojetstream.spark._options import ConnectOptions, parse_source_options
from aiojetstream.spark._read import read_range
from aiojetstream.testing import NatsServer
from helpers import unique_name


@pytest.fixture
def clean() -> Iterator[None]:
    _runtime._close_shared()
    yield
    _runtime._close_shared()


def test_same_options_share_one_session(nats_server: NatsServer, clean: None) -> None:
    options = ConnectOptions(servers=nats_server.url)
    first = _runtime.shared_session(options)
    assert _runtime.shared_session(ConnectOptions(servers=nats_server.url)) is first
    other = _runtime.shared_session(ConnectOptions(servers=nats_server.url, timeout=3))
    assert other is not first  # other options, another connection
    writer = _runtime.shared_session(options, max_pending=10)
    assert writer is not first
    assert first.usable
    assert other.usable


def test_a_closed_session_is_replaced_and_discard_closes(
    nats_server: NatsServer, clean: None
) -> None:
    options = ConnectOptions(servers=nats_server.url)
    first = _runtime.shared_session(options)
    first.run(first.js.close())  # nats-py gave up, say
    assert not first.usable
    second = _runtime.shared_session(options)
    assert second is not first
    assert second.usable
    _runtime.discard(second)
    assert not second.usable
    assert _runtime.shared_session(options) is not second


def test_least_recently_used_beyond_the_bound_is_closed(
    nats_server: NatsServer, clean: None
) -> None:
    sessions = [
        _runtime.shared_session(ConnectOptions(servers=nats_server.url, timeout=1 + i))
        for i in range(_runtime.MAX_SHARED)
    ]
    # Using the first makes the second the least recently used.
    assert (
        _runtime.shared_session(ConnectOptions(servers=nats_server.url, timeout=1)) is sessions[0]
    )
    _runtime.shared_session(ConnectOptions(servers=nats_server.url, timeout=99))
    assert not sessions[1].usable
    assert all(s.usable for i, s in enumerate(sessions) if i != 1)


def test_exit_closes_every_session(nats_server: NatsServer, clean: None) -> None:
    session = _runtime.shared_session(ConnectOptions(servers=nats_server.url))
    _runtime._close_shared()  # what atexit runs
    assert not session.usable


PERMS = """
accounts: {
  A: {
    jetstream: enabled
    users: [
      {user: admin, password: admin},
      {user: reader, password: reader, permissions: {
         publish: {allow: ["$JS.API.INFO", "$JS.API.STREAM.INFO.>"]},
         subscribe: {allow: ["_INBOX.>"]}}}
    ]
  }
}
"""


def test_a_permission_violation_is_not_retried(clean: None) -> None:
    with NatsServer(config=PERMS) as server:
        admin = ConnectOptions(servers=server.url, user="admin", password="admin")
        _runtime.run_once(
            admin, lambda js: js.create_stream(StreamConfig(name="PV", subjects=["pv.>"]))
        )
        _runtime.run_once(admin, lambda js: js.publish("pv.a", b"x"))
        opts = parse_source_options(
            {
                "servers": server.url,
                "user": "reader",
                "password": "reader",
                "stream": "PV",
                "timeout": "1",
            },
            streaming=False,
        )
        started = time.monotonic()
        # (The subject as the server wrote it: the violation once came lowercased.)
        with pytest.raises(AuthorizationError, match=r"ermissions violation.*CONSUMER\.CREATE"):
            list(read_range(opts, 1, 2))  # the consumer create is not allowed
        # Not retried for retryTimeout (30 s): one request timeout, with a margin.
        assert time.monotonic() - started < 10


def test_a_failed_consumer_delete_does_not_fail_the_read(
    nats_server: NatsServer, clean: None, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    admin = ConnectOptions(servers=nats_server.url)
    stream = unique_name("DELF")
    _runtime.run_once(
        admin, lambda js: js.create_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"]))
    )
    _runtime.run_once(admin, lambda js: js.publish(f"{stream}.a", b"x"))

    async def refused(js: Any, consumer: Any) -> None:
        raise JetStreamTimeoutError("no reply (a leader election)")

    monkeypatch.setattr(_read, "_delete", refused)
    opts = parse_source_options({"servers": nats_server.url, "stream": stream}, streaming=False)
    batches = list(read_range(opts, 1, 2))
    assert sum(b.num_rows for b in batches) == 1  # every row, and no error
    assert "could not delete a read consumer" in caplog.text
