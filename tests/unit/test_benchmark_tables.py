"""The benchmark figures the pages show are those of ``benchmarks/results/latest.json``.

``benchmarks/README.md`` ("Latest results") holds the whole table as
``benchmarks/table.py`` prints it; README.md keeps a few headline rows, the
Spark figures in a sentence, and a link to the rest. A new ``make bench`` run
written to ``latest.json`` fails these tests until both pages show it.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
README = ROOT / "README.md"
HEADLINES = {
    "`publish()`, one at a time": "publish_mem",
    "`publish_async()`, pipelined": "publish_async_mem",
    "`messages()`, no acks": "messages_ack_none",
    "`messages()`, every message acked": "messages_ack_explicit",
    "`consume()`": "consume_callback",
    "the ordered consumer": "ordered",
    "key-value `get()`, median latency": "kv_get_p50",
}
"""README.md's Performance rows and the case each one shows."""


def table_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("benchmark_table", BENCHMARKS / "table.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def results() -> dict[str, dict[str, Any]]:
    doc = json.loads((BENCHMARKS / "results" / "latest.json").read_text(encoding="utf-8"))
    return {r["name"]: r for r in doc["results"]}


def section(text: str, heading: str) -> str:
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def table_rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("| ")]


def test_benchmarks_readme_holds_the_whole_latest_table() -> None:
    table = table_module()
    page = (BENCHMARKS / "README.md").read_text(encoding="utf-8")
    rows = table_rows(section(page, "## Latest results"))
    expected = [table.row(r) for r in results().values()]
    assert rows[2:] == expected
    assert rows[0] == "| case | aiojetstream | baseline | ratio | spread | unit | target |"


def test_readme_headlines_are_the_latest_figures() -> None:
    number = table_module().number
    latest = results()
    performance = section(README.read_text(encoding="utf-8"), "## Performance")
    rows = table_rows(performance)
    assert rows[0] == "| case | aiojetstream | nats-py | ratio |"
    shown = {}
    for line in rows[2:]:
        label, ours, baseline, ratio = (cell.strip() for cell in line.strip("|").split("|"))
        shown[label] = (ours, baseline, ratio)
    assert list(shown) == list(HEADLINES)
    for label, name in HEADLINES.items():
        r = latest[name]
        unit = r["unit"]
        expected = (f"{number(r['ours'])} {unit}", f"{number(r['baseline'])} {unit}")
        assert shown[label] == (*expected, f"{number(r['ratio'])}x"), label

    text = " ".join(performance.split())
    assert spark_sentence(latest) in text
    assert f"the whole table ({len(latest)} cases" in text
    assert "[benchmarks/README.md](benchmarks/README.md#latest-results)" in text


def verdict(r: dict[str, Any]) -> str:
    """``met`` or ``missed``, as the row's ``target_met`` says."""
    assert r["target_met"] is not None, r["name"]
    return "met" if r["target_met"] else "missed"


def spark_sentence(latest: dict[str, dict[str, Any]]) -> str:
    """README's Spark sentence for ``latest``: the issue-27 rows, each with its verdict.

    The rates against the server (a bare-socket client through the same server)
    and the Python workers' CPU per row against a no-op Arrow source.
    """
    number = table_module().number
    read, write = latest["spark_read_vs_server"], latest["spark_write_vs_server"]
    read_cpu, write_cpu = latest["spark_read_cpu_vs_noop"], latest["spark_write_cpu_vs_noop"]

    def limit(r: dict[str, Any]) -> str:
        return re.sub(r"^[<>]=? ", "", r["target"])

    return (
        f"The Spark sources read {read['ours'] / 1000:.0f}k and write "
        f"{write['ours'] / 1000:.0f}k rows a second there, {number(read['ratio'])}x and "
        f"{number(write['ratio'])}x of a bare-socket client of the same server (targets "
        f"{limit(read)}: {verdict(read)}, {limit(write)}: {verdict(write)}); their Python "
        f"workers spend {number(read_cpu['ratio'])}x and {number(write_cpu['ratio'])}x the "
        f"CPU per row of a no-op Arrow source and writer (targets {limit(read_cpu)}: "
        f"{verdict(read_cpu)}, {limit(write_cpu)}: {verdict(write_cpu)})."
    )
