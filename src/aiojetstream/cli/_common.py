"""What every command shares: connection options, running a coroutine, errors and output."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import errno
import json
import os
import re
import ssl
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import pydantic
import typer
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

import aiojetstream
from aiojetstream import (
    BucketNotFoundError,
    ConsumerInfo,
    ConsumerPauseResponse,
    JetStreamContext,
    StorageType,
    StreamInfo,
)

from . import DEFAULT_SERVER
from ._hints import Hint, add_hint
from ._units import format_duration, format_time, parse_size

__all__ = [
    "BROKEN_PIPE_EXIT",
    "DEFAULT_SERVER",
    "BucketMaxBytes",
    "BucketReplicas",
    "BucketStorage",
    "CliError",
    "CliUsageError",
    "Description",
    "Force",
    "JsonFlag",
    "NamesFlag",
    "Options",
    "Output",
    "StdoutUnusableError",
    "USAGE_ERRORS",
    "check_stdout",
    "check_subject",
    "confirm",
    "describe_error",
    "done",
    "exit_on_broken_pipe",
    "guarded",
    "kv_table",
    "list_table",
    "listed",
    "load_json_file",
    "options",
    "output",
    "payload_fields",
    "printable",
    "printable_text",
    "read_data",
    "read_stdin",
    "run",
    "safe_file_name",
    "stdin_usable",
    "stdout_unusable",
    "to_jsonable",
    "usage_error",
]

T = TypeVar("T")

#: The exit code when the reader of standard output went away (``... | head``):
#: 128 + SIGPIPE, what a shell reports for ``nats`` and other programs it ends.
BROKEN_PIPE_EXIT = 141

JsonFlag = Annotated[
    bool, typer.Option("--json", help="Print JSON instead of tables (for scripts).")
]
Force = Annotated[bool, typer.Option("--force", "-f", help="Do not ask for confirmation.")]
Description = Annotated[str | None, typer.Option(help="A description.")]
NamesFlag = Annotated[bool, typer.Option("--names", "-n", help="Only the names.")]

# The options of the commands that create a bucket (kv add, obj add).
BucketMaxBytes = Annotated[
    int | None, typer.Option(parser=parse_size, metavar="SIZE", help="Bucket size limit.")
]
BucketStorage = Annotated[StorageType, typer.Option(case_sensitive=False, help="file or memory.")]
BucketReplicas = Annotated[int, typer.Option(min=1, max=5, help="Replicas (clustered).")]


class CliError(Exception):
    """An error of the command line itself (bad input): printed as one line, exit code 1."""


class CliUsageError(CliError, typer.BadParameter):
    """Options that do not go together: a usage error (Click's usage lines, exit code 2)."""


@dataclass(frozen=True)
class Options:
    """The global options: where and how to connect, and how to print."""

    servers: str = DEFAULT_SERVER
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    creds: Path | None = None
    nkey: Path | None = None
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    domain: str | None = None
    timeout: float = 5.0
    json: bool = False
    debug: bool = False

    def connect_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for :func:`aiojetstream.connect` (builds the TLS context).

        Raises:
            CliUsageError: inconsistent options (a usage error).
            CliError: a certificate file that can not be read or is not valid.

        """
        if self.password is not None and self.user is None:
            raise CliUsageError("--password needs --user")
        if self.tls_key is not None and self.tls_cert is None:
            raise CliUsageError("--tls-key needs --tls-cert")
        kwargs: dict[str, Any] = {"timeout": self.timeout, "domain": self.domain}
        if self.user is not None:
            kwargs["user"] = self.user
        if self.password is not None:
            kwargs["password"] = self.password
        if self.token is not None:
            kwargs["token"] = self.token
        if self.creds is not None:
            kwargs["user_credentials"] = str(self.creds)
        if self.nkey is not None:
            kwargs["nkeys_seed"] = str(self.nkey)
        if self.tls_ca is not None or self.tls_cert is not None:
            kwargs["tls"] = self._tls_context()
        return kwargs

    def _tls_context(self) -> ssl.SSLContext:
        try:
            context = ssl.create_default_context(
                cafile=str(self.tls_ca) if self.tls_ca is not None else None
            )
        except (OSError, ssl.SSLError) as exc:
            raise CliError(f"--tls-ca {self.tls_ca}: {_reason(exc)}") from exc
        if self.tls_cert is not None:
            try:
                context.load_cert_chain(
                    str(self.tls_cert), str(self.tls_key) if self.tls_key is not None else None
                )
            except (OSError, ssl.SSLError) as exc:
                files = f"{self.tls_cert}" + (f", {self.tls_key}" if self.tls_key else "")
                raise CliError(f"--tls-cert {files}: {_reason(exc)}") from exc
        return context


def _reason(exc: OSError) -> str:
    """Why a file could not be used (``ssl`` errors name neither the file nor ``errno``)."""
    return exc.strerror or str(exc) or type(exc).__name__


def options(ctx: typer.Context) -> Options:
    """The global options of this invocation."""
    obj = ctx.find_root().obj
    return obj if isinstance(obj, Options) else Options()


# --------------------------------------------------------------------------- errors


def describe_error(exc: BaseException) -> str:
    """One readable line for an error."""
    if isinstance(exc, pydantic.ValidationError):
        parts = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"])
            message = str(err["msg"]).removeprefix("Value error, ")
            parts.append(f"{where}: {message}" if where else message)
        text = f"invalid {exc.title}: " + "; ".join(parts)
    elif isinstance(exc, OSError) and exc.strerror and exc.filename is not None:
        text = f"{exc.filename}: {exc.strerror}"
    elif isinstance(exc, TimeoutError) and not str(exc):
        text = "timed out"
    else:
        text = str(exc) or type(exc).__name__
    hints = [note for note in getattr(exc, "__notes__", ()) if isinstance(note, Hint)]
    if hints:
        text = "; ".join([text, *hints])
    return printable(" ".join(text.split()))


_EXPECTED = (
    CliError,
    aiojetstream.JetStreamError,
    OSError,
    ValueError,
    TimeoutError,
    ssl.SSLError,
)


def say(line: str) -> None:
    """Print a line on standard error; nowhere when it is closed (``print`` would use stdout)."""
    stream = sys.stderr
    if stream is None:
        return
    with contextlib.suppress(OSError):  # not writable either: the exit code tells
        print(line, file=stream, flush=True)


def _fail(exc: BaseException, opts: Options) -> NoReturn:
    if opts.debug:
        raise exc
    text = describe_error(exc)
    if not isinstance(exc, _EXPECTED):
        text = f"unexpected {type(exc).__name__}: {text} (--debug shows the traceback)"
    say(f"error: {text}")
    raise typer.Exit(1) from None


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


def guarded(opts: Options, fn: Callable[[], T]) -> T:
    """Call ``fn``, turning errors into one line on stderr and exit code 1.

    With ``--debug`` the error is raised as it is (with its traceback).
    Ctrl-C ends with exit code 130 and no traceback; a closed standard output
    (``... | head``) with :data:`BROKEN_PIPE_EXIT` and no message.
    """
    try:
        return fn()
    except (typer.Exit, typer.Abort, typer.BadParameter):
        raise  # the command line's own exits and usage errors
    except BrokenPipeError:
        exit_on_broken_pipe()
    except StdoutUnusableError as exc:
        stdout_unusable(exc)
    except KeyboardInterrupt:
        if opts.debug:
            raise
        raise typer.Exit(130) from None
    except Exception as exc:
        _fail(exc, opts)


def run(ctx: typer.Context, work: Callable[[JetStreamContext], Awaitable[T]]) -> T:
    """Connect with the global options, run ``work(js)``, close; errors as :func:`guarded`."""
    opts = options(ctx)

    connected = False

    async def connection_error(exc: Exception) -> None:
        # Failed attempts of the first connection end in one error line (or a
        # traceback with --debug); later ones (a reconnect mid-command) are shown.
        if connected or opts.debug:
            say(f"warning: connection: {describe_error(exc)}")

    async def main() -> T:
        nonlocal connected
        js = await aiojetstream.connect(
            opts.servers, error_cb=connection_error, **opts.connect_kwargs()
        )
        connected = True
        try:
            return await work(js)
        except USAGE_ERRORS as exc:  # a name, key or subject of the command line refused
            if opts.debug:
                raise
            raise usage_error(ctx, exc) from None
        except aiojetstream.JetStreamError as exc:  # a name not found: the closest ones
            obj = ctx.command_path.split()[1:2] == ["obj"]
            await add_hint(js, exc, object_store=obj, timeout=opts.timeout)
            raise
        finally:
            await js.close()

    return guarded(opts, lambda: asyncio.run(main()))


#: The library's refusals of a value as written (before anything is sent): usage
#: errors of the command line, exit code 2. Not those that depend on the server
#: (``MaxPayloadExceededError``) or on what a stream is (``InvalidStreamConfigError``).
USAGE_ERRORS = (
    aiojetstream.InvalidNameError,
    aiojetstream.InvalidSubjectError,
    aiojetstream.InvalidKeyError,
    aiojetstream.InvalidHeaderError,
    aiojetstream.InvalidTTLError,
    aiojetstream.InvalidScheduleError,
)


def usage_error(ctx: typer.Context, exc: BaseException) -> typer.BadParameter:
    """A usage error (exit code 2) for a value the library refused, naming its parameter.

    The parameter is the one whose value the message quotes (``invalid
    subject 'a b'`` is SUBJECT's), if any.
    """
    text = describe_error(exc)
    message = str(exc)
    param: Any  # Typer's own (vendored) click.Parameter
    for param in ctx.command.params:
        value = ctx.params.get(param.name or "")
        values = value if isinstance(value, list | tuple) else [value]
        if any(isinstance(v, str) and v and repr(v) in message for v in values):
            return typer.BadParameter(text, ctx=ctx, param=param)
    return typer.BadParameter(text, ctx=ctx)


def confirm(question: str, force: bool) -> None:
    """Ask ``question`` unless ``force``; stop with exit code 1 on "no" (or end of input).

    A question that can not be asked (standard input closed or not readable)
    is a refusal: one error line and exit code 2, as for a usage error.
    """
    if force:
        return
    question = printable(question)
    problem = _stdin_problem()
    if problem is not None:
        _stdin_error(f"standard input {problem}: can not ask {question!r} (use --force)")
    try:
        agreed = typer.confirm(question, default=False, err=True)
    except (OSError, RuntimeError, ValueError) as exc:  # EIO, "lost sys.stdin", closed file
        say("")  # end the line of the question
        _stdin_error(
            f"standard input can not be read ({_stdin_reason(exc)}): can not ask "
            f"{question!r} (use --force)"
        )
    if not agreed:
        say("error: not confirmed (use --force to skip the question)")
        raise typer.Exit(1)


# --------------------------------------------------------------------------- input

# Whitespace (Unicode's too), control characters and lone surrogates: never in a subject.
_BAD_SUBJECT_CHARS = re.compile(r"[\s\x00-\x1f\x7f\ud800-\udfff]")


def check_subject(subject: str, option: str) -> str:
    """Refuse a subject (wildcards allowed) the library would refuse as a subject filter.

    The library's rules: not empty, no whitespace or control characters, no
    empty token (``a..b``), ``>`` only as the last token.

    Raises:
        typer.BadParameter: the subject is not valid (a usage error of ``option``).

    """
    hint = f"'{option}'"
    if not subject:
        raise typer.BadParameter(f"{subject!r} names no subject", param_hint=hint)
    if _BAD_SUBJECT_CHARS.search(subject):
        raise typer.BadParameter(
            f"invalid subject {subject!r}: whitespace and control characters are not allowed",
            param_hint=hint,
        )
    tokens = subject.split(".")
    for i, token in enumerate(tokens):
        if not token:
            raise typer.BadParameter(f"invalid subject {subject!r}: empty token", param_hint=hint)
        if token == ">" and i != len(tokens) - 1:
            raise typer.BadParameter(
                f"invalid subject {subject!r}: '>' must be the last token", param_hint=hint
            )
    return subject


#: The most ``-`` reads from standard input, and ``--config`` from a file:
#: 64 MiB, the largest ``max_payload`` nats-server takes, so more can never be
#: sent as one message, value or request (``--config /dev/zero`` ends there).
INPUT_LIMIT = 64 * 1024 * 1024


def _stdin_reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def _stdin_error(text: str) -> NoReturn:
    """Standard input can not be used: one error line, exit code 2 (as a usage error)."""
    say(f"error: {printable(text)}")
    raise typer.Exit(2)


def _stdin_problem() -> str | None:
    """Why standard input can not be read, or None (as far as a read of no bytes tells).

    Closed (``0<&-``: Python then has no ``sys.stdin``) or not open for
    reading (``0>/dev/null``: EBADF).
    """
    stream = sys.stdin
    if stream is None:
        return "is closed"
    try:
        fd = stream.fileno()
    except (OSError, ValueError):  # not a file descriptor (a test's input): readable
        return None
    try:
        os.read(fd, 0)
    except OSError as exc:
        return f"can not be read ({_stdin_reason(exc)})"
    return None


def stdin_usable(what: str) -> None:
    """End the command (one error line, exit code 2) unless standard input can be read.

    For a command that reads it later, in pieces (``obj put -``): checked
    before anything is sent.
    """
    problem = _stdin_problem()
    if problem is not None:
        _stdin_error(f"standard input {problem}: nothing to read for {what}")


def read_stdin(what: str = "'-'") -> bytes:
    """All of standard input (for ``what``), at most :data:`INPUT_LIMIT` bytes.

    A closed or unreadable standard input (``0<&-``, ``0>/dev/null``) ends
    the command with one error line and exit code 2; so does more than
    :data:`INPUT_LIMIT` bytes (it is not kept in memory).
    """
    if sys.stdin is None:
        _stdin_error(f"standard input is closed: nothing to read for {what}")
    try:
        data = sys.stdin.buffer.read(INPUT_LIMIT + 1)
    except (OSError, ValueError, AttributeError) as exc:  # EBADF, EIO; a closed or text stream
        _stdin_error(
            f"standard input can not be read ({_stdin_reason(exc)}): nothing to read for {what}"
        )
    if len(data) > INPUT_LIMIT:
        _stdin_error(
            f"standard input holds more than {INPUT_LIMIT >> 20} MiB for {what}: "
            "more than a NATS message can"
        )
    return data


def read_data(data: str | None) -> bytes:
    """A payload argument: ``-`` reads standard input, None is empty, else its UTF-8 bytes."""
    if data is None:
        return b""
    if data == "-":
        return read_stdin()
    return data.encode()


def load_json_file(path: Path) -> dict[str, Any]:
    """Read a JSON object from ``path`` (``-`` reads standard input).

    At most :data:`INPUT_LIMIT` bytes are read.

    Raises:
        CliError: the file does not hold a JSON object, or is larger.
        OSError: the file can not be read.

    """
    if str(path) == "-":
        raw = read_stdin("--config -")
    else:
        with path.open("rb") as f:
            raw = f.read(INPUT_LIMIT + 1)
        if len(raw) > INPUT_LIMIT:
            raise CliError(f"{path}: larger than {INPUT_LIMIT >> 20} MiB: not a config")
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        raise CliError(f"{path}: not UTF-8 text") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise CliError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


# --------------------------------------------------------------------------- output

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
        return round(value.total_seconds() * 1e9)
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


def output(ctx: typer.Context, json_flag: bool = False) -> Output:
    """The output of this invocation (JSON if the global or the command's ``--json`` is set)."""
    return Output(json_flag or options(ctx).json)


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


async def bucket_existed(bind: Awaitable[object]) -> bool:
    """Whether binding to a bucket succeeds (an identical ``add`` is accepted again)."""
    try:
        await bind
    except BucketNotFoundError:
        return False
    return True


def note_added(out: Output, bucket: str, existed: bool) -> None:
    """Say what ``kv add`` / ``obj add`` did: created, or found it already there."""
    out.note(
        f"Bucket {bucket} exists already, unchanged." if existed else f"Created bucket {bucket}."
    )
