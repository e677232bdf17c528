"""What a hostile (or broken) server may send, read without a traceback or a stall.

Numbers of 4,301 digits and more: ``int()`` refuses them (Python's int-to-str
limit) with a bare ``ValueError``, where these parsers promise ``None``, ``-1``,
``0`` or their typed error. Header blocks of many repeated keys: each value was
joined by copying the whole string again (quadratic time, the event loop held).
JSON nested deeper than the parser's recursion limit: a bare ``RecursionError``.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiojetstream import InvalidOptionError, InvalidResponseError, NotJetStreamMessageError
from aiojetstream._api import (
    STREAM_LIST,
    STREAM_NAMES,
    ApiClient,
    check_reply,
    header_uint,
    paged,
    reply_int,
)
from aiojetstream._consumer.calls import list_consumers
from aiojetstream._counter import counter_value
from aiojetstream._direct import build_message, classify_frame
from aiojetstream._headers import decode_headers
from aiojetstream._message import Msg, ack_sequences, next_in_order, parse_metadata
from aiojetstream._object.names import parse_info
from aiojetstream._status import parse_status
from aiojetstream._stream import direct_fields, stored_fields, stored_message
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


# --------------------------------------------------------------------------- API reply fields
#
# Fields the code reads itself (not through a model) raised a bare KeyError,
# TypeError, ValueError or pydantic ValidationError, or were taken as they came
# (a sequence of -1 or 1.7, "Nats-Sequence: -5", a listing of "ABC" as A, B, C).

_GOOD_TIME = "2026-11-21T06:30:29.16096689Z"


def _msg_get(**fields: object) -> dict[str, object]:
    message: dict[str, object] = {
        "subject": "orders.us.1",
        "seq": 1,
        "data": "eyJpZCI6MX0=",
        "time": _GOOD_TIME,
    }
    for key, value in fields.items():
        if value is KeyError:
            del message[key]
        else:
            message[key] = value
    return {"type": "io.nats.jetstream.api.v1.stream_msg_get_response", "message": message}


@pytest.mark.parametrize(
    "reply",
    [
        _msg_get(subject=KeyError),
        _msg_get(subject=5),
        _msg_get(seq=KeyError),
        _msg_get(seq=None),
        _msg_get(seq="1"),
        _msg_get(seq=[1]),
        _msg_get(seq=1.7),
        _msg_get(seq=1.0),
        _msg_get(seq=True),
        _msg_get(seq=-1),
        _msg_get(seq=2**64),
        _msg_get(time=KeyError),
        _msg_get(time=5),
        _msg_get(time="junk"),
        _msg_get(data=5),
        _msg_get(data=["eA=="]),
        _msg_get(hdrs=5),
        _msg_get(data="not base64!"),
        {"message": [1]},
        {},
    ],
)
def test_a_malformed_message_get_reply_is_an_invalid_response(reply: dict[str, Any]) -> None:
    with pytest.raises(InvalidResponseError):
        stored_message(reply)
    if isinstance(reply.get("message"), dict) and "data" not in str(reply):
        with pytest.raises(InvalidResponseError):
            stored_fields(reply)


def test_a_message_get_reply_reads() -> None:
    """The control: nats-server's reply, and sequence 0 (a uint64)."""
    msg = stored_message(_msg_get(hdrs="TkFUUy8xLjANClg6IHkNCg0K"))
    assert (msg.subject, msg.seq, msg.data, msg.headers) == (
        "orders.us.1",
        1,
        b'{"id":1}',
        {"X": "y"},
    )
    assert stored_message(_msg_get(seq=0)).seq == 0


@pytest.mark.parametrize(
    "seq", ["-5", "+5", "1_000", "\uff11\uff12", "1.0", "0x1", str(2**64), "9" * 5000]
)
def test_a_direct_get_sequence_that_is_not_a_uint64_is_an_invalid_response(seq: str) -> None:
    block = (
        f"NATS/1.0\r\nNats-Stream: S\r\nNats-Subject: s\r\nNats-Sequence: {seq}\r\n"
        f"Nats-Time-Stamp: {_GOOD_TIME}\r\n\r\n"
    ).encode()
    with pytest.raises(InvalidResponseError):
        direct_fields(b"", block, "sequence 1")
    with pytest.raises(InvalidResponseError):
        build_message(classify_frame(block), b"")
    for value in (seq, f" {seq}", f"{seq} ", ""):
        with pytest.raises(InvalidResponseError):
            header_uint(value, "Nats-Num-Pending header")


def test_a_direct_get_sequence_reads() -> None:
    block = (
        f"NATS/1.0\r\nNats-Stream: S\r\nNats-Subject: s\r\nNats-Sequence: {2**64 - 1}\r\n"
        f"Nats-Time-Stamp: {_GOOD_TIME}\r\n\r\n"
    ).encode()
    assert direct_fields(b"", block, "sequence 1")[1] == 2**64 - 1
    assert build_message(classify_frame(block), b"").seq == 2**64 - 1


@pytest.mark.parametrize("value", [None, "1", 1.0, 1.5, True, -1, 2**64, float("inf"), [1]])
def test_reply_ints_are_json_integers_in_range(value: object) -> None:
    with pytest.raises(InvalidResponseError):
        reply_int(value, "sequence")
    assert reply_int(0, "sequence") == 0


class _Answers(ApiClient):
    """An API client answering each request with the next of ``replies``."""

    __slots__ = ("replies",)

    def __init__(self, replies: list[dict[str, Any]]) -> None:
        super().__init__(None, "$JS.API", 1.0)  # type: ignore[arg-type]
        self.replies = replies

    async def call(self, template: str, body: Any = None, **parts: Any) -> dict[str, Any]:
        return self.replies.pop(0)


@pytest.mark.parametrize(
    "reply",
    [
        {"total": 1, "offset": 0, "streams": "ABC"},  # was listed as A, B, C
        {"total": 1, "offset": 0, "streams": {"A": 1}},
        {"total": 2, "offset": 0, "streams": [1, None]},  # was listed as '1', 'None'
        {"total": "x", "offset": 0, "streams": ["A"]},
        {"total": None, "offset": 0, "streams": ["A"]},
        {"total": 1e999, "offset": 0, "streams": ["A"]},
        {"total": 5, "offset": 0, "streams": ["A"], "missing": 3},
    ],
)
async def test_a_malformed_list_page_is_an_invalid_response(reply: dict[str, Any]) -> None:
    pages = paged(_Answers([reply]), STREAM_NAMES, "streams", {}, None)
    with pytest.raises(InvalidResponseError):
        [name async for name in pages]


async def test_list_pages_of_names_and_infos_read() -> None:
    replies = [
        {"total": 3, "offset": 0, "streams": ["A", {"config": {"name": "B"}}]},
        # (asked from one entry early: B, listed already, is not listed again)
        {"total": 3, "offset": 1, "streams": [{"config": {"name": "B"}}, "C"]},
    ]
    items = [item async for item in paged(_Answers(replies), STREAM_NAMES, "streams", {}, None)]
    assert items == ["A", {"config": {"name": "B"}}, "C"]


class _ClusterPages(ApiClient):
    """A stream list as a clustered nats-server pages it (2 a page here): a stream whose
    peers are all offline is in the page's ``streams`` and in its ``missing`` too.

    A consumer list (``consumers=True``, jsClusteredConsumerListRequest) alike, the
    made-up info of an offline consumer with ``"name": ""`` and ``"stream_name": ""``.
    """

    __slots__ = ("consumers", "names", "offline", "resort")

    def __init__(
        self, names: list[str], offline: set[str], consumers: bool = False, resort: bool = False
    ) -> None:
        super().__init__(None, "$JS.API", 1.0)  # type: ignore[arg-type]
        self.names = names
        self.offline = offline
        self.consumers = consumers
        #: Sort a consumer page by its infos' ``name`` as nats-server does after paging
        #: (jsClusteredConsumerListRequest): the made-up ``""`` first.
        self.resort = resort

    def _item(self, name: str) -> dict[str, Any]:
        if not self.consumers:
            return {"config": {"name": name}}
        online = name not in self.offline
        return {
            "name": name if online else "",
            "stream_name": "S" if online else "",
            "created": "2026-01-01T00:00:00Z",
            "config": {"name": name, "durable_name": name, "ack_policy": "explicit"},
            "delivered": {"consumer_seq": 0, "stream_seq": 0},
            "ack_floor": {"consumer_seq": 0, "stream_seq": 0},
        }

    async def call(self, template: str, body: Any = None, **parts: Any) -> dict[str, Any]:
        offset = body["offset"]
        page = self.names[offset : offset + 2]
        items = [self._item(n) for n in page]
        if self.resort:
            items.sort(key=lambda item: str(item.get("name")))
        return {
            "total": len(self.names),
            "offset": offset,
            "consumers" if self.consumers else "streams": items,
            "missing": [n for n in page if n in self.offline],
        }


async def test_a_stream_both_listed_and_missing_is_counted_once() -> None:
    """nats-server (jsClusteredStreamListRequest) puts a stream whose peers are all
    offline in a page's items and in its ``missing``: counting both moved the next
    page past a stream, which the listing left out without a word."""
    api = _ClusterPages(["A", "B", "C", "D", "E"], offline={"B"})
    items = [item async for item in paged(api, STREAM_LIST, "streams", {}, None)]
    assert [i["config"]["name"] for i in items] == ["A", "B", "C", "D", "E"]


async def test_a_consumer_both_listed_and_missing_is_counted_once_and_named(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The consumer list's made-up info has ``"name": ""``: not recognised as listed,
    it was counted twice and the listing left out online consumers without a word
    (44 of 300 in a 3-node cluster with a node down); it also came back nameless."""
    names = ["A", "B", "C", "D", "E", "F"]
    api = _ClusterPages(names, offline={"B", "D"}, consumers=True)
    infos = [info async for info in list_consumers(api, "S", None)]
    assert [i.name for i in infos] == names
    assert {i.stream_name for i in infos} == {"S"}
    # Not "left out, their leaders did not answer in time": they were listed.
    assert "left out" not in caplog.text
    assert "listed with their configuration only, their peers are offline: B" in caplog.text


@pytest.mark.parametrize("offline", ["A", "B", "C", "D", "E", "F"])
async def test_an_offline_consumer_sorted_first_on_its_page_is_listed_once(offline: str) -> None:
    """Each page is asked for from one entry early; a page with an offline consumer's
    made-up info (named "", so sorted first) looked out of order, and its first entry,
    listed already, was listed again (a 3-node cluster with a node down: c387 twice)."""
    names = ["A", "B", "C", "D", "E", "F"]
    api = _ClusterPages(names, offline={offline}, consumers=True, resort=True)
    infos = [info async for info in list_consumers(api, "S", None)]
    assert sorted(i.name for i in infos) == names


class _LivePages(ApiClient):
    """nats-server's names listing (sorted, paged by offset, ``page`` a page) of a set of
    names that ``changes`` (one a request, applied after it) edit while it is listed."""

    __slots__ = ("changes", "names", "page")

    def __init__(self, names: set[str], changes: list[tuple[set[str], set[str]]], page: int):
        super().__init__(None, "$JS.API", 1.0)  # type: ignore[arg-type]
        self.names = set(names)
        self.changes = list(changes)
        self.page = page

    async def call(self, template: str, body: Any = None, **parts: Any) -> dict[str, Any]:
        listing = sorted(self.names)
        offset = min(body["offset"], len(listing))
        reply = {
            "total": len(listing),
            "offset": offset,
            "streams": listing[offset : offset + self.page],
        }
        if self.changes:
            created, deleted = self.changes.pop(0)
            self.names = (self.names | created) - deleted
        return reply


NAME = st.text(alphabet="abcdefgh", min_size=1, max_size=3)


@given(
    st.sets(NAME, max_size=40),
    # (Fewer created between two requests than a page less one: as many repeat the
    # page, taken as a server answering the same page again; nats-server's pages are
    # 256 and 1,024 entries, see test_a_listing_answered_with_the_same_page_again_ends.)
    st.lists(st.tuples(st.sets(NAME, max_size=1), st.sets(NAME, max_size=5)), max_size=8),
    st.integers(3, 6),
)
@settings(max_examples=300, deadline=None)
def test_a_listing_changed_while_paged_lists_what_existed_throughout_once(
    names: set[str], changes: list[tuple[set[str], set[str]]], page: int
) -> None:
    """Entries created or deleted before the offset between two pages moved the next
    page: an entry was listed twice, or one that existed throughout left out; a page
    asked for again from further back moved the last name listed backwards (3,037 of
    5,300 consumers listed twice)."""
    api = _LivePages(names, changes, page)

    async def listing() -> list[str]:
        return [name async for name in paged(api, STREAM_NAMES, "streams", {}, None)]

    listed = asyncio.run(listing())
    assert len(listed) == len(set(listed)), listed
    throughout = set(names)
    for _, deleted in changes:
        throughout -= deleted
    assert throughout <= set(listed)


@pytest.mark.parametrize("level", ["x", None, 1e999, 1.5, -1, True, 2**64])
async def test_an_invalid_api_level_is_an_invalid_response(level: object) -> None:
    api = _Answers([{"api": {"level": level}}])
    with pytest.raises(InvalidResponseError):
        await api.api_level()
    assert (await _Answers([{"api": {"level": 3}}]).api_level()) == 3
    assert (await _Answers([{}]).api_level()) == 0  # before nats-server 2.11
