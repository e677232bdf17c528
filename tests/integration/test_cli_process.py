"""The command line as people run it: the console script, ``python -m``, a terminal, the server.

These start real processes (a few, to keep the suite fast); the commands
themselves are covered in-process by ``test_cli.py``.
"""

from __future__ import annotations

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
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from aiojetstream.cli._app import app
from helpers import unique_name

SRC = Path(__file__).resolve().parents[2] / "src"
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
    missing = subprocess.run(
        [sys.executable, "-m", "aiojetstream", "stream", "info", unique_name("NOPE")],
        capture_output=True,
        text=True,
        timeout=BOUND,
        env=env(NATS_URL=nats_url),
    )
    assert missing.returncode == 1
    assert missing.stdout == ""
    assert missing.stderr == "error: stream not found (code=404, err_code=10059)\n"
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


def read_terminal(master: int, proc: subprocess.Popen[bytes]) -> bytes:
    """Everything the child writes to its terminal, until it exits (bounded)."""
    chunks: list[bytes] = []
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1.0)
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
