"""The table over time as an inline SVG: live files and size per version, no script and no CDN.

One panel per measure, versions along the x axis (evenly spaced: commits of a busy table can land
milliseconds apart, which a time axis would pile on top of each other; each point's tooltip gives its
time). A step line, because a measure holds its value until the next commit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from html import escape

from airflow_provider_delta.ui.table_view import Point

WIDTH, PANEL, PAD_LEFT, PAD_RIGHT, PAD_Y = 760, 130, 70, 20, 22


def human_bytes(n: int | None) -> str:
    if n is None:
        return "?"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def table_plot(points: Sequence[Point], selected: int | None = None) -> str:
    """Two stacked panels (live files, size) as one ``<svg>`` element."""
    if not points:
        return '<p class="muted">No versions to plot.</p>'
    panels = [
        ("live files", [p.files for p in points], lambda v: f"{v:,}"),
        ("size", [p.bytes for p in points], human_bytes),
    ]
    height = PANEL * len(panels)
    parts = [
        f'<svg class="plot" role="img" aria-label="Live files and size per version" '
        f'viewBox="0 0 {WIDTH} {height + 24}" width="{WIDTH}" height="{height + 24}" '
        f'xmlns="http://www.w3.org/2000/svg">'
    ]
    for i, (label, values, fmt) in enumerate(panels):
        parts.append(_panel(points, values, fmt, label, i * PANEL, selected))
    first, last = points[0], points[-1]
    parts.append(
        f'<text x="{PAD_LEFT}" y="{height + 16}" class="axis">version {first.version} · '
        f"{escape(when(first.timestamp))}</text>"
        f'<text x="{WIDTH - PAD_RIGHT}" y="{height + 16}" class="axis" text-anchor="end">version '
        f"{last.version} · {escape(when(last.timestamp))}</text></svg>"
    )
    return "".join(parts)


def _panel(
    points: Sequence[Point],
    values: list[int],
    fmt: Callable[[int], str],
    label: str,
    top: int,
    selected: int | None,
) -> str:
    lo, hi = 0, max(max(values), 1)
    inner_w = WIDTH - PAD_LEFT - PAD_RIGHT
    inner_h = PANEL - 2 * PAD_Y
    step = inner_w / max(len(points) - 1, 1)

    def x(i: int) -> float:
        return PAD_LEFT + (i * step if len(points) > 1 else inner_w / 2)

    def y(v: int) -> float:
        return top + PAD_Y + inner_h - (v - lo) / (hi - lo) * inner_h

    out = [
        f'<g class="panel" data-measure="{escape(label)}">',
        f'<text x="4" y="{top + 14}" class="label">{escape(label)}</text>',
        f'<line x1="{PAD_LEFT}" y1="{y(lo):.1f}" x2="{WIDTH - PAD_RIGHT}" y2="{y(lo):.1f}" class="grid"/>',
        f'<line x1="{PAD_LEFT}" y1="{y(hi):.1f}" x2="{WIDTH - PAD_RIGHT}" y2="{y(hi):.1f}" class="grid"/>',
        f'<text x="{PAD_LEFT - 6}" y="{y(hi) + 4:.1f}" class="axis" text-anchor="end">'
        f"{escape(fmt(hi))}</text>",
        f'<text x="{PAD_LEFT - 6}" y="{y(lo) + 4:.1f}" class="axis" text-anchor="end">0</text>',
    ]
    path = [f"M{x(0):.1f},{y(values[0]):.1f}"]
    for i in range(1, len(values)):
        path.append(f"H{x(i):.1f}V{y(values[i]):.1f}")
    out.append(f'<path d="{"".join(path)}" class="line"/>')
    for i, (p, v) in enumerate(zip(points, values, strict=True)):
        css = "dot selected" if p.version == selected else "dot"
        tip = f"version {p.version} · {when(p.timestamp)} · {label} {fmt(v)}"
        out.append(
            f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="{5 if p.version == selected else 3}" '
            f'class="{css}" data-version="{p.version}"><title>{escape(tip)}</title></circle>'
        )
    out.append("</g>")
    return "".join(out)
