"""The leader check at the end of a read task's range, on one server (no restart).

A read task whose consumer has nothing more before its range's end asks the
stream's leader (``STREAM.MSG.GET``) whether the range holds more (see
``test_spark_cluster_catchup.py``). It is asked of a replicated stream only;
here ``stream_bounds`` reports three replicas so a single server shows the
check's other outcomes: the leader holds nothing more of a filtered range (the
range ends as before), and a user whose permissions refuse the get (the
documented read permissions of older releases) reads as before, at once, with
one warning naming the subject, and is not asked again.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest

from aiojetstream import JetStreamContext, StreamConfig
from aiojetstream.spark import _read
from aiojetstream.spark._options import SourceOptions, parse_source_options
from aiojetstream.spark._read import Bounds, read_range
from aiojetstream.spark._runtime import shared_session
from aiojetstream.testing import NatsServer
from helpers import spark_reader_config

STREAM = "LEADERCHECK"
CONFIG = spark_reader_config(STREAM, "_INBOX_lc")


@pytest.fixture
def server() -> Iterator[NatsServer]:
    with NatsServer(config=CONFIG) as srv:
        yield srv


@pytest.fixture
def replicated(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``stream_bounds`` reports three replicas; the leader gets asked (the subjects)."""
    original = _read.stream_bounds

    async def three(js: JetStreamContext, opts: SourceOptions, stream: str | None = None) -> Bounds:
        return dataclasses.replace(await original(js, opts, stream), replicas=3)

    monkeypatch.setattr(_read, "stream_bounds", three)
    asked: list[str] = []
    leader_next = _read.RangeReader._leader_next

    async def spy(self: _read.RangeReader, subject: str) -> int | None:
        asked.append(subject)
        return await leader_next(self, subject)

    monkeypatch.setattr(_read.RangeReader, "_leader_next", spy)
    return asked


async def _fill(js: JetStreamContext) -> None:
    await js.create_stream(StreamConfig(name=STREAM, subjects=[f"{STREAM}.>"]))
    for i in range(100):
        await js.publish_async(f"{STREAM}.{'ab'[i % 2]}", b"%d" % i)  # a: odd sequences
    await js.publish_async_complete()


def _read_all(opts: SourceOptions, start: int, end: int) -> list[int]:
    seqs: list[int] = []
    for batch in read_range(opts, start, end, STREAM):
        seqs += batch.column("seq").to_pylist()
    return seqs


def _options(server: NatsServer, user: str, **more: str) -> SourceOptions:
    options: dict[str, Any] = {
        "servers": server.url,
        "user": user,
        "password": user,
        "stream": STREAM,
        "subject": f"{STREAM}.a",
        "inboxPrefix": "_INBOX_lc",
        "consumerNamePrefix": "lc",
        "timeout": "5",
        **more,
    }
    return parse_source_options(options, streaming=False)


def test_a_filtered_range_the_leader_has_no_more_of_ends(
    server: NatsServer, replicated: list[str]
) -> None:
    opts = _options(server, "admin")
    shared_session(opts.connect).run(_fill(shared_session(opts.connect).js))
    # The last S.a message of [1, 101) is 99: the consumer has nothing more at 100.
    assert _read_all(opts, 1, 101) == list(range(1, 100, 2))
    assert replicated == [f"{STREAM}.a"]


def test_a_user_refused_the_get_reads_as_before_and_is_warned_once(
    server: NatsServer, replicated: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    admin = _options(server, "admin")
    shared_session(admin.connect).run(_fill(shared_session(admin.connect).js))
    opts = _options(server, "reader")
    caplog.set_level(logging.WARNING, "aiojetstream.spark")
    started = time.monotonic()
    assert _read_all(opts, 1, 101) == list(range(1, 100, 2))
    assert time.monotonic() - started < 4  # the refusal ends the wait (not the 5 s timeout)
    assert _read_all(opts, 51, 101) == list(range(51, 100, 2))
    warnings = [r.getMessage() for r in caplog.records if "message get" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert f"$JS.API.STREAM.MSG.GET.{STREAM}" in warnings[0]
    # The second read came to the check too, and sent nothing.
    assert replicated == [f"{STREAM}.a", f"{STREAM}.a"]
    assert shared_session(opts.connect).refusals.count == 1
