"""The command line's pure parts: parsing and showing durations and sizes, errors, imports."""

from __future__ import annotations

import ast
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pydantic
import pytest
import typer
from hypothesis import given
from hypothesis import strategies as st
from rich.progress import Progress

import aiojetstream
from aiojetstream._validation import subject_covers
from aiojetstream.cli._bench import BenchResult, _stores, percentile
from aiojetstream.cli._common import (
    CliError,
    CliUsageError,
    Options,
    describe_error,
    guarded,
    payload_fields,
    to_jsonable,
)
from aiojetstream.cli._consumer import parse_until
from aiojetstream.cli._messages import parse_headers
from aiojetstream.cli._obj import ByteRateColumn, BytesColumn
from aiojetstream.cli._stream import config_from, list_values
from aiojetstream.cli._units import (
    format_age,
    format_bytes,
    format_duration,
    format_limit,
    format_time,
    parse_duration,
    parse_marker_ttl,
    parse_size,
)

CLI_DIR = Path(aiojetstream.__file__).parent / "cli"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30", 30),
        ("1.5", 1.5),
        ("500ms", 0.5),
        ("90s", 90),
        ("1h30m", 5400),
        ("2d", 172800),
        ("1w", 604800),
        ("1m0.5s", 60.5),
        ("250us", 0.00025),
        (" 10s ", 10),
        ("0", 0),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "soon", "1x", "h", "1h 30m", "1.2.3s", "10s!", "1h-30m"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(typer.BadParameter, match="not a duration"):
        parse_duration(text)


def test_parse_duration_refuses_what_the_library_refuses_in_its_words() -> None:
    for text, words in (
        ("-5s", "can not be negative"),
        ("1M", "months and years have no fixed length"),
        ("9999999999d", "is too long: the server's durations are int64 nanoseconds"),
    ):
        with pytest.raises(typer.BadParameter, match=words):
            parse_duration(text)


@given(st.integers(min_value=1, max_value=10**8))
def test_format_duration_round_trips_whole_seconds(seconds: int) -> None:
    td = timedelta(seconds=seconds)
    assert parse_duration(format_duration(td)) == td


def test_format_duration() -> None:
    assert format_duration(None) == "-"
    assert format_duration(timedelta(0)) == "-"
    assert format_duration(timedelta(milliseconds=250)) == "250ms"
    assert format_duration(timedelta(seconds=1.5)) == "1.5s"
    assert format_duration(timedelta(minutes=9, seconds=59.9988)) == "10m"
    assert format_duration(timedelta(days=2, hours=3)) == "2d3h"


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("512", 512),
        ("512B", 512),
        ("64KiB", 65536),
        ("64K", 65536),
        ("10MB", 10_000_000),
        ("1MiB", 1 << 20),
        ("1G", 1 << 30),
        ("1.5GB", 1_500_000_000),
        ("8.2GB", 8_200_000_000),  # exact (through a float: 8,199,999,999)
        ("9007199254740993", 9007199254740993),
        ("2t", 2 << 40),
        ("-1", -1),
    ],
)
def test_parse_size(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "lots", "1X", "1iB", "-2", "K"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(typer.BadParameter, match="not a size"):
        parse_size(text)


def test_defaults_pass_through_the_parsers() -> None:
    # Typer hands a parameter's (already typed) default to its parser.
    assert parse_size(128) == 128
    assert parse_duration(timedelta(seconds=3)) == timedelta(seconds=3)


def test_format_bytes_time_and_age() -> None:
    assert format_bytes(-1) == "unlimited"
    assert format_bytes(0) == "0 B"
    assert format_bytes(1536) == "1.5 KiB"
    assert format_bytes(3 << 30) == "3.0 GiB"
    moment = datetime(2026, 1, 2, 15, 4, 5, 999, tzinfo=UTC)
    assert format_time(moment) == "2026-01-02 15:04:05 UTC"  # the zone said (it had none)
    tokyo = timezone(timedelta(hours=9))
    assert format_time(datetime(2026, 1, 3, 0, 4, 5, tzinfo=tokyo)) == "2026-01-02 15:04:05 UTC"
    assert format_time(None) == "-"
    assert format_limit(None) == format_limit(-1) == "unlimited"
    assert format_limit(1 << 20) == "1.0 MiB"
    assert format_limit(1536) == "1.5 KiB"
    assert format_limit(512) == "512 B"
    assert format_limit(10_000_000) == "9.5 MiB (10,000,000 bytes)"
    assert format_age(moment, moment + timedelta(seconds=42)) == "42s"
    assert format_age(moment, moment + timedelta(hours=3, minutes=5)) == "3h"
    assert format_age(moment, moment - timedelta(seconds=5)) == "0s"  # clock skew
    assert format_age(None) == "-"


@pytest.mark.parametrize(
    ("done", "total", "shown"),
    [
        (0, None, "0 B"),
        (1536, None, "1.5 KiB"),
        (900, 900, "900/900 B"),
        (1_500_000, 3_000_000, "1.4/2.9 MiB"),  # Rich's own columns: 1.5/3.0 MB
        (1 << 30, 3 << 30, "1.0/3.0 GiB"),
        (5, -1, "5 B"),  # a negative total is unknown too (was: "unlimited", a ValueError)
    ],
)
def test_transfer_bar_sizes_are_format_bytes_units(
    done: int, total: int | None, shown: str
) -> None:
    progress = Progress()
    task = progress.add_task("x", total=total, completed=done)
    assert BytesColumn().render(progress.tasks[task]).plain == shown
    assert ByteRateColumn().render(progress.tasks[task]).plain == "?"  # no rate yet


def test_parse_headers() -> None:
    assert parse_headers(None) is None
    assert parse_headers(["a:1", "B: two words ", "empty:"]) == {
        "a": "1",
        "B": "two words",
        "empty": "",
    }
    assert parse_headers(["url:http://x:1"]) == {"url": "http://x:1"}
    for bad in ("novalue", ":x", " :x"):
        with pytest.raises(typer.BadParameter, match="NAME:VALUE"):
            parse_headers([bad])


def test_parse_until() -> None:
    assert parse_until("10m") == timedelta(minutes=10)
    assert parse_until("2030-01-01T12:00:00Z") == datetime(2030, 1, 1, 12, tzinfo=UTC)
    naive = parse_until("2030-01-01T12:00:00")
    assert isinstance(naive, datetime)
    assert naive.tzinfo is not None  # taken as local time
    with pytest.raises(typer.BadParameter):
        parse_until("someday")


@pytest.mark.parametrize(
    ("zone", "text"),
    [("America/New_York", "9999-12-31T23:59:59"), ("Asia/Tokyo", "0001-01-01T00:00:00")],
)
def test_parse_until_a_local_time_past_the_calendar_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, zone: str, text: str
) -> None:
    """In UTC it falls outside years 1-9999: OverflowError / ValueError tracebacks."""
    monkeypatch.setenv("TZ", zone)
    time.tzset()
    try:
        with pytest.raises(typer.BadParameter, match="outside the years 1 to 9999"):
            parse_until(text)
    finally:
        monkeypatch.undo()
        time.tzset()


def test_list_values() -> None:
    assert list_values(None) is None
    assert list_values([]) is None
    assert list_values(["a.>,b.*", " c ", ","]) == ["a.>", "b.*", "c"]


def test_config_from_reads_server_json_and_applies_options() -> None:
    base = {"name": "S", "subjects": ["s.>"], "max_age": 3_600_000_000_000, "new_field": 1}
    cfg = config_from(base, {"max_msgs": 5, "max_age": None, "description": "d"})
    assert cfg.max_age == timedelta(hours=1)  # nanoseconds, as the server writes them
    assert cfg.max_msgs == 5
    assert cfg.description == "d"
    assert cfg.model_extra == {"new_field": 1}  # fields of newer servers are kept
    with pytest.raises(pydantic.ValidationError):
        config_from({"name": "S", "max_msgs": "many"}, {})


def test_percentile_and_bench_result() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 50
    assert percentile(values, 0.99) == 99
    assert percentile(values, 1.0) == 100
    assert percentile([7.0], 0.9) == 7
    with pytest.raises(ValueError, match="no values"):
        percentile([], 0.5)
    result = BenchResult("pub", 100, 10, 0.5, [3.0, 1.0, 2.0], "ack latency").as_dict()
    assert result["msgs_per_second"] == 200
    assert result["bytes_per_second"] == 2000
    assert result["ack_latency_ms"] == {"p50": 2.0, "p90": 3.0, "p99": 3.0, "max": 3.0}
    assert "ack_latency_ms" not in BenchResult("pub", 1, 1, 1.0).as_dict()


def test_describe_error_is_one_line() -> None:
    assert describe_error(CliError("bad\n  input")) == "bad input"
    assert describe_error(aiojetstream.StreamNotFoundError(404, 10059, "stream not found")) == (
        "stream not found (code=404, err_code=10059)"
    )
    assert describe_error(FileNotFoundError(2, "No such file or directory", "x.json")) == (
        "x.json: No such file or directory"
    )
    assert describe_error(TimeoutError()) == "timed out"
    try:
        aiojetstream.StreamConfig(name="S", max_agee=1)
    except pydantic.ValidationError as exc:
        text = describe_error(exc)
    assert "\n" not in text
    assert text.startswith("invalid StreamConfig: ")
    assert "max_agee" in text


def test_payload_fields_and_json() -> None:
    assert payload_fields(b"text") == {"data": "text"}
    assert payload_fields(b"\xff\x00", "value") == {"value_base64": "/wA="}
    moment = datetime(2026, 1, 2, tzinfo=UTC)
    data = to_jsonable({"t": moment, "d": timedelta(seconds=2), "b": b"\xff", "l": (1, b"x")})
    assert json.loads(json.dumps(data)) == {
        "t": "2026-01-02T00:00:00Z",
        "d": 2_000_000_000,
        "b": "/w==",
        "l": [1, "x"],
    }
    # Durations as exact nanoseconds: a float lost the last ones past about 104 days,
    # and a server duration's sub-microsecond part.
    from aiojetstream._models._base import ns_to_duration

    assert to_jsonable(timedelta(days=200, microseconds=1)) == 200 * 86_400 * 10**9 + 1000
    assert to_jsonable(ns_to_duration(1500)) == 1500
    assert to_jsonable(ns_to_duration(2**63 - 1)) == 2**63 - 1


def test_connect_options(tmp_path: Path) -> None:
    assert Options().connect_kwargs() == {"timeout": 5.0, "domain": None}
    creds, seed = tmp_path / "a.creds", tmp_path / "u.nk"
    creds.write_text("creds")
    seed.write_text("seed")
    kwargs = Options(user="u", password="p", creds=creds, nkey=seed).connect_kwargs()
    assert kwargs["user"] == "u"
    assert kwargs["password"] == "p"
    assert kwargs["user_credentials"] == str(creds)
    assert kwargs["nkeys_seed"] == str(seed)
    # A file that can not be read: a usage error before connecting (it was passed on, and
    # a server without authentication never read it).
    with pytest.raises(CliUsageError, match=r"'/nonexistent.creds': No such file"):
        Options(creds=Path("/nonexistent.creds")).connect_kwargs()
    with pytest.raises(CliUsageError, match=r": Is a directory"):
        Options(nkey=tmp_path).connect_kwargs()
    assert Options(token="t", domain="hub").connect_kwargs()["token"] == "t"
    assert Options(js_api_prefix="fromA").connect_kwargs()["api_prefix"] == "fromA"
    with pytest.raises(CliUsageError, match="--js-api-prefix and --domain exclude each other"):
        Options(js_api_prefix="fromA", domain="hub").connect_kwargs()
    with pytest.raises(CliError, match="--password needs --user"):
        Options(password="p").connect_kwargs()
    with pytest.raises(CliError, match="--password needs --user"):  # the URL's user: no
        Options(servers="nats://u:p@h:4222", password="p").connect_kwargs()
    with pytest.raises(CliUsageError, match=r"\(here NATS_PASSWORD, from the environment\)"):
        Options(password="p", password_from_env=True).connect_kwargs()
    from_url = Options(servers="nats://u:p@h:4222", password="env", password_from_env=True)
    assert "password" not in from_url.connect_kwargs()  # the URL's pair is used
    with_user = Options(
        servers="nats://u:p@h:4222", user="v", password="env", password_from_env=True
    )
    assert with_user.connect_kwargs()["password"] == "env"
    with pytest.raises(CliError, match="--tls-key needs --tls-cert"):
        Options(tls_key=Path("k.pem")).connect_kwargs()
    with pytest.raises(CliError, match=r"--tls-ca /nonexistent/ca.pem: No such file"):
        Options(tls_ca=Path("/nonexistent/ca.pem")).connect_kwargs()
    with pytest.raises(CliError, match=r"--tls-cert /nonexistent/c.pem, k.pem: No such file"):
        Options(tls_cert=Path("/nonexistent/c.pem"), tls_key=Path("k.pem")).connect_kwargs()


def test_cli_uses_only_the_public_api() -> None:
    """Like spark/, the command line is a client of the public API (ARCHITECTURE.md)."""
    offenders = []
    for path in sorted(CLI_DIR.glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module + "." + alias.name for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                parts = name.split(".")
                if parts[0] == "aiojetstream" and any(p.startswith("_") for p in parts[1:]):
                    offenders.append(f"{path.name}: {name}")
    assert offenders == []


def test_guarded_turns_errors_into_one_line_and_an_exit_code(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def fail(exc: BaseException) -> Callable[[], None]:
        def raise_it() -> None:
            raise exc

        return raise_it

    with pytest.raises(typer.Exit) as exited:
        guarded(Options(), fail(aiojetstream.KeyNotFoundError("key 'x' not found")))
    assert exited.value.exit_code == 1
    assert capsys.readouterr().err == "error: key 'x' not found\n"
    with pytest.raises(typer.Exit) as exited:
        guarded(Options(), fail(TypeError("a bug")))
    assert exited.value.exit_code == 1
    assert capsys.readouterr().err == (
        "error: unexpected TypeError: a bug (--debug shows the traceback)\n"
    )
    with pytest.raises(typer.Exit) as exited:
        guarded(Options(), fail(KeyboardInterrupt()))
    assert exited.value.exit_code == 130
    assert capsys.readouterr().err == ""
    # --debug raises the error itself; the command line's own exits pass through.
    with pytest.raises(TypeError, match="a bug"):
        guarded(Options(debug=True), fail(TypeError("a bug")))
    with pytest.raises(typer.BadParameter):
        guarded(Options(), fail(typer.BadParameter("usage")))
    with pytest.raises(typer.Exit) as exited:
        guarded(Options(), fail(typer.Exit(3)))
    assert exited.value.exit_code == 3
    assert guarded(Options(), lambda: 42) == 42


def test_global_options_repr_shows_no_secret() -> None:
    from aiojetstream.cli._common import Options

    shown = repr(Options(user="alice", password="pa:ss/w@rd", token="t0ken-42"))
    assert "alice" in shown
    assert "pa:ss/w@rd" not in shown
    assert "t0ken-42" not in shown


def test_bench_stream_subject_matching() -> None:
    """NATS wildcards: ``*`` one token, ``>`` one or more at the end."""
    for pattern, subject, stored in (
        ("a.b", "a.b", True),
        ("a.>", "a.b", True),
        ("a.>", "a.b.c", True),
        ("a.>", "a", False),
        ("a.*", "a.b", True),
        ("a.*", "a.b.c", False),
        ("*.b", "a.b", True),
        (">", "a.b.c", True),
        ("a.b", "a.b.c", False),
        ("a.*", "a.>", False),  # a filter wider than the stream's subjects
        ("a.>", "a.*", True),
        ("a.*", "a.*", True),
    ):
        assert _stores(pattern, subject) is stored, (pattern, subject)
        assert subject_covers(pattern, subject) is stored, (pattern, subject)  # the library's


def test_the_command_lines_bounds_are_the_librarys() -> None:
    """``--timeout`` / ``--idle`` and sequences are bounded in Typer (usage errors, exit 2)
    by the library's numbers: the root can not import the library's private modules."""
    from aiojetstream import _bounds
    from aiojetstream.cli import MAX_SEQUENCE, MAX_WAIT

    assert MAX_WAIT == _bounds.MAX_WAIT
    assert MAX_SEQUENCE == _bounds.MAX_UINT64


def test_parse_marker_ttl_is_at_least_a_second() -> None:
    assert parse_marker_ttl("1s") == timedelta(seconds=1)
    assert parse_marker_ttl("2m") == timedelta(minutes=2)
    for short in ("0.5s", "999ms", "0"):
        with pytest.raises(typer.BadParameter, match=f"at least 1 second, got '{short}'"):
            parse_marker_ttl(short)


def test_parse_size_of_thousands_of_digits_is_too_large() -> None:
    """Over Python's 4,300 digits of int conversion the error was click's own
    ("Exceeds the limit (4300 digits) ...")."""
    with pytest.raises(typer.BadParameter, match=r"\.\.\. is too large a size"):
        parse_size("9" * 5_000)


@pytest.mark.parametrize(
    ("text", "size"),
    [("0." + "0" * 5_000 + "1", 0), ("0" * 5_000 + "1", 1), ("1." + "5" * 5_000 + "KB", 1_555)],
)
def test_parse_size_of_long_but_small_numbers(text: str, size: int) -> None:
    """Thousands of digits that make a small size (zeros, a long fraction) were called
    too large (Python's int conversion limit)."""
    assert parse_size(text) == size
