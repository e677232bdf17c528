"""Stream configs and acks of counters, schedules and atomic batches round-trip the models.

Captured from nats-server 2.15.1 (see ``tests/fixtures``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from aiojetstream._batch import batch_ack
from aiojetstream._counter import ack_value
from aiojetstream._models import PubAck, StreamConfig, StreamInfo, from_wire, to_wire

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def load(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


CASES: list[tuple[str, type[BaseModel], str]] = [
    ("stream_create_counter.json", StreamInfo, "allow_msg_counter"),
    ("stream_create_schedules.json", StreamInfo, "allow_msg_schedules"),
    ("stream_create_atomic.json", StreamInfo, "allow_atomic"),
]


@pytest.mark.parametrize(("name", "model", "flag"), CASES, ids=[c[0] for c in CASES])
def test_stream_fixture_round_trips(name: str, model: type[BaseModel], flag: str) -> None:
    doc = load(name)
    info = from_wire(StreamInfo, doc)
    assert to_wire(info) == doc
    assert getattr(info.config, flag) is True
    # The user's config sends the flag, and only when set.
    assert to_wire(StreamConfig(name="S", **{flag: True}))[flag] is True
    assert flag not in to_wire(StreamConfig(name="S"))


def test_schedules_turn_on_rollup() -> None:
    info = from_wire(StreamInfo, load("stream_create_schedules.json"))
    assert info.config.allow_rollup_hdrs is True


def test_counter_ack() -> None:
    doc = load("pub_ack_counter.json")
    ack = PubAck.model_validate_json(json.dumps(doc))
    assert to_wire(ack) == doc
    assert ack_value(ack) == 123456789012345678901234567890


def test_batch_ack() -> None:
    ack = batch_ack((FIXTURES / "pub_ack_batch.json").read_bytes())
    assert ack.stream == "AB"
    assert (ack.seq, ack.batch_id, ack.batch_size, ack.domain) == (2, "b1", 2, None)
