"""``make mutants``: a curated mutation check.

Each entry of ``tools/mutants.toml`` is a one-line change to the library that
would cause a silent data error, with the tests that must catch it. For each,
this script copies ``src/`` to a temporary directory, applies the change to
the copy, and runs only the named tests against it (``PYTHONPATH`` puts the
copy first, for Spark's Python workers too). A mutant is *killed* when those
tests fail; the check fails if any mutant survives, or if its tests fail on
the unchanged code (``--baseline``: then they prove nothing).

Usage: ``python tools/mutants.py [--only ID ...] [--baseline] [--list]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CATALOGUE = ROOT / "tools" / "mutants.toml"
PACKAGE = "aiojetstream"


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


def run_tests(mutant: Mutant, src: Path | None) -> tuple[int, float, str]:
    """Run the mutant's tests with ``src`` first on the path; exit code, seconds, output tail."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(src), env.get("PYTHONPATH", "")) if p)
        # The mutated copy must be what the tests import.
        where = subprocess.run(
            [sys.executable, "-c", f"import {PACKAGE}; print({PACKAGE}.__file__)"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        ).stdout.strip()
        if not where.startswith(str(src)):
            raise SystemExit(f"mutant {mutant.id}: the tests would import {where}, not the copy")
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *mutant.tests],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-3:])
    return proc.returncode, time.monotonic() - started, tail


def main(argv: list[str] | None = None) -> int:
    """Run the check; 0 when every mutant was killed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="ID", help="run these mutants only")
    parser.add_argument(
        "--baseline", action="store_true", help="also run each mutant's tests unmutated first"
    )
    parser.add_argument("--list", action="store_true", help="print the catalogue and exit")
    args = parser.parse_args(argv)
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
                code, _, tail = run_tests(m, None)
                if code != 0:
                    rows.append((m.id, "TESTS FAIL UNMUTATED", 0.0, tail))
                    failed = True
                    continue
            src = Path(tmp) / m.id / "src"
            shutil.copytree(
                ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
            )
            apply(m, src)
            code, took, tail = run_tests(m, src)
            if code == 1:
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
    killed = sum(1 for r in rows if r[1] == "killed")
    print(f"\n{killed} of {len(rows)} mutants killed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
