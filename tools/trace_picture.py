"""Draw the trace of ``examples/traced_pipeline.py`` as an SVG time line.

``python tools/trace_picture.py`` runs the example's pipeline (its
``run_pipeline``, with ``parent=True``) against a nats-server it starts
(``aiojetstream.testing.NatsServer``; or the one at ``NATS_URL``), keeps the
spans in the OpenTelemetry SDK's in-memory exporter and writes
``docs/img/trace.svg``: a waterfall like a trace viewer's (Jaeger, Tempo), one
row per span, indented under its parent, its bar at its start and duration on a
time axis shared by all traces, coloured by span kind, with a stripe of its
service's colour (the instrumentation scope: the application or aiojetstream).
A span link to a span of the picture is drawn as a dashed arrow; a link to a
span outside it is noted after the span's name.

``render_svg`` draws any list of ``SpanRecord`` and needs neither a server nor
the OpenTelemetry SDK.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast
from xml.sax.saxutils import escape

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "traced_pipeline.py"
OUT = ROOT / "docs" / "img" / "trace.svg"

KIND_COLOURS = {
    "internal": "#8c9cb4",
    "producer": "#e8943a",
    "consumer": "#4caf7a",
    "client": "#8e6cc9",
    "server": "#d05a6e",
}
"""The bar's colour by span kind."""
SERVICE_COLOURS = ("#1f77b4", "#d62728", "#17becf", "#bcbd22", "#7f7f7f")
"""The stripe's colour by service (instrumentation scope), in order of appearance."""

WIDTH = 960
LABELS = 330
"""The width of the label column; the time line takes the rest."""
ROW = 26
TOP = 46
INDENT = 16
FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"


@dataclass(frozen=True)
class SpanRecord:
    """What the picture needs of one finished span.

    Attributes:
        name: The span's name.
        kind: Its kind in lower case (``producer``, ``consumer``...).
        trace_id: Its trace.
        span_id: Its id.
        parent_id: Its parent's span id, or ``None`` for a root.
        start_ns: Its start, in nanoseconds since the epoch.
        end_ns: Its end, likewise.
        service: What made it (the instrumentation scope's name).
        links: The span ids it is linked to.

    """

    name: str
    kind: str
    trace_id: int
    span_id: int
    parent_id: int | None
    start_ns: int
    end_ns: int
    service: str = ""
    links: tuple[int, ...] = field(default=())


def waterfall(spans: Sequence[SpanRecord]) -> list[tuple[SpanRecord, int]]:
    """The spans in a trace viewer's order, each with its depth.

    Traces in the order of their first span; in each, a parent before its
    children, siblings by start. A span whose parent is not among ``spans`` is
    a root.
    """
    ids = {span.span_id for span in spans}
    children: dict[int | None, list[SpanRecord]] = {}
    for span in sorted(spans, key=lambda s: (s.start_ns, s.end_ns)):
        parent = span.parent_id if span.parent_id in ids else None
        children.setdefault(parent, []).append(span)
    rows: list[tuple[SpanRecord, int]] = []

    def walk(span: SpanRecord, depth: int) -> None:
        rows.append((span, depth))
        for child in children.get(span.span_id, []):
            walk(child, depth + 1)

    roots = children.get(None, [])
    for trace_id in dict.fromkeys(root.trace_id for root in roots):
        for root in roots:
            if root.trace_id == trace_id:
                walk(root, 0)
    return rows


def _duration(ns: int) -> str:
    if ns >= 1_000_000:
        return f"{ns / 1_000_000:.2f} ms"
    return f"{ns / 1000:.0f} µs"


def _tick_label(ns: int) -> str:
    if ns == 0:
        return "0"
    if ns >= 1_000_000:
        return f"{ns / 1_000_000:g} ms"
    return f"{ns / 1000:g} µs"


def _tick_step(total_ns: int) -> int:
    """A round step giving 4 to 10 ticks over ``total_ns``."""
    step = 1
    while total_ns / step > 10:
        for factor in (2, 5 / 2, 2):
            step = int(step * factor)
            if total_ns / step <= 10:
                break
    return step


def render_svg(spans: Sequence[SpanRecord], title: str = "") -> str:
    """Draw ``spans`` as a waterfall: one row and one bar per span.

    Args:
        spans: Finished spans, of one trace or more (drawn on one time axis).
        title: A line above the picture.

    Returns:
        The SVG document.

    """
    if not spans:
        raise ValueError("no spans to draw")
    rows = waterfall(spans)
    traces = list(dict.fromkeys(span.trace_id for span, _ in rows))
    services = list(dict.fromkeys(span.service for span, _ in rows))
    t0 = min(span.start_ns for span in spans)
    total = max(max(span.end_ns for span in spans) - t0, 1)
    scale = (WIDTH - LABELS - 90) / total
    step = _tick_step(total)

    def x(ns: int) -> float:
        return LABELS + 10 + (ns - t0) * scale

    # A header row per trace, then its spans.
    layout: list[tuple[int, SpanRecord | int, int]] = []
    y = TOP
    for span, depth in rows:
        if not layout or (
            isinstance(layout[-1][1], SpanRecord) and layout[-1][1].trace_id != span.trace_id
        ):
            layout.append((y, span.trace_id, 0))
            y += ROW
        layout.append((y, span, depth))
        y += ROW
    height = y + 56
    where = {item.span_id: row_y for row_y, item, _ in layout if isinstance(item, SpanRecord)}

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="{FONT}" font-size="12">',
        '<defs><marker id="arrow" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="7" '
        'markerHeight="7" orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#555"/></marker></defs>',
        f'<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>',
        f'<text x="10" y="18" font-weight="bold">{escape(title)}</text>',
    ]
    # The time axis: a tick and a grid line every step.
    tick = 0
    while tick <= total:
        tx = x(t0 + tick)
        out.append(
            f'<line x1="{tx:.1f}" y1="{TOP - 8}" x2="{tx:.1f}" y2="{y}" stroke="#e4e4e4"/>'
            f'<text x="{tx:.1f}" y="{TOP - 12}" text-anchor="middle" fill="#666" '
            f'font-size="10">{_tick_label(tick)}</text>'
        )
        tick += step
    for row_y, item, depth in layout:
        if not isinstance(item, SpanRecord):
            count = sum(1 for span, _ in rows if span.trace_id == item)
            out.append(
                f'<rect x="0" y="{row_y}" width="{WIDTH}" height="{ROW}" fill="#f1f3f6"/>'
                f'<text x="10" y="{row_y + 17}" fill="#333">trace {item:032x} '
                f"({count} span{'s' if count > 1 else ''})</text>"
            )
            continue
        span = item
        colour = KIND_COLOURS.get(span.kind, "#999999")
        stripe = SERVICE_COLOURS[services.index(span.service) % len(SERVICE_COLOURS)]
        bx, bw = x(span.start_ns), max((span.end_ns - span.start_ns) * scale, 2)
        outside = [link for link in span.links if link not in where]
        note = (
            f" (linked to {len(outside)} span{'s' if len(outside) > 1 else ''} elsewhere)"
            if outside
            else ""
        )
        lx = 12 + depth * INDENT
        out.append(
            f'<g class="span" data-trace="{span.trace_id:032x}" data-span="{span.span_id:016x}">'
            f"<title>{escape(span.name)} ({span.kind}, {escape(span.service)}): "
            f"{_duration(span.end_ns - span.start_ns)}</title>"
            f'<rect x="{lx - 6}" y="{row_y + 5}" width="3" height="{ROW - 10}" fill="{stripe}"/>'
            f'<text x="{lx}" y="{row_y + 17}">{escape(span.name)}'
            f'<tspan fill="#777"> {span.kind}{escape(note)}</tspan></text>'
            f'<rect class="bar" x="{bx:.1f}" y="{row_y + 6}" width="{bw:.1f}" height="{ROW - 12}" '
            f'rx="2" fill="{colour}"/>'
            f'<text x="{bx + bw + 5:.1f}" y="{row_y + 17}" fill="#555" font-size="11">'
            f"{_duration(span.end_ns - span.start_ns)}</text></g>"
        )
    # Links within the picture: a dashed arrow from the linked span to the linking one.
    for row_y, item, _ in layout:
        if isinstance(item, SpanRecord):
            for link in item.links:
                if link in where:
                    source = next(s for s, _ in rows if s.span_id == link)
                    sx, sy = x(source.start_ns), where[link] + ROW - 6
                    ex, ey = x(item.start_ns), row_y + 6
                    out.append(
                        f'<path class="link" d="M{sx:.1f},{sy} C{sx:.1f},{ey} {ex:.1f},{sy} '
                        f'{ex:.1f},{ey}" fill="none" stroke="#555" stroke-dasharray="4 3" '
                        'marker-end="url(#arrow)"/>'
                    )
    # The legend: kinds, then services.
    gx, ly = 10.0, y + 24
    out.append(f'<text x="{gx}" y="{ly}" fill="#666">span kind:</text>')
    gx += 70
    for kind in dict.fromkeys(span.kind for span, _ in rows):
        out.append(
            f'<rect x="{gx}" y="{ly - 10}" width="14" height="10" rx="2" '
            f'fill="{KIND_COLOURS.get(kind, "#999999")}"/>'
            f'<text x="{gx + 19}" y="{ly}">{kind}</text>'
        )
        gx += 30 + 7 * len(kind)
    gx += 20
    out.append(f'<text x="{gx}" y="{ly}" fill="#666">service (scope):</text>')
    gx += 102
    for index, service in enumerate(services):
        shown = service or "(no service)"
        out.append(
            f'<rect x="{gx}" y="{ly - 11}" width="3" height="12" '
            f'fill="{SERVICE_COLOURS[index % len(SERVICE_COLOURS)]}"/>'
            f'<text x="{gx + 8}" y="{ly}">{escape(shown)}</text>'
        )
        gx += 24 + 7 * len(shown)
    if len(traces) > 1:
        out.append(
            f'<text x="10" y="{ly + 20}" fill="#666" font-size="11">'
            f"{len(traces)} traces on one time axis</text>"
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def records(spans: Sequence[ReadableSpan]) -> list[SpanRecord]:
    """The ``SpanRecord`` of each finished SDK span."""
    return [
        SpanRecord(
            name=span.name,
            kind=span.kind.name.lower(),
            trace_id=span.context.trace_id if span.context else 0,
            span_id=span.context.span_id if span.context else 0,
            parent_id=span.parent.span_id if span.parent else None,
            start_ns=span.start_time or 0,
            end_ns=span.end_time or 0,
            service=span.instrumentation_scope.name if span.instrumentation_scope else "",
            links=tuple(link.context.span_id for link in span.links),
        )
        for span in spans
    ]


async def collect(url: str | None) -> list[ReadableSpan]:
    """Run the example's pipeline once (at ``url``, or on a server started here)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from aiojetstream.testing import NatsServer

    spec = importlib.util.spec_from_file_location("traced_pipeline", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    run_pipeline = cast(Callable[[str, TracerProvider], Awaitable[None]], example.run_pipeline)

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    if url:
        await run_pipeline(url, provider)
    else:
        async with NatsServer() as server:
            await run_pipeline(server.url, provider)
    return list(exporter.get_finished_spans())


def main(argv: Sequence[str] | None = None) -> None:
    """Run the pipeline, write the picture."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--out", type=Path, default=OUT, help=f"where to write it ({OUT.relative_to(ROOT)})"
    )
    args = parser.parse_args(argv)
    spans = asyncio.run(collect(os.environ.get("NATS_URL")))
    svg = render_svg(
        records(spans),
        "examples/traced_pipeline.py, parent=True: an order, its billing, its invoice",
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(svg, encoding="utf-8")
    print(f"{len(spans)} spans drawn in {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
