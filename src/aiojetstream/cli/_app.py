"""The root command: global options and the command groups."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

import aiojetstream

from ._bench import app as bench_app
from ._common import (
    DEFAULT_SERVER,
    Options,
    StdoutUnusableError,
    check_stdout,
    exit_on_broken_pipe,
    stdout_unusable,
)
from ._consumer import app as consumer_app
from ._kv import app as kv_app
from ._messages import register as register_messages
from ._obj import app as obj_app
from ._server import register as register_server
from ._stream import app as stream_app

__all__ = ["app", "run_app"]


class _Root(TyperGroup):
    """The root command: a closed standard output ends any command quietly (exit 141).

    Commands print after their work too (tables, JSON): outside the error
    handling of :func:`~._common.guarded`, where ``... | head`` also breaks
    the pipe. A standard output that was never usable (``>&-``) ends a
    command that prints there with one error line and exit code 2.
    """

    def invoke(self, ctx: Any) -> Any:  # Any: Typer's own (vendored) click.Context
        """Run the command; a broken pipe ends it with ``BROKEN_PIPE_EXIT`` and no message."""
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
    timeout: Annotated[
        float, typer.Option(min=0.001, help="Seconds to wait for each reply.")
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
        timeout=timeout,
        json=json,
        debug=debug,
    )


app.add_typer(stream_app, name="stream")
app.add_typer(consumer_app, name="consumer")
register_messages(app)
app.add_typer(kv_app, name="kv")
app.add_typer(obj_app, name="obj")
app.add_typer(bench_app, name="bench")
register_server(app)


def run_app(argv: list[str]) -> int:
    """Run the command line on ``argv``; return the exit code."""
    command = typer.main.get_command(app)
    try:
        command.main(args=argv, prog_name="aiojetstream", standalone_mode=True)
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return 0
        return code if isinstance(code, int) else 1
    return 0
