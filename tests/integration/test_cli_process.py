"""The command line as people run it: the console script, ``python -m``, a terminal, the server.

These start real processes (a few, to keep the suite fast); the commands
themselves are covered in-process by ``test_cli.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import json
import os
import pty
import re
import select
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from typer.testing import CliRunner

import aiojetstream
from aiojetstream.cli._app import app
from helpers import interruptible, unique_name, wait_until_sync

#: The source directory of the package these tests import (children import the same).
SRC = Path(aiojetstream.__file__).resolve().parents[1]
BOUND = 60.0  # seconds: generous, for a loaded two-core machine


def env(**extra: str) -> dict[str, str]:
    """The environment of a child: this interpreter's import path, no colour settings."""
    base = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    base["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), base.get("PYTHONPATH")]))
    base.update(extra)
    return base


def console_script() -> str:
    found = shutil.which("aiojetstream", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail("the aiojetstream console script is not installed (pip install -e '.[dev]')")
    return found


def test_console_script(nats_url: str) -> None:
    stream = unique_name("PROC")
    script = console_script()
    version = subprocess.run(
        [script, "--version"], capture_output=True, text=True, timeout=BOUND, check=True
    )
    assert version.stdout.startswith("aiojetstream ")
    subprocess.run(
        [script, "stream", "add", stream, "--subjects", f"{stream}.>"],
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=True,
        env=env(NATS_URL=nats_url),
    )
    listed = subprocess.run(
        [script, "--server", nats_url, "stream", "ls", "--names", "--json"],
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=True,
    )
    assert stream in json.loads(listed.stdout)


def test_python_m_and_one_line_errors(nats_url: str) -> None:
    help_text = subprocess.run(
        [sys.executable, "-m", "aiojetstream", "--help"],
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=True,
        env=env(),
    )
    assert "Usage: aiojetstream" in help_text.stdout
    nope = unique_name("NOPE")
    missing = subprocess.run(
        [sys.executable, "-m", "aiojetstream", "stream", "info", nope],
        capture_output=True,
        text=True,
        timeout=BOUND,
        env=env(NATS_URL=nats_url),
    )
    assert missing.returncode == 1
    assert missing.stdout == ""
    assert missing.stderr == f"error: stream {nope!r} not found (code=404, err_code=10059)\n"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        nobody = f"nats://127.0.0.1:{sock.getsockname()[1]}"  # nobody listens there
    unreachable = subprocess.run(
        [sys.executable, "-m", "aiojetstream", "--server", nobody, "stream", "ls"],
        capture_output=True,
        text=True,
        timeout=BOUND,
        env=env(),
    )
    assert unreachable.returncode == 1
    # One line: not also a log line per failed attempt; saying why it failed.
    assert re.fullmatch(r"error: could not connect to [^\n]*\n", unreachable.stderr), (
        unreachable.stderr
    )
    assert "Connect call failed" in unreachable.stderr
    usage = subprocess.run(
        [sys.executable, "-m", "aiojetstream", "stream", "nosuch"],
        capture_output=True,
        text=True,
        timeout=BOUND,
        env=env(),
    )
    assert usage.returncode == 2
    assert "No such command" in usage.stderr


def test_without_the_cli_extra_the_message_names_it() -> None:
    code = (
        "import sys; sys.modules['typer'] = None; "
        "from aiojetstream.cli import main; sys.exit(main(['stream', 'ls']))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=BOUND, env=env()
    )
    assert result.returncode == 1
    assert "pip install 'aiojetstream[cli]'" in result.stderr
    assert "Traceback" not in result.stderr


def test_import_aiojetstream_loads_no_cli() -> None:
    code = (
        "import sys, aiojetstream, aiojetstream.testing; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('typer', 'rich', 'click') "
        "or m.startswith('aiojetstream.cli')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=True,
        env=env(),
    )
    assert result.stdout.strip() == "[]"


def test_server_command_runs_until_interrupted() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "aiojetstream", "server"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
        preexec_fn=interruptible,
    )
    try:
        assert proc.stderr is not None
        ready, _, _ = select.select([proc.stderr], [], [], BOUND)
        assert ready, "the server printed nothing"
        line = proc.stderr.readline()
        match = re.search(r"at (nats://\S+)", line)
        assert match, line
        url = match.group(1)
        result = CliRunner().invoke(app, ["--server", url, "--json", "stream", "ls"])
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout) == []
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=BOUND) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


#: How long a Ctrl-C may go unanswered before it is typed again (see read_terminal).
CTRL_C_AGAIN = 3.0


def read_terminal(master: int, proc: subprocess.Popen[bytes], retype: bytes = b"") -> bytes:
    """Everything the child writes to its terminal, until it exits (bounded).

    ``retype``: typed again whenever the child went on for ``CTRL_C_AGAIN`` seconds
    (a Ctrl-C: CPython loses a SIGINT that lands between its last check of signals
    and the blocking read of ``input()``, about one run in 120 even once the child
    waits in that read; a user types it again, and so does the test. Only a lost
    one: a Ctrl-C the command ignored would be ignored each time).
    """
    chunks: list[bytes] = []
    deadline = time.monotonic() + BOUND
    typed = time.monotonic()
    while time.monotonic() < deadline:
        if retype and time.monotonic() - typed > CTRL_C_AGAIN and proc.poll() is None:
            os.write(master, retype)
            typed = time.monotonic()
        ready, _, _ = select.select([master], [], [], 0.25 if retype else 1.0)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError as exc:  # EIO: the child closed its side
                if exc.errno != errno.EIO:
                    raise
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


def run_in_terminal(nats_url: str, *args: str) -> bytes:
    """Run ``python -m aiojetstream ARGS`` in a terminal (a pty, 80x24); what it wrote there."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "aiojetstream", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env(NATS_URL=nats_url, TERM="xterm-256color", COLUMNS="80", LINES="24"),
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


def test_kv_put_without_value_in_a_terminal_is_empty(nats_url: str) -> None:
    """In a terminal, no VALUE is an empty value: nothing waits for typed input."""
    bucket = unique_name("PROC")
    setup(nats_url, "kv", "add", bucket)
    screen = run_in_terminal(nats_url, "kv", "put", bucket, "k")
    assert b"Stored k: revision 1." in screen
    got = CliRunner().invoke(app, ["--server", nats_url, "kv", "get", bucket, "k", "--raw"])
    assert (got.exit_code, got.stdout) == (0, "")
    setup(nats_url, "kv", "rm", bucket, "--force")


def test_progress_renders_in_a_terminal(nats_url: str) -> None:
    """In a real terminal (a pty, 80x24) the progress bar draws, updates and finishes."""
    stream = unique_name("PROC")
    CliRunner().invoke(
        app, ["--server", nats_url, "stream", "add", stream, "--subjects", f"{stream}.>"]
    )
    screen = run_in_terminal(nats_url, "pub", f"{stream}.x", "m{n}", "--count", "3000")
    text = screen.decode("utf-8", "replace")
    assert "\x1b[" in text  # drawn with terminal control sequences (a live display)
    assert "\x1b[?25l" in text  # the cursor is hidden while the bar is live...
    assert "\x1b[?25h" in text  # ...and shown again when it finishes
    assert "3000/3000" in text  # the bar reached the end
    assert "Publishing to" in text
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
    assert "Acknowledged" in plain
    assert re.search(r"Stored\s+3,000 \(sequences 1\.\.3000\)", plain), plain
    widest = max(len(line) for line in plain.replace("\r\n", "\n").split("\n") if "\r" not in line)
    assert widest <= 80


def test_payload_reaches_a_terminal_as_it_is(nats_url: str) -> None:
    """In a terminal, where Rich styles the table, the payload under it is left as it is."""
    stream = unique_name("PROC")
    payload = ":smile: [bold]b[/bold]\ttab"
    runner = CliRunner()
    for args in (
        ["stream", "add", stream, "--subjects", f"{stream}.>"],
        ["pub", f"{stream}.x", payload],
    ):
        done = runner.invoke(app, ["--server", nats_url, *args])
        assert done.exit_code == 0, done.output
    screen = run_in_terminal(nats_url, "get", stream, "1")
    assert b"\x1b[1m" in screen  # the table's setting names are bold: Rich saw a terminal
    assert screen.endswith(b"\n" + payload.encode() + b"\r\n")  # the terminal's own \r\n


def in_controlling_terminal() -> None:
    """``preexec_fn``: a session of its own whose controlling terminal is standard input
    (a pty), so that the terminal turns Ctrl-C into SIGINT and Ctrl-D into end of input."""
    interruptible()
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


#: The number of the read system call, where /proc/PID/syscall shows it.
_READ_SYSCALL = {"x86_64": 0, "aarch64": 63}.get(os.uname().machine)


def reading_stdin(pid: int) -> bool:
    """Whether process ``pid`` is blocked reading file descriptor 0 (True where /proc
    can not tell).

    Blocked: in the read system call on fd 0 *and* waiting in it (state S, in a
    wait channel: Linux shows a sleeping task's since 5.16). Seen in the call but not yet
    waiting, a Ctrl-C typed then was now and then lost (about 1 run in 6 under
    load: the command waited for a second one; a user types later than that).
    """
    try:
        fields = Path(f"/proc/{pid}/syscall").read_text().split()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        wchan = Path(f"/proc/{pid}/wchan").read_text().strip()
    except (OSError, IndexError):
        return True
    if _READ_SYSCALL is None or not fields or not fields[0].isdigit():
        return True
    in_read = int(fields[0]) == _READ_SYSCALL and len(fields) > 1 and int(fields[1], 16) == 0
    return in_read and state == "S" and wchan not in ("", "0")


def answer_in_terminal(nats_url: str, keys: bytes, *args: str) -> tuple[int, str]:
    """Run ``python -m aiojetstream ARGS`` in a terminal, type ``keys`` at its question."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "aiojetstream", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env(NATS_URL=nats_url, TERM="dumb", COLUMNS="200"),
        close_fds=True,
        preexec_fn=in_controlling_terminal,
    )
    os.close(slave)
    try:
        asked = b""
        deadline = time.monotonic() + BOUND
        while b"[y/N]" not in asked:
            assert time.monotonic() < deadline, asked
            ready, _, _ = select.select([master], [], [], 1.0)
            if ready:
                asked += os.read(master, 65536)
            else:
                assert proc.poll() is None, asked
        # The prompt is written just before the read: a Ctrl-C in between would be
        # handled before Python blocks in read() (then waiting for a line forever).
        wait_until_sync(lambda: reading_stdin(proc.pid), BOUND, message="reading the answer")
        os.write(master, keys)
        screen = asked + read_terminal(master, proc, keys if keys == b"\x03" else b"")
        return proc.wait(timeout=BOUND), screen.decode(errors="replace")
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize(("keys", "code"), [(b"\x03", 130), (b"\x04", 1)], ids=["ctrl-c", "ctrl-d"])
def test_ctrl_c_and_ctrl_d_at_a_question(nats_url: str, keys: bytes, code: int) -> None:
    """Ctrl-C at a question exits 130 (as anywhere), Ctrl-D is a "no" (exit 1); both
    were "standard input can not be read (Abort)", exit 2. Nothing is deleted."""
    stream = unique_name("PROC")
    setup(nats_url, "stream", "add", stream, "--subjects", f"{stream}.>")
    exit_code, screen = answer_in_terminal(nats_url, keys, "stream", "rm", stream)
    assert exit_code == code, screen
    assert "can not be read" not in screen
    assert "Traceback" not in screen
    if code == 1:
        assert "error: not confirmed (use --force to skip the question)" in screen
    else:
        assert "error" not in screen  # quietly, as Ctrl-C elsewhere
    assert stored(nats_url, stream) == 0  # the stream is still there
    setup(nats_url, "stream", "rm", stream, "--force")


def test_end_of_input_at_a_question_is_a_no(nats_url: str) -> None:
    """``</dev/null``: the question gets end of input, a "no" (exit 1), not exit 2."""
    stream = unique_name("PROC")
    setup(nats_url, "stream", "add", stream, "--subjects", f"{stream}.>")
    done = run_aj(nats_url, "stream", "rm", stream, stdin=subprocess.DEVNULL)
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines()[-1] == (
        "error: not confirmed (use --force to skip the question)"
    )
    assert stored(nats_url, stream) == 0
    setup(nats_url, "stream", "rm", stream, "--force")


def test_kv_del_and_purge_without_a_terminal_need_force(nats_url: str) -> None:
    """``</dev/null``: ``kv del`` and ``kv purge`` get a "no" (exit 1), as ``stream rm``."""
    bucket = unique_name("PROC")
    setup(nats_url, "kv", "add", bucket)
    setup(nats_url, "kv", "put", bucket, "k", "v")
    for command in ("del", "purge"):
        done = run_aj(nats_url, "kv", command, bucket, "k", stdin=subprocess.DEVNULL)
        assert done.returncode == 1, done.stderr
        assert done.stderr.splitlines()[-1] == (
            "error: not confirmed (use --force to skip the question)"
        )
    assert run_aj(nats_url, "kv", "get", bucket, "k", "--raw").stdout == "v"
    setup(nats_url, "kv", "rm", bucket, "--force")


def aj(*args: str) -> list[str]:
    """The command line ``python -m aiojetstream ARGS`` (run with ``env(NATS_URL=...)``)."""
    return [sys.executable, "-m", "aiojetstream", *args]


def run_aj(url: str, *args: str, **options: Any) -> subprocess.CompletedProcess[str]:
    """Run ``python -m aiojetstream ARGS`` against ``url``, capturing its text output."""
    if "stdout" not in options:
        options["capture_output"] = True
    return subprocess.run(aj(*args), text=True, timeout=BOUND, env=env(NATS_URL=url), **options)


def setup(url: str, *args: str, input: str | bytes | None = None) -> None:
    """Run a command in-process (to prepare a test); it must succeed."""
    done = CliRunner().invoke(app, ["--server", url, *args], input=input)
    assert done.exit_code == 0, done.output


def assert_quiet(stderr: str) -> None:
    """No traceback and no asyncio complaint about failures nobody looked at."""
    # Counted, not ``not in``: pytest's diff of a long stderr takes minutes.
    noise = ("Traceback", "never retrieved", "Exception ignored")
    found = {text: stderr.count(text) for text in noise}
    assert found == dict.fromkeys(noise, 0), stderr[:2000]


def test_failed_async_publishes_are_reported_once(nats_url: str) -> None:
    """Every publish of the window fails: one error line, not one traceback per future."""
    stream = unique_name("PROC")
    setup(nats_url, "stream", "add", stream, "--subjects", f"{stream}.>")  # no --allow-msg-ttl
    pub = run_aj(
        nats_url, "pub", f"{stream}.x", "m{n}", "--count", "1000", "--async", "--ttl", "1h"
    )
    assert pub.returncode == 1, pub.stderr
    assert_quiet(pub.stderr)
    errors = [line for line in pub.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [
        f"error: a message TTL needs allow_msg_ttl, and stream {stream!r} has it off: set "
        "allow_msg_ttl=True (update_stream can enable it, never disable it; CLI: "
        f"aiojetstream stream edit {stream} --allow-msg-ttl) (code=400, err_code=10166)"
    ]

    full = unique_name("PROC")
    setup(
        nats_url, "stream", "add", full, "--subjects", f"{full}.x", "--max-msgs", "10",
        "--discard", "new",
    )  # fmt: skip
    bench = run_aj(
        nats_url, "bench", "pub", "--stream", full, "--subject", f"{full}.x", "--msgs", "1000"
    )
    assert bench.returncode == 1, bench.stderr
    assert_quiet(bench.stderr)
    errors = [line for line in bench.stderr.splitlines() if line.startswith("error: ")]
    assert errors == ["error: maximum messages exceeded (code=503, err_code=10077)"]
    for name in (stream, full):
        setup(nats_url, "stream", "rm", name, "-f")


def stored(url: str, stream: str) -> int:
    """How many messages ``stream`` holds (asked on a connection of the test's own)."""

    async def main() -> int:
        async with await aiojetstream.connect(url) as js:
            return (await js.stream(stream)).cached_info.state.messages

    return asyncio.run(main())


def test_interrupted_async_publish_is_quiet(nats_url: str) -> None:
    """Ctrl-C while a window of publishes is in flight: exit 130, nothing on stderr but the bar."""
    stream = unique_name("PROC")
    setup(nats_url, "stream", "add", stream, "--subjects", f"{stream}.>", "--storage", "memory")
    proc = subprocess.Popen(
        aj("pub", f"{stream}.x", "m{n}", "--count", "10000000", "--async"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env(NATS_URL=nats_url),
        preexec_fn=interruptible,
    )
    try:
        wait_until_sync(lambda: stored(nats_url, stream) >= 1000, timeout=BOUND)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=BOUND)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr
    assert_quiet(stderr)
    assert "error" not in stderr
    setup(nats_url, "stream", "rm", stream, "-f")


@contextlib.contextmanager
def cli_process(url: str, *args: str) -> Iterator[tuple[subprocess.Popen[bytes], IO[bytes]]]:
    """``python -m aiojetstream ARGS`` running with piped output: the process and its stdout.

    Killed if it still runs when the block ends.
    """
    proc = subprocess.Popen(
        aj(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env(NATS_URL=url)
    )
    try:
        assert proc.stdout is not None
        yield proc, proc.stdout
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def ended(proc: subprocess.Popen[bytes]) -> tuple[int, str]:
    """Wait for the process: its exit code and its standard error."""
    code = proc.wait(timeout=BOUND)
    assert proc.stderr is not None
    return code, proc.stderr.read().decode()


def into_closed_pipe(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the command with a standard output nobody reads: its first write breaks the pipe."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return run_aj(url, *args, stdout=write_end, stderr=subprocess.PIPE)
    finally:
        os.close(write_end)


def test_broken_pipe_ends_quietly(nats_url: str) -> None:
    """``consume | head`` and ``obj get -o - | head -c``: exit 141, no message; cleaned up."""
    stream = unique_name("PROC")
    setup(nats_url, "stream", "add", stream, "--subjects", f"{stream}.>")
    setup(nats_url, "pub", f"{stream}.x", "m{n}", "--count", "2")
    with cli_process(nats_url, "consume", stream, "--raw") as (consume, out):
        assert out.readline() == b"m1\n"
        assert out.readline() == b"m2\n"
        out.close()  # as head does when it has its lines
        setup(nats_url, "pub", f"{stream}.x", "m3")  # the next write finds no reader
        code, stderr = ended(consume)
    assert code == 141
    assert stderr == ""
    listed = CliRunner().invoke(app, ["--server", nats_url, "consumer", "ls", stream, "-n"])
    assert listed.exit_code == 0, listed.output
    assert listed.stdout == ""  # the ordered consumer was deleted on the way out

    bucket = unique_name("OBJ")
    setup(nats_url, "obj", "add", bucket)
    setup(nats_url, "obj", "put", bucket, "-", "--name", "big", input=os.urandom(1 << 20))
    with cli_process(nats_url, "obj", "get", bucket, "big", "-o", "-") as (fetch, out):
        assert len(out.read(10)) == 10
        out.close()  # 1 MiB does not fit in the pipe: the object is still coming
        code, stderr = ended(fetch)
    assert code == 141
    assert_quiet(stderr)
    assert "error" not in stderr.lower()

    # Printed after the work is done (outside its error handling): the same.
    for args in (("get", stream, "1", "--raw"), ("stream", "ls", "--names")):
        late = into_closed_pipe(nats_url, *args)  # no reader at all
        assert late.returncode == 141, args
        assert late.stderr == "", args
    setup(nats_url, "obj", "rm", bucket, "-f")


@pytest.mark.parametrize("shape", [[], ["--json"]])
def test_a_table_into_a_closed_pipe_ends_quietly(nats_url: str, shape: list[str]) -> None:
    """Rich's tables too: Rich catches the broken pipe itself (and would exit 1)."""
    stream = unique_name("PROC")
    setup(nats_url, "stream", "add", stream, "--subjects", f"{stream}.>")
    listed = into_closed_pipe(nats_url, "stream", "ls", *shape)
    assert (listed.returncode, listed.stderr) == (141, "")
    setup(nats_url, "stream", "rm", stream, "-f")


def test_obj_get_file_mode_follows_the_umask(nats_url: str, tmp_path: Path) -> None:
    """A downloaded file gets 0o666 less the umask; --force keeps the replaced file's mode."""
    bucket = unique_name("OBJ")
    setup(nats_url, "obj", "add", bucket)
    setup(nats_url, "obj", "put", bucket, "-", "--name", "f.txt", input="content")
    target = tmp_path / "f.txt"
    for umask, mode in ((0o027, 0o640), (0o002, 0o664)):
        target.unlink(missing_ok=True)
        run_aj(nats_url, "obj", "get", bucket, "f.txt", "-o", str(target), check=True, umask=umask)
        assert target.read_text() == "content"
        assert stat.S_IMODE(target.stat().st_mode) == mode, oct(target.stat().st_mode)
    target.chmod(0o604)
    run_aj(
        nats_url,
        "obj",
        "get",
        bucket,
        "f.txt",
        "-o",
        str(target),
        "--force",
        check=True,
        umask=0o077,
    )
    assert stat.S_IMODE(target.stat().st_mode) == 0o604
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.txt"]
    setup(nats_url, "obj", "rm", bucket, "-f")


def test_server_on_a_busy_port_is_one_error_line() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run(
            aj("server", "--port", str(port)),
            capture_output=True,
            text=True,
            timeout=BOUND,
            env=env(),
        )
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    assert re.fullmatch(
        rf"error: nats-server on port {port} exited with code 1 during startup: "
        r"[^\n]*address already in use[^\n]*\n",
        result.stderr,
    ), result.stderr
