"""What a hostile (or broken) server may send, read without a traceback or a stall.

Numbers of 4,301 digits and more: ``int()`` refuses them (Python's int-to-str
limit) with a bare ``ValueError``, where these parsers promise ``None``, ``-1``,
``0`` or their typed error. Header blocks of many repeated keys: each value was
joined by copying the whole string again (quadratic time, the event loop held).
JSON nested deeper than the parser's recursion limit: a bare ``RecursionError``.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from aiojetstream import InvalidOptionError, InvalidResponseError, NotJetStreamMessageError
from aiojetstream._api import check_reply
from aiojetstream._counter import counter_value
from aiojetstream._headers import decode_headers
from aiojetstream._message import Msg, ack_sequences, next_in_order, parse_metadata
from aiojetstream._object.names import parse_info
from aiojetstream._status import parse_status
from aiojetstream.otel.consuming import ack_numbers

HUGE = b"9" * 5000  # past int()'s 4,300 digits
GOOD = [b"$JS", b"ACK", b"S", b"c", b"1", b"42", b"7", b"1700000000123456789", b"3"]


def reply_with(index: int, token: bytes) -> bytes:
    tokens = list(GOOD)
    tokens[index] = token
    return b".".join(tokens)


@pytest.mark.parametrize("index", [4, 5, 6, 7, 8])
def test_ack_subjects_with_a_huge_number_are_not_deliveries(index: int) -> None:
    reply = reply_with(index, HUGE)
    assert ack_sequences(reply) is None
    with pytest.raises(NotJetStreamMessageError):
        parse_metadata(reply)
    msg = Msg(b"s", reply, b"", None, None)  # type: ignore[arg-type]
    assert next_in_order(msg, 7) == -1
    # The telemetry's reading takes delivered, sequence and pending only (no raise).
    assert ack_numbers(reply) == (None if index in (4, 5, 8) else (1, 42, 3))
    # The same subject with its numbers in range reads (the control).
    assert ack_sequences(b".".join(GOOD)) == (42, 7, 1)


def test_a_status_with_huge_pending_counts_reads_as_zero() -> None:
    status = parse_status(
        b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: "
        + HUGE
        + b"\r\nNats-Pending-Bytes: "
        + HUGE
        + b"\r\n\r\n"
    )
    assert status is not None
    assert (status.code, status.pending_messages, status.pending_bytes) == (408, 0, 0)


def test_many_repeated_header_keys_are_read_in_linear_time() -> None:
    """6 MB of one repeated key: read once, 0.36 s here; each value copying the whole
    string again took 5.4 s for a third of it (400,000 lines), so about 50 s. The
    bound is a behavioural one (the event loop is held meanwhile), about 8 times the
    linear time and a sixteenth of the quadratic one."""
    block = b"NATS/1.0\r\n" + b"A:x\r\n" * 1_200_000 + b"\r\n"
    started = time.perf_counter()
    headers, status, _ = decode_headers(block)
    took = time.perf_counter() - started
    assert status is None
    assert headers is not None
    assert headers["A"] == ", ".join(["x"] * 1_200_000)
    assert took < 3.0, took
    assert decode_headers(b"NATS/1.0\r\nA: 1\r\nB: x\r\nA: 2\r\nA: 3\r\n\r\n")[0] == {
        "A": "1, 2, 3",
        "B": "x",
    }


DEEP = b"[" * 100_000  # nested past the JSON parser's recursion limit


def test_deeply_nested_json_is_an_invalid_response() -> None:
    with pytest.raises(InvalidResponseError):
        check_reply(DEEP)  # every API reply
    with pytest.raises(InvalidResponseError):
        counter_value(DEEP)  # a counter's stored value
    with pytest.raises(InvalidResponseError):
        parse_info(DEEP, datetime.now(UTC), "b", "$O.b.M.x")  # an object's stored info


def test_deeply_nested_json_options_and_files_are_usage_errors(tmp_path: Path) -> None:
    pytest.importorskip("typer")
    from aiojetstream.cli._common import CliError, load_json_file
    from aiojetstream.spark._option_values import parse_per_stream

    with pytest.raises(InvalidOptionError):
        parse_per_stream('{"S": ' + DEEP.decode(), "startingOffsets", ("earliest", "latest"))
    config = tmp_path / "deep.json"
    config.write_bytes(DEEP)
    with pytest.raises(CliError):
        load_json_file(config)
