"""Server JSON captured from nats-server 2.15.1 (tests/fixtures/capture.py) through the models."""

from __future__ import annotations

import base64
import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from aiojetstream._models import (
    WIRE,
    AccountInfo,
    AckPolicy,
    ConsumerConfig,
    ConsumerInfo,
    DeliverPolicy,
    NanoDatetime,
    NanoTimedelta,
    PriorityPolicy,
    PubAck,
    StoreCompression,
    StreamConfig,
    StreamInfo,
    duration_to_ns,
    format_timestamp,
    from_wire,
    parse_timestamp,
    to_wire,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GO_ZERO_TIME = datetime(1, 1, 1, tzinfo=UTC)


def load(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


# (fixture, model, key holding a list of items or None for the whole document)
RESPONSES: list[tuple[str, type[BaseModel], str | None]] = [
    ("stream_create_response.json", StreamInfo, None),
    ("stream_create_mirror_response.json", StreamInfo, None),
    ("stream_info.json", StreamInfo, None),
    ("stream_info_with_deleted_and_subjects.json", StreamInfo, None),
    ("stream_info_sources.json", StreamInfo, None),
    ("stream_info_mirror_error.json", StreamInfo, None),
    ("stream_list.json", StreamInfo, "streams"),
    ("consumer_create_response.json", ConsumerInfo, None),
    ("consumer_info.json", ConsumerInfo, None),
    ("consumer_create_paused_priority.json", ConsumerInfo, None),
    ("consumer_list.json", ConsumerInfo, "consumers"),
    ("account_info.json", AccountInfo, None),
    ("pub_ack.json", PubAck, None),
    ("pub_ack_duplicate.json", PubAck, None),
]


def documents(name: str, key: str | None) -> list[dict[str, Any]]:
    data = load(name)
    if key is None:
        return [data]
    items: list[dict[str, Any]] = data[key]
    assert items, f"{name} has no {key}"
    return items


@pytest.mark.parametrize(("name", "model", "key"), RESPONSES, ids=[r[0] for r in RESPONSES])
def test_fixture_round_trips_exactly(name: str, model: type[BaseModel], key: str | None) -> None:
    for doc in documents(name, key):
        parsed = from_wire(model, doc)
        # Exact: every key, every value (nanosecond durations and timestamps), nothing added.
        assert to_wire(parsed) == doc
        assert json.loads(parsed.model_dump_json(exclude_none=True)) == doc


@pytest.mark.parametrize(("name", "model", "key"), RESPONSES, ids=[r[0] for r in RESPONSES])
def test_fixture_parses_from_raw_json_bytes(
    name: str, model: type[BaseModel], key: str | None
) -> None:
    for doc in documents(name, key):
        raw = json.dumps(doc).encode()
        assert to_wire(from_wire(model, raw)) == doc
        assert to_wire(model.model_validate_json(raw, context=WIRE)) == doc
        assert to_wire(model.model_validate(doc, context=WIRE)) == doc


def inject(doc: dict[str, Any], path: tuple[str | int, ...]) -> dict[str, Any]:
    """Return a deep copy of ``doc`` with unknown fields added at ``path``."""
    out = copy.deepcopy(doc)
    target: Any = out
    for part in path:
        target = target[part]
    target["future_flag"] = True
    target["future_setting"] = {"nested": [1, 2, {"x": None}], "ns": 123456789}
    return out


@pytest.mark.parametrize(
    ("name", "model", "path"),
    [
        ("stream_info.json", StreamInfo, ()),
        ("stream_info.json", StreamInfo, ("config",)),
        ("stream_info.json", StreamInfo, ("config", "consumer_limits")),
        ("stream_info.json", StreamInfo, ("config", "republish")),
        ("stream_info.json", StreamInfo, ("state",)),
        ("stream_info.json", StreamInfo, ("cluster",)),
        ("stream_info_sources.json", StreamInfo, ("config", "sources", 0)),
        ("stream_info_sources.json", StreamInfo, ("config", "sources", 0, "subject_transforms", 0)),
        ("stream_info_sources.json", StreamInfo, ("sources", 0)),
        ("stream_create_mirror_response.json", StreamInfo, ("config", "mirror")),
        ("stream_create_mirror_response.json", StreamInfo, ("mirror",)),
        ("consumer_info.json", ConsumerInfo, ()),
        ("consumer_info.json", ConsumerInfo, ("config",)),
        ("consumer_info.json", ConsumerInfo, ("delivered",)),
        ("consumer_create_paused_priority.json", ConsumerInfo, ("priority_groups", 0)),
        ("account_info.json", AccountInfo, ()),
        ("account_info.json", AccountInfo, ("limits",)),
        ("account_info.json", AccountInfo, ("api",)),
        ("pub_ack.json", PubAck, ()),
    ],
)
def test_unknown_response_fields_survive(
    name: str, model: type[BaseModel], path: tuple[str | int, ...]
) -> None:
    doc = inject(load(name), path)
    # Unknown values are kept verbatim (a None nested inside one included).
    assert to_wire(from_wire(model, doc)) == doc


def test_unknown_config_field_from_server_is_resent_on_update() -> None:
    doc = inject(load("stream_info.json"), ("config",))
    info = from_wire(StreamInfo, doc)
    assert info.config.model_extra == {
        "future_flag": True,
        "future_setting": {"nested": [1, 2, {"x": None}], "ns": 123456789},
    }
    updated = info.config.model_copy(update={"max_age": timedelta(hours=2)})
    wire = to_wire(updated)
    assert wire["future_flag"] is True
    assert wire["max_age"] == 2 * 3600 * 10**9
    assert wire == doc["config"] | {"max_age": 2 * 3600 * 10**9}


def test_unknown_config_field_from_user_raises() -> None:
    config = load("stream_create_response.json")["config"]
    with pytest.raises(ValidationError, match="future_flag"):
        StreamConfig.model_validate(config | {"future_flag": True})
    with pytest.raises(ValidationError, match="future_flag"):
        StreamConfig(name="S", **{"future_flag": True})
    consumer = load("consumer_info.json")["config"]
    with pytest.raises(ValidationError, match="future_flag"):
        ConsumerConfig.model_validate(consumer | {"future_flag": True})
    # The same data is accepted as server data.
    assert from_wire(StreamConfig, config | {"future_flag": True}).model_extra == {
        "future_flag": True
    }


def test_stream_create_response_values() -> None:
    info = from_wire(StreamInfo, load("stream_create_response.json"))
    cfg = info.config
    assert cfg.name == "ORDERS"
    assert cfg.subjects == ["orders.>"]
    assert cfg.max_age == timedelta(hours=1)
    assert cfg.duplicate_window == timedelta(seconds=30)
    assert cfg.allow_msg_ttl is True
    assert cfg.subject_delete_marker_ttl == timedelta(seconds=60)
    # ADR-43: the server turns rollups on for subject delete markers.
    assert cfg.allow_rollup_hdrs is True
    assert cfg.allow_direct is True
    assert cfg.compression is StoreCompression.S2
    assert cfg.consumer_limits is not None
    assert cfg.consumer_limits.inactive_threshold == timedelta(hours=1)
    assert cfg.republish is not None
    assert cfg.republish.headers_only is True
    assert cfg.metadata is not None
    assert cfg.metadata["team"] == "shop"
    assert cfg.metadata["_nats.req.level"] == "1"  # TTL streams need API level 1
    assert info.state.messages == 0
    assert info.state.first_ts == GO_ZERO_TIME
    assert info.created.tzinfo is UTC
    assert info.model_extra is not None
    assert info.model_extra["did_create"] is True


def test_stream_info_with_deleted_and_subjects() -> None:
    info = from_wire(StreamInfo, load("stream_info_with_deleted_and_subjects.json"))
    assert info.state.deleted == [2]
    assert info.state.num_deleted == 1
    assert info.state.subjects == {"orders.us.1": 1, "orders.us.3": 1, "orders.eu.4": 1}
    assert info.state.first_seq == 1
    assert info.state.last_seq == 4
    plain = from_wire(StreamInfo, load("stream_info.json"))
    assert plain.state.deleted is None
    assert plain.state.subjects is None
    assert plain.state.num_subjects == 3


def test_mirror_and_sources() -> None:
    mirror = from_wire(StreamInfo, load("stream_create_mirror_response.json"))
    assert mirror.config.mirror is not None
    assert mirror.config.mirror.name == "ORDERS"
    assert mirror.mirror is not None
    assert duration_to_ns(mirror.mirror.active) == -1  # "never active"
    broken = from_wire(StreamInfo, load("stream_info_mirror_error.json"))
    assert broken.mirror is not None
    assert broken.mirror.error is not None
    assert broken.mirror.error["err_code"] == 10082
    agg = from_wire(StreamInfo, load("stream_info_sources.json"))
    assert agg.sources is not None
    assert agg.sources[0].name == "ORDERS"
    assert agg.sources[0].subject_transforms is not None
    assert agg.sources[0].subject_transforms[0].dest == "agg.us.>"
    assert agg.config.sources is not None
    assert agg.config.sources[0].subject_transforms is not None


def test_consumer_values() -> None:
    info = from_wire(ConsumerInfo, load("consumer_info.json"))
    cfg = info.config
    assert cfg.durable_name == "PROCESSOR"
    assert cfg.ack_policy is AckPolicy.EXPLICIT
    assert cfg.deliver_policy is DeliverPolicy.ALL
    assert cfg.backoff == [timedelta(seconds=1), timedelta(seconds=5), timedelta(seconds=30)]
    # The server replaces ack_wait by the first backoff value.
    assert cfg.ack_wait == timedelta(seconds=1)
    assert cfg.filter_subjects == ["orders.us.>", "orders.eu.>"]
    assert cfg.inactive_threshold == timedelta(minutes=30)
    assert cfg.metadata is not None
    assert cfg.metadata["owner"] == "billing"
    assert info.delivered.consumer_seq == 1
    assert info.delivered.last_active is not None
    assert info.num_ack_pending == 1
    assert info.paused is False


def test_paused_priority_consumer() -> None:
    doc = load("consumer_create_paused_priority.json")
    info = from_wire(ConsumerInfo, doc)
    assert info.paused is True
    assert info.config.priority_policy is PriorityPolicy.PINNED_CLIENT
    assert info.config.priority_groups == ["jobs"]
    assert info.config.priority_timeout == timedelta(minutes=2)
    assert info.config.pause_until is not None
    assert format_timestamp(info.config.pause_until) == doc["config"]["pause_until"]
    assert info.pause_remaining is not None
    assert duration_to_ns(info.pause_remaining) == doc["pause_remaining"]
    if doc["pause_remaining"] % 1000:
        assert isinstance(info.pause_remaining, NanoTimedelta)
    assert info.priority_groups is not None
    assert info.priority_groups[0].group == "jobs"
    assert info.priority_groups[0].pinned_ts == GO_ZERO_TIME


def test_account_info_api_level() -> None:
    info = from_wire(AccountInfo, load("account_info.json"))
    assert info.api.level >= 1  # nats-server >= 2.11 supports ADR-43
    assert info.limits.max_streams == -1
    assert info.streams >= 1
    doc = load("account_info.json")
    del doc["api"]["level"]  # what a pre-2.11 server sends
    old = from_wire(AccountInfo, doc)
    assert old.api.level == 0
    assert to_wire(old) == doc


def test_pub_ack_hot_path_parse() -> None:
    raw = (FIXTURES / "pub_ack.json").read_bytes()
    ack = PubAck.model_validate_json(raw)
    assert (ack.stream, ack.seq, ack.duplicate, ack.domain) == ("ORDERS", 2, False, None)
    dup = PubAck.model_validate_json((FIXTURES / "pub_ack_duplicate.json").read_bytes())
    assert dup.duplicate is True
    # The server really sends this one with a space: '{"stream":"S","seq":1,"duplicate": true}'
    assert PubAck.model_validate_json(b'{"stream":"S","seq":1,"duplicate": true}').duplicate


@pytest.mark.parametrize(
    ("name", "code", "err_code"),
    [
        ("error_stream_not_found.json", 404, 10059),
        ("error_consumer_not_found.json", 404, 10014),
        ("error_ttl_disabled.json", 400, 10166),
        ("error_ttl_invalid.json", 400, 10165),
        ("error_stream_config_10052.json", 500, 10052),
        ("error_unknown_field.json", 400, 10025),
    ],
)
def test_error_fixtures(name: str, code: int, err_code: int) -> None:
    error = load(name)["error"]
    assert error["code"] == code
    assert error["err_code"] == err_code
    assert isinstance(error["description"], str)


def test_stream_msg_get_fixture() -> None:
    message = load("stream_msg_get.json")["message"]
    assert base64.b64decode(message["hdrs"]) == b"NATS/1.0\r\nX-Trace: abc\r\n\r\n"
    assert base64.b64decode(message["data"]) == b'{"id":1}'
    assert format_timestamp(parse_timestamp(message["time"])) == message["time"]


def test_direct_get_fixture() -> None:
    capture = load("direct_get.txt")
    headers = capture["nats_py"]["headers"]
    block: str = capture["raw"]["header_block"]
    lines = block.split("\r\n")
    assert lines[0] == "NATS/1.0"
    assert block.endswith("\r\n\r\n")
    assert dict(line.split(": ", 1) for line in lines[1:] if line) == headers
    assert headers["Nats-Stream"] == "ORDERS"
    assert headers["Nats-Sequence"] == "3"
    assert headers["Nats-TTL"] == "1h"
    stamp = parse_timestamp(headers["Nats-Time-Stamp"])
    assert format_timestamp(stamp) == headers["Nats-Time-Stamp"]
    assert capture["raw"]["payload"] == capture["nats_py"]["data"]
    missing = load("direct_get_not_found.txt")
    assert missing["raw"]["header_block"] == "NATS/1.0 404 Message Not Found\r\n\r\n"


def test_server_timestamps_keep_nanoseconds() -> None:
    info = from_wire(StreamInfo, load("stream_info.json"))
    doc = load("stream_info.json")
    for value, raw in (
        (info.created, doc["created"]),
        (info.state.last_ts, doc["state"]["last_ts"]),
    ):
        assert format_timestamp(value) == raw
        digits = raw.rsplit(".", 1)[-1].rstrip("Z")
        assert isinstance(value, NanoDatetime) == (len(digits) > 6 and "." in raw)
