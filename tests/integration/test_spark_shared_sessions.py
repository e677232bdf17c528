"""One connection per Spark Python worker process: the shared sessions of ``_runtime``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from aiojetstream.spark import _runtime
from aiojetstream.spark._options import ConnectOptions
from aiojetstream.testing import NatsServer


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
