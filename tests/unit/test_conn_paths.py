"""The choice between the fast path and the fallback, and the fallback's own pieces.

See ``aiojetstream._conn`` (module docstring): the switch, the internals the
fast path needs, an import that survives a nats-py without them, the
fallback's background publishes (their failures reach ``on_error``) and its
header blocks rebuilt from nats-py's dict (read back exactly like the raw
ones the fast path hands on).
"""

from __future__ import annotations

import importlib.metadata
import inspect
import json
import logging
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import nats.errors as nats_errors
import pytest
from hypothesis import given
from hypothesis import strategies as st
from nats.aio.client import Client as NatsClient
from nats.aio.client import Srv
from nats.aio.msg import Msg as NatsMsg
from packaging.requirements import Requirement

from aiojetstream import (
    ConnectionClosedError,
    DisconnectedError,
    InvalidOptionError,
    JetStreamError,
    JetStreamTimeoutError,
    MaxPayloadExceededError,
    NoRespondersError,
    _conn,
)
from aiojetstream._headers import decode_headers
from aiojetstream._status import parse_status
from helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- the switch


@pytest.mark.parametrize(
    ("value", "fast"),
    [
        (None, True),
        ("", True),
        ("1", True),
        ("true", True),
        ("YES", True),
        ("on", True),
        ("0", False),
        ("false", False),
        (" no ", False),
        ("Off", False),
    ],
)
def test_switch_values(monkeypatch: pytest.MonkeyPatch, value: str | None, fast: bool) -> None:
    if value is None:
        monkeypatch.delenv(_conn.FAST_PATH_ENV, raising=False)
    else:
        monkeypatch.setenv(_conn.FAST_PATH_ENV, value)
    assert _conn.fast_path_switched_on() is fast


@pytest.mark.parametrize("value", ["2", "fast", "disabled", "0 0"])
def test_bad_switch_values(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(_conn.FAST_PATH_ENV, value)
    with pytest.raises(InvalidOptionError, match=_conn.FAST_PATH_ENV):
        _conn.fast_path_switched_on()


def test_the_pinned_nats_py_has_every_internal() -> None:
    # The pin in pyproject.toml is the range the fast path was verified on.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = [Requirement(r) for r in project["dependencies"] if r.startswith("nats-py")]
    assert len(pins) == 1
    assert pins[0].specifier.contains(importlib.metadata.version("nats-py"))
    assert str(pins[0].specifier) == "<2.17,>=2.16", "re-verify the internals before moving it"
    assert _conn.fast_path_missing(NatsClient()) == []
    # Used on both paths: the state callbacks chained for listeners (_Hub) and
    # the tls:// downgrade guard (_guard_tls).
    nc = NatsClient()
    for name in ("_disconnected_cb", "_reconnected_cb", "_closed_cb", "_current_server"):
        assert hasattr(nc, name), name
    assert callable(nc._process_info)
    # The reconnect and close bounds (NextServer, drop_unsent_on_reconnect,
    # _bound_close_waits): the op-error hook, the transport and a server's last attempt.
    assert callable(nc._process_op_err)
    assert hasattr(nc, "_transport")
    assert "last_attempt" in Srv.__dataclass_fields__  # what the pool holds
    assert "reconnect_to_server_handler" in inspect.signature(NatsClient.connect).parameters


def test_each_missing_internal_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    nc = NatsClient()
    nc._pending = None  # type: ignore[assignment]
    del nc._max_payload
    nc._process_msg = None  # type: ignore[assignment,method-assign]
    monkeypatch.setattr(nc._ps, "buf", b"")
    missing = _conn.fast_path_missing(nc)
    assert missing == [
        "_pending",
        "_max_payload",
        "_process_msg",
        "_ps (the protocol parser and its states)",
    ]


def test_the_path_is_chosen_once_per_client(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv(_conn.FAST_PATH_ENV, raising=False)
    monkeypatch.setitem(_conn._FAST_PATH_ATTRIBUTES, "_gone_in_a_future_nats_py", int)
    first, second = NatsClient(), NatsClient()
    with caplog.at_level(logging.DEBUG, logger="aiojetstream"):
        assert not _conn.Conn(first).fast
        assert not _conn.Conn(first).fast
        monkeypatch.delitem(_conn._FAST_PATH_ATTRIBUTES, "_gone_in_a_future_nats_py")
        assert not _conn.Conn(first).fast, "kept for the client"
        assert _conn.Conn(second).fast, "chosen again for another client"
    lacking = [r for r in caplog.records if "_gone_in_a_future_nats_py" in r.getMessage()]
    assert [r.levelno for r in lacking] == [logging.INFO]


# --------------------------------------------------------------------------- import


IMPORT_CHECK = textwrap.dedent(
    """
    import asyncio, json, logging, sys

    import nats.aio.client  # nats-py itself imports its parser first
    import nats.protocol
    import nats.protocol.parser as parser

    # Hidden while aiojetstream is imported only: nats-py's own parser reads
    # the name at run time.
    saved = parser.AWAITING_MSG_PAYLOAD
    if sys.argv[2] == "renamed":
        del parser.AWAITING_MSG_PAYLOAD
    else:  # the whole module moved
        del nats.protocol.parser
        sys.modules["nats.protocol.parser"] = None

    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("aiojetstream").addHandler(handler)
    logging.getLogger("aiojetstream").setLevel(logging.INFO)

    import aiojetstream
    from aiojetstream import AckPolicy, ConsumerConfig, KeyValueConfig, StreamConfig, _conn

    parser.AWAITING_MSG_PAYLOAD = saved
    nats.protocol.parser = parser
    sys.modules["nats.protocol.parser"] = parser

    async def main():
        js = await aiojetstream.connect(sys.argv[1])
        name = "IMPORT_" + sys.argv[2].upper() + "_" + str(id(js))
        try:
            await js.create_stream(StreamConfig(name=name, subjects=[name + ".>"]))
            ack = await (await js.publish_async(name + ".a", b"hello"))
            consumer = await js.create_consumer(
                name, ConsumerConfig(durable_name="c", ack_policy=AckPolicy.EXPLICIT)
            )
            msgs = [m async for m in await consumer.fetch(1, expires=5)]
            await msgs[0].double_ack()
            kv = await js.create_key_value(KeyValueConfig(bucket=name))
            await kv.put("k", b"v")
            value = (await kv.get("k")).value
            await js.delete_key_value(name)
            await js.delete_stream(name)
            return {
                "fast": js._conn.fast,
                "parser": _conn._NatsParser is not None,
                "seq": ack.seq,
                "data": msgs[0].data.decode(),
                "kv": value.decode(),
                "logs": [(r.levelname, r.getMessage()) for r in records],
            }
        finally:
            await js.close()

    print(json.dumps(asyncio.run(main())))
    """
)


@pytest.mark.parametrize("how", ["renamed", "removed"])
def test_an_import_survives_moved_parser_internals(nats_url: str, how: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != _conn.FAST_PATH_ENV}
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_CHECK, nats_url, how],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["fast"] is False
    assert result["parser"] is (how == "renamed")
    assert (result["seq"], result["data"], result["kv"]) == (1, "hello", "v")
    logs = result["logs"]
    assert len(logs) == 1, logs
    level, message = logs[0]
    assert level == "INFO"
    assert "lacks internals of the fast path" in message
    assert "_ps (the protocol parser and its states)" in message


# --------------------------------------------------------------------------- fallback publishes


def _fallback(nc: NatsClient) -> _conn.Conn:
    conn = _conn.Conn(nc)
    conn.fast = False
    return conn


async def test_a_failed_background_publish_goes_to_on_error() -> None:
    # An unconnected client: nats-py refuses (no reconnect buffer) in the task.
    conn = _fallback(NatsClient())
    errors: list[JetStreamError] = []
    conn.publish_nowait(b"s", b"x", b"reply", None, errors.append)
    await wait_until(lambda: bool(errors))
    assert len(errors) == 1
    assert type(errors[0]) is DisconnectedError
    assert isinstance(errors[0].__cause__, nats_errors.OutboundBufferLimitError)
    assert not _conn._BACKGROUND


async def test_without_on_error_the_failure_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    conn = _fallback(NatsClient())
    with caplog.at_level(logging.WARNING, logger="aiojetstream"):
        conn.publish_nowait(b"s", b"x")
        await wait_until(lambda: not _conn._BACKGROUND)
    assert "a publish on 's' failed" in caplog.text


async def test_a_cancelled_background_publish_goes_to_on_error() -> None:
    conn = _fallback(NatsClient())
    errors: list[JetStreamError] = []
    conn.publish_nowait(b"s", b"x", on_error=errors.append)
    (task,) = _conn._BACKGROUND
    task.cancel()
    await wait_until(lambda: bool(errors))
    assert type(errors[0]) is ConnectionClosedError
    assert "cancelled" in str(errors[0])


async def test_an_unexpected_nats_py_failure_is_wrapped(monkeypatch: pytest.MonkeyPatch) -> None:
    nc = NatsClient()
    conn = _fallback(nc)

    async def changed(*args: object, **kwargs: object) -> None:
        raise AttributeError("'Client' object has no attribute '_renamed'")

    monkeypatch.setattr(nc, "publish", changed)
    errors: list[JetStreamError] = []
    conn.publish_nowait(b"s", b"x", on_error=errors.append)
    await wait_until(lambda: bool(errors))
    assert type(errors[0]) is JetStreamError
    assert isinstance(errors[0].__cause__, AttributeError)
    assert "_renamed" in str(errors[0])


async def test_closed_and_draining_are_refused_at_once() -> None:
    nc = NatsClient()
    conn = _fallback(nc)
    nc._status = NatsClient.DRAINING_PUBS
    with pytest.raises(ConnectionClosedError, match="draining"):
        conn.publish_nowait(b"s", b"x")
    nc._status = NatsClient.CLOSED
    with pytest.raises(ConnectionClosedError):
        conn.publish_nowait(b"s", b"x")
    assert not _conn._BACKGROUND


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (nats_errors.NoRespondersError(), NoRespondersError),
        (nats_errors.TimeoutError(), JetStreamTimeoutError),
        (nats_errors.ConnectionClosedError(), ConnectionClosedError),
        (nats_errors.ConnectionDrainingError(), ConnectionClosedError),
        (nats_errors.OutboundBufferLimitError(), DisconnectedError),
        (nats_errors.MaxPayloadError(), MaxPayloadExceededError),
        (nats_errors.Error("other"), JetStreamError),
        (RuntimeError("not nats-py's"), JetStreamError),
        (KeyboardInterrupt(), JetStreamError),
    ],
)
def test_as_jetstream_error(exc: BaseException, expected: type[JetStreamError]) -> None:
    error = _conn.as_jetstream_error(exc, "subj")
    assert type(error) is expected
    assert error.__cause__ is exc
    same = ConnectionClosedError("already ours")
    assert _conn.as_jetstream_error(same) is same


async def test_a_detached_fallback_subscription_delivers_nothing() -> None:
    nc = NatsClient()
    got: list[tuple[bytes, bytes, bytes, bytes | None]] = []
    delivery = _conn._FallbackDelivery(lambda s, r, d, h: got.append((s, r, d, h)))
    raw = _conn.RawSubscription(_fallback(nc), object(), "s", delivery)  # type: ignore[arg-type]
    assert raw.sid == 0
    msg = NatsMsg(_client=nc, subject="s", reply="r", data=b"x", headers={"A": "b"})
    await delivery.deliver(msg)
    assert got == [(b"s", b"r", b"x", b"NATS/1.0\r\nA: b\r\n\r\n")]
    raw.detach()
    await delivery.deliver(msg)
    assert len(got) == 1


# --------------------------------------------------------------------------- rebuilt header blocks

KEYS = st.sampled_from(
    ["Nats-Pending-Messages", "Nats-Pending-Bytes", "Nats-Last-Consumer", "Nats-Msg-Id", "X"]
) | st.from_regex(r"[A-Za-z][A-Za-z0-9-]{0,15}", fullmatch=True).filter(
    lambda k: k.lower() not in ("status", "description")
)
VALUES = st.text(
    alphabet=st.characters(exclude_characters="\r\n\x00", exclude_categories=["Cs"]), max_size=12
)
# nats-py 2.16 misreads a description starting with ":" (b"NATS/1.0 100 :\r\n..."
# gains a header "00"); the server's descriptions never start with one.
DESCRIPTIONS = (
    st.text(
        alphabet=st.characters(exclude_characters="\r\n", exclude_categories=["Cs"]), max_size=20
    )
    .map(str.strip)
    .filter(lambda d: not d.startswith(":"))
)


@given(
    st.one_of(st.none(), st.integers(100, 999)),
    DESCRIPTIONS,
    st.dictionaries(KEYS, VALUES, max_size=4),
)
async def test_rebuilt_header_blocks_read_as_the_raw_ones(
    code: int | None, description: str, headers: dict[str, str]
) -> None:
    # The fast path hands on the raw block; the fallback rebuilds it from
    # nats-py's dict. Both must read the same (status, description, headers).
    if code is None:
        first = "NATS/1.0"
    elif description and headers:
        first = f"NATS/1.0 {code} {description}"
    else:  # nats-py misreads a status without a description but with headers
        first = f"NATS/1.0 {code}"
        headers = {}
    lines = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    block = (first + "\r\n" + lines + "\r\n").encode()
    if code is None and not headers:
        assert _conn._rebuild_header_block(await NatsClient()._process_headers(block)) is None
        return
    rebuilt = _conn._rebuild_header_block(await NatsClient()._process_headers(block))
    assert rebuilt is not None
    assert decode_headers(rebuilt) == decode_headers(block)
    assert parse_status(rebuilt) == parse_status(block)


def test_a_user_status_header_is_not_a_status_line() -> None:
    assert (
        _conn._rebuild_header_block({"Status": "active"}) == b"NATS/1.0\r\nStatus: active\r\n\r\n"
    )
    assert _conn._rebuild_header_block({"Status": "503"}) == b"NATS/1.0 503\r\n\r\n"
