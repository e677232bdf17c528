"""What every command shares: connection options, running a coroutine, errors and input.

Connecting with the global options (:class:`Options`, :func:`run`), one error
line and an exit code for every failure (:func:`guarded`, usage errors),
questions (:func:`confirm`) and what a command reads (subjects, standard
input, ``--config`` files). What commands print lives in :mod:`._output`;
its names are re-exported here, so a command imports this module only.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import json
import os
import re
import ssl
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import pydantic
import typer

import aiojetstream
from aiojetstream import (
    BucketNotFoundError,
    JetStreamContext,
    StorageType,
)

from . import DEFAULT_SERVER
from ._hints import Hint, add_hint
from ._output import (
    BROKEN_PIPE_EXIT,
    Output,
    StdoutUnusableError,
    check_stdout,
    done,
    exit_on_broken_pipe,
    kv_table,
    list_table,
    listed,
    payload_fields,
    printable,
    printable_text,
    safe_file_name,
    say,
    stdout_unusable,
    to_jsonable,
)
from ._units import parse_size

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
    "as_written",
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
    "read_value",
    "read_stdin",
    "run",
    "safe_file_name",
    "stdin_usable",
    "stdout_unusable",
    "to_jsonable",
    "usage_error",
]

T = TypeVar("T")


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
    js_api_prefix: str | None = None
    inbox_prefix: str | None = None
    timeout: float = 5.0
    json: bool = False
    debug: bool = False
    password_from_env: bool = False
    """The password is ``NATS_PASSWORD``'s (not ``--password``)."""

    def connect_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for :func:`aiojetstream.connect` (builds the TLS context).

        ``NATS_PASSWORD`` without a user (``--user``, ``NATS_USER``) is left out
        when a server URL carries user information (``nats://alice:pw@host``):
        the URL's user and password are used, as the ``nats`` CLI does.

        Raises:
            CliUsageError: inconsistent options, or a ``--creds`` or ``--nkey``
                file that can not be read (a usage error).
            CliError: a certificate file that can not be read or is not valid.

        """
        password = self.password
        if password is not None and self.user is None:
            if not self.password_from_env:
                raise CliUsageError("--password needs --user")
            if "@" not in self.servers:  # no host name holds one: no URL's user either
                raise CliUsageError(
                    "--password (here NATS_PASSWORD, from the environment) needs --user "
                    "(or NATS_USER); or give the user and password in the server URL, "
                    "or unset NATS_PASSWORD"
                )
            password = None  # the URL's credentials are used
        if self.tls_key is not None and self.tls_cert is None:
            raise CliUsageError("--tls-key needs --tls-cert")
        if self.js_api_prefix is not None and self.domain is not None:
            raise CliUsageError("--js-api-prefix and --domain exclude each other")
        kwargs: dict[str, Any] = {"timeout": self.timeout, "domain": self.domain}
        if self.js_api_prefix is not None:
            kwargs["api_prefix"] = self.js_api_prefix
        if self.inbox_prefix is not None:
            kwargs["inbox_prefix"] = self.inbox_prefix
        if self.user is not None:
            kwargs["user"] = self.user
        if password is not None:
            kwargs["password"] = password
        if self.token is not None:
            kwargs["token"] = self.token
        if self.creds is not None:
            kwargs["user_credentials"] = str(_readable(self.creds, "--creds"))
        if self.nkey is not None:
            kwargs["nkeys_seed"] = str(_readable(self.nkey, "--nkey"))
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
                    str(self.tls_cert),
                    str(self.tls_key) if self.tls_key is not None else None,
                    password=self._passphrase,
                )
            except (OSError, ssl.SSLError) as exc:
                files = f"{self.tls_cert}" + (f", {self.tls_key}" if self.tls_key else "")
                raise CliError(f"--tls-cert {files}: {_reason(exc)}") from exc
        return context

    def _passphrase(self) -> str:
        """The passphrase of an encrypted TLS key, asked for on the terminal only.

        OpenSSL's own prompt read standard input even when it was a pipe (the
        command's data) and blocked there; without a terminal, an error.

        Raises:
            CliError: standard input is not a terminal.

        """
        option, key = ("--tls-key", self.tls_key) if self.tls_key else ("--tls-cert", self.tls_cert)
        if not sys.stdin.isatty():
            raise CliError(
                f"{option} {key}: the private key is encrypted (it has a passphrase) and "
                "there is no terminal to ask for it: run the command from one, or store the "
                "key decrypted (openssl pkey -in ENCRYPTED.key -out KEY.key), readable only "
                "by you"
            )
        return getpass.getpass(f"Passphrase for the private key in {key}: ")


def _readable(path: Path, option: str) -> Path:
    """``path`` if it is a file that can be read; else a usage error of ``option``.

    Checked before connecting: a server that requires no authentication never
    reads the file, and a mistyped path went unnoticed.

    Raises:
        CliUsageError: the file is missing, a directory, or not readable.

    """
    try:
        with path.open("rb"):
            pass
    except OSError as exc:
        raise CliUsageError(f"{str(path)!r}: {_reason(exc)}", param_hint=f"'{option}'") from None
    return path


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


def _fail(exc: BaseException, opts: Options) -> NoReturn:
    if opts.debug:
        raise exc
    text = describe_error(exc)
    if not isinstance(exc, _EXPECTED):
        text = f"unexpected {type(exc).__name__}: {text} (--debug shows the traceback)"
    say(f"error: {text}")
    raise typer.Exit(1) from None


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
        except RefusedAsWritten as exc:  # a value refused before anything was sent
            if opts.debug:
                raise exc.error from None
            raise usage_error(ctx, exc.error) from None
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


class RefusedAsWritten(Exception):
    """An :class:`~aiojetstream.InvalidOptionError` raised in :func:`as_written`."""

    def __init__(self, error: aiojetstream.InvalidOptionError) -> None:
        super().__init__(str(error))
        self.error = error


@contextlib.contextmanager
def as_written() -> Iterator[None]:
    """Make a library call's refusals of the command line's values usage errors.

    Around a call that checks the values before it sends anything: the
    :class:`~aiojetstream.InvalidOptionError` it raises is a usage error of
    :func:`run` (exit code 2), as for :data:`USAGE_ERRORS`. A duration or a
    number out of the server's range (``stream add --max-age 300000d``,
    ``--max-msgs 2**63``) exited with 1. Only around calls whose every
    ``InvalidOptionError`` is such a check: not where one depends on the server
    or on what is stored (``consumer reset`` to a sequence past the stream's
    end, ``obj put`` with a chunk over ``max_payload``), and never for
    ``MaxPayloadExceededError`` or ``InvalidStreamConfigError`` (some depend on
    the stream: ``update_stream`` refuses to turn ``allow_msg_ttl`` off).
    """
    try:
        yield
    except (aiojetstream.MaxPayloadExceededError, aiojetstream.InvalidStreamConfigError):
        raise
    except aiojetstream.InvalidOptionError as exc:
        raise RefusedAsWritten(exc) from exc


def usage_error(ctx: typer.Context, exc: BaseException) -> typer.BadParameter:
    """A usage error (exit code 2) for a value the library refused, naming its parameter.

    The parameter is the one whose value the message quotes (``invalid
    subject 'a b'`` is SUBJECT's), else the one it names as a config field
    (``StreamConfig.max_age`` is ``--max-age``'s) or at its start (``pause
    until: ...`` is UNTIL's), if any.
    """
    text = describe_error(exc)
    message = str(exc)
    param: Any  # Typer's own (vendored) click.Parameter
    for param in ctx.command.params:
        value = ctx.params.get(param.name or "")
        values = value if isinstance(value, list | tuple) else [value]
        if any(isinstance(v, str) and v and repr(v) in message for v in values):
            return typer.BadParameter(text, ctx=ctx, param=param)
    for param in ctx.command.params:
        name = re.escape(param.name or "")
        if name and re.search(rf"^(?:\w+ )?{name}\b|\w\.{name}\b", message):
            return typer.BadParameter(text, ctx=ctx, param=param)
    return typer.BadParameter(text, ctx=ctx)


def confirm(question: str, force: bool) -> None:
    """Ask ``question`` unless ``force``; stop with exit code 1 on "no" (or end of input).

    End of input (Ctrl-D, ``</dev/null``) is a "no": nothing is done, exit
    code 1. Ctrl-C ends the command quietly with exit code 130, as anywhere
    else. A question that can not be asked (standard input closed or not
    readable) is a refusal: one error line and exit code 2, as for a usage error.
    """
    if force:
        return
    question = printable(question)
    problem = _stdin_problem()
    if problem is not None:
        _stdin_error(f"standard input {problem}: can not ask {question!r} (use --force)")
    try:
        agreed = typer.confirm(question, default=False, err=True)
    except typer.Abort as exc:
        # Click turns Ctrl-C (KeyboardInterrupt) and end of input (EOFError) into
        # Abort, raised "from None": the original is still its __context__.
        say("")  # end the line of the question
        if isinstance(exc.__context__, KeyboardInterrupt):
            raise typer.Exit(130) from None
        agreed = False
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
    """A payload argument: ``-`` reads standard input, None is empty, else its bytes.

    The bytes as given on the command line (UTF-8, or what the shell passed: an
    argument that is not UTF-8 reaches Python with surrogates).
    """
    if data is None:
        return b""
    if data == "-":
        return read_stdin()
    return os.fsencode(data)


def read_value(value: str | None) -> bytes:
    """A value argument (``kv put``, ``kv create``): as :func:`read_data`, or standard input.

    None given reads a piped standard input (``echo v | aiojetstream kv put
    B k``, as ``nats`` does), at most :data:`INPUT_LIMIT` bytes. With no value
    and standard input a terminal, closed or not readable, the value is empty
    (nothing was given to read).
    """
    if value is not None:
        return read_data(value)
    try:
        if sys.stdin is None or sys.stdin.isatty() or _stdin_problem() is not None:
            return b""
    except ValueError:  # a closed file object
        return b""
    return read_stdin("the value")


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
    except (json.JSONDecodeError, RecursionError) as exc:
        raise CliError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise CliError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


# --------------------------------------------------------------------------- output


def output(ctx: typer.Context, json_flag: bool = False) -> Output:
    """The output of this invocation (JSON if the global or the command's ``--json`` is set)."""
    return Output(json_flag or options(ctx).json)


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
