"""The mutant catalogue (``make mutants``) still matches the sources.

Each mutant's ``find`` must occur exactly once in its file; a refactor that
moved the line made ``make mutants`` (run last in CI) stop at that mutant.
Checked here, in ``make test``, without running any mutant.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _module() -> Any:
    """``tools/mutants.py`` (not a package module)."""
    if "mutants" in sys.modules:
        return sys.modules["mutants"]
    spec = importlib.util.spec_from_file_location("mutants", ROOT / "tools" / "mutants.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["mutants"] = module
    spec.loader.exec_module(module)
    return module


def _catalogue() -> list[Any]:
    return list(_module().load())


@pytest.mark.parametrize("mutant", _catalogue(), ids=lambda m: str(m.id))
def test_each_mutant_finds_its_line_once(mutant: Any) -> None:
    source = ROOT / "src" / "aiojetstream" / mutant.file
    count = source.read_text().count(mutant.find)
    assert count == 1, f"{mutant.id}: {mutant.find!r} occurs {count} times in {mutant.file}"


# A process that starts a child in its group and one in a session of its own (as a
# test may start nats-servers, Spark's JVM and workers), writes their pids, and hangs.
_HANGING_TREE = """
import os, subprocess, sys, time
hang = [sys.executable, "-c", "import time; time.sleep(300)"]
kids = [subprocess.Popen(hang), subprocess.Popen(hang, start_new_session=True)]
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(" ".join(str(p.pid) for p in kids))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(300)
"""


def _gone(pid: int) -> bool:
    """Whether ``pid`` exited (a zombie nobody reaped counts: it runs nothing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_hanging_run_is_killed_with_every_process_it_started(tmp_path: Path) -> None:
    """``make mutants`` hung on a mutant that makes a wait spin, and a timed-out run
    left its nats-server behind: past the timeout the run's whole tree is killed."""
    import subprocess

    from helpers import wait_until_sync

    mutants = _module()
    pids = tmp_path / "pids"
    proc = subprocess.Popen(
        [sys.executable, "-c", _HANGING_TREE, str(pids)], start_new_session=True
    )
    try:
        wait_until_sync(pids.exists, timeout=30)
        kids = [int(p) for p in pids.read_text().split()]
        assert mutants.descendants(proc.pid) >= set(kids)
    finally:
        mutants.kill_tree(proc)
    assert proc.returncode == -signal.SIGKILL
    wait_until_sync(lambda: all(_gone(pid) for pid in kids), timeout=10)


def test_run_reports_a_timeout() -> None:
    mutants = _module()
    code, took, _ = mutants.run(
        [sys.executable, "-c", "import time; time.sleep(300)"], dict(os.environ), 0.5
    )
    assert code == mutants.TIMED_OUT
    assert took < 60
    code, _, output = mutants.run([sys.executable, "-c", "print('out')"], dict(os.environ), 60)
    assert (code, output) == (0, "out\n")
