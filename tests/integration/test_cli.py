"""The command line, run in-process (Typer's CliRunner) against the session's real nats-server.

Each test uses its own stream, consumer and bucket names. Results are
checked through the CLI's own ``--json`` output and, where it matters, through
the library on a connection of the test's own.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import shutil
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol, TypeVar

import nkeys  # type: ignore[import-untyped]  # no type hints
import pytest
import typer
from typer.testing import CliRunner, Result

import aiojetstream
from aiojetstream import ConsumerConfig, JetStreamContext, StreamNotFoundError
from aiojetstream.cli._app import app
from aiojetstream.testing import NatsServer
from credentials import CertificateAuthority, Operator, new_nkey, public_key, seed_text
from helpers import CROSS_ACCOUNTS_CONFIG, unique_name

T = TypeVar("T")
NS = 1_000_000_000


class Cli(Protocol):
    def __call__(self, *args: str, input: str | bytes | None = None, expect: int = 0) -> Result: ...


def invoke(url: str, args: tuple[str, ...], input: str | bytes | None, expect: int) -> Result:
    runner = CliRunner()
    result = runner.invoke(app, list(args), input=input, env={"NATS_URL": url, "COLUMNS": "80"})
    assert result.exit_code == expect, (
        f"exit {result.exit_code} (expected {expect}) for {args}\n"
        f"stdout: {result.stdout}\nstderr: {result.stderr}\nexception: {result.exception!r}"
    )
    return result


@pytest.fixture
def cli(nats_url: str) -> Cli:
    def call(*args: str, input: str | bytes | None = None, expect: int = 0) -> Result:
        return invoke(nats_url, args, input, expect)

    return call


def query(url: str, fn: Callable[[JetStreamContext], Awaitable[T]]) -> T:
    """Run ``fn(js)`` on a connection of the test's own (checks behind the CLI's back)."""

    async def main() -> T:
        async with await aiojetstream.connect(url) as js:
            return await fn(js)

    return asyncio.run(main())


def as_json(result: Result) -> Any:
    return json.loads(result.stdout)


def json_lines(result: Result) -> list[Any]:
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def assert_fits(text: str, width: int = 80) -> None:
    too_wide = [line for line in text.splitlines() if len(line) > width]
    assert not too_wide, f"lines wider than {width} columns: {too_wide}"


def one_error_line(result: Result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.output
    return lines[0]


def usage_error_line(result: Result) -> str:
    """The one ``Error:`` line of a usage error (exit code 2, after Click's usage lines)."""
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, result.stderr
    assert "Traceback" not in result.output
    return errors[0]


def unreachable_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"nats://127.0.0.1:{sock.getsockname()[1]}"  # nobody listens there


@pytest.fixture
def stream(cli: Cli) -> Iterator[str]:
    """A file stream of the test's own on ``<name>.>``."""
    name = unique_name("CLI")
    cli("stream", "add", name, "--subjects", f"{name}.>")
    yield name
    cli("stream", "rm", name, "--force", expect=0)


def test_consumer_info_of_a_push_consumer(cli: Cli, stream: str, nats_url: str) -> None:
    # js.consumer() refuses a push consumer (the library pulls); the CLI shows any.
    deliver = unique_name("deliver")
    config = ConsumerConfig(durable_name="p", deliver_subject=deliver)
    query(nats_url, lambda js: js.create_consumer(stream, config))
    info = as_json(cli("consumer", "info", stream, "p", "--json"))
    assert info["config"]["deliver_subject"] == deliver


# --------------------------------------------------------------------------- stream


def test_stream_add_with_options_and_info(cli: Cli) -> None:
    name = unique_name("CLI")
    result = cli(
        "stream",
        "add",
        name,
        "--subjects",
        f"{name}.a,{name}.b",
        "--subjects",
        f"{name}.c",
        "--storage",
        "memory",
        "--retention",
        "limits",
        "--max-age",
        "1h",
        "--max-msgs",
        "1000",
        "--max-bytes",
        "1MiB",
        "--allow-msg-ttl",
        "--marker-ttl",
        "30s",
        "--description",
        "made by the CLI",
    )
    assert f"Created stream {name}." in result.stderr
    assert_fits(result.stdout)
    assert "Marker TTL" in result.stdout
    assert "30s" in result.stdout
    cfg = as_json(cli("stream", "info", name, "--json"))["config"]
    assert cfg["subjects"] == [f"{name}.a", f"{name}.b", f"{name}.c"]
    assert cfg["storage"] == "memory"
    assert cfg["max_age"] == 3600 * NS
    assert cfg["max_msgs"] == 1000
    assert cfg["max_bytes"] == 1 << 20
    assert cfg["allow_msg_ttl"] is True
    assert cfg["subject_delete_marker_ttl"] == 30 * NS
    assert cfg["description"] == "made by the CLI"
    # The global --json works too.
    assert as_json(cli("--json", "stream", "info", name))["config"]["name"] == name


def test_stream_ls(cli: Cli, stream: str) -> None:
    cli("pub", f"{stream}.x", "hello")
    table = cli("stream", "ls").stdout
    assert stream in table
    assert_fits(table)
    names = as_json(cli("stream", "ls", "--names", "--json"))
    assert stream in names
    infos = as_json(cli("stream", "ls", "--json", "--subject", f"{stream}.x"))
    assert [i["config"]["name"] for i in infos] == [stream]
    assert infos[0]["state"]["messages"] == 1
    assert stream in cli("stream", "ls", "--names").stdout.split()


def test_stream_add_from_config_file_with_override(cli: Cli, stream: str, tmp_path: Path) -> None:
    cli("stream", "edit", stream, "--max-age", "2d", "--max-msgs-per-subject", "3")
    config = as_json(cli("stream", "info", stream, "--json"))["config"]
    copy = unique_name("CLI")
    config.update(name=copy, subjects=[f"{copy}.>"])
    path = tmp_path / "stream.json"
    path.write_text(json.dumps(config))
    cli("stream", "add", copy, "--config", str(path), "--max-msgs", "7")
    got = as_json(cli("stream", "info", copy, "--json"))["config"]
    assert got["max_age"] == 2 * 86400 * NS
    assert got["max_msgs_per_subject"] == 3
    assert got["max_msgs"] == 7
    assert got["subjects"] == [f"{copy}.>"]
    # The config on standard input, and a name that disagrees with it.
    third = unique_name("CLI")
    config.update(name=third, subjects=[f"{third}.>"])
    cli("stream", "add", third, "--config", "-", input=json.dumps(config))
    assert as_json(cli("stream", "info", third, "--json"))["config"]["max_msgs_per_subject"] == 3
    bad = cli("stream", "add", "OTHER", "--config", "-", input=json.dumps(config), expect=1)
    assert "names stream" in one_error_line(bad)


def test_stream_add_invalid_config_is_one_line(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"name": "X", "max_msgs": "many"}))
    line = one_error_line(cli("stream", "add", "X", "--config", str(path), expect=1))
    assert "max_msgs" in line
    path.write_text("[1, 2]")
    assert "JSON object" in one_error_line(
        cli("stream", "add", "X", "--config", str(path), expect=1)
    )
    missing = tmp_path / "missing.json"
    line = one_error_line(cli("stream", "add", "X", "--config", str(missing), expect=1))
    assert "missing.json" in line


def test_stream_edit(cli: Cli, stream: str) -> None:
    result = cli("stream", "edit", stream, "--max-msgs", "50", "--description", "edited")
    assert "Updated stream" in result.stderr
    cfg = as_json(cli("stream", "info", stream, "--json"))["config"]
    assert cfg["max_msgs"] == 50
    assert cfg["description"] == "edited"
    assert cfg["subjects"] == [f"{stream}.>"]  # untouched settings stay
    usage = cli("stream", "edit", stream, expect=2)
    assert "nothing to change" in usage.stderr


def test_empty_subject_lists_are_usage_errors(cli: Cli, stream: str, nats_url: str) -> None:
    """``--subjects ''`` would replace the subjects with none (the server then uses the name)."""
    for value in ("", " , "):
        usage = cli("stream", "edit", stream, "--subjects", value, expect=2)
        assert usage_error_line(usage) == (
            f"Error: Invalid value for '--subjects': {value!r} names no subject"
        )
        assert usage.stdout == ""
    both = cli("stream", "edit", stream, "--subjects", "", "--subject", ",", expect=2)
    assert usage_error_line(both).endswith("'', ',' names no subject")

    async def subjects(js: JetStreamContext) -> list[str] | None:
        return (await js.stream(stream)).cached_info.config.subjects

    assert query(nats_url, subjects) == [f"{stream}.>"]
    assert "Stored in stream" in cli("pub", f"{stream}.x", "still captured").stdout
    # Empty parts beside a subject are left out, as before.
    cli("stream", "edit", stream, "--subjects", f"{stream}.>,", "--subject", ",")
    assert query(nats_url, subjects) == [f"{stream}.>"]

    other = unique_name("CLI")
    usage = cli("stream", "add", other, "--subjects", "", expect=2)
    assert "'--subjects': '' names no subject" in usage_error_line(usage)
    usage = cli("consumer", "add", stream, "c", "--filter", " ", expect=2)
    assert usage_error_line(usage) == "Error: Invalid value for '--filter': ' ' names no subject"
    usage = cli("consume", stream, "--subject", f"{stream}.x", "--subject", "", expect=2)
    assert usage_error_line(usage) == "Error: Invalid value for '--subject': '' names no subject"

    async def created(js: JetStreamContext) -> tuple[list[str], list[str]]:
        streams = [name async for name in js.stream_names()]
        consumers = [name async for name in (await js.stream(stream)).consumer_names()]
        return streams, consumers

    streams, consumers = query(nats_url, created)
    assert other not in streams
    assert consumers == []
    # Refused before connecting: nothing is sent.
    nowhere = unreachable_url()
    for args in (
        ("stream", "edit", stream, "--subjects", ""),
        ("stream", "add", other, "--subjects", ","),
        ("consumer", "add", stream, "c", "--filter", ""),
        ("consume", stream, "--subject", ""),
    ):
        assert "names no subject" in usage_error_line(invoke(nowhere, args, None, 2))


def test_invalid_subjects_are_usage_errors(cli: Cli, stream: str, nats_url: str) -> None:
    """A subject the library would refuse is refused before connecting (exit 2)."""
    other = unique_name("CLI")
    cases = [
        (("stream", "add", other, "--subjects", f"{other}..b"), "--subjects", "empty token"),
        (("stream", "add", other, "--subjects", f"{other}.a b"), "--subjects", "whitespace"),
        (("stream", "edit", stream, "--subjects", f"{stream}.>.x"), "--subjects", "last token"),
        (("stream", "edit", stream, "--subject", f"{stream}.ok,.x"), "--subjects", "empty"),
        (("consumer", "add", stream, "c", "--filter", f"{stream}..x"), "--filter", "empty"),
        (("consumer", "add", stream, "c", "--filter", "a,b\tc"), "--filter", "whitespace"),
        (("consume", stream, "--subject", f"{stream}.>.x"), "--subject", "last token"),
    ]
    nowhere = unreachable_url()
    for args, option, reason in cases:
        line = usage_error_line(cli(*args, expect=2))
        assert line.startswith(f"Error: Invalid value for '{option}': invalid subject "), line
        assert reason in line
        assert usage_error_line(invoke(nowhere, args, None, 2)) == line  # nothing was sent

    async def state(js: JetStreamContext) -> tuple[list[str], list[str], list[str] | None]:
        streams = [name async for name in js.stream_names()]
        handle = await js.stream(stream)
        consumers = [name async for name in handle.consumer_names()]
        return streams, consumers, handle.cached_info.config.subjects

    streams, consumers, subjects = query(nats_url, state)
    assert other not in streams
    assert consumers == []
    assert subjects == [f"{stream}.>"]
    # Wildcards stay allowed.
    cli("stream", "edit", stream, "--subjects", f"{stream}.*.x,{stream}.y.z.>")
    cli("consumer", "add", stream, "c", "--filter", f"{stream}.*.x")


def test_stream_purge_and_rm(cli: Cli, stream: str) -> None:
    for subject in ("a", "a", "b", "b", "b"):
        cli("pub", f"{stream}.{subject}", "x")
    purged = as_json(cli("stream", "purge", stream, "--subject", f"{stream}.a", "-f", "--json"))
    assert purged == {"stream": stream, "purged": 2}
    assert "Purged 2 messages" in cli("stream", "purge", stream, "--keep", "1", "-f").stdout
    assert as_json(cli("stream", "info", stream, "--json"))["state"]["messages"] == 1
    # Without --force the question is asked; "no" keeps the stream.
    refused = cli("stream", "purge", stream, input="n\n", expect=1)
    assert "not confirmed" in refused.stderr
    assert as_json(cli("stream", "info", stream, "--json"))["state"]["messages"] == 1
    cli("stream", "rm", stream, input="n\n", expect=1)
    cli("stream", "info", stream)
    cli("stream", "rm", stream, input="y\n")
    cli("stream", "info", stream, expect=1)
    cli("stream", "add", stream, "--subjects", f"{stream}.>")  # for the fixture's rm


def test_kv_del_and_purge_ask_first(cli: Cli) -> None:
    """As ``nats kv del`` / ``kv purge`` (and ``kv rm`` here): a question, ``--force`` skips it.

    Was: both acted at once and refused ``--force``.
    """
    bucket = unique_name("KV")
    cli("kv", "add", bucket, "--history", "5")
    cli("kv", "put", bucket, "k", "v1")
    cli("kv", "put", bucket, "k", "v2")

    def history() -> list[str]:
        return [e["operation"] for e in as_json(cli("kv", "history", bucket, "k", "--json"))]

    for command, question in (
        ("del", f"Delete key k of bucket {bucket}?"),
        ("purge", f"Purge key k of bucket {bucket} (all its revisions)?"),
    ):
        refused = cli("kv", command, bucket, "k", input="n\n", expect=1)
        assert question in refused.stderr
        assert "error: not confirmed (use --force to skip the question)" in refused.stderr
        cli("kv", command, bucket, "k", input="\n", expect=1)  # Enter: a "no"
        assert history() == ["PUT", "PUT"]  # nothing done
    cli("kv", "del", bucket, "k", input="y\n")
    assert history() == ["PUT", "PUT", "DEL"]
    cli("kv", "put", bucket, "k", "v3")
    assert cli("kv", "purge", bucket, "k", "--force").stderr == "Purged k.\n"
    assert history() == ["PURGE"]
    cli("kv", "put", bucket, "k", "v4")
    assert cli("kv", "del", bucket, "k", "-f").stderr == "Deleted k.\n"
    cli("kv", "rm", bucket, "-f")


def test_stream_purge_question_and_count_follow_the_options(cli: Cli, stream: str) -> None:
    """The question said "all messages" for --keep and --seq; the count was always plural."""
    for n in range(4):
        cli("pub", f"{stream}.{'a' if n < 2 else 'b'}", f"m{n}")
    for options, question in (
        ((), "Purge all messages of stream {s}?"),
        (("--keep", "2"), "Purge all but the newest 2 messages of stream {s}?"),
        (("--keep", "1"), "Purge all but the newest message of stream {s}?"),
        (("--keep", "0"), "Purge all messages of stream {s}?"),
        (("--seq", "3"), "Purge the messages below sequence 3 of stream {s}?"),
        (("--subject", f"{stream}.a"), "Purge messages on {s}.a of stream {s}?"),
        (
            ("--subject", f"{stream}.a", "--keep", "1"),
            "Purge all but the newest message on {s}.a of stream {s}?",
        ),
    ):
        refused = cli("stream", "purge", stream, *options, input="n\n", expect=1)
        assert question.format(s=stream) in refused.stderr, refused.stderr
    assert as_json(cli("stream", "info", stream, "--json"))["state"]["messages"] == 4
    one = cli("stream", "purge", stream, "--seq", "2", "--force")
    assert one.stdout.strip() == f"Purged 1 message from stream {stream}."
    two = cli("stream", "purge", stream, "--keep", "1", "--force")
    assert two.stdout.strip() == f"Purged 2 messages from stream {stream}."
    none = cli("stream", "purge", stream, "--subject", f"{stream}.a", "--force")
    assert none.stdout.strip() == f"Purged 0 messages from stream {stream}."


def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, Any]]:
    """Every command of the command line: ``("stream rm", its Click command)``, ..."""
    children = getattr(command, "commands", None)
    if children is None:
        yield " ".join(path), command
        return
    for name, child in children.items():
        yield from _commands(child, (*path, name))


def test_rm_del_and_purge_take_json(cli: Cli) -> None:
    """Every command takes --json, those that remove something too (docs/cli.md)."""
    without = [
        name
        for name, command in _commands(typer.main.get_command(app))
        if not any("--json" in getattr(param, "opts", []) for param in command.params)
    ]
    assert without == ["server"]
    name = unique_name("CLI")
    cli("stream", "add", name, "--subjects", f"{name}.>")
    cli("consumer", "add", name, "c")
    removed = cli("consumer", "rm", name, "c", "-f", "--json")
    assert as_json(removed) == {"stream": name, "consumer": "c", "deleted": True}
    assert removed.stderr == ""  # the JSON is the whole answer
    removed = cli("--json", "stream", "rm", name, "-f")
    assert as_json(removed) == {"stream": name, "deleted": True}
    assert removed.stderr == ""
    cli("stream", "add", name)
    assert cli("stream", "rm", name, "-f").stderr == f"Deleted stream {name}.\n"  # as before

    bucket = unique_name("KV")
    cli("kv", "add", bucket, "--history", "3")
    cli("kv", "put", bucket, "k", "v")
    assert as_json(cli("kv", "del", bucket, "k", "-f", "--json")) == {
        "bucket": bucket,
        "key": "k",
        "deleted": True,
    }
    assert as_json(cli("kv", "purge", bucket, "k", "-f", "--json")) == {
        "bucket": bucket,
        "key": "k",
        "purged": True,
    }
    assert as_json(cli("kv", "rm", bucket, "-f", "--json")) == {"bucket": bucket, "deleted": True}

    store = unique_name("OBJ")
    cli("obj", "add", store)
    cli("obj", "put", store, "-", "--name", "a/b.txt", input="x")
    removed = cli("obj", "rm", store, "a/b.txt", "-f", "--json")
    assert as_json(removed) == {"bucket": store, "name": "a/b.txt", "deleted": True}
    assert as_json(cli("obj", "rm", store, "-f", "--json")) == {"bucket": store, "deleted": True}


#: Keys of the API reply around an info, not part of it.
ENVELOPE = {"type", "total", "offset", "limit", "did_create"}


def test_infos_have_one_json_shape(cli: Cli) -> None:
    """stream/consumer add, edit, info and ls print the same objects, without envelope keys."""
    name = unique_name("CLI")
    added = as_json(cli("stream", "add", name, "--subjects", f"{name}.>", "--json"))
    edited = as_json(cli("stream", "edit", name, "--max-msgs", "9", "--json"))
    shown = as_json(cli("stream", "info", name, "--json"))
    (listed,) = [i for i in as_json(cli("stream", "ls", "--json")) if i["config"]["name"] == name]
    for info in (added, edited, shown, listed):
        assert not ENVELOPE & set(info), sorted(info)
    assert set(added) == set(edited) == set(listed) == {"config", "created", "state", "ts"}
    assert set(shown) - {"cluster"} == set(listed)  # the cluster: what the server says

    c_added = as_json(cli("consumer", "add", name, "c", "--json"))
    c_shown = as_json(cli("consumer", "info", name, "c", "--json"))
    (c_listed,) = as_json(cli("consumer", "ls", name, "--json"))
    for info in (c_added, c_shown, c_listed):
        assert not ENVELOPE & set(info), sorted(info)
    assert set(c_added) == set(c_shown) == set(c_listed)
    paused = as_json(cli("consumer", "pause", name, "c", "1h", "--json"))
    assert set(paused) == {"paused", "pause_until", "pause_remaining"}

    bucket = unique_name("KV")
    status = as_json(cli("kv", "add", bucket, "--json"))
    assert not ENVELOPE & set(status["stream_info"])
    assert not ENVELOPE & set(as_json(cli("kv", "info", bucket, "--json"))["stream_info"])


def test_errors_are_one_line_and_debug_raises(cli: Cli) -> None:
    missing = unique_name("NOPE")
    result = cli("stream", "info", missing, expect=1)
    assert one_error_line(result) == (
        f"error: stream {missing!r} not found (code=404, err_code=10059)"
    )
    assert result.stdout == ""
    debug = cli("--debug", "stream", "info", missing, expect=1)
    assert isinstance(debug.exception, StreamNotFoundError)


def test_connection_errors_are_one_line(nats_url: str) -> None:
    result = invoke(unreachable_url(), ("stream", "ls"), None, 1)
    assert "could not connect" in one_error_line(result)
    # Options that do not go together: usage errors (issue 26; were exit 1).
    result = invoke(nats_url, ("--password", "p", "stream", "ls"), None, 2)
    assert usage_error_line(result) == "Error: Invalid value: --password needs --user"
    result = invoke(nats_url, ("--tls-key", "k.pem", "stream", "ls"), None, 2)
    assert usage_error_line(result) == "Error: Invalid value: --tls-key needs --tls-cert"


def test_unreadable_creds_and_nkey_files_are_usage_errors(nats_url: str, tmp_path: Path) -> None:
    """The session's server requires no authentication: a --creds or --nkey file that is
    not there was never read, and the command succeeded (exit 0)."""
    missing = tmp_path / "missing.creds"
    for args, option, reason in (
        (("--creds", str(missing)), "--creds", "No such file or directory"),
        (("--nkey", str(tmp_path / "user.nk")), "--nkey", "No such file or directory"),
        (("--nkey", str(tmp_path)), "--nkey", "Is a directory"),
    ):
        result = invoke(nats_url, (*args, "stream", "ls", "--names"), None, 2)
        assert usage_error_line(result) == (
            f"Error: Invalid value for '{option}': {args[1]!r}: {reason}"
        )
        assert result.stdout == ""
    # From the environment too (NATS_CREDS).
    runner = CliRunner()
    env = {"NATS_URL": nats_url, "NATS_CREDS": str(missing)}
    result = runner.invoke(app, ["stream", "ls", "--names"], env=env)
    assert result.exit_code == 2, result.output
    assert usage_error_line(result).startswith("Error: Invalid value for '--creds': ")


def test_a_creds_file_that_is_none_is_one_error_line(nats_url: str, tmp_path: Path) -> None:
    """--creds naming a file that is not a .creds file: refused before connecting.

    The session's server requires no authentication: the file was never read
    and the command succeeded; against one that does, nats-py spun forever.
    """
    seed = seed_text(new_nkey(nkeys.PREFIX_BYTE_USER))
    bad = tmp_path / "user.creds"
    bad.write_text(f"-----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n")
    result = invoke(nats_url, ("--creds", str(bad), "stream", "ls", "--names"), None, 1)
    line = one_error_line(result)
    assert line.startswith(f"error: .creds file {str(bad)!r}: it has no '-----BEGIN NATS USER JWT")
    assert seed not in result.output
    assert result.stdout == ""


def test_user_and_password() -> None:
    with NatsServer(config={"authorization": {"user": "alice", "password": "s3cret"}}) as server:
        ok = invoke(
            server.url, ("--user", "alice", "--password", "s3cret", "stream", "ls"), None, 0
        )
        assert "No streams." in ok.stderr
        bad = invoke(
            server.url, ("--user", "alice", "--password", "wrong", "stream", "ls"), None, 1
        )
        line = one_error_line(bad)
        assert "refused the credentials" in line
        assert "wrong" not in line


def test_nats_password_without_a_user_and_a_url_with_credentials() -> None:
    """NATS_PASSWORD in the environment and ``-s nats://alice:pw@host``: the URL's
    credentials are used, as the nats CLI does (it failed with "--password needs --user",
    with no word of the variable); without them, the error names the variable."""
    with NatsServer(config={"authorization": {"user": "alice", "password": "s3cret"}}) as server:
        runner = CliRunner()
        env = {"NATS_PASSWORD": "leftover", "NATS_USER": None, "COLUMNS": "80"}
        with_user = f"nats://alice:s3cret@127.0.0.1:{server.port}"
        ok = runner.invoke(app, ["-s", with_user, "stream", "ls"], env=env)
        assert ok.exit_code == 0, ok.output
        assert "No streams." in ok.stderr
        plain = runner.invoke(app, ["-s", server.url, "stream", "ls"], env=env)
        assert plain.exit_code == 2, plain.output
        assert usage_error_line(plain) == (
            "Error: Invalid value: --password (here NATS_PASSWORD, from the environment) "
            "needs --user (or NATS_USER); or give the user and password in the server URL, "
            "or unset NATS_PASSWORD"
        )
        assert "leftover" not in plain.output
        # Given on the command line, a password still needs a user (the URL's too).
        given = runner.invoke(app, ["-s", with_user, "--password", "x", "stream", "ls"], env={})
        assert given.exit_code == 2, given.output
        assert usage_error_line(given) == "Error: Invalid value: --password needs --user"
        # With NATS_USER too, the environment's pair is used (nats-py: options first).
        both = {**env, "NATS_USER": "alice"}
        refused = runner.invoke(app, ["-s", with_user, "stream", "ls"], env=both)
        assert refused.exit_code == 1, refused.output
        assert "refused the credentials" in one_error_line(refused)


def test_js_api_prefix_reaches_another_accounts_jetstream() -> None:
    with NatsServer(config=CROSS_ACCOUNTS_CONFIG) as server:
        owner = server.url.replace("nats://", "nats://a:a@")
        bucket = unique_name("cfg")
        as_i = ("--user", "i", "--password", "i", "--js-api-prefix", "fromA")
        invoke(server.url, (*as_i, "kv", "add", bucket), None, 0)
        invoke(server.url, (*as_i, "kv", "put", bucket, "k", "v"), None, 0)
        got = invoke(server.url, (*as_i, "--json", "kv", "get", bucket, "k"), None, 0)
        assert json.loads(got.stdout)["revision"] == 1

        async def value(js: JetStreamContext) -> bytes:
            return (await (await js.key_value(bucket)).get("k")).value

        assert query(owner, value) == b"v"  # in account A
        # Without the prefix, account I has no JetStream of its own.
        invoke(server.url, ("--user", "i", "--password", "i", "kv", "get", bucket, "k"), None, 1)
        result = invoke(server.url, (*as_i, "--domain", "hub", "kv", "ls"), None, 2)
        assert usage_error_line(result) == (
            "Error: Invalid value: --js-api-prefix and --domain exclude each other"
        )


#: A user allowed to subscribe to its own inboxes only (``_INBOX_alice.>``).
OWN_INBOXES_CONFIG: dict[str, Any] = {
    "accounts": {
        "A": {
            "jetstream": "enabled",
            "users": [
                {
                    "user": "alice",
                    "password": "alice",
                    "permissions": {
                        "publish": {"allow": ["$JS.API.>", "own.>", "_INBOX_alice.>"]},
                        "subscribe": {"allow": ["_INBOX_alice.>"]},
                    },
                }
            ],
        }
    }
}


def test_inbox_prefix_for_a_user_allowed_its_own_inboxes_only() -> None:
    """``--inbox-prefix`` (or ``NATS_INBOX_PREFIX``, as the nats CLI): without it such a
    user's replies never came (``_INBOX.>`` refused), every command timed out; now the
    refused inbox fails the command at once, saying what to do."""
    with NatsServer(config=OWN_INBOXES_CONFIG) as server:
        alice = ("--user", "alice", "--password", "alice", "--timeout", "2")
        name = unique_name("OWN")
        prefixed = (*alice, "--inbox-prefix", "_INBOX_alice")
        invoke(server.url, (*prefixed, "stream", "add", name, "--subjects", "own.>"), None, 0)
        invoke(server.url, (*prefixed, "pub", "own.x", "hello"), None, 0)
        runner = CliRunner()
        env = {"NATS_URL": server.url, "NATS_INBOX_PREFIX": "_INBOX_alice"}
        listed = runner.invoke(app, [*alice, "--json", "stream", "ls"], env=env)
        assert listed.exit_code == 0, listed.output
        assert [s["config"]["name"] for s in json.loads(listed.stdout)] == [name]
        # Without it the replies go to _INBOX.>, which the server does not let alice read.
        refused = invoke(server.url, (*alice, "stream", "ls"), None, 1)
        assert "permissions violation for subscription to" in refused.stderr
        assert "error: permissions violation: the server refused a subscription to" in (
            refused.stderr
        )
        assert "--inbox-prefix" in refused.stderr
        bad = invoke(server.url, (*alice, "--inbox-prefix", "_INBOX.*", "stream", "ls"), None, 1)
        assert "invalid inbox_prefix" in one_error_line(bad)


def _auth_schemes(
    tmp: Path,
) -> dict[str, tuple[dict[str, Any], list[str], list[str], dict[str, str]]]:
    """scheme -> (server config, good options, refused options, good environment)."""
    user = new_nkey(nkeys.PREFIX_BYTE_USER)
    stranger = new_nkey(nkeys.PREFIX_BYTE_USER)
    (tmp / "user.nk").write_text(seed_text(user))
    (tmp / "stranger.nk").write_text(seed_text(stranger))
    operator = Operator(tmp)
    alice = str(operator.user_creds("alice"))
    forged = str(operator.user_creds("mallory", signer=new_nkey(nkeys.PREFIX_BYTE_ACCOUNT)))
    return {
        "token": (
            {"authorization": {"token": "t0ken-s3cret"}},
            ["--token", "t0ken-s3cret"],
            ["--token", "t0ken-wrong"],
            {"NATS_TOKEN": "t0ken-s3cret"},
        ),
        "nkey": (
            {"authorization": {"users": [{"nkey": public_key(user)}]}},
            ["--nkey", str(tmp / "user.nk")],
            ["--nkey", str(tmp / "stranger.nk")],
            {"NATS_NKEY": str(tmp / "user.nk")},
        ),
        "creds": (
            operator.server_config(),
            ["--creds", alice],
            ["--creds", forged],
            {"NATS_CREDS": alice},
        ),
    }


@pytest.mark.parametrize("scheme", ["token", "nkey", "creds"])
def test_credentials(scheme: str, tmp_path: Path) -> None:
    config, good, refused, environment = _auth_schemes(tmp_path)[scheme]
    runner = CliRunner()
    with NatsServer(config=config) as server:
        env = {"NATS_URL": server.url}
        ok = runner.invoke(app, [*good, "--json", "kv", "ls"], env=env)
        assert ok.exit_code == 0, ok.output
        assert json.loads(ok.stdout) == []
        ok = runner.invoke(app, ["--json", "kv", "ls"], env={**env, **environment})
        assert ok.exit_code == 0, ok.output
        bad = runner.invoke(app, [*refused, "kv", "ls"], env=env)
        assert bad.exit_code == 1, bad.output
        assert "refused the credentials" in one_error_line(bad)
        anonymous = runner.invoke(app, ["kv", "ls"], env=env)
        assert anonymous.exit_code == 1, anonymous.output


def test_tls(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    cert = ca.issue("server", "IP:127.0.0.1,DNS:localhost")
    config = {"tls": {"cert_file": str(cert.cert_file), "key_file": str(cert.key_file)}}
    with NatsServer(config=config) as server:
        url = f"tls://127.0.0.1:{server.port}"
        ok = invoke(url, ("--tls-ca", str(ca.cert_file), "--json", "stream", "ls"), None, 0)
        assert json.loads(ok.stdout) == []
        untrusted = invoke(url, ("stream", "ls"), None, 1)
        assert "TLS handshake" in one_error_line(untrusted)
        missing = invoke(url, ("--tls-ca", str(tmp_path / "none.pem"), "stream", "ls"), None, 1)
        assert one_error_line(missing) == (
            f"error: --tls-ca {tmp_path / 'none.pem'}: No such file or directory"
        )
        garbage = tmp_path / "garbage.pem"
        garbage.write_text("not a certificate")
        bad = invoke(url, ("--tls-ca", str(garbage), "stream", "ls"), None, 1)
        assert one_error_line(bad).startswith(f"error: --tls-ca {garbage}: ")


def test_usage_errors_exit_2(cli: Cli) -> None:
    result = cli("stream", "add", expect=2)
    assert "Missing argument" in result.stderr
    result = cli("stream", "add", "X", "--max-age", "9999999999999d", expect=2)
    assert "is too long: the server's durations are int64" in usage_error_line(result)
    result = cli("stream", "add", "X", "--max-bytes", "9" * 400, expect=2)
    assert "is too large a size" in usage_error_line(result)
    result = cli("server", "--port", "65536", expect=2)
    assert "'--port'" in usage_error_line(result)
    result = cli("stream", "add", "X", "--max-age", "soon", expect=2)
    assert "is not a duration" in result.stderr
    result = cli("stream", "add", "X", "--storage", "tape", expect=2)
    assert "tape" in result.stderr
    result = cli("stream", "add", "X", "--max-bytes", "lots", expect=2)
    assert "is not a size" in result.stderr


def test_options_that_do_not_go_together_are_usage_errors(tmp_path: Path) -> None:
    """Checked before connecting, naming the options: they were exit 1 with the library's
    argument names (kv watch), after the progress bar (obj put), a server's error (server)."""
    nowhere = unreachable_url()
    file = tmp_path / "f.txt"
    file.write_text("x")
    for args, expected in (
        (
            ("kv", "watch", "B", "--history", "--updates-only"),
            "--history and --updates-only can not be combined",
        ),
        (
            ("obj", "put", "B", str(file), "--chunk-size", "0"),
            "Invalid value for '--chunk-size': '0' is not a chunk size: give 1 byte or more",
        ),
        (
            ("obj", "put", "B", str(file), "--chunk-size", "-1"),
            "Invalid value for '--chunk-size': '-1' is not a chunk size: give 1 byte or more",
        ),
        (
            ("server", "--cluster", "1"),
            "Invalid value for '--cluster': a cluster has 2 nodes or more (3 for quorum); "
            "one server is without --cluster",
        ),
        (
            ("server", "--cluster", "3", "--port", "4222"),
            "--port can not be combined with --cluster (ports are free ones)",
        ),
    ):
        usage = invoke(nowhere, args, None, 2)
        assert usage_error_line(usage).endswith(expected)
        assert "Storing" not in usage.stderr  # no progress bar: nothing started
    # A chunk of 1 byte is a chunk size: it gets as far as connecting.
    one = invoke(nowhere, ("obj", "put", "B", str(file), "--chunk-size", "1"), None, 1)
    assert "could not connect" in one_error_line(one)


def test_help_of_every_command(cli: Cli) -> None:
    commands = [
        (),
        ("stream",),
        ("consumer",),
        ("kv",),
        ("obj",),
        ("bench",),
        ("pub",),
        ("consume",),
        ("get",),
        ("server",),
        ("stream", "add"),
        ("consumer", "add"),
        ("kv", "watch"),
        ("obj", "put"),
        ("bench", "consume"),
    ]
    for command in commands:
        result = cli(*command, "--help")
        assert "Usage:" in result.stdout
        assert_fits(result.stdout)
    assert cli("--version").stdout.strip() == f"aiojetstream {aiojetstream.__version__}"


# --------------------------------------------------------------------------- pub, get, consume


def test_pub_one_message(cli: Cli, stream: str) -> None:
    result = cli("pub", f"{stream}.x", "hello", "-H", "a: b", "--header", "trace:1")
    assert result.stdout.strip() == f"Stored in stream {stream} at sequence 1."
    ack = as_json(cli("pub", f"{stream}.x", "second", "--msg-id", "m2", "--json"))
    assert ack == {"stream": stream, "seq": 2}
    dup = cli("pub", f"{stream}.x", "second", "--msg-id", "m2")
    assert dup.stdout.strip() == f"Duplicate of stream {stream} sequence 2."
    msg = as_json(cli("get", stream, "1", "--json"))
    assert msg["data"] == "hello"
    assert msg["headers"] == {"a": "b", "trace": "1"}
    assert msg["subject"] == f"{stream}.x"
    # A header has one value here: a repeated name is refused, not cut to its last value.
    twice = cli("pub", f"{stream}.x", "third", "-H", "a:1", "-H", "a:2", expect=2)
    assert "header 'a' is given twice" in twice.stderr


def test_pub_reads_stdin_and_binary_data(cli: Cli, stream: str) -> None:
    blob = bytes(range(256))
    cli("pub", f"{stream}.bin", "-", input=blob)
    msg = as_json(cli("get", stream, "1", "--json"))
    assert "data" not in msg
    assert base64.b64decode(msg["data_base64"]) == blob
    raw = cli("get", stream, "1", "--raw")
    assert raw.stdout_bytes == blob
    cli("pub", f"{stream}.empty")
    assert as_json(cli("get", stream, "2", "--json"))["data"] == ""
    # An argument that is not UTF-8 (Python holds it with surrogates): its bytes, as
    # given (encoding it raised UnicodeEncodeError, a traceback).
    cli("pub", f"{stream}.latin1", os.fsdecode(b"caf\xe9"))
    assert cli("get", stream, "3", "--raw").stdout_bytes == b"caf\xe9"


def test_pub_ttl(cli: Cli) -> None:
    name = unique_name("CLI")
    cli("stream", "add", name, "--subjects", f"{name}.>", "--allow-msg-ttl")
    cli("pub", f"{name}.t", "short-lived", "--ttl", "1h")
    assert as_json(cli("get", name, "1", "--json"))["headers"] == {"Nats-TTL": "3600"}
    # A usage error (exit 2), as for the other durations: not a server or library error.
    bad = cli("pub", f"{name}.t", "x", "--ttl", "soon", expect=2)
    assert usage_error_line(bad) == (
        "Error: Invalid value for '--ttl': 'soon' is not a TTL: give seconds (90, 1.5) or a Go "
        "duration such as '1h30m', '500ms' or '2d' (units ns, us, ms, s, m, h, and d = 24h, "
        "w = 7d), or 'never' for no expiry"
    )
    cli("pub", f"{name}.t", "kept", "--ttl", "never")
    cli("pub", f"{name}.t", "two days", "--ttl", "2d")  # the CLI's units, as --max-age
    assert as_json(cli("get", name, "2", "--json"))["headers"] == {"Nats-TTL": "never"}
    assert as_json(cli("get", name, "3", "--json"))["headers"] == {"Nats-TTL": "172800"}
    plain = unique_name("CLI")
    cli("stream", "add", plain, "--subjects", f"{plain}.>")
    refused = cli("pub", f"{plain}.t", "x", "--ttl", "10s", expect=1)
    assert "10166" in one_error_line(refused)


def test_ttl_is_checked_before_connecting() -> None:
    """A bad --ttl is a usage error (exit 2) before connecting, not a connection error."""
    nowhere = unreachable_url()
    for args, value, reason in (
        (("pub", "x", "y", "--ttl", "abc"), "abc", "is not a TTL"),
        (("pub", "x", "y", "--count", "3", "--async", "--ttl", "1x"), "1x", "is not a TTL"),
        (("pub", "x", "y", "--ttl", "500ms"), "500ms", "is under 1 second"),
        (("kv", "create", "B", "k", "v", "--ttl", "soon"), "soon", "is not a TTL"),
        (("kv", "purge", "B", "k", "--ttl", "0.5"), "0.5", "is under 1 second"),
        # Past a timedelta (an OverflowError traceback, exit 1).
        (("pub", "x", "y", "--ttl", "100000000000h"), "100000000000h", "is longer than a"),
        (("kv", "create", "B", "k", "v", "--ttl", "100000000000h"), "100000000000h", "is lon"),
    ):
        usage = invoke(nowhere, args, None, 2)
        line = usage_error_line(usage)
        assert line.startswith(f"Error: Invalid value for '--ttl': {value!r} {reason}"), line
        assert "could not connect" not in usage.output
    # A good one gets as far as connecting (and fails there: nobody listens).
    assert "could not connect" in one_error_line(
        invoke(nowhere, ("pub", "x", "y", "--ttl", "1h"), None, 1)
    )


def test_pub_replaces_n_only_with_count(cli: Cli, stream: str) -> None:
    """Without --count, ``{n}`` is sent as written (ICU, ``${n}``, ``\\d{n}``): not a template."""
    cli("pub", f"{stream}.a", "You have {n} new messages", "--msg-id", "id-{n}")
    cli("pub", f"{stream}.b", "-", input=b'echo "${n}" \\d{n}')
    cli("pub", f"{stream}.c", "{n} async", "--async", "--json")  # one message, not a template
    assert cli("get", stream, "1", "--raw").stdout == "You have {n} new messages"
    assert as_json(cli("get", stream, "1", "--json"))["headers"] == {"Nats-Msg-Id": "id-{n}"}
    assert cli("get", stream, "2", "--raw").stdout == 'echo "${n}" \\d{n}'
    assert cli("get", stream, "3", "--raw").stdout == "{n} async"
    # With --count (even 1), the argument, standard input and --msg-id are templates.
    cli("pub", f"{stream}.d", "m{n}", "--count", "1", "--msg-id", "d-{n}")
    cli("pub", f"{stream}.e", "-", "--count", "2", input=b"s{n}")
    got = as_json(cli("get", stream, "4", "--json"))
    assert (got["data"], got["headers"]) == ("m1", {"Nats-Msg-Id": "d-1"})
    assert [cli("get", stream, str(seq), "--raw").stdout for seq in (5, 6)] == ["s1", "s2"]


@pytest.mark.parametrize("mode", ["pipelined", "sync", "async"])
def test_pub_count_summary_counts_duplicates(cli: Cli, stream: str, mode: str) -> None:
    flags = {"pipelined": [], "sync": ["--sync"], "async": ["--async"]}[mode]  # --async: an alias
    args = ("pub", f"{stream}.n", "msg {n}", "--count", "50", "--msg-id", "id-{n}", *flags)
    first = as_json(cli(*args, "--json"))
    assert first["count"] == 50
    assert first["acked"] == 50
    assert first["duplicates"] == 0
    assert (first["first_seq"], first["last_seq"]) == (1, 50)
    again = as_json(cli(*args, "--json"))
    assert again["duplicates"] == 50
    assert again["first_seq"] is None
    table = cli("pub", f"{stream}.n", "more {n}", "--count", "10", *flags)
    assert "Duplicates" in table.stdout
    assert "Rate" in table.stdout
    assert "sequences 51..60" in table.stdout
    assert "10/10" in table.stderr  # the progress bar, finished
    assert_fits(table.stdout)
    assert as_json(cli("get", stream, "7", "--json"))["data"] == "msg 7"
    assert as_json(cli("get", stream, "60", "--json"))["data"] == "more 10"


def test_pub_count_pipelines_by_default(
    cli: Cli, stream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``pub --count`` keeps acks in flight (``--sync``: one at a time), in order, all counted."""
    in_flight: list[int] = []
    pending: set[asyncio.Future[Any]] = set()
    publish_async = JetStreamContext.publish_async

    async def counted(self: JetStreamContext, *args: Any, **kwargs: Any) -> Any:
        pending.difference_update([fut for fut in pending if fut.done()])
        fut = await publish_async(self, *args, **kwargs)
        pending.add(fut)
        in_flight.append(len(pending))
        return fut

    monkeypatch.setattr(JetStreamContext, "publish_async", counted)
    pipelined = as_json(cli("pub", f"{stream}.p", "m{n}", "--count", "500", "--json"))
    assert len(in_flight) == 500
    assert max(in_flight) > 1  # the old default waited for each ack: never two
    assert (pipelined["acked"], pipelined["first_seq"], pipelined["last_seq"]) == (500, 1, 500)
    for seq in (1, 2, 250, 500):  # stored in the order sent
        assert as_json(cli("get", stream, str(seq), "--json"))["data"] == f"m{seq}"
    in_flight.clear()
    one_by_one = as_json(cli("pub", f"{stream}.p", "s{n}", "--count", "20", "--sync", "--json"))
    assert in_flight == []  # each with publish(), its ack awaited
    assert (one_by_one["acked"], one_by_one["first_seq"], one_by_one["last_seq"]) == (20, 501, 520)
    both = cli("pub", f"{stream}.p", "x", "--count", "2", "--sync", "--async", expect=2)
    assert usage_error_line(both).endswith("--sync and --async can not be combined")


def test_get_last_for_subject_and_errors(cli: Cli, stream: str) -> None:
    cli("pub", f"{stream}.a", "a1")
    cli("pub", f"{stream}.b", "b1")
    cli("pub", f"{stream}.a", "a2")
    assert cli("get", stream, "--last-for", f"{stream}.a", "--raw").stdout == "a2"
    shown = cli("get", stream, "2")
    assert "b1" in shown.stdout
    assert f"{stream}.b" in shown.stdout
    assert_fits(shown.stdout)
    assert "10037" in one_error_line(cli("get", stream, "99", expect=1))
    cli("get", stream, expect=2)
    cli("get", stream, "1", "--last-for", f"{stream}.a", expect=2)


#: User data that Rich would change: emoji codes, markup (a bad closing tag
#: raised MarkupError), a tab (expanded to spaces) and a backslash.
TRICKY = ":smile: :thumbs_up:\ttab [bold]b[/bold] [/x] \\[y]"


def test_payloads_are_printed_as_they_are(cli: Cli, stream: str) -> None:
    cli("pub", f"{stream}.x", TRICKY)
    assert cli("get", stream, "1").stdout.endswith(f"\n{TRICKY}\n")
    assert cli("get", stream, "1", "--raw").stdout == TRICKY
    assert cli("consume", stream, "--count", "1").stdout.splitlines()[1:] == [TRICKY]
    # Header values too, in the table of get and the lines of consume.
    cli("pub", f"{stream}.h", "x", "-H", "note: [/x] :smile:\t|")
    assert " [/x] :smile:" in cli("get", stream, "2").stdout
    consumed = cli("consume", stream, "--start-seq", "2", "-c", "1", "--headers").stdout
    assert consumed.splitlines()[1:] == ["  note: [/x] :smile:\t|", "x"]
    # Not UTF-8 and control characters: escaped (test_cli_hostile.py has the rest).
    blob = b"bin\xff\x00\r\x07end"
    cli("pub", f"{stream}.bin", "-", input=blob)
    text = b"bin\\xff\\x00\\r\\x07end\n"
    assert cli("get", stream, "3").stdout_bytes.endswith(b" \n" + text)  # after the table
    consumed_bytes = cli("consume", stream, "--start-seq", "3", "--count", "1").stdout_bytes
    assert consumed_bytes.endswith(b" 10 bytes\n" + text)
    assert cli("consume", stream, "--start-seq", "3", "-c", "1", "--raw").stdout_bytes == (
        blob + b"\n"
    )
    # Subjects and names too (a progress bar's description among them).
    odd = f"{stream}.:smile:[/x]"
    published = cli("pub", odd, "x", "--count", "2")
    assert f"Publishing to {odd}" in published.stderr
    assert f" {odd} " in cli("consume", stream, "--subject", odd, "-c", "1").stdout


def test_consume_ordered_replay(cli: Cli, stream: str) -> None:
    for n in range(1, 6):
        cli("pub", f"{stream}.{'even' if n % 2 == 0 else 'odd'}", f"m{n}", "-H", f"n:{n}")
    records = json_lines(cli("consume", stream, "--count", "5", "--json"))
    assert [r["data"] for r in records] == ["m1", "m2", "m3", "m4", "m5"]
    assert [r["seq"] for r in records] == [1, 2, 3, 4, 5]
    assert records[0]["headers"] == {"n": "1"}
    assert records[0]["stream"] == stream
    raw = cli("consume", stream, "--count", "2", "--raw")
    assert raw.stdout == "m1\nm2\n"
    text = cli("consume", stream, "--count", "1", "--headers")
    assert "n: 1" in text.stdout
    assert "m1" in text.stdout
    assert "1 message." in text.stderr
    odd = json_lines(
        cli("consume", stream, "--subject", f"{stream}.odd", "--idle", "0.5", "--json")
    )
    assert [r["data"] for r in odd] == ["m1", "m3", "m5"]
    tail = json_lines(cli("consume", stream, "--start-seq", "4", "--idle", "0.5", "--json"))
    # --idle (and --timeout) take the library's durations, a bare number being seconds.
    assert json_lines(cli("--timeout", "2s", "consume", stream, "--idle", "300ms", "--json")) == (
        json_lines(cli("consume", stream, "--idle", "0.3", "--json"))
    )
    assert [r["seq"] for r in tail] == [4, 5]
    assert json_lines(cli("consume", stream, "--new", "--idle", "0.3", "--json")) == []
    cli("consume", stream, "--ack", expect=2)


def test_consume_durable_acks(cli: Cli, stream: str, nats_url: str) -> None:
    for n in range(6):
        cli("pub", f"{stream}.x", f"m{n}")
    cli("consumer", "add", stream, "work", "--ack", "explicit", "--ack-wait", "1m")
    got = json_lines(cli("consume", stream, "work", "--count", "4", "--json"))
    assert [r["data"] for r in got] == ["m0", "m1", "m2", "m3"]
    info = as_json(cli("consumer", "info", stream, "work", "--json"))
    # Exactly what was asked for was pulled and acknowledged: nothing waits out the ack wait.
    assert info["ack_floor"]["stream_seq"] == 4
    assert info["num_ack_pending"] == 0
    assert info["num_pending"] == 2
    rest = cli("consume", stream, "work", "--idle", "1", "--no-ack", "--raw")
    assert rest.stdout == "m4\nm5\n"

    async def pending(js: JetStreamContext) -> int:
        return (await (await js.consumer(stream, "work")).info()).num_ack_pending

    assert query(nats_url, pending) == 2  # --no-ack left them unacknowledged
    cli("consumer", "add", stream, "noack", "--ack", "none")
    line = one_error_line(cli("consume", stream, "noack", "--count", "1", expect=1))
    assert "does not take acks" in line
    assert len(json_lines(cli("consume", stream, "noack", "--no-ack", "-c", "6", "--json"))) == 6
    cli("consume", stream, "work", "--subject", "x", expect=2)


def test_consume_pulls_within_the_consumers_limits(cli: Cli, stream: str, nats_url: str) -> None:
    """consume asked 100 messages a pull and waited up to 30 s: a consumer with a
    smaller max_batch or max_expires (its own, or a server's max_request_batch) answered
    every pull with a 409, and the command failed with nothing printed."""
    for n in range(5):
        cli("pub", f"{stream}.x", f"m{n}")

    async def limited(js: JetStreamContext) -> None:
        await js.create_consumer(stream, ConsumerConfig(durable_name="small", max_batch=2))
        await js.create_consumer(
            stream, ConsumerConfig(durable_name="short", max_expires=timedelta(seconds=5))
        )

    query(nats_url, limited)

    async def too_short(js: JetStreamContext) -> None:
        await js.create_consumer(
            stream, ConsumerConfig(durable_name="half", max_expires=timedelta(seconds=0.5))
        )

    query(nats_url, too_short)
    line = one_error_line(cli("consume", stream, "half", "--count", "1", expect=1))
    assert "max_expires 500ms" in line, line
    got = cli("consume", stream, "small", "--idle", "2", "--raw")
    assert got.stdout == "m0\nm1\nm2\nm3\nm4\n"
    got = cli("consume", stream, "short", "--count", "3", "--raw")
    assert got.stdout == "m0\nm1\nm2\n"


def test_consume_idle_counts_from_the_last_message(cli: Cli, stream: str) -> None:
    """Each pull waited a whole --idle: a message at the start of one and none after it
    ended the command after about twice --idle."""
    cli("consumer", "add", stream, "idle", "--ack", "explicit")
    cli("pub", f"{stream}.x", "only")
    started = time.monotonic()
    got = cli("consume", stream, "idle", "--idle", "5", "--raw")
    took = time.monotonic() - started
    assert got.stdout == "only\n"
    assert 5.0 <= took < 8.5, took  # was about 10 s


# --------------------------------------------------------------------------- consumer


def test_consumer_lifecycle(cli: Cli, stream: str, nats_url: str) -> None:
    for n in range(10):
        cli("pub", f"{stream}.{n % 2}", f"m{n}")
    created = cli(
        "consumer",
        "add",
        stream,
        "c1",
        "--filter",
        f"{stream}.0",
        "--max-deliver",
        "3",
        "--ack-wait",
        "45s",
        "--description",
        "first",
    )
    assert f"Created consumer {stream} > c1." in created.stderr
    assert_fits(created.stdout)
    cli("consumer", "add", stream, "c2", "--filter", f"{stream}.0,{stream}.1", "--start-seq", "5")
    listed = as_json(cli("consumer", "ls", stream, "--json"))
    assert [c["name"] for c in listed] == ["c1", "c2"]
    assert listed[0]["config"]["filter_subject"] == f"{stream}.0"
    assert listed[0]["config"]["ack_wait"] == 45 * NS
    assert listed[1]["config"]["filter_subjects"] == [f"{stream}.0", f"{stream}.1"]
    assert listed[1]["config"]["deliver_policy"] == "by_start_sequence"
    assert listed[1]["num_pending"] == 6
    table = cli("consumer", "ls", stream).stdout
    assert "c1" in table
    assert "c2" in table
    assert_fits(table)
    assert as_json(cli("consumer", "ls", stream, "-n", "--json")) == ["c1", "c2"]

    paused = as_json(cli("consumer", "pause", stream, "c1", "10m", "--json"))
    assert paused["paused"] is True
    assert 9 * 60 * NS < paused["pause_remaining"] <= 10 * 60 * NS
    assert "(paused)" in cli("consumer", "ls", stream).stdout
    assert "Not paused." in cli("consumer", "resume", stream, "c1").stdout
    until = cli("consumer", "pause", stream, "c1", "2099-01-01T00:00:00+00:00")
    assert "Paused until 2099-01-01 00:00:00 UTC" in until.stdout
    cli("consumer", "resume", stream, "c1")
    cli("consumer", "pause", stream, "c1", "whenever", expect=2)

    reset = as_json(cli("consumer", "reset", stream, "c2", "--seq", "9", "--json"))
    assert reset == {"stream": stream, "consumer": "c2", "sequence": 9}
    assert as_json(cli("consumer", "info", stream, "c2", "--json"))["num_pending"] == 2
    text = cli("consumer", "reset", stream, "c2")
    assert "continues at stream sequence" in text.stdout

    cli("consumer", "rm", stream, "c1", "-f")
    assert as_json(cli("consumer", "ls", stream, "-n", "--json")) == ["c2"]
    assert "10014" in one_error_line(cli("consumer", "info", stream, "c1", expect=1))


def test_consumer_add_from_config(cli: Cli, stream: str, tmp_path: Path) -> None:
    cli("consumer", "add", stream, "orig", "--max-ack-pending", "7", "--inactive-threshold", "1h")
    config = as_json(cli("consumer", "info", stream, "orig", "--json"))["config"]
    for key in ("name", "durable_name"):
        config.pop(key, None)
    path = tmp_path / "consumer.json"
    path.write_text(json.dumps(config))
    cli("consumer", "add", stream, "copy", "--config", str(path), "--max-deliver", "2")
    got = as_json(cli("consumer", "info", stream, "copy", "--json"))["config"]
    assert got["max_ack_pending"] == 7
    assert got["inactive_threshold"] == 3600 * NS
    assert got["max_deliver"] == 2
    assert got["durable_name"] == "copy"


# --------------------------------------------------------------------------- kv


def test_kv_commands(cli: Cli) -> None:
    bucket = unique_name("KV")
    created = cli("kv", "add", bucket, "--history", "5", "--description", "settings")
    assert f"Created bucket {bucket}." in created.stderr
    again = cli("kv", "add", bucket, "--history", "5", "--description", "settings")
    assert f"Bucket {bucket} exists already, unchanged." in again.stderr
    assert_fits(created.stdout)
    assert as_json(cli("kv", "put", bucket, "db.url", "postgres://a", "--json")) == {
        "key": "db.url",
        "revision": 1,
    }
    assert "revision 2" in cli("kv", "put", bucket, "db.url", "postgres://b").stdout
    cli("kv", "put", bucket, "db.pw", "-", input="from stdin")
    assert cli("kv", "get", bucket, "db.pw", "--raw").stdout == "from stdin"
    entry = as_json(cli("kv", "get", bucket, "db.url", "--json"))
    assert (entry["value"], entry["revision"], entry["operation"]) == ("postgres://b", 2, "PUT")
    assert as_json(cli("kv", "get", bucket, "db.url", "--revision", "1", "--json"))["value"] == (
        "postgres://a"
    )
    assert "postgres://b" in cli("kv", "get", bucket, "db.url").stdout
    cli("kv", "create", bucket, "lock", "me")
    exists = cli("kv", "create", bucket, "lock", "me", expect=1)
    assert "exists" in one_error_line(exists)
    assert as_json(cli("kv", "keys", bucket, "--json")) == ["db.pw", "db.url", "lock"]
    cli("kv", "del", bucket, "lock", "-f")
    assert "not found" in one_error_line(cli("kv", "get", bucket, "lock", expect=1))
    cli("kv", "create", bucket, "lock", "again")  # allowed after a delete
    cli("kv", "purge", bucket, "db.pw", "-f")
    assert cli("kv", "keys", bucket).stdout.split() == ["db.url", "lock"]
    history = as_json(cli("kv", "history", bucket, "db.url", "--json"))
    assert [(h["revision"], h["value"]) for h in history] == [
        (1, "postgres://a"),
        (2, "postgres://b"),
    ]
    table = cli("kv", "history", bucket, "lock").stdout
    assert "DEL" in table
    assert "again" in table
    assert_fits(table)
    listed = as_json(cli("kv", "ls", "--json"))
    mine = [b for b in listed if b["bucket"] == bucket]
    assert mine
    assert mine[0]["history"] == 5
    assert mine[0]["values"] >= 3
    assert bucket in cli("kv", "ls", "--names").stdout
    assert_fits(cli("kv", "ls").stdout)
    assert as_json(cli("kv", "info", bucket, "--json"))["history"] == 5
    cli("kv", "rm", bucket, "-f")
    assert "not found" in one_error_line(cli("kv", "info", bucket, expect=1))
    assert bucket not in cli("kv", "ls", "--names").stdout


def test_times_say_they_are_utc(cli: Cli, stream: str, tmp_path: Path) -> None:
    """Times are printed in UTC, and say so: a time without a zone is local for ``pause``."""
    utc = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")
    cli("pub", f"{stream}.x", "hello")
    shown = {
        "get": cli("get", stream, "1").stdout,
        "consume": cli("consume", stream, "--count", "1").stdout,
        "stream info": cli("stream", "info", stream).stdout,
    }
    bucket = unique_name("KV")
    cli("kv", "add", bucket)
    cli("kv", "put", bucket, "k", "a long value " * 6)
    shown["kv get"] = cli("kv", "get", bucket, "k").stdout
    history = cli("kv", "history", bucket, "k").stdout
    shown["kv history"] = history
    (tmp_path / "f.txt").write_text("x")
    store = unique_name("OBJ")
    cli("obj", "add", store)
    cli("obj", "put", store, str(tmp_path / "f.txt"))
    shown["obj ls"] = cli("obj", "ls", store).stdout
    shown["obj info"] = cli("obj", "info", store, "f.txt").stdout
    for command, text in shown.items():
        assert utc.search(text), (command, text)
    # The history table keeps its columns whole; a long value is what gets cut.
    assert_fits(history)
    assert "Revision   Operation" in history
    assert "a long value a long" in history
    assert "…" in history
    cli("kv", "rm", bucket, "--force")
    cli("obj", "rm", store, "--force")


def test_kv_put_without_value_reads_piped_stdin(cli: Cli) -> None:
    """No VALUE and a piped standard input: the value is read from it (it was empty)."""
    bucket = unique_name("KV")
    cli("kv", "add", bucket)
    cli("kv", "put", bucket, "piped", input=b"secret-config\n")
    assert cli("kv", "get", bucket, "piped", "--raw").stdout == "secret-config\n"
    cli("kv", "create", bucket, "made", input=b"\xff binary")
    assert cli("kv", "get", bucket, "made", "--raw").stdout_bytes == b"\xff binary"
    cli("kv", "put", bucket, "empty")  # nothing piped (an empty input): an empty value
    assert cli("kv", "get", bucket, "empty", "--raw").stdout == ""
    cli("kv", "put", bucket, "given", "v", input=b"ignored")  # a VALUE wins
    assert cli("kv", "get", bucket, "given", "--raw").stdout == "v"
    cli("kv", "rm", bucket, "--force")


def test_kv_ttl_needs_limit_markers(cli: Cli) -> None:
    plain = unique_name("KV")
    cli("kv", "add", plain)
    refused = cli("kv", "create", plain, "k", "v", "--ttl", "5s", expect=1)
    assert one_error_line(refused) == (
        f"error: a TTL on create needs limit markers, and bucket {plain!r} has none: set "
        "limit_marker_ttl (update_key_value can enable it); this client refuses a key TTL "
        "without markers (ADR-48: its expiry would reach no watcher) (code=400, err_code=10166)"
    )
    marked = unique_name("KV")
    cli("kv", "add", marked, "--limit-marker-ttl", "2s")
    assert as_json(cli("kv", "info", marked, "--json"))["limit_marker_ttl"] == 2 * NS
    cli("kv", "create", marked, "session", "v", "--ttl", "1h")
    cli("kv", "purge", marked, "session", "--ttl", "1h", "-f")
    history = as_json(cli("kv", "history", marked, "session", "--json"))
    assert history[-1]["operation"] == "PURGE"


def test_kv_watch(cli: Cli) -> None:
    bucket = unique_name("KV")
    cli("kv", "add", bucket, "--history", "3")
    cli("kv", "put", bucket, "a.1", "x")
    cli("kv", "put", bucket, "a.1", "y")
    cli("kv", "put", bucket, "b.1", "z")
    cli("kv", "del", bucket, "b.1", "-f")
    latest = json_lines(cli("kv", "watch", bucket, "--idle", "500ms", "--json"))
    assert [(e["key"], e["operation"]) for e in latest] == [("a.1", "PUT"), ("b.1", "DEL")]
    every = json_lines(cli("kv", "watch", bucket, "a.*", "--history", "-c", "2", "--json"))
    assert [e["value"] for e in every] == ["x", "y"]
    text = cli("kv", "watch", bucket, "--ignore-deletes", "--idle", "0.5")
    assert "[PUT] a.1 revision 2: y" in text.stdout
    assert "b.1" not in text.stdout
    assert "up to date" in text.stderr
    assert json_lines(cli("kv", "watch", bucket, "--updates-only", "--idle", "0.3", "--json")) == []


def test_kv_values_are_printed_as_they_are(cli: Cli) -> None:
    bucket = unique_name("KV")
    cli("kv", "add", bucket, "--history", "2")
    cli("kv", "put", bucket, "k", TRICKY)
    got = cli("kv", "get", bucket, "k")
    assert got.stdout.splitlines()[1:] == [TRICKY]
    watched = cli("kv", "watch", bucket, "--count", "1")
    assert watched.stdout == f"[PUT] k revision 1: {TRICKY}\n"
    cli("kv", "put", bucket, "k", "[/x] :smile:")
    table = cli("kv", "history", bucket, "k").stdout  # a table of values
    assert "[/x] :smile:" in table
    assert ":smile: :thumbs_up:" in table
    blob = b"v\xfe\r\x07"
    cli("kv", "put", bucket, "bin", "-", input=blob)
    assert cli("kv", "get", bucket, "bin").stdout_bytes.endswith(b"bytes\nv\\xfe\\r\\x07\n")


# --------------------------------------------------------------------------- obj


def test_obj_commands(cli: Cli, tmp_path: Path) -> None:
    bucket = unique_name("OBJ")
    created = cli("obj", "add", bucket, "--description", "files")
    assert f"Created bucket {bucket}." in created.stderr
    again = cli("obj", "add", bucket, "--description", "files")
    assert f"Bucket {bucket} exists already, unchanged." in again.stderr
    blob = bytes(range(256)) * 2000  # 512,000 bytes: several chunks
    source = tmp_path / "blob.bin"
    source.write_bytes(blob)
    stored = as_json(cli("obj", "put", bucket, str(source), "--chunk-size", "64KiB", "--json"))
    assert (stored["name"], stored["size"], stored["chunks"]) == ("blob.bin", len(blob), 8)
    text = cli("obj", "put", bucket, "-", "--name", "notes/hi.txt", input="hi\n")
    assert "Stored notes/hi.txt" in text.stdout
    assert "Storing notes/hi.txt" in text.stderr  # the progress bar
    cli("obj", "put", bucket, "-", expect=2)  # standard input needs --name

    listed = as_json(cli("obj", "ls", bucket, "--json"))
    assert [o["name"] for o in listed] == ["blob.bin", "notes/hi.txt"]
    table = cli("obj", "ls", bucket).stdout
    assert "blob.bin" in table
    assert "notes/hi.txt" in table
    assert_fits(table)
    assert bucket in cli("obj", "ls").stdout.split()
    assert bucket in as_json(cli("obj", "ls", "--json"))
    info = as_json(cli("obj", "info", bucket, "blob.bin", "--json"))
    assert info["digest"].startswith("SHA-256=")
    assert_fits(cli("obj", "info", bucket, "blob.bin").stdout)
    assert as_json(cli("obj", "info", bucket, "--json"))["size"] > len(blob)
    assert_fits(cli("obj", "info", bucket).stdout)

    target = tmp_path / "out.bin"
    fetched = cli("obj", "get", bucket, "blob.bin", "-o", str(target))
    assert target.read_bytes() == blob
    assert "Fetching blob.bin" in fetched.stderr
    again = cli("obj", "get", bucket, "blob.bin", "-o", str(target), expect=1)
    assert "exists" in one_error_line(again)
    cli("obj", "get", bucket, "blob.bin", "-o", str(target), "--force")
    assert cli("obj", "get", bucket, "notes/hi.txt", "-o", "-").stdout == "hi\n"
    missing = cli("obj", "get", bucket, "nope", "-o", str(tmp_path / "nope"), expect=1)
    assert "not found" in one_error_line(missing)
    assert not (tmp_path / "nope").exists()
    nowhere = tmp_path / "nowhere" / "out.bin"
    failed = cli("obj", "get", bucket, "blob.bin", "-o", str(nowhere), expect=1)
    # Names the directory asked for (it named a ".out.bin.<random>.part" file there).
    assert one_error_line(failed) == f"error: {nowhere.parent}: no such directory"

    # Names are shown as they are, in the progress bar and the tables.
    odd = "[/x] :smile:"
    stored_odd = cli("obj", "put", bucket, "-", "--name", odd, input="x")
    assert f"Storing {odd}" in stored_odd.stderr
    assert f"Stored {odd} in {bucket}" in stored_odd.stdout
    assert odd in cli("obj", "ls", bucket).stdout
    assert f"Object {odd}" in cli("obj", "info", bucket, odd).stdout
    cli("obj", "rm", bucket, odd, "-f")

    cli("obj", "rm", bucket, "blob.bin", "-f")
    assert [o["name"] for o in as_json(cli("obj", "ls", bucket, "--json"))] == ["notes/hi.txt"]
    cli("obj", "rm", bucket, "-f")
    assert bucket not in cli("obj", "ls").stdout.split()


#: A size in decimal units (kB, MB: Rich's progress columns) rather than KiB, MiB.
DECIMAL_UNITS = re.compile(r"\d ?[kKMGT]B\b")


def test_sizes_are_in_binary_units_everywhere(cli: Cli, tmp_path: Path) -> None:
    """Progress bars, summaries, tables and bench say KiB/MiB: the bar said 3.0 MB over 2.9 MiB."""
    bucket = unique_name("UNITS")
    cli("obj", "add", bucket)
    source = tmp_path / "three.bin"
    source.write_bytes(b"u" * 3_000_000)
    stored = cli("obj", "put", bucket, str(source))
    assert "2.9/2.9 MiB" in stored.stderr  # the progress bar
    assert re.search(r"\d MiB/s", stored.stderr), stored.stderr
    assert "three.bin in " + bucket + ": 2.9 MiB" in stored.stdout
    fetched = cli("obj", "get", bucket, "three.bin", "-o", str(tmp_path / "back.bin"))
    assert "2.9/2.9 MiB" in fetched.stderr
    assert "(2.9 MiB)" in fetched.stderr
    info = cli("obj", "info", bucket, "three.bin")
    assert "2.9 MiB (3,000,000 bytes)" in info.stdout
    name = unique_name("UNITS")
    cli("stream", "add", name, "--subjects", f"{name}.>", "--storage", "memory")
    published = cli("pub", f"{name}.x", "y" * 2048, "--count", "200")
    assert re.search(r"Throughput +[\d.]+ [KMG]iB/s", published.stdout), published.stdout
    bench = cli("bench", "pub", "--stream", unique_name("UNITS"), "--msgs", "500", "--size", "1KiB")
    assert re.search(r"Throughput +[\d.]+ [KMG]iB/s", bench.stdout), bench.stdout
    for result in (stored, fetched, info, published, bench):
        assert not DECIMAL_UNITS.search(result.output), result.output
    cli("stream", "rm", name, "-f")
    cli("obj", "rm", bucket, "-f")


def test_size_limits_are_shown_in_binary_units(cli: Cli) -> None:
    """``Max msg size`` was ``1,048,576``; bucket limits were not shown; kv history's Size bare."""
    name = unique_name("UNITS")
    added = cli("stream", "add", name, "--max-msg-size", "1MiB", "--max-bytes", "10MB")
    assert re.search(r"Max msg size +1\.0 MiB\s*\n", added.stdout), added.stdout
    assert re.search(r"Max bytes +9\.5 MiB \(10,000,000 bytes\)", added.stdout), added.stdout
    assert "1,048,576" not in added.stdout
    info = cli("stream", "info", name).stdout
    assert re.search(r"Max msg size +1\.0 MiB\s*\n", info), info
    cli("stream", "rm", name, "-f")
    bucket = unique_name("UNITS")
    kv_added = cli("kv", "add", bucket, "--max-bytes", "1GiB", "--max-value-size", "512")
    kv_info = cli("kv", "info", bucket).stdout
    for text in (kv_added.stdout, kv_info):
        assert re.search(r"Max bytes +1\.0 GiB\s*\n", text), text
        assert re.search(r"Max value size +512 B\s*\n", text), text
    cli("kv", "put", bucket, "k", "x" * 300)
    history = cli("kv", "history", bucket, "k").stdout
    assert re.search(r"PUT .* 300 B ", history), history
    unlimited = unique_name("UNITS")
    cli("kv", "add", unlimited)
    assert re.search(r"Max value size +unlimited", cli("kv", "info", unlimited).stdout)
    store = unique_name("UNITS")
    obj_added = cli("obj", "add", store, "--max-bytes", "64MiB")
    for text in (obj_added.stdout, cli("obj", "info", store).stdout):
        assert re.search(r"Max bytes +64\.0 MiB\s*\n", text), text
    for result in (added, kv_added, obj_added):
        assert_fits(result.stdout)
    cli("kv", "rm", bucket, "-f")
    cli("kv", "rm", unlimited, "-f")
    cli("obj", "rm", store, "-f")


def test_obj_get_into_a_directory(cli: Cli, tmp_path: Path) -> None:
    """``-o DIR`` writes DIR/NAME (the name's last part); refusals come before fetching."""
    bucket = unique_name("OBJ")
    cli("obj", "add", bucket)
    blob = bytes(range(256)) * 1000
    cli("obj", "put", bucket, "-", "--name", "build/app.bin", input=blob)
    folder = tmp_path / "downloads"
    folder.mkdir()
    fetched = cli("obj", "get", bucket, "build/app.bin", "-o", str(folder), "--json")
    assert as_json(fetched)["file"] == str(folder / "app.bin")
    assert (folder / "app.bin").read_bytes() == blob
    assert sorted(p.name for p in folder.iterdir()) == ["app.bin"]  # no part file left
    # There already: refused without --force, before anything is fetched.
    again = cli("obj", "get", bucket, "build/app.bin", "-o", str(folder), expect=1)
    assert (
        one_error_line(again) == f"error: {folder / 'app.bin'} exists (use --force to overwrite it)"
    )
    assert "Fetching" not in again.stderr
    (folder / "app.bin").write_bytes(b"old")
    cli("obj", "get", bucket, "build/app.bin", "-o", str(folder), "--force")
    assert (folder / "app.bin").read_bytes() == blob
    # DIR/NAME is itself a directory: refused, even with --force, before fetching.
    (folder / "app.bin").unlink()
    (folder / "app.bin").mkdir()
    clash = cli("obj", "get", bucket, "build/app.bin", "-o", str(folder), "-f", expect=1)
    assert one_error_line(clash) == f"error: {folder / 'app.bin'} is a directory"
    assert "Fetching" not in clash.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["app.bin"]
    # Always inside DIR: a last part that is no file name ("logs/..") becomes "object".
    for name, file in (("logs/..", "object"), ("tmp/", "tmp"), ("../../up", "up")):
        cli("obj", "put", bucket, "-", "--name", name, input=name.encode())
        shutil.rmtree(folder)
        folder.mkdir()
        cli("obj", "get", bucket, name, "-o", str(folder))
        assert [p.name for p in folder.iterdir()] == [file]
        assert (folder / file).read_bytes() == name.encode()


# --------------------------------------------------------------------------- bench


def test_bench_pub(cli: Cli, nats_url: str) -> None:
    name = unique_name("BENCH")
    result = as_json(
        cli("bench", "pub", "--stream", name, "--msgs", "300", "--size", "64", "--json")
    )
    assert result["messages"] == 300
    assert result["payload_bytes"] == 64
    assert result["msgs_per_second"] > 0
    latency = result["ack_latency_ms"]
    assert 0 <= latency["p50"] <= latency["p90"] <= latency["p99"] <= latency["max"]

    async def exists(js: JetStreamContext) -> bool:
        try:
            await js.stream(name)
        except StreamNotFoundError:
            return False
        return True

    assert not query(nats_url, exists)  # the stream it made is gone
    table = cli("bench", "pub", "--stream", name, "--msgs", "200", "--sync", "--keep")
    assert "ack latency p99" in table.stdout
    assert "Rate" in table.stdout
    assert "200/200" in table.stderr
    assert_fits(table.stdout)
    assert query(nats_url, exists)  # --keep


def test_bench_uses_a_stream_storing_the_subject_through_a_wildcard(cli: Cli) -> None:
    """A stream on ``NAME.>`` stores ``NAME.bench``: it was refused (an exact match only)."""
    name = unique_name("BENCH")
    cli("stream", "add", name, "--subjects", f"{name}.>,other.*.x")
    for subject in (f"{name}.bench", f"{name}.a.b", "other.y.x"):
        result = as_json(
            cli("bench", "pub", "--stream", name, "--subject", subject, "--msgs", "5", "--json")
        )
        assert result["messages"] == 5
    consumed = cli(
        "bench", "consume", "--stream", name, "--subject", f"{name}.c", "--msgs", "5", "--json"
    )
    assert as_json(consumed)["messages"] == 5
    assert as_json(cli("stream", "info", name, "--json"))["state"]["messages"] == 20
    for subject in (name, "other.y", "other.y.x.z", "elsewhere"):
        refused = cli("bench", "pub", "--stream", name, "--subject", subject, expect=1)
        assert f"does not store {subject}" in one_error_line(refused)
    cli("stream", "rm", name, "--force")


def test_bench_size_is_not_negative() -> None:
    """``--size -1`` (unlimited, for limits) is no payload size: a usage error, not a crash."""
    nowhere = unreachable_url()
    for command in ("pub", "consume"):
        usage = invoke(nowhere, ("bench", command, "--size", "-1"), None, 2)
        assert usage_error_line(usage) == (
            "Error: Invalid value for '--size': '-1' is negative: give a size of 0 or more bytes"
        )


def test_bench_consume(cli: Cli) -> None:
    name = unique_name("BENCH")
    live = as_json(cli("bench", "consume", "--stream", name, "--msgs", "300", "--json"))
    assert live["benchmark"] == "consume (live)"
    assert live["messages"] == 300
    latency = live["end_to_end_ms"]
    assert 0 <= latency["p50"] <= latency["max"]
    backlog = cli("bench", "consume", "--stream", name, "--msgs", "200", "--backlog", "--no-ack")
    assert "consume (backlog)" in backlog.stdout
    assert "Rate" in backlog.stdout
    assert "Storing" in backlog.stderr
    assert "Consuming" in backlog.stderr
    assert_fits(backlog.stdout)
    small = cli("bench", "consume", "--stream", name, "--size", "4", expect=2)
    assert "at least 8" in small.stderr
