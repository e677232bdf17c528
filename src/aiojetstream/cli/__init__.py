"""The ``aiojetstream`` command line (extra ``cli``: Typer and Rich).

Run it as ``aiojetstream ...`` (the console script) or ``python -m aiojetstream ...``.
``import aiojetstream`` never loads this package, Typer or Rich: only the
console script and ``python -m aiojetstream`` do. See ``docs/cli.md``.

The command line is a client of the public API: nothing here imports the
library's private modules.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["INSTALL_HINT", "main"]

INSTALL_HINT = "pip install 'aiojetstream[cli]'"
"""How to install what the command line needs."""

DEFAULT_SERVER = "nats://127.0.0.1:4222"
"""The server of ``--server`` when neither it nor ``NATS_URL`` is given."""

MAX_WAIT = (2**63 - 1) // 10**9
"""The longest wait in seconds (``--timeout``, ``--idle``): the library's, the
server's int64 nanoseconds (about 292 years). Longer ones (``inf``, ``1e300``)
are usage errors, as the library refuses them."""

MAX_SEQUENCE = 2**64 - 1
"""The largest stream sequence (the server's uint64), as the library takes it."""

_NEEDED = ("typer", "rich")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line and return its exit code.

    Args:
        argv: The arguments (``sys.argv[1:]`` when None).

    Returns:
        0 on success, 1 for an error, 2 for a usage error, 130 when interrupted,
        141 when standard output was closed (``... | head``).
        Without Typer or Rich installed, prints how to install them and returns 1.

    """
    try:
        from ._app import run_app

        # Rich and the commands load with the first command that needs them.
        return run_app(list(sys.argv[1:] if argv is None else argv))
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").partition(".")[0]
        if missing not in _NEEDED:
            raise
        print(
            f"error: the aiojetstream command line needs {missing!r}, "
            f"which is not installed: {INSTALL_HINT}",
            file=sys.stderr,
        )
        return 1
