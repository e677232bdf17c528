"""The echo check of level-gated settings (``_features.stream_dropped`` / ``consumer_dropped``).

A node older than the meta leader (a mixed-version cluster) creates a stream or
consumer without the settings it does not know and echoes its own config;
tests/integration/test_mixed_versions.py shows it against nats-server 2.10.
"""

from __future__ import annotations

import pickle
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from aiojetstream import (
    AckPolicy,
    ConsumerConfig,
    FeatureNotSupportedError,
    PersistMode,
    PriorityPolicy,
    StreamConfig,
)
from aiojetstream import _features as F

STREAM_SETTINGS: list[tuple[dict[str, Any], F.Feature]] = [
    ({"allow_msg_ttl": True}, F.STREAM_MSG_TTL),
    ({"subject_delete_marker_ttl": timedelta(seconds=5)}, F.MARKER_TTL),
    ({"allow_msg_counter": True}, F.COUNTERS),
    ({"allow_atomic": True}, F.ATOMIC_BATCH),
    ({"allow_msg_schedules": True}, F.SCHEDULES),
    ({"persist_mode": PersistMode.ASYNC}, F.PERSIST_MODE),
    ({"allow_batched": True}, F.FAST_BATCH),
]


@pytest.mark.parametrize(("settings", "feature"), STREAM_SETTINGS)
def test_a_stream_setting_echoed_off_is_dropped(
    settings: dict[str, Any], feature: F.Feature
) -> None:
    sent = StreamConfig(name="S", **settings)
    assert F.stream_dropped(sent, StreamConfig(name="S")) == [feature]
    assert F.stream_dropped(sent, sent) == []


def test_a_stream_without_gated_settings_drops_nothing() -> None:
    sent = StreamConfig(name="S", persist_mode=PersistMode.DEFAULT)
    assert F.stream_dropped(sent, StreamConfig(name="S")) == []


CONSUMER_SETTINGS: list[tuple[dict[str, Any], F.Feature]] = [
    ({"pause_until": datetime(2100, 1, 1, tzinfo=UTC)}, F.PAUSED_CONSUMER),
    (
        {"priority_groups": ["g"], "priority_policy": PriorityPolicy.PINNED_CLIENT},
        F.PRIORITY_GROUPS,
    ),
    ({"priority_groups": ["g"], "priority_policy": PriorityPolicy.PRIORITIZED}, F.PRIORITIZED),
    ({"ack_policy": AckPolicy.FLOW_CONTROL}, F.FLOW_CONTROL_ACK),
]


@pytest.mark.parametrize(("settings", "feature"), CONSUMER_SETTINGS)
def test_a_consumer_setting_echoed_off_is_dropped(
    settings: dict[str, Any], feature: F.Feature
) -> None:
    sent = ConsumerConfig(durable_name="c", **settings)
    assert F.consumer_dropped(sent, ConsumerConfig(durable_name="c")) == [feature]
    assert F.consumer_dropped(sent, sent) == []


def test_the_error_says_it_was_created_and_why() -> None:
    error = F.dropped_error([F.STREAM_MSG_TTL, F.COUNTERS], "stream 'S'", "created", 5)
    assert error.feature == "allow_msg_ttl, message counters (allow_msg_counter)"
    assert (error.required_level, error.server_level, error.server_version) == (2, 5, "2.12")
    assert "stream 'S' WAS created without it" in str(error)
    assert "mixed-version cluster" in str(error)
    assert "reports API level" not in str(error)
    assert any("meta leader" in note for note in error.__notes__)
    copy = pickle.loads(pickle.dumps(error))
    assert isinstance(copy, FeatureNotSupportedError)
    assert str(copy) == str(error)
    assert copy.reason == error.reason
