"""Print ``results/latest.json`` (or the file given) as the README's Markdown table.

``python benchmarks/table.py [results.json]``: the machine line, then one row a
case, in the order of the run, so the README's Performance section is
refreshed from a run rather than typed in.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

DEFAULT = Path(__file__).parent / "results" / "latest.json"


def number(value: float | None) -> str:
    """A figure as the README writes it: thousands separated, small ones with decimals."""
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 0.1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def row(r: dict[str, Any]) -> str:
    """One table row of a result object."""
    spread = "-" if r["spread"] is None else f"{r['spread'] * 100:.0f}%"
    target = ""
    if r["target"]:
        target = f"{r['target']} ({'holds' if r['target_met'] else 'MISSED'})"
    cells = [
        f"`{r['name']}`",
        number(r["ours"]),
        number(r["baseline"]),
        number(r["ratio"]),
        spread,
        r["unit"],
        target,
    ]
    return "| " + " | ".join(cells) + " |"


def main(argv: list[str]) -> None:
    """Print the table of the results file named in ``argv`` (default: latest.json)."""
    path = Path(argv[1]) if len(argv) > 1 else DEFAULT
    doc = json.loads(path.read_text())
    print(f"Machine: {doc['machine']}\n")
    print("| case | aiojetstream | baseline | ratio | spread | unit | target |")
    print("| --- | ---: | ---: | ---: | ---: | --- | --- |")
    for r in doc["results"]:
        print(row(r))


if __name__ == "__main__":
    main(sys.argv)
