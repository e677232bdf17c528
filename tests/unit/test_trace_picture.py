"""tools/trace_picture.py: the waterfall drawn for docs/observability.md.

Its renderer is pure: given span records it returns an SVG document, one row
and one bar per span, the bars on one time axis. No server here; the tool
itself runs the example against one (``python tools/trace_picture.py``).
"""

from __future__ import annotations

import importlib.util
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SVG = "{http://www.w3.org/2000/svg}"


def load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "trace_picture", ROOT / "tools" / "trace_picture.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


tool = load_tool()
MS = 1_000_000


def record(
    name: str, span_id: int, parent: int | None, start_ms: float, end_ms: float, **kw: Any
) -> Any:
    return tool.SpanRecord(
        name=name,
        kind=kw.pop("kind", "internal"),
        trace_id=kw.pop("trace_id", 0xA),
        span_id=span_id,
        parent_id=parent,
        start_ns=int(start_ms * MS),
        end_ns=int(end_ms * MS),
        **kw,
    )


# Given out of order: the renderer sorts them.
SPANS = [
    record("process orders", 3, 2, 2.0, 3.0, kind="consumer", service="aiojetstream"),
    record("checkout", 1, None, 0.0, 1.5, service="shop"),
    record("receive ORDERS", 9, None, 1.8, 2.2, kind="client", trace_id=0xB, links=(2,)),
    record("send orders", 2, 1, 0.5, 1.0, kind="producer", service="aiojetstream"),
    record("compute <invoice> & tax", 4, 3, 2.5, 2.6, service="shop"),
]


def bars(svg: str) -> list[tuple[str, float, float, float]]:
    """(span id, x, width, y) of each bar, in document order."""
    found = []
    for group in ET.fromstring(svg).iter(f"{SVG}g"):
        if group.get("class") != "span":
            continue
        bar = next(r for r in group.iter(f"{SVG}rect") if r.get("class") == "bar")
        found.append(
            (
                group.get("data-span", ""),
                float(bar.get("x", "")),
                float(bar.get("width", "")),
                float(bar.get("y", "")),
            )
        )
    return found


def test_one_bar_per_span_placed_by_start_and_duration() -> None:
    svg = tool.render_svg(SPANS, "a title")
    drawn = bars(svg)  # ET.fromstring: well formed, names escaped
    assert len(drawn) == len(SPANS)
    by_id = {int(span_id, 16): (x, width) for span_id, x, width, _ in drawn}
    in_time_order = sorted(SPANS, key=lambda s: s.start_ns)
    xs = [by_id[s.span_id][0] for s in in_time_order]
    assert xs == sorted(xs)
    assert len(set(xs)) == len(xs)
    # One scale: x and width are linear in start and duration.
    first, last = in_time_order[0], in_time_order[-1]
    per_ns = (by_id[last.span_id][0] - by_id[first.span_id][0]) / (last.start_ns - first.start_ns)
    for span in SPANS:
        x, width = by_id[span.span_id]
        assert x == pytest.approx(
            by_id[first.span_id][0] + (span.start_ns - first.start_ns) * per_ns, abs=0.1
        )
        assert width == pytest.approx((span.end_ns - span.start_ns) * per_ns, abs=0.1)
    assert "compute &lt;invoice&gt; &amp; tax" in svg


def test_rows_follow_the_tree_trace_by_trace() -> None:
    drawn = bars(tool.render_svg(SPANS))
    # Parent before children, siblings by start; the second trace after the first.
    assert [int(span_id, 16) for span_id, *_ in drawn] == [1, 2, 3, 4, 9]
    ys = [y for *_, y in drawn]
    assert ys == sorted(ys)
    depths = [depth for _, depth in tool.waterfall(SPANS)]
    assert depths == [0, 1, 2, 3, 0]


def test_links_are_drawn_or_noted() -> None:
    svg = tool.render_svg(SPANS)
    assert len([p for p in ET.fromstring(svg).iter(f"{SVG}path") if p.get("class") == "link"]) == 1
    outside = tool.render_svg([record("process x", 5, None, 0, 1, links=(77,))])
    assert "linked to 1 span elsewhere" in outside
    assert 'class="link"' not in outside


def test_nothing_to_draw_is_an_error() -> None:
    with pytest.raises(ValueError, match="no spans"):
        tool.render_svg([])
