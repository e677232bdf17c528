"""The command line against hostile input (issue 25, round 2).

Server data that would control a terminal (ESC sequences, BEL, CR, NUL, a
bidi override) is printed escaped by every command, and is never read as Rich
markup; ``--raw`` and ``--json`` stay exact. ``pub --count`` (pipelined) and
``bench pub`` keep memory flat and stop at the first failed acknowledgement.
A closed or unreadable standard input is one error line and exit code 2.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import pty
import select
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from typer.testing import CliRunner, Result

import aiojetstream
from aiojetstream import (
    JetStreamContext,
    KeyValueConfig,
    ObjectStoreConfig,
    StorageType,
    StreamConfig,
)
from aiojetstream.cli._app import app
from helpers import unique_name, wait_until_sync

T = TypeVar("T")
SRC = Path(__file__).resolve().parents[2] / "src"
BOUND = 60.0  # seconds: generous, for a loaded two-core machine

#: Retitles the terminal (OSC 0 ... BEL), clears it (CSI 2J), returns the
#: cursor (CR), turns the text around (U+202E), a NUL; then Rich markup and an
#: emoji code, which must come out as they are.
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\r\u202e\x00[bold]B[/bold][link=http://x]L[/link]:smile:"
ESCAPED = "\\x1b]0;pwned\\x07\\x1b[2J\\r\\u202e\\x00[bold]B[/bold][link=http://x]L[/link]:smile:"
#: The same for names and subjects (no NUL, CR, space or "/": a stream name can hold it).
NAME = "\x1b]0;pwned\x07\x1b[2J\u202e[bold]B[red]"
NAME_ESCAPED = "\\x1b]0;pwned\\x07\\x1b[2J\\u202e[bold]B[red]"
#: None of these may reach a terminal from server data.
CONTROLS = ("\x1b", "\x07", "\x00", "\r", "\u202e")


def env(**extra: str) -> dict[str, str]:
    """The environment of a child: this interpreter's import path, no colour settings."""
    base = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    base["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), base.get("PYTHONPATH")]))
    base.update(extra)
    return base


def query(url: str, fn: Callable[[JetStreamContext], Awaitable[T]]) -> T:
    """Run ``fn(js)`` on a connection of the test's own."""

    async def main() -> T:
        async with await aiojetstream.connect(url) as js:
            return await fn(js)

    return asyncio.run(main())


def api(url: str, subject: str, request: dict[str, Any]) -> dict[str, Any]:
    """A raw JetStream API request (names the library would refuse, as another client sends)."""

    async def call(js: JetStreamContext) -> dict[str, Any]:
        reply = await js.nc.request(subject, json.dumps(request).encode(), timeout=10)
        answer: dict[str, Any] = json.loads(reply.data)
        assert "error" not in answer, answer
        return answer

    return query(url, call)


def raw_publish(
    url: str, subject: str, payload: bytes, headers: dict[str, str] | None = None
) -> None:
    """Publish as another client may: a subject and headers the library would refuse."""

    async def send(js: JetStreamContext) -> None:
        reply = await js.nc.request(subject, payload, headers=headers, timeout=10)
        assert b'"seq"' in reply.data, reply.data  # stored

    query(url, send)


def run_cli(url: str, *args: str, input: str | bytes | None = None, expect: int = 0) -> Result:
    """The command in-process, wide (no folded cells): exit code checked."""
    result = CliRunner().invoke(
        app, list(args), input=input, env={"NATS_URL": url, "COLUMNS": "400"}
    )
    assert result.exit_code == expect, (
        f"exit {result.exit_code} (expected {expect}) for {args}\n"
        f"stdout: {result.stdout!r}\nstderr: {result.stderr!r}\nexception: {result.exception!r}"
    )
    return result


def assert_printable(result: Result, *, seen: tuple[str, ...] = ()) -> str:
    """No control character of :data:`CONTROLS` in the output; each of ``seen`` in it."""
    text = result.stdout + result.stderr
    found = {repr(c): text.count(c) for c in CONTROLS}
    assert found == dict.fromkeys(found, 0), text
    for part in seen:
        assert part in text, f"{part!r} not in {text!r}"
    return text


# --------------------------------------------------------------------------- 7: output


def test_messages_are_printed_escaped(nats_url: str) -> None:
    """consume and get: subject, headers and payload escaped; the payload's lines kept."""
    stream = unique_name("HOST")
    run_cli(nats_url, "stream", "add", stream, "--subjects", f"{stream}.>")
    subject = f"{stream}.{NAME}"
    payload = HOSTILE.encode() + b"\nline 2 \xff"
    raw_publish(nats_url, subject, payload, {"X-Note": NAME})
    subject_escaped = f"{stream}.{NAME_ESCAPED}"
    body = f"{ESCAPED}\nline 2 \\xff\n"

    consumed = run_cli(nats_url, "consume", stream, "--count", "1", "--headers")
    assert_printable(consumed, seen=(subject_escaped, f"  X-Note: {NAME_ESCAPED}\n"))
    assert consumed.stdout.endswith(body)  # its two lines, as two lines
    got = run_cli(nats_url, "get", stream, "1")
    assert_printable(got, seen=(subject_escaped, NAME_ESCAPED))
    assert got.stdout.endswith(body)
    durable = unique_name("C")
    run_cli(nats_url, "consumer", "add", stream, durable)
    pulled = run_cli(nats_url, "consume", stream, durable, "--count", "1")
    assert_printable(pulled, seen=(subject_escaped,))
    assert pulled.stdout.endswith(body)

    # Exact for pipes and scripts.
    assert run_cli(nats_url, "get", stream, "1", "--raw").stdout_bytes == payload
    raw = run_cli(nats_url, "consume", stream, "-c", "1", "--raw").stdout_bytes
    assert raw == payload + b"\n"
    record = json.loads(run_cli(nats_url, "get", stream, "1", "--json").stdout)
    assert record["subject"] == subject
    assert record["headers"] == {"X-Note": NAME}
    assert "\x1b" not in run_cli(nats_url, "get", stream, "1", "--json").stdout  # \u001b
    run_cli(nats_url, "stream", "rm", stream, "-f")


def hpub(url: str, subject: str, block: bytes, payload: bytes) -> None:
    """Publish with a header block of any bytes (nats-py's headers are str): raw HPUB."""

    async def send() -> None:
        host, _, port = url.removeprefix("nats://").rpartition(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        await reader.readline()  # INFO
        size = len(block) + len(payload)
        writer.write(
            b'CONNECT {"headers":true,"protocol":1,"verbose":false}\r\nSUB ack 1\r\n'
            + f"HPUB {subject} ack {len(block)} {size}\r\n".encode()
            + block
            + payload
            + b"\r\nPING\r\n"
        )
        reply = b""
        while b'"seq"' not in reply:
            line = await asyncio.wait_for(reader.readline(), BOUND)
            assert line, reply
            reply += line
        writer.close()
        await writer.wait_closed()

    asyncio.run(send())


def test_header_bytes_that_are_not_utf8_are_replaced_as_documented(nats_url: str) -> None:
    """As nats-py and nats.js decode them: U+FFFD, in the library and every CLI output
    (docs/cli.md said such bytes show as \\xff and --json is exact: true of payloads only)."""
    stream = unique_name("HUTF")
    run_cli(nats_url, "stream", "add", stream, "--subjects", f"{stream}.>")
    hpub(nats_url, f"{stream}.a", b"NATS/1.0\r\nX-Bin: caf\xe9 \xff\r\n\r\n", b"d\xff")
    replaced = {"X-Bin": "caf\ufffd \ufffd"}

    async def read(js: JetStreamContext) -> list[dict[str, str] | None]:
        stored = await (await js.stream(stream)).get_msg(1)
        batch = await (await js.ordered_consumer(stream)).fetch(1)
        return [stored.headers, *[msg.headers async for msg in batch]]

    assert query(nats_url, read) == [replaced, replaced]
    record = json.loads(run_cli(nats_url, "get", stream, "1", "--json").stdout)
    assert record["headers"] == replaced
    assert record["data_base64"] == "ZP8="  # the payload: exact
    got = run_cli(nats_url, "get", stream, "1").stdout
    assert "X-Bin  caf\ufffd \ufffd" in got
    assert got.endswith("d\\xff\n")
    consumed = run_cli(nats_url, "consume", stream, "--count", "1", "--headers").stdout
    assert "  X-Bin: caf\ufffd \ufffd\n" in consumed
    docs = " ".join((SRC.parent / "docs" / "cli.md").read_text().split())
    assert "Header names and values (and subjects) are decoded by the library with " in docs
    assert "each byte that is not UTF-8 is `\ufffd` (U+FFFD) there, in every output, " in docs
    run_cli(nats_url, "stream", "rm", stream, "-f")


def test_stream_and_consumer_infos_are_printed_escaped(nats_url: str) -> None:
    """Names, descriptions, subjects and metadata of streams and consumers, as tables and lists."""
    plain = unique_name("HOST")
    run_cli(nats_url, "stream", "add", plain, "--subjects", f"{plain}.>")
    api(
        nats_url,
        f"$JS.API.STREAM.UPDATE.{plain}",
        {
            "name": plain,
            "subjects": [f"{plain}.>", f"{plain}{NAME}"],
            "description": HOSTILE,
            "metadata": {"note": HOSTILE},
            "storage": "file",
        },
    )
    # A stream and a consumer named so by another client (the server takes it).
    odd = f"{unique_name('HOST')}{NAME}"
    api(nats_url, f"$JS.API.STREAM.CREATE.{odd}", {"name": odd, "subjects": [f"{plain}odd.>"]})
    consumer = f"C{NAME}"
    api(
        nats_url,
        f"$JS.API.CONSUMER.CREATE.{plain}.{consumer}",
        {
            "stream_name": plain,
            "config": {"durable_name": consumer, "name": consumer, "ack_policy": "explicit"},
        },
    )
    described = unique_name("C")
    api(
        nats_url,
        f"$JS.API.CONSUMER.CREATE.{plain}.{described}",
        {
            "stream_name": plain,
            "config": {
                "durable_name": described,
                "ack_policy": "explicit",
                "description": HOSTILE,
                "filter_subject": f"{plain}{NAME}",
            },
        },
    )

    info = run_cli(nats_url, "stream", "info", plain)
    assert_printable(info, seen=(ESCAPED, f"{plain}{NAME_ESCAPED}", f"note={ESCAPED}"))
    listed = run_cli(nats_url, "stream", "ls")
    assert_printable(listed, seen=(NAME_ESCAPED, f"{plain}{NAME_ESCAPED}"))
    assert_printable(run_cli(nats_url, "stream", "ls", "--names"), seen=(NAME_ESCAPED,))
    assert odd in json.loads(run_cli(nats_url, "stream", "ls", "--names", "--json").stdout)
    consumers = run_cli(nats_url, "consumer", "ls", plain)
    assert_printable(consumers, seen=(f"C{NAME_ESCAPED}", f"{plain}{NAME_ESCAPED}"))
    assert_printable(run_cli(nats_url, "consumer", "ls", plain, "-n"), seen=(f"C{NAME_ESCAPED}",))
    shown = run_cli(nats_url, "consumer", "info", plain, described)
    assert_printable(shown, seen=(ESCAPED, f"{plain}{NAME_ESCAPED}"))
    # What a command says of a name given to it, and a question about one.
    asked = run_cli(
        nats_url, "stream", "purge", plain, "--subject", f"{plain}{NAME}", input="n\n", expect=1
    )
    assert_printable(asked, seen=(f"Purge messages on {plain}{NAME_ESCAPED}",))
    # An acknowledgement naming it (the library refuses the name): one printable error line.
    refused = run_cli(nats_url, "pub", f"{plain}odd.x", "m", expect=1)
    assert_printable(refused, seen=("error: invalid publish acknowledgement",))
    assert refused.stderr.count("\n") == 1
    api(nats_url, f"$JS.API.STREAM.DELETE.{odd}", {})
    run_cli(nats_url, "stream", "rm", plain, "-f")


def test_kv_is_printed_escaped(nats_url: str) -> None:
    """kv get, watch, history, keys, info and ls."""
    bucket = unique_name("KVH")

    async def make(js: JetStreamContext) -> None:
        kv = await js.create_key_value(
            KeyValueConfig(bucket=bucket, description=HOSTILE, history=5)
        )
        await kv.put("k", HOSTILE.encode() + b"\nline 2")
        # A key no client of this library writes: straight to its subject.
        await js.nc.publish(f"$KV.{bucket}.k{NAME}", b"v")
        await js.nc.flush()

    query(nats_url, make)
    value_lines = f"{ESCAPED}\nline 2\n"

    got = run_cli(nats_url, "kv", "get", bucket, "k")
    assert_printable(got, seen=(ESCAPED,))
    assert got.stdout.endswith(value_lines)
    assert run_cli(nats_url, "kv", "get", bucket, "k", "--raw").stdout_bytes == (
        HOSTILE.encode() + b"\nline 2"
    )
    watched = run_cli(nats_url, "kv", "watch", bucket, "--count", "2")
    assert_printable(watched)
    # One line an entry: the value's newline is escaped there.
    assert watched.stdout.splitlines() == [
        f"[PUT] k revision 1: {ESCAPED}\\nline 2",
        f"[PUT] k{NAME_ESCAPED} revision 2: v",
    ]
    history = run_cli(nats_url, "kv", "history", bucket, "k")
    assert_printable(history, seen=("\\x1b]0;pwned",))
    assert_printable(run_cli(nats_url, "kv", "keys", bucket), seen=(f"k{NAME_ESCAPED}",))
    assert_printable(run_cli(nats_url, "kv", "info", bucket), seen=(ESCAPED,))
    assert_printable(run_cli(nats_url, "kv", "ls"))
    run_cli(nats_url, "kv", "rm", bucket, "-f")


async def put_object(js: JetStreamContext, bucket: str, name: str) -> None:
    await (await js.object_store(bucket)).put(name, b"data")


def test_obj_is_printed_escaped_and_files_are_named_safely(nats_url: str, tmp_path: Path) -> None:
    """obj ls, info and get: names, descriptions, metadata; the file ``obj get`` creates."""
    bucket = unique_name("OBH")
    name = f"dir/{HOSTILE}.txt"

    async def make(js: JetStreamContext) -> None:
        store = await js.create_object_store(ObjectStoreConfig(bucket=bucket, description=HOSTILE))
        await store.put(name, b"data", description=HOSTILE, metadata={"note": HOSTILE})

    query(nats_url, make)
    name_escaped = f"dir/{ESCAPED}.txt"
    assert_printable(run_cli(nats_url, "obj", "ls", bucket), seen=(name_escaped,))
    assert_printable(run_cli(nats_url, "obj", "info", bucket), seen=(ESCAPED,))
    info = run_cli(nats_url, "obj", "info", bucket, name)
    assert_printable(info, seen=(name_escaped, f"note={ESCAPED}"))
    fetched = run_cli(nats_url, "obj", "get", bucket, name, "-o", str(tmp_path))
    assert_printable(fetched, seen=(f"Fetching {name_escaped}", f"Wrote {name_escaped}"))
    assert [p.name for p in tmp_path.iterdir()] == ["link]:smile:.txt"]  # the last part
    # The file's name: what would be escaped becomes "_".
    file_name = "a\x1b]0;t\x07\x1b[2J\r\u202e\x00\tb.txt"
    query(nats_url, lambda js: put_object(js, bucket, f"dir/{file_name}"))
    folder = tmp_path / "files"
    folder.mkdir()
    saved = run_cli(nats_url, "obj", "get", bucket, f"dir/{file_name}", "-o", str(folder))
    assert_printable(saved, seen=("Fetching dir/a\\x1b]0;t\\x07",))
    assert [p.name for p in folder.iterdir()] == ["a_]0;t__[2J____b.txt"]
    assert (folder / "a_]0;t__[2J____b.txt").read_bytes() == b"data"
    here = run_cli(nats_url, "obj", "get", bucket, f"dir/{file_name}", "-o", str(folder), "-f")
    assert_printable(here, seen=(str(folder / "a_]0;t__[2J____b.txt"),))
    out = json.loads(
        run_cli(nats_url, "obj", "get", bucket, name, "-o", str(tmp_path / "j"), "--json").stdout
    )
    assert out["name"] == name  # exact in JSON
    # A name given to put: the progress bar and the result line.
    stored = run_cli(nats_url, "obj", "put", bucket, "-", "--name", HOSTILE, input="x")
    assert_printable(stored, seen=(f"Storing {ESCAPED}", f"Stored {ESCAPED} in {bucket}"))
    # An error naming it.
    missing = run_cli(nats_url, "obj", "info", bucket, f"no{HOSTILE}", expect=1)
    assert_printable(missing, seen=("error: ",))
    run_cli(nats_url, "obj", "rm", bucket, "-f")


def test_obj_get_of_an_info_with_a_negative_size_is_one_error(
    nats_url: str, tmp_path: Path
) -> None:
    """A forged info saying size -1: the progress bar died of "tuple.index(x): x not in
    tuple" (its total was "unlimited"); ``obj info`` said ``Size unlimited (-1 bytes)``."""
    bucket = unique_name("OBN")

    async def forge(js: JetStreamContext) -> None:
        store = await js.create_object_store(ObjectStoreConfig(bucket=bucket))
        info = await store.put("good", b"data")
        meta = {**info.model_dump(mode="json", exclude={"mtime"}), "name": "neg", "size": -1}
        await js.publish(f"$O.{bucket}.M.bmVn", json.dumps(meta).encode())  # "neg"

    query(nats_url, forge)
    error = f"error: invalid object info on '$O.{bucket}.M.bmVn': size: Input should be"
    for args in (
        ("info", bucket, "neg"),
        ("get", bucket, "neg", "-o", "-"),
        ("get", bucket, "neg", "-o", str(tmp_path / "file")),
        ("get", bucket, "neg", "-o", str(tmp_path / "json"), "--json"),
    ):
        result = run_cli(nats_url, "obj", *args, expect=1)
        assert result.stdout == ""
        assert result.stderr.startswith(error), (args, result.stderr)
    assert list(tmp_path.iterdir()) == []
    run_cli(nats_url, "obj", "rm", bucket, "-f")


def read_terminal(master: int, proc: subprocess.Popen[bytes]) -> bytes:
    """Everything the child writes to its terminal until it exits (bounded)."""
    chunks: list[bytes] = []
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed its side
                break
            if not chunk:
                break
            chunks.append(chunk)
        elif proc.poll() is not None:
            break
    else:
        proc.kill()
        pytest.fail("the command did not finish in time")
    return b"".join(chunks)


def in_terminal(url: str, *args: str) -> bytes:
    """``python -m aiojetstream ARGS`` in a pseudo-terminal: what it wrote there."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "aiojetstream", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env(NATS_URL=url, TERM="xterm-256color", COLUMNS="200", LINES="24"),
        close_fds=True,
    )
    os.close(slave)
    try:
        screen = read_terminal(master, proc)
        assert proc.wait(timeout=BOUND) == 0, screen.decode(errors="replace")
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return screen


def test_a_terminal_gets_no_control_sequence_from_data(nats_url: str) -> None:
    """In a real terminal, where Rich styles its tables, the data's own sequences are escaped."""
    stream = unique_name("HOST")
    run_cli(nats_url, "stream", "add", stream, "--subjects", f"{stream}.>")
    raw_publish(nats_url, f"{stream}.{NAME}", HOSTILE.encode(), {"X-Note": NAME})
    for args in (("get", stream, "1"), ("consume", stream, "-c", "1", "--headers")):
        screen = in_terminal(nats_url, *args)
        if args[0] == "get":
            assert b"\x1b[1m" in screen  # Rich saw a terminal: the setting names are bold
        for sequence in (b"\x1b]", b"\x1b[2J", b"\x07", b"\x00", "\u202e".encode()):
            assert sequence not in screen, (args, screen)
        assert ESCAPED.encode() in screen
    run_cli(nats_url, "stream", "rm", stream, "-f")


def run_process(url: str, *args: str, expect: int) -> subprocess.CompletedProcess[str]:
    """``python -m aiojetstream ARGS`` as a child: its output as the user's terminal gets it."""
    proc = subprocess.run(
        [sys.executable, "-m", "aiojetstream", *args],
        capture_output=True,
        text=True,
        env=env(NATS_URL=url, COLUMNS="200"),
        timeout=BOUND,
        check=False,
    )
    assert proc.returncode == expect, (proc.returncode, proc.stdout, proc.stderr)
    return proc


def test_library_warnings_and_debug_tracebacks_are_printed_escaped(nats_url: str) -> None:
    """The library's warnings reached standard error through Python's last-resort
    handler, and ``--debug`` tracebacks through Python's own printing: server text in
    them (here a stored object's metadata, a server's error description) came out raw."""
    bucket = unique_name("OBW")
    run_cli(nats_url, "obj", "add", bucket)
    info = {"name": "evil", "bucket": bucket, "nuid": "N1", "size": 0, "chunks": 0}
    info["metadata"] = {NAME: 5}  # not a string: the listing skips it with a warning
    raw_publish(nats_url, f"$O.{bucket}.M.ZXZpbA==", json.dumps(info).encode())
    listed = run_process(nats_url, "obj", "ls", bucket, expect=0)
    for c in CONTROLS:
        assert c not in listed.stdout + listed.stderr, listed.stderr
    assert "warning:" in listed.stderr
    assert NAME_ESCAPED in listed.stderr
    # Reading that info fails; with --debug the traceback quotes the metadata, escaped.
    debug = run_process(nats_url, "--debug", "obj", "info", bucket, "evil", expect=1)
    assert "Traceback (most recent call last)" in debug.stderr
    for c in CONTROLS:
        assert c not in debug.stdout + debug.stderr, debug.stderr
    assert NAME_ESCAPED in debug.stderr
    run_cli(nats_url, "obj", "rm", bucket, "-f")


# --------------------------------------------------------------------------- 9: stdin


def aj(*args: str) -> list[str]:
    return [sys.executable, "-m", "aiojetstream", *args]


def close_stdin() -> None:
    """``preexec_fn``: start the child with file descriptor 0 closed (as ``0<&-``)."""
    os.close(0)


def with_stdin(url: str, how: str, commands: list[tuple[str, ...]]) -> list[tuple[int, str, str]]:
    """Run the commands at once, standard input ``closed`` (``0<&-``) or ``write-only``
    (``0>/dev/null``): exit code, stdout and stderr of each."""
    write_only = os.open(os.devnull, os.O_WRONLY)
    procs = []
    try:
        for args in commands:
            options: dict[str, Any] = (
                {"preexec_fn": close_stdin} if how == "closed" else {"stdin": write_only}
            )
            procs.append(
                subprocess.Popen(
                    aj(*args),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    env=env(NATS_URL=url),
                    **options,
                )
            )
        results = []
        for proc in procs:
            stdout, stderr = proc.communicate(timeout=BOUND)
            results.append((proc.returncode, stdout, stderr))
        return results
    finally:
        os.close(write_only)
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def one_error_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: "), stderr
    return lines[0]


@pytest.mark.parametrize("how", ["closed", "write-only"])
def test_unusable_stdin_is_one_error_line_and_exit_2(nats_url: str, how: str) -> None:
    """``-`` and confirmations with standard input closed (``0<&-``) or not readable."""
    stream = unique_name("HOST")
    bucket = unique_name("KVS")
    store = unique_name("OBS")
    run_cli(nats_url, "stream", "add", stream, "--subjects", f"{stream}.>")
    run_cli(nats_url, "kv", "add", bucket)
    run_cli(nats_url, "obj", "add", store)
    commands = [
        ("pub", f"{stream}.x", "-"),
        ("kv", "put", bucket, "k", "-"),
        ("stream", "add", unique_name("NEW"), "--config", "-"),
        ("obj", "put", store, "-", "--name", "x"),
        ("stream", "rm", stream),  # a question that can not be asked: a refusal
    ]
    for args, (code, stdout, stderr) in zip(
        commands, with_stdin(nats_url, how, commands), strict=True
    ):
        assert code == 2, (args, stderr)
        line = one_error_line(stderr)
        why = "is closed" if how == "closed" else "can not be read (Bad file descriptor)"
        assert line.startswith(f"error: standard input {why}: "), line
        assert stdout.strip() == "", args

    async def untouched(js: JetStreamContext) -> tuple[int, int, int]:
        messages = (await js.stream(stream)).cached_info.state.messages
        values = (await (await js.key_value(bucket)).status()).values
        objects = [info async for info in (await js.object_store(store)).list()]
        return messages, values, len(objects)

    assert query(nats_url, untouched) == (0, 0, 0)  # nothing sent, nothing deleted
    run_cli(nats_url, "stream", "rm", stream, "-f")
    run_cli(nats_url, "kv", "rm", bucket, "-f")
    run_cli(nats_url, "obj", "rm", store, "-f")


def limit_memory() -> None:
    """``preexec_fn``: at most 2 GiB of address space (an unbounded read fails, not the host)."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def test_config_files_are_read_up_to_a_bound(nats_url: str, tmp_path: Path) -> None:
    """``--config /dev/zero`` stops at 64 MiB; it read (and kept) all there was."""
    if not Path("/dev/zero").exists():
        pytest.skip("needs /dev/zero")
    ((code, _, stderr),) = run_all(
        nats_url,
        [("stream", "add", unique_name("NEW"), "--config", "/dev/zero")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=limit_memory,
    )
    assert (code, stderr) == (1, "error: /dev/zero: larger than 64 MiB: not a config\n")
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"\xff{}")
    refused = run_cli(nats_url, "stream", "add", "X", "--config", str(bad), expect=1)
    assert refused.stderr == f"error: {bad}: not UTF-8 text\n"


def test_stdin_beyond_any_message_is_refused(nats_url: str) -> None:
    """``-`` reads at most 64 MiB (nats-server's largest max_payload), not all there is."""
    stream = unique_name("HOST")
    run_cli(nats_url, "stream", "add", stream, "--subjects", f"{stream}.>")
    big = run_cli(
        nats_url, "pub", f"{stream}.x", "-", input=b"x" * (64 * 1024 * 1024 + 1), expect=2
    )
    assert big.stderr == (
        "error: standard input holds more than 64 MiB for '-': more than a NATS message can\n"
    )
    run_cli(nats_url, "stream", "rm", stream, "-f")


def run_all(
    url: str,
    commands: list[tuple[str, ...]],
    extra_env: dict[str, str] | None = None,
    **options: Any,
) -> list[tuple[int, str, str]]:
    """Start the commands at once (each ``python -m aiojetstream``); exit code, stdout, stderr."""
    procs = []
    child_env = env(NATS_URL=url, **(extra_env or {}))
    try:
        for args in commands:
            procs.append(subprocess.Popen(aj(*args), text=True, env=child_env, **options))
        results = []
        for proc in procs:
            stdout, stderr = proc.communicate(timeout=BOUND)
            results.append((proc.returncode, stdout or "", stderr or ""))
        return results
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def close_stdout() -> None:
    """``preexec_fn``: start the child with file descriptor 1 closed (as ``>&-``)."""
    os.close(1)


@pytest.mark.parametrize("how", ["closed", "read-only"])
def test_unusable_stdout_is_one_error_line_and_exit_2(nats_url: str, how: str) -> None:
    """``>&-`` or ``1</dev/null``: an error, not a traceback, nor a table lost with exit 0."""
    stream = unique_name("HOST")
    run_cli(nats_url, "stream", "add", stream, "--subjects", f"{stream}.>")
    run_cli(nats_url, "pub", f"{stream}.x", "m")
    commands = [
        ("stream", "ls"),  # a Rich table: Rich dropped it without a word
        ("stream", "info", stream, "--json"),
        ("consume", stream, "-c", "1", "--raw"),  # printed inside the command's work
        ("get", stream, "1"),
    ]
    read_only = os.open(os.devnull, os.O_RDONLY)
    try:
        options: dict[str, Any] = (
            {"preexec_fn": close_stdout} if how == "closed" else {"stdout": read_only}
        )
        results = run_all(nats_url, commands, stderr=subprocess.PIPE, **options)
    finally:
        os.close(read_only)
    why = "is closed" if how == "closed" else "can not be written (Bad file descriptor)"
    for args, (code, _, stderr) in zip(commands, results, strict=True):
        assert (code, stderr) == (2, f"error: standard output {why}\n"), args
    run_cli(nats_url, "stream", "rm", stream, "-f")


def test_closed_stderr_sends_no_error_into_stdout(nats_url: str) -> None:
    """``2>&-``: the error line goes nowhere; it went into standard output (``print``'s default)."""
    missing = unique_name("NOPE")
    ((code, stdout, _),) = run_all(
        nats_url,
        [("stream", "info", missing, "--json")],
        stdout=subprocess.PIPE,
        preexec_fn=lambda: os.close(2),
    )
    assert (code, stdout) == (1, "")


def test_text_an_output_encoding_lacks_is_escaped(nats_url: str) -> None:
    """``PYTHONIOENCODING=ascii`` (or a Latin-1 locale): escapes, not ``UnicodeEncodeError``."""
    bucket = unique_name("KVE")
    run_cli(nats_url, "kv", "add", bucket)
    run_cli(nats_url, "kv", "put", bucket, "k", "日本 é")
    commands: list[tuple[str, ...]] = [("kv", "get", bucket, "k"), ("kv", "history", bucket, "k")]
    results = run_all(
        nats_url,
        commands,
        {"PYTHONIOENCODING": "ascii"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    for args, (code, stdout, stderr) in zip(commands, results, strict=True):
        assert (code, stderr) == (0, ""), args
        assert "\\u65e5\\u672c \\xe9" in stdout, (args, stdout)
    run_cli(nats_url, "kv", "rm", bucket, "-f")


# --------------------------------------------------------------------------- 4: pub --count

#: A deadline for a command that must stop at once (measured: about 1.2 s,
#: interpreter start-up included); the unbounded version ran to the end of its
#: messages (16 s and 730 MB for 200,000; minutes for these tests' millions).
STOP_DEADLINE = 10.0


def publish_forever(stream: str) -> dict[str, tuple[str, ...]]:
    """``pub --count`` and ``bench pub`` of (nearly) endless messages into ``stream``.

    Both are pipelined by default (``pub --async`` is an alias of the default).
    """
    return {
        "pub": ("pub", f"{stream}.x", "m{n}", "--count", "100000000"),
        "bench": (
            "bench", "pub", "--stream", stream, "--subject", f"{stream}.x", "--msgs", "100000000",
        ),
    }  # fmt: skip


def resident_bytes(pid: int) -> int:
    """The resident set size of a process (Linux)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc (Linux)")
@pytest.mark.parametrize("command", ["pub", "bench"])
def test_async_publishing_keeps_memory_flat(nats_url: str, command: str) -> None:
    """The memory of an endless pipelined run does not grow with the messages sent.

    It kept every future: about 0.8 KB a message (50,000 messages: 40 MB more).
    """
    stream = unique_name("MEM")

    async def make(js: JetStreamContext) -> None:  # keeps only the newest 1,000
        await js.create_stream(
            StreamConfig(
                name=stream, subjects=[f"{stream}.x"], max_msgs=1000, storage=StorageType.MEMORY
            )
        )

    query(nats_url, make)

    async def last_seq(js: JetStreamContext) -> int:
        return (await js.stream(stream)).cached_info.state.last_seq

    def stored_up_to(mark: int) -> bool:
        return query(nats_url, last_seq) >= mark

    proc = subprocess.Popen(
        aj(*publish_forever(stream)[command]),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env(NATS_URL=nats_url),
    )
    try:
        sizes = []
        for mark in (10_000, 60_000):
            wait_until_sync(functools.partial(stored_up_to, mark), timeout=BOUND)
            sizes.append(resident_bytes(proc.pid))
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
    growth = sizes[1] - sizes[0]
    # 50,000 messages later: a few MB at most (bench keeps up to 100,000 latencies, 3 MB).
    assert growth < 16 * 1024 * 1024, f"{growth / 1e6:.1f} MB more after 50,000 messages"
    query(nats_url, lambda js: js.delete_stream(stream))


@pytest.mark.parametrize("command", ["pub", "bench"])
def test_async_publishing_stops_at_the_first_failure(nats_url: str, command: str) -> None:
    """A full stream (10 messages, discard new): the first refusal ends the command at once."""
    stream = unique_name("FULL")
    run_cli(
        nats_url, "stream", "add", stream, "--subjects", f"{stream}.x", "--max-msgs", "10",
        "--discard", "new", "--storage", "memory",
    )  # fmt: skip
    start = time.monotonic()
    try:
        done = subprocess.run(
            aj(*publish_forever(stream)[command]),
            capture_output=True,
            text=True,
            timeout=STOP_DEADLINE,
            env=env(NATS_URL=nats_url),
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"still publishing after {STOP_DEADLINE:g} s")
    took = time.monotonic() - start
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "never retrieved" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert errors == ["error: maximum messages exceeded (code=503, err_code=10077)"], done.stderr
    assert took < STOP_DEADLINE

    async def messages(js: JetStreamContext) -> int:
        return (await js.stream(stream)).cached_info.state.messages

    assert query(nats_url, messages) == 10
    run_cli(nats_url, "stream", "rm", stream, "-f")
