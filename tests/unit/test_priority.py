"""Priority groups (ADR-42) without a server: option checks, the pin state, captured frames.

``tests/fixtures/priority_frames.json`` holds frames captured from
nats-server 2.15.1 (pinned messages, both 423 texts, the 400 refusals); they
drive the header parser, the status classifier and the engine's pin handling.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiojetstream import InvalidOptionError, PinIdMismatchError
from aiojetstream._priority import (
    GROUP_PATTERN,
    PinState,
    PriorityOptions,
    check_group_name,
    pin_id_from_headers,
    resolve_priority,
)
from aiojetstream._pull_driver import pull_request_body
from aiojetstream._pull_engine import (
    Finish,
    PriorityConsumer,
    PullEngine,
    Report,
    SendPull,
    resolve_consume,
    resolve_fetch,
)
from aiojetstream._status import Severity, StatusKind, parse_status

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "priority_frames.json"
FRAMES: dict[str, Any] = json.loads(FIXTURE.read_text())
PINNED = PriorityConsumer(("jobs",), "pinned_client")
OVERFLOW = PriorityConsumer(("jobs", "b"), "overflow")
PRIORITIZED = PriorityConsumer(("jobs",), "prioritized")


def block(name: str) -> bytes:
    return str(FRAMES[name]["header_block"]).encode()


# --------------------------------------------------------------------------- options


def test_a_consumer_without_groups_takes_no_priority_options() -> None:
    assert resolve_priority(groups=None, policy=None) is None
    assert resolve_priority(groups=[], policy="none") is None
    for options in ({"group": "jobs"}, {"min_pending": 1}, {"priority": 0}):
        with pytest.raises(InvalidOptionError, match="priority groups"):
            resolve_priority(groups=None, policy=None, **options)


@pytest.mark.parametrize(
    ("policy", "options", "match"),
    [
        ("pinned_client", {}, "pass group="),
        ("pinned_client", {"group": "other"}, "not one of"),
        ("pinned_client", {"group": "bad name"}, "1 to 16"),
        ("pinned_client", {"group": "jobs", "min_pending": 2}, "overflow"),
        ("prioritized", {"group": "jobs", "min_ack_pending": 2}, "overflow"),
        ("overflow", {"group": "jobs", "priority": 1}, "prioritized"),
        ("prioritized", {"group": "jobs", "priority": 10}, "0 to 9"),
        ("prioritized", {"group": "jobs", "priority": -1}, "0 to 9"),
        ("prioritized", {"group": "jobs", "priority": True}, "0 to 9"),
        ("overflow", {"group": "jobs", "min_pending": 0}, "positive"),
        ("overflow", {"group": "jobs", "min_ack_pending": 1.5}, "positive"),
    ],
)
def test_bad_options_are_refused(policy: str, options: dict[str, object], match: str) -> None:
    with pytest.raises(InvalidOptionError, match=match):
        resolve_priority(groups=["jobs"], policy=policy, **options)  # type: ignore[arg-type]


def test_resolved_options_and_their_wire_fields() -> None:
    o = resolve_priority(groups=["jobs"], policy="overflow", group="jobs", min_pending=5)
    assert o == PriorityOptions("jobs", min_pending=5)
    assert o.fields(None) == {"group": "jobs", "min_pending": 5}
    o = resolve_priority(groups=["jobs"], policy="prioritized", group="jobs", priority=0)
    assert o is not None
    assert o.fields(None) == {"group": "jobs", "priority": 0}
    o = resolve_priority(groups=["jobs"], policy="pinned_client", group="jobs")
    assert o is not None
    assert o.pinned
    assert o.fields("abc") == {"group": "jobs", "id": "abc"}


@given(st.from_regex(r"[A-Za-z0-9\-_/=]{1,16}", fullmatch=True))
def test_valid_group_names(name: str) -> None:
    assert check_group_name(name) == name


@given(st.text(max_size=20))
def test_group_names_follow_the_server_pattern(name: str) -> None:
    valid = GROUP_PATTERN.fullmatch(name) is not None
    assert valid == (
        1 <= len(name) <= 16 and all(c.isascii() and (c.isalnum() or c in "-_/=") for c in name)
    )
    if not valid:
        with pytest.raises(InvalidOptionError):
            check_group_name(name)


def test_settings_carry_the_options_and_check_expires_against_the_pin_timeout() -> None:
    s = resolve_consume(consumer=PINNED, group="jobs", expires=60)
    assert s.priority == PriorityOptions("jobs", pinned=True)
    assert resolve_fetch(consumer=OVERFLOW, group="b", min_ack_pending=3).priority == (
        PriorityOptions("b", min_ack_pending=3)
    )
    short = PriorityConsumer(("jobs",), "pinned_client", timeout=10.0)
    with pytest.raises(InvalidOptionError, match="priority_timeout"):
        resolve_consume(consumer=short, group="jobs")  # 30 s default expiry
    with pytest.raises(InvalidOptionError, match="priority_timeout"):
        resolve_fetch(consumer=short, group="jobs", expires=10)
    assert resolve_fetch(consumer=short, group="jobs", no_wait=True).priority is not None
    assert resolve_consume(consumer=short, group="jobs", expires=9).expires == 9
    with pytest.raises(InvalidOptionError, match="priority_timeout"):
        resolve_consume(consumer=PINNED, group="jobs", expires=120)


def test_pull_request_body_has_the_group_fields_and_the_pin() -> None:
    s = resolve_fetch(max_messages=2, expires=5, consumer=PINNED, group="jobs")
    body = json.loads(pull_request_body(SendPull(2, 0, 5.0, 0.0, pin_id="P1"), s))
    assert body == {"batch": 2, "expires": 5_000_000_000, "group": "jobs", "id": "P1"}
    body = json.loads(pull_request_body(SendPull(2, 0, 5.0, 0.0), s))
    assert "id" not in body
    assert json.loads(pull_request_body(SendPull(1, 0, 5.0, 0.0))) == {
        "batch": 1,
        "expires": 5_000_000_000,
    }


# --------------------------------------------------------------------------- captured frames


def test_pin_id_from_captured_messages() -> None:
    first = pin_id_from_headers(block("pinned_message"))
    assert first
    assert pin_id_from_headers(block("second_pinned_message")) == first
    assert pin_id_from_headers(None) is None
    assert pin_id_from_headers(b"NATS/1.0\r\nX-Other: 1\r\n\r\n") is None
    assert pin_id_from_headers(b"NATS/1.0\r\nnats-pin-id: x\r\n\r\n") is None  # fast path
    assert pin_id_from_headers(b"NATS/1.0\r\nNats-Pin-Id:\r\n\r\n") is None


@given(st.binary(max_size=200))
def test_pin_id_parser_never_raises(data: bytes) -> None:
    pin_id_from_headers(b"NATS/1.0\r\nNats-Pin-Id: " + data)
    pin_id_from_headers(data)


@pytest.mark.parametrize(
    ("name", "pending", "reason"),
    [("pin_id_mismatch", 0, "mismatch"), ("wrong_pin_id", 3, "wrong_pin")],
)
def test_captured_423_frames(name: str, pending: int, reason: str) -> None:
    status = parse_status(block(name))
    assert status is not None
    assert status.code == 423
    assert status.kind is StatusKind.PIN_MISMATCH
    assert status.severity is Severity.SILENT
    assert status.pending_messages == pending
    error = status.error()
    assert isinstance(error, PinIdMismatchError)
    assert error.reason == reason


@pytest.mark.parametrize(
    "name",
    ["status_no_group", "status_unknown_group", "status_not_overflow", "status_bad_priority"],
)
def test_captured_400_refusals_are_terminal(name: str) -> None:
    status = parse_status(block(name))
    assert status is not None
    assert (status.code, status.kind, status.severity) == (
        400,
        StatusKind.BAD_REQUEST,
        Severity.TERMINAL,
    )


def test_pin_id_mismatch_error_pickles() -> None:
    import pickle

    err = pickle.loads(pickle.dumps(PinIdMismatchError("lost", "wrong_pin")))
    assert (str(err), err.reason) == ("lost", "wrong_pin")


# --------------------------------------------------------------------------- the pin state


def test_pin_state() -> None:
    pin = PinState()
    assert pin.id is None
    assert not pin.lost()
    assert pin.pinned("a")
    assert not pin.pinned("a")
    assert pin.pinned("b")
    assert pin.lost()
    assert pin.id is None
    assert pin.changes == 3


def pulls(cmds: object) -> list[SendPull]:
    return [c for c in cmds if isinstance(c, SendPull)]  # type: ignore[attr-defined]


def test_consume_sends_the_pin_and_recovers_from_wrong_pin_id() -> None:
    pin_id = pin_id_from_headers(block("pinned_message"))
    assert pin_id is not None
    e = PullEngine(resolve_consume(max_messages=4, consumer=PINNED, group="jobs"))
    (first,) = pulls(e.start(0.0))
    assert (first.batch, first.pin_id) == (4, None)
    for _ in range(3):
        e.on_pin_id(pin_id)
        e.on_message(0)
    e.on_consumed(0)
    e.on_consumed(0)
    (second,) = pulls(e.on_consumed(0))
    assert (second.batch, second.pin_id) == (3, pin_id)
    # the pin is taken away: the waiting pull with it gets 423 Nats-Wrong-Pin-Id
    status = parse_status(block("wrong_pin_id"))
    assert status is not None
    assert status.pending_messages == 3
    err = status.error()
    cmds = e.on_status(status.kind, status.severity, 3, 0, err, 1.0)
    assert e.pin is not None
    assert e.pin.id is None
    assert Report(err) in cmds
    assert not [c for c in cmds if isinstance(c, Finish)]
    (again,) = pulls(cmds)  # pulls again, without the pin, for what was released
    assert (again.batch, again.pin_id) == (3, None)
    assert e.pending_messages == 4
    assert e.requested == e.delivered + e.released + e.outstanding_messages


def test_mismatch_gives_back_the_last_pull_sent_with_the_pin() -> None:
    pin = PinState()
    pin.pinned("old")
    e = PullEngine(resolve_consume(max_messages=3, consumer=PINNED, group="jobs"), pin)
    (first,) = pulls(e.start(0.0))
    assert first.pin_id == "old"
    status = parse_status(block("pin_id_mismatch"))
    assert status is not None
    cmds = e.on_status(status.kind, status.severity, 0, 0, status.error(), 0.0)
    (again,) = pulls(cmds)
    assert (again.batch, again.pin_id) == (3, None)
    assert pin.id is None  # shared with the consumer handle
    assert e.released == 3
    assert e.outstanding_messages == 3


def test_fetch_ends_with_pin_id_mismatch_and_the_handle_forgets_the_pin() -> None:
    pin = PinState()
    pin.pinned("old")
    e = PullEngine(resolve_fetch(max_messages=2, consumer=PINNED, group="jobs"), pin)
    (pull,) = pulls(e.start(0.0))
    assert pull.pin_id == "old"
    err = PinIdMismatchError("423 Nats-Pin-Id mismatch", "mismatch")
    cmds = e.on_status(StatusKind.PIN_MISMATCH, Severity.SILENT, 0, 0, err, 0.0)
    assert Finish(err) in cmds
    assert pin.id is None
    assert e.outstanding_messages == 0
    nxt = PullEngine(resolve_fetch(max_messages=2, consumer=PINNED, group="jobs"), pin)
    (pull,) = pulls(nxt.start(1.0))
    assert pull.pin_id is None


def test_no_pin_state_without_pinned_client() -> None:
    e = PullEngine(resolve_consume(consumer=OVERFLOW, group="jobs", min_pending=2))
    assert e.pin is None
    e.on_pin_id("x")  # ignored
    (pull,) = pulls(e.start(0.0))
    assert pull.pin_id is None


def test_a_stale_mismatch_keeps_a_pin_taken_since() -> None:
    """The server pins the first waiting pull without an id, then refuses an older-pin
    pull of the same handle behind it (423 Nats-Wrong-Pin-Id): forgetting the new pin
    left no pull holding it, and the only client got nothing until priority_timeout."""
    pin = PinState()
    pin.pinned("old")
    stale = PullEngine(resolve_consume(max_messages=3, consumer=PINNED, group="jobs"), pin)
    (first,) = pulls(stale.start(0.0))
    assert first.pin_id == "old"
    pin.pinned("new")  # another pull of the handle was given the new pin
    err = PinIdMismatchError("423 Nats-Wrong-Pin-Id", "wrong_pin")
    cmds = stale.on_status(StatusKind.PIN_MISMATCH, Severity.SILENT, 0, 0, err, 0.0)
    assert pin.id == "new"  # kept
    (again,) = pulls(cmds)
    assert again.pin_id == "new"
    # A mismatch of the pin the run's pulls did carry still forgets it.
    cmds = stale.on_status(StatusKind.PIN_MISMATCH, Severity.SILENT, 0, 0, err, 1.0)
    assert pin.id is None
