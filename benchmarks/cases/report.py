"""The row type, the targets and the table of ``make bench``.

A :class:`Row` holds every round's figure of ours and of the baseline; its
figures are the medians of the two sides' rounds, its ratio the median of the
per-round ratios and its spread the interquartile range of those ratios over
their median (see :data:`SPREAD_WARNING`). :func:`print_table` prints the rows
as ``run.py`` shows them; :meth:`Row.as_json` is one object of ``latest.json``.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
from importlib.metadata import version
from pathlib import Path
from typing import Any

from aiojetstream.testing import find_nats_server

#: The groups of cases, as ``--only`` names them, in the order of a full run's table.
GROUPS = ("publish", "consume", "kv", "memory", "spark", "import")

#: Targets: case -> (comparison, threshold); ratios for cases with a baseline.
TARGETS: dict[str, tuple[str, float]] = {
    "publish_mem": (">=", 1.1),
    "publish_file": (">=", 1.1),
    "publish_async_mem": (">=", 2.0),
    "publish_async_file": (">=", 2.0),
    "messages_ack_none": (">=", 4.5),
    "messages_ack_explicit": (">=", 3.0),
    # Issue 14 (Performance II): past nats-py's own core subscription.
    "messages_ack_none_vs_core": (">=", 1.25),
    "consume_vs_core": (">=", 1.25),
    "messages_ack_explicit_vs_core": (">=", 0.7),
    # Issue 27: against what the server delivers and stores (bare-socket clients).
    "messages_vs_socket": (">=", 0.8),
    "publish_many_vs_socket": (">=", 0.6),
    "ordered": (">=", 1.5),
    "kv_put": (">=", 1.0),
    "kv_get_p50": ("<=", 0.6),
    "rss_bytes_per_buffered_msg": ("<=", 400),
    "rss_growth_1m_msgs_mib": ("<", 50),
    "import_ms_over_nats": ("<=", 150),
    "import_ratio_over_nats": ("<=", 0.5),
    # Issue 26: the command line answers --version and --help in under half a second.
    "cli_version_ms": ("<=", 500),
    "cli_help_ms": ("<=", 500),
    # Issue 27 (issue 8's spark_*_vs_noop targets withdrawn: those rows are information).
    # CPU rows: Python-worker CPU per row over the no-op source's; lower is better.
    "spark_read_cpu_vs_noop": ("<=", 3.0),
    "spark_write_cpu_vs_noop": ("<=", 5.0),
    "spark_read_vs_server": (">=", 0.7),
    "spark_write_vs_server": (">=", 0.6),
    # Issue 28: an instrumented context (OpenTelemetry SDK) against a plain one.
    "publish_async_otel_vs_plain": (">=", 0.7),
    "messages_otel_vs_plain": (">=", 0.7),
    # Issue 28: messages(model=...) over messages() plus a hand-written model_validate_json.
    "typed_messages_vs_manual": (">=", 0.95),
}

#: Above this spread (the interquartile range of a row's per-round ratios over
#: their median: the middle half of the rounds differ by more than 15 %) the
#: run prints a warning: the ratio is not a figure to trust, rerun the group.
#: Not warned about: rows without a baseline (memory, import milliseconds: their
#: targets are absolute and far from the noise) and rows whose every round meets
#: the target (the verdict holds whatever the spread).
SPREAD_WARNING: float = 0.15


def machine() -> str:
    """A one-line description of this machine."""
    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    try:
        out = subprocess.run(
            [find_nats_server(), "--version"], capture_output=True, text=True, timeout=10
        )
        server = out.stdout.strip().replace("nats-server: v", "nats-server ")
    except (OSError, subprocess.SubprocessError):
        server = "nats-server"
    return (
        f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{platform.system()}, {server}, nats-py {version('nats-py')}"
    )


def relative_iqr(values: list[float]) -> float | None:
    """The interquartile range of ``values`` over their median (None for fewer than 3)."""
    if len(values) < 3:
        return None
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    middle = statistics.median(values)
    return (q3 - q1) / middle if middle else None


class Row:
    """One line of the table: every round's figure of ours and of the baseline.

    ``ours`` and ``baseline`` are the medians of the sides' rounds; ``ratio``
    is the median of the per-round ratios (round i of ours over round i of the
    baseline, measured back to back); ``spread`` is :func:`relative_iqr` of
    those ratios, or of ours' rounds in a row without a baseline.
    """

    def __init__(
        self, name: str, ours: list[float], baseline: list[float] | None, unit: str
    ) -> None:
        if baseline is not None and len(baseline) != len(ours):
            raise ValueError(f"{name}: {len(ours)} rounds of ours, {len(baseline)} of the baseline")
        self.name = name
        self.rounds = ours
        self.baseline_rounds = baseline
        self.unit = unit
        self.ours = statistics.median(ours)
        self.baseline = None if baseline is None else statistics.median(baseline)
        self.ratios = (
            None if baseline is None else [o / b for o, b in zip(ours, baseline, strict=True) if b]
        )

    @property
    def ratio(self) -> float | None:
        """The median of the per-round ratios (None without a baseline)."""
        return statistics.median(self.ratios) if self.ratios else None

    @property
    def spread(self) -> float | None:
        """How much the rounds disagree (None for a single measurement)."""
        return relative_iqr(self.rounds if self.ratios is None else self.ratios)

    def as_json(self) -> dict[str, Any]:
        ratio = self.ratio
        spread = self.spread
        text, holds = self.target()
        return {
            "name": self.name,
            "ours": round(self.ours, 1),
            "baseline": None if self.baseline is None else round(self.baseline, 1),
            "ratio": None if ratio is None else round(ratio, 3),
            "unit": self.unit,
            "spread": None if spread is None else round(spread, 3),
            "rounds": len(self.rounds),
            "target": text or None,
            "target_met": holds,
        }

    def target(self) -> tuple[str, bool | None]:
        """The target as text and whether it holds (None without a target)."""
        spec = TARGETS.get(self.name)
        if spec is None:
            return "", None
        op, limit = spec
        value = self.ours if self.baseline is None else self.ratio
        assert value is not None
        suffix = "x" if self.baseline is not None else f" {self.unit}"
        return f"{op} {limit:g}{suffix}", _holds(value, op, limit)

    def noisy(self) -> bool:
        """Whether to warn about the row's spread (see :data:`SPREAD_WARNING`)."""
        if self.ratios is None or (self.spread or 0) <= SPREAD_WARNING:
            return False
        spec = TARGETS.get(self.name)
        return spec is None or not all(_holds(r, *spec) for r in self.ratios)

    def unsure(self) -> bool:
        """Whether the target lies between the first and third quartile of the rounds.

        The rounds then fall on both sides of it: the verdict is the median's,
        but another run may well give the other one.
        """
        spec = TARGETS.get(self.name)
        values = self.rounds if self.ratios is None else self.ratios
        if spec is None or len(values) < 3:
            return False
        op, limit = spec
        q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
        return _holds(q1, op, limit) != _holds(q3, op, limit)


def _holds(value: float, op: str, limit: float) -> bool:
    return value >= limit if op == ">=" else value <= limit if op == "<=" else value < limit


def ratio_text(value: float | None) -> str:
    """A ratio as the table shows it."""
    if value is None:
        return "-"
    return f"{value:.2f}" if value >= 0.1 else f"{value:.3f}"


def number_text(value: float | None) -> str:
    """A figure as the table shows it."""
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"


def spread(values: list[float]) -> str:
    """``median [min..max] (n rounds)`` of a side's figures (for --verbose)."""
    return (
        f"{number_text(statistics.median(values))} "
        f"[{number_text(min(values))}..{number_text(max(values))}] ({len(values)} rounds)"
    )


def print_table(machine_text: str, rows: list[Row]) -> None:
    """The table, then a warning for every row whose rounds disagree too much."""
    print(f"machine: {machine_text}")
    print(
        f"{'case':<30}{'ours':>12}{'baseline':>12}{'ratio':>8}{'spread':>8}  "
        f"{'unit':<11}{'target':<15}"
    )
    for r in rows:
        ratio = r.ratio
        spread = r.spread
        text, holds = r.target()
        mark = "" if holds is None else ("ok" if holds else "MISSED")
        if mark and r.unsure():
            mark += "?"
        print(
            f"{r.name:<30}{number_text(r.ours):>12}{number_text(r.baseline):>12}"
            f"{ratio_text(ratio):>8}"
            f"{'-' if spread is None else f'{spread:.0%}':>8}  {r.unit:<11}{text:<15}{mark}"
        )
    noisy = [r for r in rows if r.noisy()]
    for r in noisy:
        print(
            f"warning: {r.name}: the rounds disagree too much to trust the figure "
            f"(spread {r.spread:.0%} > {SPREAD_WARNING:.0%}); rerun its group "
            f"(--only {group_of(r.name)}) on a quieter machine"
        )
    if any(r.unsure() for r in rows):
        print("?: the target lies between the rounds' quartiles: another run may say otherwise")


def group_of(case: str) -> str:
    """The ``--only`` group that measures ``case``."""
    for prefix, group in (
        ("publish", "publish"),
        ("kv_", "kv"),
        ("rss_", "memory"),
        ("import_", "import"),
        ("cli_", "import"),
        ("spark_", "spark"),
    ):
        if case.startswith(prefix):
            return group
    return "consume"
