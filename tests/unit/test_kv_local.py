"""Key-value logic that needs no server.

Bucket config validation, the mapping of marker reasons to operations, and the
reader's end-of-initial-values safety nets, driven by a fake ordered consumer
(the server cannot be made to lose values between a consumer's creation and
their delivery on cue). The rest of the key-value behaviour is tested against
a real server in ``tests/integration/test_kv.py``.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import ValidationError

from aiojetstream import (
    ClusterUnavailableError,
    DeliverPolicy,
    InvalidNameError,
    JetStreamTimeoutError,
    KeyValueConfig,
    KeyValueOp,
    MessageNotFoundError,
    _kv,
    _watch,
)

STEP = 10.0  # bound of any single wait


def test_config_validation() -> None:
    for bad in ("", "a.b", "a b", "a*", ">", "ä"):
        # Checked when the config is sent, as a stream's name: InvalidNameError.
        config = KeyValueConfig(bucket=bad)
        with pytest.raises(InvalidNameError, match="invalid bucket name"):
            _kv.kv_stream_config(config)
    for history in (0, 65):
        with pytest.raises(ValidationError):
            KeyValueConfig(bucket="b", history=history)
    with pytest.raises(ValidationError, match="at least 1 second"):
        KeyValueConfig(bucket="b", limit_marker_ttl=0.5)
    with pytest.raises(ValidationError, match="unknown field"):
        KeyValueConfig(bucket="b", histroy=2)  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        KeyValueConfig(bucket="b").bucket = "c"  # type: ignore[misc]
    assert KeyValueConfig(bucket="b", history=64, limit_marker_ttl=1).history == 64


def test_marker_reasons_map_to_operations() -> None:
    op = _kv.entry_operation
    assert op(None) is KeyValueOp.PUT
    assert op({"Other": "x"}) is KeyValueOp.PUT
    assert op({"KV-Operation": "DEL"}) is KeyValueOp.DEL
    assert op({"KV-Operation": "PURGE", "Nats-Rollup": "sub"}) is KeyValueOp.PURGE
    assert op({"Nats-Marker-Reason": "MaxAge", "Nats-TTL": "1s"}) is KeyValueOp.PURGE
    assert op({"Nats-Marker-Reason": "Purge"}) is KeyValueOp.PURGE
    assert op({"Nats-Marker-Reason": "Remove"}) is KeyValueOp.DEL


class _Silent:
    """An ordered consumer whose initial values vanished before delivery."""

    def __init__(self) -> None:
        self.cached_info = SimpleNamespace(num_pending=3)  # pending when created
        self.pending = 0  # ... and no longer when asked again
        self.closed = asyncio.Event()

    def messages(self, **options: Any) -> _Silent:
        return self

    async def __aenter__(self) -> _Silent:
        return self

    async def __anext__(self) -> None:
        await self.closed.wait()
        raise StopAsyncIteration

    def stop(self) -> None:
        self.closed.set()

    async def aclose(self) -> None:
        self.closed.set()

    async def info(self) -> Any:
        delivered = SimpleNamespace(consumer_seq=0)
        return SimpleNamespace(num_pending=self.pending, delivered=delivered, name="c")


class _OwnLoop:
    """The connection of a reader used in its own loop (``Conn.outside`` says so)."""

    def outside(self) -> bool:
        return False

    def refuse_outside(self) -> None:
        pass


class _Api:
    conn = _OwnLoop()


class _Stream:
    name = "KV_b"

    def __init__(self, consumer: _Silent) -> None:
        self.consumer = consumer
        self._api = _Api()

    async def ordered_consumer(self, config: object) -> _Silent:
        return self.consumer

    async def _api_get(self, body: object, timeout: object) -> object:
        # The leader has none either: the initial values vanished (Reader._behind_leader).
        raise MessageNotFoundError(404, 10037, "no message found")


async def test_initial_values_that_vanished_still_end_with_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_watch, "IDLE_CHECK", 0.05)
    silent = _Silent()
    reader = _watch.Reader(_Stream(silent), ["$KV.b.>"], DeliverPolicy.ALL, False)  # type: ignore[arg-type]
    await reader.start()
    assert not reader.caught_up
    assert await asyncio.wait_for(reader.next(), STEP) is _watch.ReaderEvent.CAUGHT_UP
    await reader.aclose()
    assert silent.closed.is_set()
    assert await reader.next() is _watch.ReaderEvent.END


async def test_one_shot_reads_time_out_without_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_watch, "IDLE_CHECK", 0.05)
    silent = _Silent()
    silent.pending = 3  # values pending that never arrive
    reader = _watch.Reader(_Stream(silent), ["$KV.b.>"], DeliverPolicy.ALL, False, stall=0.2)  # type: ignore[arg-type]
    await reader.start()
    with pytest.raises(JetStreamTimeoutError, match="still pending"):
        await asyncio.wait_for(reader.next(), STEP)
    await reader.aclose()
    assert silent.closed.is_set()


def _mirror_of(name: str, *transforms: tuple[str | None, str], api: str | None = None) -> Any:
    from aiojetstream import StreamSource, SubjectTransformConfig
    from aiojetstream._models.stream import ExternalStream

    return StreamSource(
        name=name,
        subject_transforms=[SubjectTransformConfig(src=s, dest=d) for s, d in transforms] or None,
        external=None if api is None else ExternalStream(api=api),
    )


def test_namespaces_of_buckets_and_mirrors() -> None:
    """Where a handle reads (``$KV.<read>.``) and writes (``[<api>.]$KV.<write>.``)."""
    from aiojetstream import StreamConfig
    from aiojetstream._kv.keys import kv_namespaces

    def cfg(name: str, mirror: Any = None) -> StreamConfig:
        return StreamConfig(name=name, mirror=mirror)

    assert kv_namespaces([cfg("KV_b")]) == ("b", "b", None)
    assert kv_namespaces([cfg("KV_m", _mirror_of("KV_b"))]) == ("b", "b", None)
    xdomain = _mirror_of("KV_b", api="$JS.hub.API.")
    assert kv_namespaces([cfg("KV_m", xdomain)]) == ("b", "b", "$JS.hub.API")
    renamed = _mirror_of("KV_b", ("$KV.b.>", "$KV.m.>"))
    assert kv_namespaces([cfg("KV_m", renamed)]) == ("m", "b", None)
    # A mirror of a mirror: the first origin's namespace, through every rename.
    chain = [cfg("KV_r2", _mirror_of("KV_r1")), cfg("KV_r1", _mirror_of("KV_b")), cfg("KV_b")]
    assert kv_namespaces(chain) == ("b", "b", None)
    chain = [cfg("KV_r2", _mirror_of("KV_m")), cfg("KV_m", renamed), cfg("KV_b")]
    assert kv_namespaces(chain) == ("m", "b", None)
    chain = [cfg("KV_r2", _mirror_of("KV_r1")), cfg("KV_r1", xdomain)]
    assert kv_namespaces(chain) == ("b", "b", "$JS.hub.API")


def test_mirror_transforms_that_are_no_rename_are_refused() -> None:
    from aiojetstream import KeyValueError
    from aiojetstream._kv.keys import mirrored_namespace

    assert mirrored_namespace(_mirror_of("KV_b"), "b") == "b"
    for ok in (
        [("$KV.b.>", "$KV.m.>")],
        [("$KV.*.>", "$KV.m.>")],
        [("$KV.b.a.>", "$KV.m.a.>"), ("$KV.b.c.*", "$KV.m.c.*")],
    ):
        assert mirrored_namespace(_mirror_of("KV_b", *ok), "b") == "m"
    for bad in (
        [(None, "$KV.m.>")],  # every subject: $KV.m.$KV.b.<key>
        [(">", "$KV.m.>")],
        [("$KV.b.>", "x.m.>")],
        [("$KV.b.>", "$KV.m.x.>")],
        [("$KV.b.*.>", "$KV.m.{{wildcard(1)}}.>")],
        [("$KV.b.>", "$KV.*.>")],
        [("$KV.b.a.>", "$KV.m.a.>"), ("$KV.b.c.>", "$KV.n.c.>")],  # two names
    ):
        with pytest.raises(KeyValueError, match="could not be read"):
            mirrored_namespace(_mirror_of("KV_b", *bad), "b")


class _LeaderlessStream(_Stream):
    async def _api_get(self, body: object, timeout: object) -> object:
        # A member of the group answers while the stream has no leader.
        raise ClusterUnavailableError(503, 10008, "JetStream system temporarily unavailable")


async def test_a_read_without_a_leader_is_behind_not_done(monkeypatch: pytest.MonkeyPatch) -> None:
    """A replicated bucket without a leader: its consumer, on the only peer left, had
    nothing (that peer had missed writes), and the leader's 503 was taken as no answer:
    keys() returned 0 of 55 keys (a 5-node cluster, the reviewer's repro). The read is
    behind while there is no leader; a one-shot read times out saying so."""
    monkeypatch.setattr(_watch, "IDLE_CHECK", 0.05)
    silent = _Silent()  # nothing pending, as the stale peer says
    stream: Any = _LeaderlessStream(silent)
    reader = _watch.Reader(stream, ["$KV.b.>"], DeliverPolicy.LAST_PER_SUBJECT, True, stall=0.3)
    await reader.start()
    assert not reader.caught_up
    with pytest.raises(JetStreamTimeoutError, match="no leader"):
        await asyncio.wait_for(reader.next(), STEP)
    await reader.aclose()
