"""What the commands print, and how: the printable form, JSON values, Rich output, stdout's guards.

Server data (names, subjects, payloads, descriptions) reaches a terminal only
in :func:`printable` form; ``--json`` output goes through :func:`to_jsonable`.
:class:`Output` prints either way. A broken pipe ends a command quietly with
:data:`BROKEN_PIPE_EXIT`, and an unusable standard output with one error line
(:func:`check_stdout`). Nothing here connects or reads the command line's
options (:mod:`._common` does).
"""

from __future__ import annotations

import base64
import contextlib
import errno
import json
import os
import re
import sys
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, NoReturn

import pydantic
import typer
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from aiojetstream import ConsumerInfo, ConsumerPauseResponse, StreamInfo

from ._units import format_duration, format_time

#: The exit code when the reader of standard output went away (``... | head``):
#: 128 + SIGPIPE, what a shell reports for ``nats`` and other programs it ends.
BROKEN_PIPE_EXIT = 141


def say(line: str) -> None:
    """Print a line on standard error; nowhere when it is closed (``print`` would use stdout)."""
    stream = sys.stderr
    if stream is None:
        return
    with contextlib.suppress(OSError):  # not writable either: the exit code tells
        print(line, file=stream, flush=True)


class StdoutUnusableError(OSError):
    """Standard output is closed, or not open for writing: nothing can be printed."""


class _UnusableStdout:
    """``sys.stdout`` when it can not be written (:func:`check_stdout`): each write raises.

    Python has no ``sys.stdout`` at all when descriptor 1 is closed (``>&-``):
    writes would raise ``AttributeError``, and Rich would drop its output
    without a word.
    """

    encoding = "utf-8"
    errors = "strict"

    def __init__(self, why: str) -> None:
        self.why = why

    @property
    def buffer(self) -> _UnusableStdout:
        """The binary side: the same."""
        return self

    def write(self, data: object) -> int:
        """Raise :class:`StdoutUnusableError`."""
        raise StdoutUnusableError(errno.EBADF, f"standard output {self.why}")

    def flush(self) -> None:
        """Nothing to flush."""

    def isatty(self) -> bool:
        """Not a terminal."""
        return False

    def writable(self) -> bool:
        """Not writable."""
        return False


def check_stdout() -> None:
    r"""Make every write to an unusable standard output raise :class:`StdoutUnusableError`.

    Closed (``>&-``) or not open for writing (``1</dev/null``: EBADF, found by
    writing no bytes). Commands that print nothing there still run. A usable
    one writes what its encoding lacks (``PYTHONIOENCODING=ascii``, a Latin-1
    locale) as ``\xe9`` / ``\u65e5`` escapes, as the printable form does,
    instead of failing with ``UnicodeEncodeError``.
    """
    stream = sys.stdout
    if stream is None:
        sys.stdout = _UnusableStdout("is closed")
        return
    if getattr(stream, "errors", None) == "strict" and hasattr(stream, "reconfigure"):
        with contextlib.suppress(OSError, ValueError):
            stream.reconfigure(errors="backslashreplace")
    try:
        fd = stream.fileno()
    except (OSError, ValueError):  # not a file descriptor (a test's output)
        return
    try:
        os.write(fd, b"")
    except OSError as exc:
        sys.stdout = _UnusableStdout(f"can not be written ({exc.strerror or exc})")


def stdout_unusable(exc: StdoutUnusableError) -> NoReturn:
    """End the command: one error line and exit code 2 (standard input's rule)."""
    say(f"error: {exc.strerror}")
    raise typer.Exit(2)


def exit_on_broken_pipe() -> NoReturn:
    """End quietly, with :data:`BROKEN_PIPE_EXIT`: standard output's reader is gone.

    Standard output is pointed at the null device first, so that nothing left
    in its buffer makes the interpreter report a failed flush at exit.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass  # not a file descriptor (a test's captured output): nothing to flush into a pipe
    raise typer.Exit(BROKEN_PIPE_EXIT)


#: What the printable form escapes. C0 controls but tab (ESC, BEL, CR, NUL,
#: backspace...), DEL and C1 controls (0x9B is a CSI on some terminals); the
#: Unicode format characters (category Cf: the bidi overrides and isolates
#: U+202A-U+202E and U+2066-U+2069, zero-width spaces, tag characters) but
#: the joiners ZWNJ and ZWJ, which scripts and emoji need; line and paragraph
#: separators (U+2028, U+2029); lone surrogates, which can not be written.
_FORMAT_CHARS = (
    r"\xad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b\u200e\u200f"
    r"\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb"
    r"\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"
    r"\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f"
)


_UNPRINTABLE_BODY = re.compile(  # a CR ending a line (CRLF) is kept in bodies
    r"\r(?!\n)|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f" + _FORMAT_CHARS + r"\ud800-\udfff]"
)


_UNPRINTABLE_LINE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f" + _FORMAT_CHARS + r"\ud800-\udfff]")


_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED_ESCAPES.get(char)
    if named is not None:
        return named
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def printable(text: str, *, lines: bool = False) -> str:
    r"""``text`` as it may reach a terminal: what could control it written as escapes.

    ESC becomes ``\x1b``, BEL ``\x07``, NUL ``\x00``, CR ``\r``, a newline
    ``\n`` (kept with ``lines``: payloads and values keep their lines, CRLF
    endings included), U+202E ``\u202e``; tabs are kept. Backslashes are not
    doubled: the form is for reading (``--json`` and ``--raw`` are exact).
    """
    pattern = _UNPRINTABLE_BODY if lines else _UNPRINTABLE_LINE
    if pattern.search(text) is None:
        return text
    return pattern.sub(_escape, text)


def printable_text(data: bytes, *, lines: bool = True) -> str:
    r"""A payload or value as text for a terminal: UTF-8, other bytes as ``\xNN``.

    Then :func:`printable` (with ``lines``, by default: its lines are kept).
    """
    return printable(data.decode("utf-8", "backslashreplace"), lines=lines)


_FILE_NAME_UNSAFE = re.compile(_UNPRINTABLE_LINE.pattern[:-1] + r"\t]")


def safe_file_name(name: str) -> str:
    """A file name from server data: characters :func:`printable` escapes and tabs become ``_``."""
    return _FILE_NAME_UNSAFE.sub("_", name)


def to_jsonable(value: Any) -> Any:
    """Turn models, bytes, datetimes and timedeltas into JSON values.

    Models are dumped as the server writes them (durations in nanoseconds,
    timestamps in RFC 3339), stream and consumer infos without the API reply's
    own keys (``type``, ``total``, ``offset``, ``limit``, ``did_create``);
    bytes become text when they are UTF-8, else base64 (messages and entries
    use :func:`payload_fields`, which names the encoding).
    """
    if isinstance(value, pydantic.BaseModel):
        dumped = value.model_dump(mode="json", exclude_none=True)
        if isinstance(value, _SERVER_INFOS):
            for key in _ENVELOPE_KEYS:
                dumped.pop(key, None)
        return dumped
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, timedelta):
        # Exact nanoseconds (total_seconds() is a float: 2 ns short past about 104
        # days, and a server duration's sub-microsecond part was dropped).
        whole = (value.days * 86_400 + value.seconds) * 1_000_000_000
        return whole + value.microseconds * 1000 + getattr(value, "nanoseconds", 0)
    if isinstance(value, bytes):
        return value.decode() if _is_text(value) else base64.b64encode(value).decode("ascii")
    return value


#: Replies printed as JSON without the keys of the API reply around them: the same
#: shape from every command (``stream info`` and ``stream ls``, ``add`` and ``info``).
_SERVER_INFOS = (StreamInfo, ConsumerInfo, ConsumerPauseResponse)


_ENVELOPE_KEYS = ("type", "total", "offset", "limit", "did_create")


def _is_text(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


def payload_fields(data: bytes, key: str = "data") -> dict[str, str]:
    """``{key: text}`` for UTF-8 data, else ``{key + "_base64": base64}`` (JSON output)."""
    if _is_text(data):
        return {key: data.decode()}
    return {f"{key}_base64": base64.b64encode(data).decode("ascii")}


class _PrintableConsole(Console):
    """A Rich console that writes every string it renders in :func:`printable` form.

    Table cells, titles and notes (server data among them: names,
    descriptions, subjects, values) reach it as strings, through
    :meth:`render_str`; Rich itself leaves ESC, NUL and C1 controls in them.
    """

    def render_str(self, text: str, **kwargs: Any) -> Text:
        """Rich's :meth:`~rich.console.Console.render_str` of :func:`printable` ``text``."""
        return super().render_str(printable(text), **kwargs)


class _Stdout(_PrintableConsole):
    """Rich's console on standard output, ending a broken pipe as every command does.

    Rich catches a ``BrokenPipeError`` itself and exits with 1; here it is
    :func:`exit_on_broken_pipe` (exit 141, no message), as for JSON and raw output.
    """

    def on_broken_pipe(self) -> None:
        """Standard output's reader is gone: end quietly with ``BROKEN_PIPE_EXIT``."""
        self.quiet = True
        exit_on_broken_pipe()


class Output:
    """Where a command prints: JSON for scripts, or Rich tables for people.

    Text is written in :func:`printable` form (control characters escaped),
    but otherwise as it is: Rich renders the tables and notes, but neither
    interprets markup (``[bold]``) nor emoji codes (``:smile:``) in them, and
    :meth:`print` does not go through Rich at all. ``--json`` and ``--raw``
    output is exact.
    """

    def __init__(self, as_json: bool) -> None:
        self.json = as_json
        self.console = _Stdout(highlight=False, markup=False, emoji=False)
        self.err = _PrintableConsole(stderr=True, highlight=False, markup=False, emoji=False)

    def emit_json(self, value: Any) -> None:
        """Print ``value`` as indented JSON on standard output."""
        sys.stdout.write(json.dumps(to_jsonable(value), indent=2) + "\n")
        sys.stdout.flush()

    def json_line(self, value: Any) -> None:
        """Print ``value`` as one line of JSON (JSON Lines, for streams of records)."""
        sys.stdout.write(json.dumps(to_jsonable(value), separators=(",", ":")) + "\n")
        sys.stdout.flush()

    def print(self, text: str) -> None:
        """Print one line: ``text`` in :func:`printable` form (newlines escaped too).

        Not through Rich: payloads, values, subjects and names keep their
        emoji codes, brackets and tabs; control characters are escaped.
        """
        sys.stdout.write(printable(text) + "\n")
        sys.stdout.flush()

    def body(self, data: bytes) -> None:
        """Print a payload or value and a newline: :func:`printable_text`, lines kept."""
        sys.stdout.write(printable_text(data) + "\n")
        sys.stdout.flush()

    def note(self, text: str) -> None:
        """Print a remark on standard error (progress, confirmations)."""
        self.err.print(text, markup=False, soft_wrap=True)

    def table(self, table: Table) -> None:
        """Print a Rich table on standard output."""
        self.console.print(table)


def done(out: Output, record: dict[str, Any], note: str) -> None:
    """What a command without a result prints (``rm``, ``del``): ``record`` as JSON, or ``note``."""
    if out.json:
        out.emit_json(record)
    else:
        out.note(note)


def list_table(title: str) -> Table:
    """A table of rows (streams, consumers, ...): a header line, no vertical borders."""
    return Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False)


def listed(
    out: Output, names: list[str], items: list[Any], *, names_only: bool, empty: str
) -> bool:
    """What every ``ls`` prints before its table; True when that was all.

    With ``names_only`` the ``names`` (JSON, or a line each); else with
    ``--json`` the ``items``; else the note ``empty`` when there are none.
    """
    if names_only:
        if out.json:
            out.emit_json(names)
        else:
            for name in names:
                out.print(name)
        return True
    if out.json:
        out.emit_json(items)
        return True
    if not items:
        out.note(empty)
        return True
    return False


def kv_table(title: str | None, rows: Iterable[tuple[str, Any]]) -> Table:
    """A two-column table of settings: ``(name, value)`` rows; None values are left out."""
    table = Table(title=title, show_header=False, box=None, padding=(0, 1), title_justify="left")
    table.add_column("setting", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold")
    for name, value in rows:
        if value is None:
            continue
        table.add_row(name, _cell(value))
    return table


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, timedelta):
        return format_duration(value)
    if isinstance(value, datetime):
        return format_time(value)
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    return str(value)
