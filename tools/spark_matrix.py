"""Run the Spark tests under several pyspark versions (``make spark-matrix``).

For each version, a virtualenv of its own (``.venv-spark-4.0`` ...) gets
``pyspark==VERSION`` and the package with its ``dev`` extra (editable, so it
tests this checkout's ``src``); then the Spark tests run there (``tests/spark``
and the Spark example of ``tests/integration/test_examples.py``) as ``make
test`` runs them (two xdist workers, the Spark groups). One line per version
is printed and written, with the failed and skipped tests, to
``build-artifacts/spark-matrix.txt``; each version's pytest output and JUnit
XML are kept beside it.

pyspark 4.x comes as a source distribution of about 450 MB per version (pip
builds a wheel in about 30 s and caches it); ``--find-links DIR`` lets pip take
already downloaded ones from DIR. Not part of ``make test``: about 10 minutes
a version on a 2-core machine, plus the installs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VERSIONS = ["4.0.5", "4.1.4", "4.2.1", "4.3.0"]
TESTS = ["tests/spark", "tests/integration/test_examples.py::test_example_runs[spark_pipeline.py]"]
OUT = ROOT / "build-artifacts"


@dataclass
class Outcome:
    """What one version's run gave."""

    version: str
    installed: str = ""
    passed: int = 0
    failed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    seconds: float = 0.0
    error: str = ""

    def line(self) -> str:
        """The one-line summary."""
        head = f"pyspark {self.version}:"
        if self.error:
            return f"{head} ERROR {self.error}"
        counts = f"{self.passed} passed, {len(self.failed)} failed, {len(self.skipped)} skipped"
        return f"{head} {counts} in {self.seconds:.0f} s"


#: Set for the tests of a matrix run (tests/spark/spark_helpers.py: requires_spark).
SPARK_MATRIX_ENV = "AIOJETSTREAM_SPARK_MATRIX"


def run(argv: list[str], log: Path | None = None) -> None:
    """Run ``argv`` in the checkout, its output into ``log`` (or through).

    Raises:
        RuntimeError: it exited non-zero.

    """
    if log is None:
        done = subprocess.run(argv, cwd=ROOT, check=False)
    else:
        with log.open("w", encoding="utf-8") as out:
            done = subprocess.run(argv, cwd=ROOT, check=False, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        where = f" (see {log.relative_to(ROOT)})" if log is not None else ""
        raise RuntimeError(f"{' '.join(argv[:4])} ... exited {done.returncode}{where}")


def install(version: str, python: str, find_links: list[str]) -> Path:
    """The version's virtualenv, created when missing, with pyspark==version and the package."""
    minor = ".".join(version.split(".")[:2])
    env = ROOT / f".venv-spark-{minor}"
    py = env / "bin" / "python"
    if not py.exists():
        run([python, "-m", "venv", str(env)])
        run([str(py), "-m", "pip", "install", "--quiet", "--upgrade", "pip"])
    argv = [str(py), "-m", "pip", "install", "--quiet", f"pyspark=={version}", "-e", ".[dev]"]
    for place in find_links:
        argv += ["--find-links", place]
    run(argv, OUT / f"spark-matrix-{minor}-install.log")
    return env


def outcome_of(version: str, junit: Path, seconds: float) -> Outcome:
    """Counts, failed and skipped tests from pytest's JUnit XML."""
    result = Outcome(version, seconds=seconds)
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        skipped = case.find("skipped")
        if failure is not None:
            message = (failure.get("message") or "").splitlines()
            result.failed.append(f"{name}: {message[0][:300] if message else ''}")
        elif skipped is not None:
            result.skipped.append(f"{name}: {skipped.get('message', '')}")
        else:
            result.passed += 1
    return result


def test(version: str, env: Path, workers: int, extra: list[str]) -> Outcome:
    """Run the Spark tests in ``env``."""
    minor = ".".join(version.split(".")[:2])
    junit = OUT / f"spark-matrix-{minor}.xml"
    log = OUT / f"spark-matrix-{minor}.log"
    argv = [str(env / "bin" / "pytest"), "-q", "-rs", f"--junitxml={junit}"]
    argv += ["-n", str(workers), "--dist", "loadgroup", *extra, *TESTS]
    started = time.monotonic()
    # Tests of a feature newer than the version skip here (requires_spark); in
    # `make test` they fail instead.
    env_vars = {**os.environ, SPARK_MATRIX_ENV: "1"}
    with log.open("w", encoding="utf-8") as out:
        subprocess.run(
            argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, check=False, env=env_vars
        )
    seconds = time.monotonic() - started
    if not junit.exists():
        return Outcome(version, error=f"pytest wrote no report (see {log.relative_to(ROOT)})")
    return outcome_of(version, junit, seconds)


def main() -> int:
    """Install and test each version in turn; write the summary; exit 1 when any failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("versions", nargs="*", default=VERSIONS, help="pyspark versions")
    parser.add_argument("--python", default=sys.executable, help="interpreter for the venvs")
    parser.add_argument("--find-links", action="append", default=[], help="extra pip --find-links")
    parser.add_argument("--workers", type=int, default=2, help="pytest-xdist workers")
    parser.add_argument("--pytest-args", default="", help="more pytest arguments")
    args = parser.parse_args()

    OUT.mkdir(exist_ok=True)
    summary = OUT / "spark-matrix.txt"
    outcomes: list[Outcome] = []
    for version in args.versions:
        started = time.monotonic()
        try:
            env = install(version, args.python, args.find_links)
            installed = subprocess.run(
                [str(env / "bin" / "python"), "-c", "import pyspark; print(pyspark.__version__)"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            if installed != version:
                raise RuntimeError(f"{env.name} holds pyspark {installed}")
            print(f"pyspark {version}: installed in {time.monotonic() - started:.0f} s", flush=True)
            outcome = test(version, env, args.workers, args.pytest_args.split())
            outcome.installed = installed
        except (subprocess.CalledProcessError, RuntimeError) as exc:
            outcome = Outcome(version, error=str(exc))
        outcomes.append(outcome)
        print(outcome.line(), flush=True)
        write_summary(summary, outcomes)
    print(f"Summary: {summary.relative_to(ROOT)}")
    return 1 if any(o.error or o.failed for o in outcomes) else 0


def write_summary(path: Path, outcomes: list[Outcome]) -> None:
    """One line per version, then the failed and skipped tests of each."""
    lines = [o.line() for o in outcomes]
    for o in outcomes:
        for title, names in (("failed", o.failed), ("skipped", o.skipped)):
            if names:
                lines += ["", f"pyspark {o.version} {title}:"] + [f"  {n}" for n in names]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
