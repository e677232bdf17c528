"""Node.js scripts against pinned npm packages, for the interoperability tests.

``node_packages(pins)`` installs exactly the pinned versions (``npm install
--save-exact``) once into a cache directory of their own,
``~/.cache/aiojetstream-tests/npm-<digest of the pins>`` (``$XDG_CACHE_HOME``
is honoured), and reuses it afterwards. ``run_node`` runs a script there and
returns the JSON object its last line prints.

Without ``node``, ``npm`` or a reachable registry the tests skip, saying why;
under CI (``CI`` set to ``true``, ``1`` or ``yes``) a skip would hide a gap in
coverage, so they fail instead.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

import pytest

__all__ = ["NODE_TIMEOUT", "NPM_TIMEOUT", "in_ci", "node_packages", "run_node", "unavailable"]

NODE_TIMEOUT = 60.0
NPM_TIMEOUT = 300.0


def in_ci() -> bool:
    """True when running under CI (``CI=true``): missing tools fail the tests there."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def unavailable(reason: str) -> NoReturn:
    """Skip the test for ``reason``; fail it under CI, where a skip is a failure."""
    if in_ci():
        pytest.fail(f"{reason} (CI is set: the interoperability tests must run)", pytrace=False)
    pytest.skip(reason)


def _cache_dir(pins: Mapping[str, str]) -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    key = json.dumps(sorted(pins.items())).encode()
    return Path(base) / "aiojetstream-tests" / f"npm-{hashlib.sha256(key).hexdigest()[:12]}"


def _installed_version(root: Path, package: str) -> str | None:
    manifest = root / "node_modules" / package / "package.json"
    try:
        version = json.loads(manifest.read_text()).get("version")
    except (OSError, ValueError):
        return None
    return version if isinstance(version, str) else None


def _installed(root: Path, pins: Mapping[str, str]) -> bool:
    return all(_installed_version(root, pkg) == version for pkg, version in pins.items())


def node_packages(pins: Mapping[str, str], scripts: Mapping[str, str] | None = None) -> Path:
    """A directory with exactly ``pins`` (package -> version) installed and ``scripts`` written.

    Skips (fails under CI) when node, npm or the registry is unavailable.
    """
    if shutil.which("node") is None:
        unavailable("node is not installed: the JavaScript interoperability tests need it")
    root = _cache_dir(pins)
    if not _installed(root, pins):
        npm = shutil.which("npm")
        if npm is None:
            unavailable(f"npm is not installed: it is needed once to install {dict(pins)}")
        root.mkdir(parents=True, exist_ok=True)
        specs = [f"{pkg}@{version}" for pkg, version in sorted(pins.items())]
        try:
            done = subprocess.run(
                [
                    npm,
                    "install",
                    "--save-exact",
                    "--no-audit",
                    "--no-fund",
                    "--prefix",
                    str(root),
                    *specs,
                ],
                cwd=root,
                capture_output=True,
                text=True,
                timeout=NPM_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired:
            unavailable(f"npm install did not finish in {NPM_TIMEOUT:g} s (registry unreachable?)")
        if done.returncode != 0 or not _installed(root, pins):
            got = {pkg: _installed_version(root, pkg) for pkg in pins}
            unavailable(
                f"npm could not install {' '.join(specs)} (registry unreachable?; installed: "
                f"{got}): {done.stderr.strip()[-500:]}"
            )
    for name, text in (scripts or {}).items():
        path = root / name
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
    return root


async def run_node(
    root: Path, script: str, *args: str, timeout: float = NODE_TIMEOUT
) -> dict[str, Any]:
    """Run ``node <root>/<script> args...``; return the JSON object of its last output line.

    Raises:
        AssertionError: node exited with an error (its stderr is in the message).

    """
    node = shutil.which("node")
    assert node is not None
    proc = await asyncio.create_subprocess_exec(
        node,
        str(root / script),
        *args,
        cwd=root,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode == 0, (
        f"node {script} {' '.join(args)} failed ({proc.returncode}):\n{err.decode()}"
    )
    lines = out.decode().strip().splitlines()
    assert lines, f"node {script} printed nothing:\n{err.decode()}"
    result = json.loads(lines[-1])
    assert isinstance(result, dict), lines[-1]
    return result
