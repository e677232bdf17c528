"""``make mutants``: a curated mutation check.

Each entry of ``tools/mutants.toml`` is a one-line change to the library that
would cause a silent data error, with the tests that must catch it. For each,
this script copies ``src/`` to a temporary directory, applies the change to
the copy, and runs only the named tests against it (``PYTHONPATH`` puts the
copy first, for Spark's Python workers too). A mutant is *killed* when those
tests fail; the check fails if any mutant survives, or if its tests fail on
the unchanged code (``--baseline``: then they prove nothing).

A mutant whose tests run longer than ``--timeout`` seconds (a mutation that
makes a wait spin or hang) counts as killed, and says so: its pytest and
every process it started (nats-servers, Spark's JVMs and workers) are killed.

Usage: ``python tools/mutants.py [--only ID ...] [--baseline] [--timeout S] [--list]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CATALOGUE = ROOT / "tools" / "mutants.toml"
PACKAGE = "aiojetstream"
#: Seconds a mutant's tests may run (``--timeout``); the slowest entries take about 2 minutes.
DEFAULT_TIMEOUT = 600.0
#: The exit code :func:`run` reports for a run it stopped at its timeout.
TIMED_OUT = -1


@dataclass(frozen=True)
class Mutant:
    """One entry of the catalogue."""

    id: str
    file: str
    find: str
    replace: str
    guards: str
    tests: tuple[str, ...]


def load(path: Path = CATALOGUE) -> list[Mutant]:
    """The catalogue's mutants (each checked for its fields)."""
    with path.open("rb") as f:
        data = tomllib.load(f)
    mutants = []
    for entry in data["mutant"]:
        mutants.append(
            Mutant(
                id=str(entry["id"]),
                file=str(entry["file"]),
                find=str(entry["find"]),
                replace=str(entry["replace"]),
                guards=str(entry["guards"]),
                tests=tuple(str(t) for t in entry["tests"]),
            )
        )
    ids = [m.id for m in mutants]
    if len(set(ids)) != len(ids):
        raise SystemExit(f"{path.name}: duplicate mutant ids")
    return mutants


def apply(mutant: Mutant, src: Path) -> None:
    """Apply ``mutant`` to the package under ``src`` (its ``find`` must occur once)."""
    target = src / PACKAGE / mutant.file
    text = target.read_text()
    count = text.count(mutant.find)
    if count != 1:
        raise SystemExit(
            f"mutant {mutant.id}: {mutant.find!r} occurs {count} times in {mutant.file} "
            "(expected once): update tools/mutants.toml"
        )
    target.write_text(text.replace(mutant.find, mutant.replace))


def _children() -> dict[int, list[int]]:
    """Every process's children, from ``/proc`` (empty where there is none)."""
    children: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue  # exited meanwhile
            # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    return children


def descendants(pid: int) -> set[int]:
    """The processes ``pid`` started, and theirs (a new session or group included)."""
    children = _children()
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _signal(pids: set[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """Kill ``proc`` (started in a session of its own) and every process it started.

    The tree is stopped first, so that nothing in it starts another process
    between the listing and the kill; a process already orphaned out of it
    is found by the process group.
    """
    tree = {proc.pid}
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGSTOP)
    for _ in range(3):  # until the listing no longer grows
        found = {proc.pid} | descendants(proc.pid)
        _signal(found - tree, signal.SIGSTOP)
        if found <= tree:
            break
        tree |= found
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    _signal(tree, signal.SIGKILL)
    proc.wait()


def run(command: Sequence[str], env: Mapping[str, str], timeout: float) -> tuple[int, float, str]:
    """Run ``command`` in ``ROOT``; its exit code (``TIMED_OUT``), seconds and output.

    Past ``timeout`` seconds it is killed with every process it started. The
    output goes to a file, not a pipe, which a process left behind could hold open.
    """
    started = time.monotonic()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(
            command,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            start_new_session=True,  # a process group of its own, killed as one
        )
        try:
            code = proc.wait(timeout=timeout)
            # What it left running in its group (a session nats-server of a crashed run).
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        except subprocess.TimeoutExpired:
            kill_tree(proc)
            code = TIMED_OUT
        except BaseException:  # interrupted: leave no process behind
            kill_tree(proc)
            raise
        took = time.monotonic() - started
        out.seek(0)
        output = out.read().decode(errors="replace")
    return code, took, output


def run_tests(mutant: Mutant, src: Path, timeout: float) -> tuple[int, float, str]:
    """Run the mutant's tests with ``src`` first on the path; exit code, seconds, output tail.

    The exit code is ``TIMED_OUT`` when they ran past ``timeout`` seconds.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(src), env.get("PYTHONPATH", "")) if p)
    # The copy must be what the tests import (not an installed package elsewhere).
    where = subprocess.run(
        [sys.executable, "-c", f"import {PACKAGE}; print({PACKAGE}.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout.strip()
    if not where.startswith(str(src)):
        raise SystemExit(f"mutant {mutant.id}: the tests would import {where}, not {src}")
    code, took, output = run(
        [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *mutant.tests],
        env,
        timeout,
    )
    tail = "\n".join(output.strip().splitlines()[-3:])
    return code, took, tail


def main(argv: list[str] | None = None) -> int:
    """Run the check; 0 when every mutant was killed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="ID", help="run these mutants only")
    parser.add_argument(
        "--baseline", action="store_true", help="also run each mutant's tests unmutated first"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="S",
        help=f"seconds a mutant's tests may run; past it, killed (default {DEFAULT_TIMEOUT:g})",
    )
    parser.add_argument("--list", action="store_true", help="print the catalogue and exit")
    args = parser.parse_args(argv)
    if not args.timeout > 0:
        parser.error("--timeout must be above 0")
    mutants = load()
    if args.only:
        unknown = set(args.only) - {m.id for m in mutants}
        if unknown:
            parser.error(f"unknown mutant ids: {', '.join(sorted(unknown))}")
        mutants = [m for m in mutants if m.id in args.only]
    if args.list:
        for m in mutants:
            print(f"{m.id:28} {m.file:20} {m.guards}")
        return 0
    rows: list[tuple[str, str, float, str]] = []
    failed = False
    with tempfile.TemporaryDirectory(prefix="mutants-") as tmp:
        for m in mutants:
            if args.baseline:
                # The unchanged sources of this checkout (not whatever is installed).
                code, _, tail = run_tests(m, ROOT / "src", args.timeout)
                if code != 0:
                    what = "TIMED OUT" if code == TIMED_OUT else "FAIL"
                    rows.append((m.id, f"TESTS {what} UNMUTATED", 0.0, tail))
                    print(f"{m.id:28} TESTS {what} UNMUTATED\n    {tail}", flush=True)
                    failed = True
                    continue
            src = Path(tmp) / m.id / "src"
            shutil.copytree(
                ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
            )
            apply(m, src)
            code, took, tail = run_tests(m, src, args.timeout)
            if code == TIMED_OUT:
                # A mutation that makes a wait spin or hang: caught, though not by an
                # assertion. Its processes (nats-servers too) were killed.
                verdict = "killed by timeout"
                tail = (
                    f"its tests ran past {args.timeout:g} s: they and their processes were killed"
                )
            elif code == 1:
                verdict = "killed"
            elif code == 0:
                verdict = "SURVIVED"
                failed = True
            else:  # 2-5: interrupted, internal or usage error, no tests collected
                verdict = f"ERROR (pytest exit {code})"
                failed = True
            rows.append((m.id, verdict, took, tail))
            print(f"{m.id:28} {verdict:10} {took:6.1f} s  {m.guards}", flush=True)
            if verdict != "killed":
                print(f"    {tail}", flush=True)
    killed = sum(1 for r in rows if r[1].startswith("killed"))
    by_timeout = sum(1 for r in rows if r[1] == "killed by timeout")
    after = f" ({by_timeout} by timeout)" if by_timeout else ""
    print(f"\n{killed} of {len(rows)} mutants killed{after}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
