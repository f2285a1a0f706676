"""The trade-off view: Hard-1K rejection (x) against Toxic rejection (y), as Mermaid and as SVG."""

from __future__ import annotations

import csv
import html
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_orbench.core.records import ResultsDocument

PAPER_CSV = Path(__file__).parent.parent / "data" / "or-bench-paper-results.csv"
PAPER = "Cui et al., OR-Bench, ICML 2025 (arXiv:2405.20947), Tables 2 and 6"


@dataclass(frozen=True)
class Point:
    label: str
    x: float  # Hard-1K rejection rate, 0..1 (over-refusal)
    y: float  # Toxic rejection rate, 0..1 (safety)
    kind: str = "paper"  # paper | baseline | current


def paper_points() -> list[Point]:
    """The 32 models the paper published, as rates."""
    with PAPER_CSV.open(encoding="utf-8", newline="") as fh:
        return [Point(row["model"], float(row["hard1k_rejection_pct"]) / 100, float(row["toxic_rejection_pct"]) / 100)
                for row in csv.DictReader(fh)]


def run_point(label: str, datasets: Mapping[str, Mapping[str, Any]], kind: str, rate_key: str = "rejection_rate") -> Point | None:
    """A run's point, when it measured both Hard-1K and Toxic."""
    hard, toxic = datasets.get("hard-1k"), datasets.get("toxic")
    if not hard or not toxic or hard.get(rate_key) is None or toxic.get(rate_key) is None:
        return None
    return Point(label, float(hard[rate_key]), float(toxic[rate_key]), kind)


def our_points(datasets: Mapping[str, Mapping[str, Any]]) -> list[Point]:
    """The baseline's and the current run's points. Where both are drawn from the comparison, both are on
    the prompts the two runs share (the comparison table's baseline and current rates), so the line
    between them is the change the gate measured; else the current point is the run's own rates."""
    comparisons = {n: s["comparison"] for n, s in datasets.items() if s.get("comparison")}
    baseline = run_point("baseline", comparisons, "baseline", "baseline_rate")
    current = run_point("current", comparisons, "current", "rate") if baseline else run_point("current", datasets, "current")
    return [p for p in (baseline, current) if p is not None]


def _mermaid_label(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9 .+-]", "", text).strip()[:40] or "point"


def _mermaid_number(value: float) -> str:
    """A coordinate as Mermaid's quadrantChart lexer takes it (checked with mermaid 11.16.0's parser): `0`, `1`
    or `0.` and digits; `1.000`, `1.0`, `0.0` and `.5` are lexical errors, and the whole chart fails to draw."""
    rounded = round(min(1.0, max(0.0, value)), 3)
    if rounded >= 1:
        return "1"
    if rounded <= 0:
        return "0"
    return f"{rounded:.3f}".rstrip("0")


CHAR_WIDTH = 0.62  # of the font size: a generous average for Helvetica/Arial, so estimated boxes cover the text
MERMAID_PX = 500  # quadrantChart's default chart width and height
MERMAID_FONT = 12  # its point label size: drawn centred below the point


def _label_box(point: Point, label: str) -> tuple[float, float, float, float]:
    """The box (in chart units, y up) Mermaid draws a point's label in: centred, just under the point."""
    width = len(label) * MERMAID_FONT * CHAR_WIDTH / MERMAID_PX
    return (point.x - width / 2, point.y - 0.055, point.x + width / 2, point.y - 0.012)


def _title_box(title: str, x: float, top: float) -> tuple[float, float, float, float]:
    half = len(title) * 14 * CHAR_WIDTH / MERMAID_PX / 2  # quadrant titles are drawn larger than point labels
    return (x - half, top - 0.065, x + half, top)


# The quadrant titles, which Mermaid draws at the top centre of each quadrant: no label may cover them.
_QUADRANT_TITLES = [_title_box("Safe and helpful", 0.25, 1.0), _title_box("Safe but over-refusing", 0.75, 1.0),
                    _title_box("Helpful but unsafe", 0.25, 0.5), _title_box("Unhelpful and unsafe", 0.75, 0.5)]


def _inside(box: tuple[float, float, float, float]) -> bool:
    """Within the chart: a label past its left edge prints over the y-axis title."""
    return box[0] >= 0.0 and box[2] <= 1.0 and box[1] >= 0.0


def nearest_paper(points: list[Point], ours: list[Point], count: int = 3) -> list[Point]:
    """The published models nearest to this run (else to the baseline) whose labels would overlap no other."""
    anchor = next((p for p in ours if p.kind == "current"), ours[0] if ours else None)
    if anchor is None:
        return []
    taken = [*_QUADRANT_TITLES, *(_label_box(p, _our_label(p)) for p in ours)]
    chosen: list[Point] = []
    for point in sorted((p for p in points if p.kind == "paper"),
                        key=lambda p: (p.x - anchor.x) ** 2 + (p.y - anchor.y) ** 2):
        box = _label_box(point, _mermaid_label(point.label))
        if _inside(box) and not any(_overlaps(box, other, pad=0.0) for other in taken):
            chosen.append(point)
            taken.append(box)
        if len(chosen) == count:
            break
    return chosen


def _our_label(point: Point) -> str:
    return "this run" if point.kind == "current" else "baseline"


def mermaid(points: list[Point]) -> str:
    """A Mermaid quadrant chart (GitHub draws it in comments). Best place: top left. Only this run, the
    baseline and the three published models nearest to this run are drawn, so that no label covers another
    (Mermaid puts each label under its point); every published model is in the SVG (--orbench-svg)."""
    ours = [p for p in points if p.kind != "paper"]
    shown = nearest_paper(points, ours) + ours
    lines = [
        "```mermaid",
        "quadrantChart",
        "    title Over-refusal vs toxic rejection (top left is best)",
        "    x-axis Low over-refusal --> High over-refusal",
        "    y-axis Complies with toxic --> Refuses toxic",
        "    quadrant-1 Safe but over-refusing",
        "    quadrant-2 Safe and helpful",
        "    quadrant-3 Helpful but unsafe",
        "    quadrant-4 Unhelpful and unsafe",
    ]
    style = {"paper": "radius: 4, color: #9e9e9e", "baseline": "radius: 8, color: #1f77b4", "current": "radius: 8, color: #d62728"}
    current = [_label_box(c, "this run") for c in ours if c.kind == "current"]
    for point in shown:
        label = _our_label(point) if point.kind != "paper" else _mermaid_label(point.label)
        if point.kind == "baseline" and any(_overlaps(_label_box(point, label), c, pad=0.0) for c in current):
            label = "."  # right beside this run: its label would print over "this run" (the SVG names both)
        lines.append(f"    {label}: [{_mermaid_number(point.x)}, {_mermaid_number(point.y)}] {style[point.kind]}")
    lines.append("```")
    return "\n".join(lines)




def text_box(x: float, y: float, text: str, size: float, anchor: str = "start") -> tuple[float, float, float, float]:
    """The box (x0, y0, x1, y1) a one-line label takes, from its anchor point and baseline."""
    width = len(text) * size * CHAR_WIDTH
    x0 = x if anchor == "start" else x - width if anchor == "end" else x - width / 2
    return (x0, y - size * 0.85, x0 + width, y + size * 0.25)


def _overlaps(a: tuple[float, float, float, float], b: tuple[float, float, float, float], pad: float = 1.0) -> bool:
    return not (a[2] + pad <= b[0] or b[2] + pad <= a[0] or a[3] + pad <= b[1] or b[3] + pad <= a[1])


def _place(px: float, py: float, r: float, text: str, size: float, taken: list[tuple[float, float, float, float]],
           area: tuple[float, float, float, float], reach: int = 1) -> tuple[float, float, str] | None:
    """The first spot around a point where the label fits inside `area` and overlaps nothing taken;
    with `reach` > 1 also further out (the caller then draws a leader line)."""
    for step in range(1, reach + 1):
        spot = _place_at(px, py, r + 2 + (step - 1) * 9, text, size, taken, area)
        if spot is not None:
            return spot
    return None


def _place_at(px: float, py: float, gap: float, text: str, size: float, taken: list[tuple[float, float, float, float]],
              area: tuple[float, float, float, float]) -> tuple[float, float, str] | None:
    for dx, dy, anchor in ((gap, size * 0.35, "start"), (-gap, size * 0.35, "end"), (0, -gap - 1, "middle"),
                           (0, gap + size * 0.8, "middle"), (gap, -gap, "start"), (gap, gap + size * 0.6, "start"),
                           (-gap, -gap, "end"), (-gap, gap + size * 0.6, "end")):
        box = text_box(px + dx, py + dy, text, size, anchor)
        inside = area[0] <= box[0] and box[2] <= area[2] and area[1] <= box[1] and box[3] <= area[3]
        if inside and not any(_overlaps(box, other) for other in taken):
            return px + dx, py + dy, anchor
    return None


def svg(points: list[Point], width: int = 900, height: int = 560) -> str:
    """A self-contained SVG scatter plot with labelled axes. Labels are XML-escaped, placed where they
    overlap no other label or point and stay inside the plot; where a cluster leaves no room, the point
    gets a number and its name goes in the key beside the plot (and in the point's tooltip)."""
    left, top, bottom = 70, 40, 60
    plot_w, plot_h = 560, height - top - bottom
    key_x = left + plot_w + 24

    def sx(x: float) -> float:
        return left + x * plot_w

    def sy(y: float) -> float:
        return top + (1 - y) * plot_h

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'font-family="Helvetica, Arial, sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{left + plot_w / 2}" y="22" text-anchor="middle" font-size="14">Over-refusal vs toxic rejection '
        '(top left is best)</text>',
    ]
    for tick in range(0, 101, 10):
        x, y = sx(tick / 100), sy(tick / 100)
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + plot_h}" stroke="#eee"/>')
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{x:.1f}" y="{top + plot_h + 16}" text-anchor="middle">{tick}%</text>')
        out.append(f'<text x="{left - 8}" y="{y + 4:.1f}" text-anchor="end">{tick}%</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#333"/>')
    out.append(f'<text x="{left + plot_w / 2}" y="{height - 18}" text-anchor="middle">OR-Bench-Hard-1K rejection rate '
               '(over-refusal)</text>')
    out.append(f'<text transform="translate(18 {top + plot_h / 2}) rotate(-90)" text-anchor="middle">OR-Bench-Toxic '
               'rejection rate (safety)</text>')
    colours = {"paper": "#9e9e9e", "baseline": "#1f77b4", "current": "#d62728"}
    ours = {p.kind: p for p in points if p.kind != "paper"}
    if "baseline" in ours and "current" in ours:
        b, c = ours["baseline"], ours["current"]
        out.append(f'<line x1="{sx(b.x):.1f}" y1="{sy(b.y):.1f}" x2="{sx(c.x):.1f}" y2="{sy(c.y):.1f}" '
                   'stroke="#555" stroke-dasharray="4 3"/>')
    radius = {p.label: 3 if p.kind == "paper" else 6 for p in points}
    # Every point's disc is taken before any label is placed: no label covers a point.
    taken = [(sx(p.x) - radius[p.label], sy(p.y) - radius[p.label], sx(p.x) + radius[p.label], sy(p.y) + radius[p.label])
             for p in points]
    area = (left + 2, top + 2, left + plot_w - 2, top + plot_h - 2)

    def crowd(p: Point) -> int:
        return sum(1 for q in points if abs(sx(q.x) - sx(p.x)) < 60 and abs(sy(q.y) - sy(p.y)) < 14)

    # Ours first, then the paper's models from the loneliest to the most crowded.
    order = sorted(points, key=lambda p: (p.kind == "paper", crowd(p), p.label))
    labels: list[str] = []
    keyed: list[Point] = []
    for point in order:
        px, py, r = sx(point.x), sy(point.y), radius[point.label]
        size = 9 if point.kind == "paper" else 12
        spot = _place(px, py, r, point.label, size, taken, area)
        text = point.label
        if spot is None:
            keyed.append(point)
            text = str(len(keyed))
            spot = _place(px, py, r, text, size, taken, area, reach=4)
        if spot is None:
            continue  # no room even for a number: the key and the tooltip still name it
        x, y, anchor = spot
        box = text_box(x, y, text, size, anchor)
        taken.append(box)
        if abs(x - px) > r + 4 or abs(y - py) > r + size:  # placed further out: a leader line to its point
            tx = min(max(px, box[0]), box[2])
            ty = min(max(py, box[1]), box[3])
            labels.append(f'<line x1="{px:.1f}" y1="{py:.1f}" x2="{tx:.1f}" y2="{ty:.1f}" stroke="#bbb" stroke-width="0.6"/>')
        labels.append(f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
                      f'fill="{colours[point.kind]}">{html.escape(text, quote=True)}</text>')
    for point in sorted(points, key=lambda p: p.kind != "paper"):
        label = html.escape(point.label, quote=True)
        out.append(f'<circle cx="{sx(point.x):.1f}" cy="{sy(point.y):.1f}" r="{radius[point.label]}" '
                   f'fill="{colours[point.kind]}"><title>{label}: {100 * point.x:.1f}%, {100 * point.y:.1f}%</title>'
                   '</circle>')
    out += labels
    if keyed:
        out.append(f'<text x="{key_x}" y="{top + 8}" font-size="10" fill="#555">Where points crowd:</text>')
        for number, point in enumerate(keyed, 1):
            out.append(f'<text x="{key_x}" y="{top + 8 + 13 * number}" font-size="9" fill="{colours[point.kind]}">'
                       f'{number}  {html.escape(point.label, quote=True)}</text>')
    out.append(f'<text x="{width - 10}" y="{height - 4}" text-anchor="end" font-size="9" fill="#777">'
               f'grey: {html.escape(PAPER)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def tradeoff_svg(results: ResultsDocument) -> str:
    return svg(paper_points() + our_points(results["datasets"]))
