"""The Spark extension's pure parts: options, range splitting, data-loss rule, boundaries."""

from __future__ import annotations

import ast
import itertools
import re
import warnings
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiojetstream import InvalidOptionError
from aiojetstream._message import Msg
from aiojetstream.spark import DataLossError, JetStreamSparkWarning
from aiojetstream.spark._options import (
    SEQUENCES_PER_PARTITION,
    parse_kv_options,
    parse_sink_options,
    parse_source_options,
)
from aiojetstream.spark._read import _numbers, check_loss, split
from credentials import Operator

SPARK_DIR = Path(__file__).resolve().parents[2] / "src" / "aiojetstream" / "spark"


def test_defaults_and_case_insensitive_keys() -> None:
    opts = parse_source_options({"STREAM": "ORDERS"}, streaming=False)
    assert opts.stream == "ORDERS"
    assert opts.connect.servers == "nats://127.0.0.1:4222"
    assert opts.starting is None
    assert opts.ending == "latest"
    assert opts.fail_on_data_loss is True
    assert opts.num_partitions is None
    opts = parse_source_options(
        {
            "stream": "S",
            "StartingOffsets": "EARLIEST",
            "endingoffsets": "42",
            "Subject": "a.*, b.>",
            "numPartitions": "3",
            "failOnDataLoss": "False",
            "maxRecordsPerTrigger": "10",
            "servers": "nats://a:1, nats://b:2",
            "startingTimestamp": "2026-01-31T12:00:00Z",
        },
        streaming=False,
    )
    assert opts.starting == "earliest"
    assert opts.ending == 42
    assert opts.subjects == ("a.*", "b.>")
    assert opts.num_partitions == 3
    assert opts.fail_on_data_loss is False
    assert opts.max_records_per_trigger == 10
    assert opts.connect.servers == "nats://a:1,nats://b:2"
    assert opts.starting_timestamp == datetime(2026, 1, 31, 12, tzinfo=UTC)


def test_json_offset_accepted() -> None:
    opts = parse_source_options(
        {"stream": "S", "startingOffsets": '{"stream": "S", "seq": 17}'}, streaming=True
    )
    assert opts.starting == 17
    with pytest.raises(InvalidOptionError, match="the offset is of stream 'OTHER', not 'S'"):
        parse_source_options(
            {"stream": "S", "startingOffsets": '{"stream": "OTHER", "seq": 17}'}, streaming=True
        )


def test_json_offset_of_one_stream_in_a_read_of_several() -> None:
    """A single stream's checkpoint offset in a read of several streams: it was taken
    as every stream's (the other streams silently started, or ended, at its sequence)."""
    offset = '{"stream": "A", "seq": 17, "created": "2026-11-25T02:11:20.101452+00:00"}'
    opts = parse_source_options({"streams": "A,B", "startingOffsets": offset}, streaming=True)
    assert (opts.starting_for("A"), opts.starting_for("B")) == (17, None)
    batch = parse_source_options({"streams": "A,B", "endingOffsets": offset}, streaming=False)
    assert (batch.ending_for("A"), batch.ending_for("B")) == (17, "latest")
    pattern = parse_source_options(
        {"streamPattern": "[AB]", "startingOffsets": offset}, streaming=True
    )
    assert (pattern.starting_for("A"), pattern.starting_for("B")) == (17, None)
    with pytest.raises(InvalidOptionError, match="names stream 'A', which is not read"):
        parse_source_options({"streams": "X,Y", "startingOffsets": offset}, streaming=True)
    with pytest.raises(InvalidOptionError, match="'A', which 'streamPattern'"):
        parse_source_options({"streamPattern": "X.*", "endingOffsets": offset}, streaming=False)
    with pytest.raises(InvalidOptionError, match="'startingOffsets'"):
        parse_source_options(
            {"streams": "A,B", "startingOffsets": '{"stream": "A", "seq": 0}'}, streaming=True
        )


@pytest.mark.parametrize(
    "offset",
    [
        # As checkpointed now (with the stream's creation time), in any key order.
        '{"stream": "S", "seq": 17, "created": "2026-11-25T02:11:20.101452+00:00"}',
        '{"seq": 17, "stream": "S"}',
        '{ "created": "x", "seq": 17, "stream": "S" }',
    ],
)
def test_json_offsets_as_checkpointed(offset: str) -> None:
    """The offset regex took only ``{"stream": .., "seq": ..}`` in that order: an offset
    copied from a checkpoint (which has "created" since) was refused."""
    opts = parse_source_options({"stream": "S", "startingOffsets": offset}, streaming=True)
    assert opts.starting == 17


@pytest.mark.parametrize(
    "offset",
    ['{"stream": "S"}', '{"stream": "S", "seq": "17"}', '{"stream": "S", "seq": 0}', "{", "[17]"],
)
def test_bad_json_offsets(offset: str) -> None:
    with pytest.raises(InvalidOptionError, match="'startingOffsets'"):
        parse_source_options({"stream": "S", "startingOffsets": offset}, streaming=True)


@pytest.mark.parametrize(
    ("options", "names"),
    [
        ({}, "exactly one of the options 'stream'.*got none"),
        ({"stream": "  "}, "exactly one of the options 'stream'.*got none"),
        ({"stream": "A", "streams": "A,B"}, "exactly one of .*got 'stream' and 'streams'"),
        ({"streams": "A,B", "streamPattern": "A.*"}, "got 'streams' and 'streamPattern'"),
        ({"streams": "A,,B"}, "option 'streams': invalid stream name ''"),
        ({"streamPattern": "A(["}, "option 'streamPattern': invalid regular expression"),
        ({"streams": "A,B", "startingOffsets": '{"C": 5}'}, "names stream 'C', which is not"),
        ({"streamPattern": "A-.*", "startingOffsets": '{"B": 5}'}, "'B', which 'streamPattern'"),
        ({"streams": "A", "startingOffsets": '{"A": 0}'}, "stream 'A': expected earliest"),
        ({"streams": "A", "startingOffsets": '{"A": true}'}, "stream 'A': expected earliest"),
        ({"streams": "A", "endingOffsets": '{"A": "earliest"}'}, "stream 'A': expected latest"),
        ({"streams": "A", "startingOffsets": "{nope"}, "'startingOffsets': not valid JSON"),
        (
            {"streams": "A,B", "startingOffsets": '{"A": 9}', "endingOffsets": '{"A": 3}'},
            r"\(3\) is before 'startingOffsets' \(9\) of stream 'A'",
        ),
        ({"stream": "S", "endingTimestamp": "later"}, "'endingTimestamp'"),
        ({"stream": "S", "minPartitions": "0"}, "'minPartitions'"),
        ({"stream": "S", "maxOffsetsPerTrigger": "x"}, "'maxOffsetsPerTrigger'"),
        (
            {"stream": "S", "maxOffsetsPerTrigger": "5", "maxRecordsPerTrigger": "6"},
            "same setting",
        ),
        (
            {"stream": "S", "maxOffsetsPerTrigger": "5", "minOffsetsPerTrigger": "6"},
            "'minOffsetsPerTrigger' \\(6\\) is above",
        ),
        ({"stream": "S", "maxTriggerDelay": "soon"}, "'maxTriggerDelay'"),
        ({"stream": "S", "maxTriggerDelay": "0s"}, "'maxTriggerDelay'"),
        ({"stream": "S", "maxBytesPerTrigger": "-5"}, "'maxBytesPerTrigger'"),
        ({"stream": "S", "retryTimeout": "0"}, "'retryTimeout'"),
        ({"stream": "S", "consumerNamePrefix": "a.b"}, "'consumerNamePrefix'"),
        ({"stream": "S", "consumerNamePrefix": "x" * 33}, "'consumerNamePrefix'"),
        ({"stream": "S", "startingTimestamp": "99999999999999999999"}, "out of range"),
        ({"stream": "a.b"}, "option 'stream': invalid name"),
        ({"stream": "S", "startingOffsets": "first"}, "'startingOffsets'"),
        ({"stream": "S", "startingOffsets": "1.5"}, "'startingOffsets'"),
        ({"stream": "S", "endingOffsets": "earliest"}, "'endingOffsets'"),
        ({"stream": "S", "startingOffsets": "9", "endingOffsets": "3"}, "is before"),
        ({"stream": "S", "startingTimestamp": "soon"}, "'startingTimestamp'"),
        ({"stream": "S", "numPartitions": "-1"}, "'numPartitions'"),
        ({"stream": "S", "maxRecordsPerTrigger": "0"}, "'maxRecordsPerTrigger'"),
        ({"stream": "S", "failOnDataLoss": "perhaps"}, "'failOnDataLoss'"),
        ({"stream": "S", "subject": "a.>.b"}, "'subject'"),
        ({"stream": "S", "subject": "a b"}, "'subject'"),
        ({"stream": "S", "subject": "a,,b"}, "'subject'"),
        ({"stream": "S", "subject": "a.a,a.a"}, "'a.a' and 'a.a' overlap"),
        ({"stream": "S", "subject": "s.>,s.a"}, "'s.>' and 's.a' overlap"),
        ({"stream": "S", "subject": "x,s.*.c,s.b.*"}, "'s.\\*.c' and 's.b.\\*' overlap"),
        ({"stream": "S", "subject": "s.*,s.a"}, "overlap"),
        ({"stream": "S", "servers": " , "}, "'servers'"),
        ({"stream": "S", "password": "p"}, "'password' needs 'user'"),
        ({"stream": "S", "tlsKeyFile": "k.pem"}, "'tlsKeyFile' needs 'tlsCertFile'"),
        ({"stream": "S", "inactiveThreshold": "0"}, "'inactiveThreshold'"),
        ({"stream": "S", "timeout": "nan"}, "'timeout'"),
    ],
)
def test_bad_source_options_name_the_option(options: dict[str, str], names: str) -> None:
    with pytest.raises(InvalidOptionError, match=names):
        parse_source_options(options, streaming=False)


@pytest.mark.parametrize(
    ("options", "where"),
    [
        ({"stream": "S", "startingOffsets": "latest"}, ""),
        ({"stream": "S", "startingOffsets": " LATEST "}, ""),
        ({"streams": "A,B", "startingOffsets": "latest"}, ""),
        ({"streams": "A,B", "startingOffsets": '{"A": 5, "B": "latest"}'}, " for stream 'B'"),
        ({"streamPattern": "A.*", "startingOffsets": '{"A1": "latest"}'}, " for stream 'A1'"),
    ],
)
def test_batch_reads_refuse_a_latest_start(options: dict[str, str], where: str) -> None:
    """Kafka: "starting offset can't be latest for batch queries". A batch read from
    the stream's end was accepted and always returned no rows."""
    with pytest.raises(
        InvalidOptionError,
        match=re.escape(f"option 'startingOffsets': 'latest'{where} applies to streaming"),
    ):
        parse_source_options(options, streaming=False)
    # A stream may start there; a batch read's startingTimestamp wins over startingOffsets.
    assert parse_source_options(options, streaming=True)
    assert parse_source_options({**options, "startingTimestamp": "0"}, streaming=False)
    assert parse_source_options(
        {
            **options,
            "startingOffsets": re.sub("latest", "earliest", options["startingOffsets"], flags=re.I),
        },
        streaming=False,
    )


def test_ending_offsets_batch_only() -> None:
    with pytest.raises(InvalidOptionError, match="batch reads only"):
        parse_source_options({"stream": "S", "endingOffsets": "5"}, streaming=True)


def test_unknown_option_fails_naming_it_and_the_valid_ones() -> None:
    with pytest.raises(
        InvalidOptionError, match="'startingoffset' \\(did you mean 'startingOffsets'"
    ) as err:
        parse_source_options({"stream": "S", "startingOffset": "earliest"}, streaming=False)
    assert "Valid options: apiPrefix, consumerNamePrefix," in str(err.value)
    assert "ignoreUnknownOptions=true" in str(err.value)
    with pytest.raises(InvalidOptionError, match=r"option 'bucket'\. Valid options") as err:
        parse_sink_options({"bucket": "x"})
    assert "did you mean" not in str(err.value)
    with pytest.raises(InvalidOptionError, match="'buckett' \\(did you mean 'bucket'"):
        parse_kv_options({"buckett": "x"})
    # ignoreUnknownOptions=true: a warning instead, as before.
    with pytest.warns(JetStreamSparkWarning, match="'startingoffset' is ignored"):
        parse_source_options(
            {"stream": "S", "startingOffset": "earliest", "ignoreUnknownOptions": "true"},
            streaming=False,
        )
    with pytest.warns(JetStreamSparkWarning, match="'bucket'"):
        parse_sink_options({"bucket": "x", "IGNOREUNKNOWNOPTIONS": "TRUE"})
    # Keys Spark adds itself are not warned about.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parse_sink_options({"checkpointLocation": "/tmp/x", "path": "p", "subject": "a.b"})


def test_sink_and_kv_options() -> None:
    sink = parse_sink_options({"Subject": "orders.copy", "DEDUPE": "Auto", "maxPending": "64"})
    assert (sink.subject, sink.dedupe, sink.max_pending) == ("orders.copy", "auto", 64)
    for bad, what in (
        ({"subject": "a.*"}, "'subject'"),
        ({"subject": "a b"}, "'subject'"),
        ({"dedupe": "yes"}, "'dedupe'"),
        ({"maxPending": "0"}, "'maxPending'"),
    ):
        with pytest.raises(InvalidOptionError, match=what):
            parse_sink_options(bad)
    kv = parse_kv_options({"Bucket": "totals"})
    assert kv.bucket == "totals"
    with pytest.raises(InvalidOptionError, match="'bucket' is required"):
        parse_kv_options({})
    with pytest.raises(InvalidOptionError, match="invalid bucket name"):
        parse_kv_options({"bucket": "to:tals"})


def test_connect_kwargs(tmp_path: Path) -> None:
    opts = parse_source_options(
        {"stream": "S", "user": "u", "password": "p", "domain": "hub"}, streaming=False
    )
    kwargs = opts.connect.connect_kwargs()
    assert kwargs["user"] == "u"
    assert kwargs["password"] == "p"
    assert kwargs["domain"] == "hub"
    assert "tls" not in kwargs
    prefixed = parse_source_options({"stream": "S", "apiPrefix": "$X.API"}, streaming=False)
    assert prefixed.connect.connect_kwargs()["api_prefix"] == "$X.API"
    assert "p" not in opts.connect.describe()
    with pytest.raises(InvalidOptionError, match="URL 1 of 2 has credentials in it"):
        parse_source_options(
            {"stream": "S", "servers": "nats://u:pw@a:4222,nats://b:4222"}, streaming=False
        )
    creds = str(Operator(tmp_path).user_creds("c"))  # read where the connection opens
    token = parse_source_options({"stream": "S", "token": "t", "creds": creds}, streaming=False)
    kwargs = token.connect.connect_kwargs()
    assert (kwargs["token"], kwargs["user_credentials"]) == ("t", creds)


def test_domain_and_api_prefix_exclude_each_other() -> None:
    """Given both, connect() took the domain and dropped apiPrefix without a word (the
    command line refuses the pair): refused before anything is sent, whatever the
    options' case, for reads and writes."""
    for pair in ({"domain": "hub", "apiPrefix": "fromA"}, {"DOMAIN": "hub", "apiprefix": "x"}):
        with pytest.raises(InvalidOptionError, match="'domain' and 'apiPrefix' exclude"):
            parse_source_options({"stream": "S", **pair}, streaming=False)
        with pytest.raises(InvalidOptionError, match="'domain' and 'apiPrefix' exclude"):
            parse_sink_options({"subject": "s", **pair})
        with pytest.raises(InvalidOptionError, match="'domain' and 'apiPrefix' exclude"):
            parse_kv_options({"bucket": "b", **pair})


def test_inbox_prefix() -> None:
    """``inboxPrefix``: nats-py's ``inbox_prefix`` for the source, the sink and the KV format."""
    source = parse_source_options({"stream": "S", "InboxPrefix": "_INBOX_etl"}, streaming=False)
    assert source.connect.connect_kwargs()["inbox_prefix"] == "_INBOX_etl"
    sink = parse_sink_options({"subject": "s.x", "inboxPrefix": " _INBOX.etl. "})
    assert sink.connect.connect_kwargs()["inbox_prefix"] == "_INBOX.etl"
    assert parse_kv_options({"bucket": "b", "inboxPrefix": "_I"}).connect.inbox_prefix == "_I"
    assert "inbox_prefix" not in parse_sink_options({"subject": "s.x"}).connect.connect_kwargs()
    for bad in ("_INBOX.*", "a.>", "a b", "a..b", ".", "a\x01b"):
        with pytest.raises(InvalidOptionError, match=r"^option 'inboxPrefix': invalid prefix"):
            parse_sink_options({"subject": "s.x", "inboxPrefix": bad})


@given(
    start=st.integers(1, 10**12),
    total=st.integers(0, 10**7),
    parts=st.one_of(st.none(), st.integers(1, 200)),
)
def test_split_is_contiguous_and_balanced(start: int, total: int, parts: int | None) -> None:
    ranges = split(start, start + total, parts)
    if total == 0:
        assert ranges == []
        return
    assert ranges[0][0] == start
    assert ranges[-1][1] == start + total
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    sizes = [hi - lo for lo, hi in ranges]
    assert min(sizes) >= 1
    assert max(sizes) - min(sizes) <= 1
    if parts is not None:
        assert len(ranges) == min(parts, total)
    else:
        assert 1 <= len(ranges) <= 64
        assert len(ranges) == min(64, -(-total // SEQUENCES_PER_PARTITION))


def test_check_loss() -> None:
    strict = parse_source_options({"stream": "S"}, streaming=True)
    assert check_loss(strict, 10, 10, "x") == 10
    assert check_loss(strict, 11, 10, "x") == 11
    with pytest.raises(DataLossError, match=r"no longer holds sequences 3\.\.9"):
        check_loss(strict, 3, 10, "checkpointed offset")
    lenient = parse_source_options({"stream": "S", "failOnDataLoss": "false"}, streaming=True)
    with pytest.warns(JetStreamSparkWarning, match=r"3\.\.9 .*skipped"):
        assert check_loss(lenient, 3, 10, "checkpointed offset") == 10


def test_data_loss_warnings_are_not_kept_in_the_warnings_registry() -> None:
    """Each text (its sequences) stayed in the caller's ``__warningregistry__`` for ever:
    one entry per micro-batch that skipped data, under the default filter."""
    lenient = parse_source_options({"stream": "S", "failOnDataLoss": "false"}, streaming=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for i in range(50):
            assert check_loss(lenient, 100 * i, 100 * i + 10, "offset") == 100 * i + 10
        check_loss(lenient, 0, 10, "offset")  # the same text again: shown again
        registry = globals().get("__warningregistry__", {})
        assert [key for key in registry if key != "version"] == []
    assert len(caught) == 51
    assert all(w.category is JetStreamSparkWarning for w in caught)
    assert "sequences 4900..4909 (offset)" in str(caught[49].message)
    assert caught[0].filename == __file__  # the caller's line, as with stacklevel=2


def test_a_condition_found_at_every_trigger_is_warned_once() -> None:
    """Found behind its stream or of an earlier stream of that name, an offset is found
    so again at each trigger until a batch moves on: one warning, not one per trigger."""
    from aiojetstream.spark._offsets import Position
    from aiojetstream.spark._read import Bounds
    from aiojetstream.spark._source import StreamReader

    r = StreamReader(
        parse_source_options({"stream": "S", "failOnDataLoss": "false"}, streaming=True)
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for stream_next in (5, 6, 7):  # the stream grows; the offset waits at 10
            r._behind("S", 10, stream_next)
        r._behind("S", 12, 7)
        old = Position(3, created="2024-01-01T00:00:00Z")
        for _ in range(3):
            assert r._recreated("S", old, Bounds(1, 5, created="2025-01-01T00:00:00Z"))
        assert r._recreated("S", old, Bounds(1, 5, created="2026-01-01T00:00:00Z"))
    texts = [str(w.message) for w in caught]
    assert len(texts) == 4, texts
    assert "offset is 10" in texts[0]
    assert "offset is 12" in texts[1]
    assert "created at 2025" in texts[2]
    assert "created at 2026" in texts[3]


def _msg(reply: str) -> Msg:
    return Msg(b"s", reply.encode(), b"", None, None)  # type: ignore[arg-type]


V1 = "$JS.ACK.S.C.1.{seq}.7.{ns}.{pending}"
V2 = "$JS.ACK.hub.ACCHASH.S.C.1.{seq}.7.{ns}.{pending}.xyz"


def _ns(seq: int) -> int:
    return 1_700_000_000_123_456_000 + seq * 1000 + 999  # 999 ns below the next microsecond


@pytest.mark.parametrize(
    "forms",
    [[V1] * 3, [V2] * 3, [V1, V2, V1]],  # a mix takes the one-by-one path
    ids=["v1", "v2", "mixed"],
)
def test_reply_numbers_column_wise(forms: list[str]) -> None:
    msgs = [
        _msg(form.format(seq=seq, ns=_ns(seq), pending=50 - seq))
        for seq, form in enumerate(forms, 40)
    ]
    seqs, stamps, pending = _numbers(pa.array([m.reply for m in msgs], pa.string()))
    assert seqs.to_pylist() == [40, 41, 42]
    assert seqs.type == pa.int64()
    # whole microseconds of the nanosecond timestamps, as UTC timestamps
    micros = [1_700_000_000_123_456 + seq for seq in (40, 41, 42)]
    assert pc.cast(stamps, pa.int64()).to_pylist() == micros
    assert stamps.type == pa.timestamp("us", tz="UTC")
    assert pending == 50 - 42


def _generic_numbers(replies: pa.Array) -> tuple[list[int], list[int], int]:
    # _numbers split token by token: what its shared-prefix shortcut must give.
    rows = [r.split(".") for r in replies.to_pylist()]
    bases = [2 if len(t) == 9 else 4 for t in rows]
    seqs = [int(t[b + 3]) for b, t in zip(bases, rows, strict=True)]
    micros = [int(t[b + 5]) // 1000 for b, t in zip(bases, rows, strict=True)]
    return seqs, micros, int(rows[-1][bases[-1] + 6])


@pytest.mark.parametrize(
    ("replies", "shortcut"),
    [
        ([V1.format(seq=s, ns=_ns(s), pending=9 - s) for s in range(1, 5)], True),
        ([V2.format(seq=s, ns=_ns(s), pending=9 - s) for s in range(1, 5)], True),
        # v2 with more tokens after the random one, not the same number on each
        (
            [V2.format(seq=1, ns=_ns(1), pending=1) + ".a.b", V2.format(seq=2, ns=5, pending=0)],
            True,
        ),
        # stream and consumer names of any characters (the prefix is cut in bytes)
        (["$JS.ACK.Strøm.Ç.1.3.3.5000.1", "$JS.ACK.Strøm.Ç.1.4.4.6000.0"], True),
        # a redelivery: the delivery count differs, the prefix with it
        (["$JS.ACK.S.C.1.3.3.5000.1", "$JS.ACK.S.C.2.4.4.6000.0"], False),
        # another consumer's reply (no prefix shared)
        (["$JS.ACK.S.C.1.3.3.5000.1", "$JS.ACK.S.D.1.4.4.6000.0"], False),
        # a v2 reply that starts like the first (v1) one: its rest has more tokens
        (["$JS.ACK.S.C.1.3.3.5000.1", "$JS.ACK.S.C.1.S.C.1.4.4.6000.0.r"], False),
        # a reply after a v2 one whose prefix it shares, its rest too short (10 tokens)
        (["$JS.ACK.h.A.S.C.1.3.3.5000.1.r", "$JS.ACK.h.A.S.C.1.3.5000.1"], False),
        # v2 without the random last token (11 tokens: nats.go and nats.js read it)
        (["$JS.ACK.h.A.S.C.1.3.3.5000.1", "$JS.ACK.h.A.S.C.1.4.4.6000.0"], True),
        # ... and mixed with the 12-token form
        (["$JS.ACK.h.A.S.C.1.3.3.5000.1.r", "$JS.ACK.h.B.S.C.1.4.4.6000.0"], False),
    ],
    ids=[
        "v1",
        "v2",
        "v2-more-tokens",
        "non-ascii",
        "redelivery",
        "mixed",
        "v1-v2",
        "v2-v1",
        "v2-11",
        "v2-11-12",
    ],
)
def test_reply_numbers_by_a_shared_prefix(replies: list[str], shortcut: bool) -> None:
    from aiojetstream.spark._read import _same_prefix_numbers

    column = pa.array(replies, pa.string())
    fast = _same_prefix_numbers(column)
    assert (fast is not None) is shortcut
    if replies[-1].count(".") == 9:  # 10 tokens: no $JS.ACK subject, as without the shortcut
        from aiojetstream import InvalidResponseError

        with pytest.raises(InvalidResponseError, match="10 tokens"):
            _numbers(column)
        return
    seqs, stamps, pending = _numbers(column)
    assert (seqs.to_pylist(), pc.cast(stamps, pa.int64()).to_pylist(), pending) == (
        _generic_numbers(column)
    )
    if fast is not None:
        assert fast[0].equals(seqs)
        assert fast[1].equals(stamps)
        assert fast[2] == pending


@pytest.mark.parametrize(
    "replies",
    [
        # one form, no prefix shared (a redelivery, another consumer): split column-wise
        [
            "$JS.ACK.S.C.1.40.7.{ns40}.9",
            "$JS.ACK.S.C.2.41.8.{ns41}.8",
            "$JS.ACK.S.D.1.42.3.{ns42}.2",
        ],
        [
            "$JS.ACK.h.A.S.C.1.40.7.{ns40}.9.r",
            "$JS.ACK.h.A.S.C.2.41.8.{ns41}.8.r",
            "$JS.ACK.h.B.S.C.1.42.3.{ns42}.2",  # 11 tokens: no random last one
        ],
        # both forms in one column: split reply by reply
        [
            "$JS.ACK.S.C.1.40.7.{ns40}.9",
            "$JS.ACK.h.A.S.C.1.41.8.{ns41}.8.r",
            "$JS.ACK.S.C.1.42.3.{ns42}.2",
        ],
    ],
    ids=["v1", "v2", "v1-and-v2"],
)
def test_reply_numbers_without_the_shared_prefix_shortcut(replies: list[str]) -> None:
    """Stream sequences, not consumer sequences (the token after), in the ``seq``
    column of the paths that split every reply (the other tests had both equal)."""
    from aiojetstream.spark._read import _same_prefix_numbers

    column = pa.array([r.format(ns40=_ns(40), ns41=_ns(41), ns42=_ns(42)) for r in replies])
    assert _same_prefix_numbers(column) is None
    seqs, stamps, pending = _numbers(column)
    assert seqs.to_pylist() == [40, 41, 42]
    assert pc.cast(stamps, pa.int64()).to_pylist() == [_ns(seq) // 1000 for seq in (40, 41, 42)]
    assert pending == 2


def test_extension_uses_only_the_public_api() -> None:
    """ARCHITECTURE.md: extensions import aiojetstream as a user would, never ``_private``."""
    offenders = []
    cli = SPARK_DIR.parent / "cli"
    for path in sorted([*SPARK_DIR.glob("*.py"), *cli.glob("*.py")]):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level >= 2:
                # (relative, out of the extension's package: the library's own modules)
                offenders.append(f"{path.name}: from {'.' * node.level}{node.module or ''}")
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                parts = node.module.split(".")
                if parts[0] == "aiojetstream" and any(p.startswith("_") for p in parts[1:]):
                    offenders.append(f"{path.name}: from {node.module}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    parts = alias.name.split(".")
                    if parts[0] == "aiojetstream" and any(p.startswith("_") for p in parts[1:]):
                        offenders.append(f"{path.name}: import {alias.name}")
    assert offenders == []


def test_spark_public_names_are_pinned() -> None:
    import aiojetstream.spark

    assert aiojetstream.spark.__all__ == [
        "DataLossError",
        "JetStreamDataSource",
        "JetStreamKVDataSource",
        "JetStreamSparkWarning",
        "register",
    ]
    assert aiojetstream.spark.JetStreamDataSource.name() == "jetstream"
    assert aiojetstream.spark.JetStreamKVDataSource.name() == "jetstream_kv"
    import pyspark_jetstream
    import pyspark_jetstream_kv

    assert pyspark_jetstream.DefaultSource is aiojetstream.spark.JetStreamDataSource
    assert pyspark_jetstream_kv.DefaultSource is aiojetstream.spark.JetStreamKVDataSource


def test_tls_options_make_every_url_tls() -> None:
    servers = "nats://a:4222, b:4222,tls://c:4443,NATS://d:4222,ws://e:8080,wss://f:443"
    plain = parse_source_options({"stream": "S", "servers": servers}, streaming=False)
    assert plain.connect.urls() == plain.connect.servers  # no TLS option: as given
    for option in ("tlsCaFile", "tlsCertFile"):
        opts = parse_source_options(
            {"stream": "S", "servers": servers, option: "x.pem"}, streaming=False
        )
        assert opts.connect.urls().split(",") == [
            "tls://a:4222",
            "tls://b:4222",
            "tls://c:4443",
            "tls://d:4222",
            "wss://e:8080",
            "wss://f:443",
        ]


@pytest.mark.parametrize(
    "headers",
    [
        None,
        {},
        {"KV-Operation": "DEL"},
        {"KV-Operation": "PURGE"},
        {"KV-Operation": "PUT"},
        {"KV-Operation": "SOMETHING-NEW"},
        {"Nats-Marker-Reason": "MaxAge"},
        {"Nats-Marker-Reason": "Remove"},
        {"Nats-Marker-Reason": ""},
        {"X-Other": "1"},
    ],
)
def test_kv_read_leaves_out_what_kv_get_treats_as_no_value(headers: dict[str, str] | None) -> None:
    from aiojetstream import KeyValueOp
    from aiojetstream._kv import entry_operation
    from aiojetstream.spark._kv import _marker

    assert _marker(headers) == (entry_operation(headers) is not KeyValueOp.PUT)


def test_a_reply_that_is_no_ack_subject_is_an_invalid_response() -> None:
    from aiojetstream import InvalidResponseError

    replies = [V1.format(seq=1, ns=_ns(1), pending=1), "$JS.ACK.S.C.1.2"]
    with pytest.raises(InvalidResponseError, match="6 tokens"):
        _numbers(pa.array(replies, pa.string()))


def test_the_spark_telemetry_option() -> None:
    from aiojetstream.spark._options import parse_sink_options

    def parsed(value: str | None) -> str | None:
        options = {"subject": "a.b"} if value is None else {"subject": "a.b", "telemetry": value}
        return parse_sink_options(options).connect.telemetry

    assert parsed(None) is None
    assert parsed("false") is None
    assert parsed("True") == "true"
    assert parsed(" mypkg.otel:configure ") == "mypkg.otel:configure"
    for bad in ("yes", "mypkg.otel", "mypkg:", "my-pkg:configure"):
        with pytest.raises(InvalidOptionError, match="option 'telemetry'"):
            parsed(bad)
    # Not part of the connection's identity: one shared connection either way.
    assert parse_sink_options({"subject": "a.b", "telemetry": "true"}).connect == (
        parse_sink_options({"subject": "a.b"}).connect
    )


@pytest.mark.parametrize(
    "value",
    [
        "-----BEGIN NATS USER JWT-----\neyJ0eXAi.eyJqdGki.sig\n------END NATS USER JWT------\n",
        "SUAMLK2ZNL35WSMW37E7UD4VZ7ELPKW7DHC3BWBSD2GCZ7IUQQXZIORRBU",
        "-----BEGIN NATS USER JWT----- eyJ0eXAi",
    ],
)
def test_creds_text_or_seed_in_place_of_a_path_is_refused_unquoted(value: str) -> None:
    """The option 'creds' takes a path; its text (or a seed) there reached nats-py,
    whose error quoted it as the file name it could not open."""
    for streaming in (True, False):
        with pytest.raises(InvalidOptionError, match="credsSecret") as exc:
            parse_source_options({"stream": "S", "creds": value}, streaming=streaming)
        assert "SUAMLK2Z" not in str(exc.value)
        assert "eyJ0eXAi" not in str(exc.value)
    with pytest.raises(InvalidOptionError, match="credsSecret"):
        parse_sink_options({"subject": "s", "creds": value})
    ok = parse_source_options({"stream": "S", "creds": "/etc/nats/user.creds"}, streaming=True)
    assert ok.connect.creds == "/etc/nats/user.creds"


@pytest.mark.parametrize("text", [pa.string(), pa.large_string()])
def test_header_ids_of_a_sink_batch(text: pa.DataType) -> None:
    """dedupe=auto takes a row's own Nats-Msg-Id header (as it goes out: stripped, an
    empty one is none); maps of large strings (useLargeVarTypes) raised ArrowTypeError."""
    from aiojetstream.spark._write import _header_ids

    rows = [
        [("Nats-Msg-Id", "orig-1"), ("X", "1")],
        [("X", "2")],
        None,
        [("Nats-Msg-Id", " p ")],
        [("Nats-Msg-Id", "  ")],
        [("nats-msg-id", "lower")],
    ]
    headers = pa.array(rows, pa.map_(text, text))
    ids = _header_ids(headers)
    assert ids is not None
    assert ids.to_pylist() == ["orig-1", None, None, "p", None, None]
    assert _header_ids(pa.array([[("X", "2")], None], pa.map_(text, text))) is None


def test_a_writes_commit_warns_of_rows_dropped_as_duplicates() -> None:
    """The count of duplicates was an INFO log line only, invisible at Spark's default
    WARN level: rows that shared an id were dropped with no visible sign."""
    from pyspark.sql.types import StringType, StructField, StructType

    from aiojetstream.spark._write import StreamWriter, Writer, WriteResult, check_sink_schema

    opts = parse_sink_options({"subject": "s.x"})
    columns = check_sink_schema(StructType([StructField("data", StringType())]), opts)
    results: list[Any] = [WriteResult(rows=3, duplicates=1), WriteResult(rows=4), None]
    with pytest.warns(JetStreamSparkWarning, match=r"the write published 7 rows; .* dropped 1 "):
        Writer(opts, columns).commit(results)
    with pytest.warns(JetStreamSparkWarning, match=r"micro-batch 5 published 7 rows; .*dropped 1"):
        StreamWriter(opts, columns).commit(results, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Writer(opts, columns).commit([WriteResult(rows=3)])
        StreamWriter(opts, columns).commit([WriteResult(rows=3)], 6)
