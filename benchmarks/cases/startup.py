"""Group ``import``: import and command-line start-up times, in fresh interpreters.

* ``import_ms_over_nats``: what a bare ``import aiojetstream`` adds after
  ``import nats`` (it loads the package's ``__init__`` only).
* ``import_ratio_over_nats``: ``from aiojetstream import`` the names of the
  README's first program (:data:`IMPORT_NAMES`) over ``import nats``, the two
  in alternating interpreters; the ratio is the extra, (ours - nats) / nats.
* ``cli_version_ms``, ``cli_help_ms``: ``python -m aiojetstream --version``
  (``--help``) from start to exit.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Final

from .report import Row, ratio_text, spread


def bench_startup(rounds: int, verbose: bool) -> list[Row]:
    """The group's rows (with ``verbose``, each side's rounds and CPU times on stderr)."""
    f = import_times(rounds)
    if verbose:
        cpu = Row("cpu", extra(f["first_cpu"], f["nats_cpu"]), f["nats_cpu"], "ms")
        print(
            f"  import nats {spread(f['nats'])} ms, then import aiojetstream "
            f"{spread(f['bare'])} ms; from aiojetstream import {IMPORT_NAMES} "
            f"{spread(f['first'])} ms; CPU: import nats {spread(f['nats_cpu'])} ms, "
            f"ours {spread(f['first_cpu'])} ms, extra ratio {ratio_text(cpu.ratio)}",
            file=sys.stderr,
        )
    rows = [Row("import_ms_over_nats", f["bare"], None, "ms")]
    # (ours - nats) / nats per round: the extra ratio (0.5: half again import nats).
    rows.append(Row("import_ratio_over_nats", extra(f["first"], f["nats"]), f["nats"], "ms"))
    for name, times in cli_startup_times(rounds).items():
        rows.append(Row(name, times, None, "ms"))
    return rows


#: The names the README's first program imports: what ``import_ratio_over_nats`` times.
IMPORT_NAMES: Final = "connect, StreamConfig, ConsumerConfig, Msg"

#: The baseline's interpreter: ``import nats`` (timed), then a bare ``import
#: aiojetstream`` after it (``import_ms_over_nats``; it loads the package's
#: ``__init__`` only). Wall and CPU milliseconds.
NATS_SNIPPET: Final = (
    "import time\n"
    "w0, c0 = time.perf_counter(), time.process_time()\n"
    "import nats\n"
    "w1, c1 = time.perf_counter(), time.process_time()\n"
    "import aiojetstream\n"
    "w2 = time.perf_counter()\n"
    "print((w1 - w0) * 1000, (c1 - c0) * 1000, (w2 - w1) * 1000)\n"
)

#: Our interpreter: only ``from aiojetstream import <IMPORT_NAMES>`` (timed).
IMPORT_SNIPPET: Final = (
    "import time\n"
    "w0, c0 = time.perf_counter(), time.process_time()\n"
    f"from aiojetstream import {IMPORT_NAMES}\n"
    "w1, c1 = time.perf_counter(), time.process_time()\n"
    "print((w1 - w0) * 1000, (c1 - c0) * 1000)\n"
)

#: Fresh interpreters of the import cases (at least; more with more --rounds).
IMPORT_ROUNDS = 10


def import_times(rounds: int) -> dict[str, list[float]]:
    """Milliseconds of ``import nats`` and of our first program's import, in fresh interpreters.

    Each round runs two interpreters back to back, in the opposite order every
    other round: one times ``import nats`` (and then a bare ``import
    aiojetstream``), the other only ``from aiojetstream import`` the names of
    :data:`IMPORT_NAMES` (which loads nats too). Returns each round's figures:
    ``nats`` and ``first`` (wall ms), ``nats_cpu`` and ``first_cpu`` (CPU ms of
    the same imports, for --verbose) and ``bare`` (the bare import's wall ms).
    """
    # Measured as installed packages are used: with bytecode caches (the warm-up
    # run writes them even where PYTHONDONTWRITEBYTECODE is set).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

    def once(snippet: str) -> list[float]:
        out = subprocess.run(
            [sys.executable, "-c", snippet],
            check=True,
            capture_output=True,
            text=True,
            env=env,
        )
        return [float(x) for x in out.stdout.split()]

    figures: dict[str, list[float]] = {
        "nats": [],
        "nats_cpu": [],
        "bare": [],
        "first": [],
        "first_cpu": [],
    }

    def nats_side() -> None:
        wall, cpu, bare = once(NATS_SNIPPET)
        figures["nats"].append(wall)
        figures["nats_cpu"].append(cpu)
        figures["bare"].append(bare)

    def ours_side() -> None:
        wall, cpu = once(IMPORT_SNIPPET)
        figures["first"].append(wall)
        figures["first_cpu"].append(cpu)

    once(NATS_SNIPPET)  # warm the file system cache and the bytecode caches
    once(IMPORT_SNIPPET)
    for i in range(max(rounds, IMPORT_ROUNDS)):
        for side in (nats_side, ours_side) if i % 2 == 0 else (ours_side, nats_side):
            side()
    return figures


def extra(ours: list[float], baseline: list[float]) -> list[float]:
    """Each round's ``ours - baseline`` (what our import adds to ``import nats``)."""
    return [o - b for o, b in zip(ours, baseline, strict=True)]


#: The command line's start-up cases: row name -> arguments of ``python -m aiojetstream``.
CLI_STARTUP: Final = {"cli_version_ms": ("--version",), "cli_help_ms": ("--help",)}


def cli_startup_times(rounds: int) -> dict[str, list[float]]:
    """Milliseconds from starting ``python -m aiojetstream --version`` (``--help``) to its exit.

    Wall time of a fresh process, interpreter start-up included (bytecode
    cached, as :func:`import_times`); the cases alternate, one of each a round.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

    def once(args: tuple[str, ...]) -> float:
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "aiojetstream", *args],
            check=True,
            capture_output=True,
            env=env,
        )
        return (time.perf_counter() - start) * 1000

    for args in CLI_STARTUP.values():
        once(args)  # warm the file system cache and the bytecode caches
    times: dict[str, list[float]] = {name: [] for name in CLI_STARTUP}
    for _ in range(max(rounds, IMPORT_ROUNDS)):
        for name, args in CLI_STARTUP.items():
            times[name].append(once(args))
    return times
