"""The trade-off view: Hard-1K rejection (x) against Toxic rejection (y), as Mermaid and as SVG."""

from __future__ import annotations

import csv
import html
import re
from dataclasses import dataclass
from pathlib import Path

PAPER_CSV = Path(__file__).parent / "data" / "or-bench-paper-results.csv"
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


def run_point(label: str, datasets: dict[str, dict[str, object]], kind: str, rate_key: str = "rejection_rate") -> Point | None:
    """A run's point, when it measured both Hard-1K and Toxic."""
    hard, toxic = datasets.get("hard-1k"), datasets.get("toxic")
    if not hard or not toxic or hard.get(rate_key) is None or toxic.get(rate_key) is None:
        return None
    return Point(label, float(hard[rate_key]), float(toxic[rate_key]), kind)  # type: ignore[arg-type]


def _mermaid_label(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9 .+-]", "", text)[:40] or "point"


def mermaid(points: list[Point]) -> str:
    """A Mermaid quadrant chart (GitHub draws it in comments). Best place: top left."""
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
    style = {"paper": "radius: 3, color: #9e9e9e", "baseline": "radius: 8, color: #1f77b4", "current": "radius: 8, color: #d62728"}
    for point in points:
        lines.append(f"    {_mermaid_label(point.label)}: [{point.x:.3f}, {point.y:.3f}] {style[point.kind]}")
    lines.append("```")
    return "\n".join(lines)


def svg(points: list[Point], width: int = 720, height: int = 540) -> str:
    """A self-contained SVG scatter plot with labelled axes; labels are XML-escaped."""
    left, right, top, bottom = 70, 20, 40, 60
    plot_w, plot_h = width - left - right, height - top - bottom

    def sx(x: float) -> float:
        return left + x * plot_w

    def sy(y: float) -> float:
        return top + (1 - y) * plot_h

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'font-family="Helvetica, Arial, sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2}" y="22" text-anchor="middle" font-size="14">Over-refusal vs toxic rejection (top left is best)</text>',
    ]
    for tick in range(0, 101, 10):
        x, y = sx(tick / 100), sy(tick / 100)
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + plot_h}" stroke="#eee"/>')
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{x:.1f}" y="{top + plot_h + 16}" text-anchor="middle">{tick}%</text>')
        out.append(f'<text x="{left - 8}" y="{y + 4:.1f}" text-anchor="end">{tick}%</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#333"/>')
    out.append(f'<text x="{left + plot_w / 2}" y="{height - 18}" text-anchor="middle">OR-Bench-Hard-1K rejection rate (over-refusal)</text>')
    out.append(f'<text transform="translate(18 {top + plot_h / 2}) rotate(-90)" text-anchor="middle">OR-Bench-Toxic rejection rate (safety)</text>')
    colours = {"paper": "#9e9e9e", "baseline": "#1f77b4", "current": "#d62728"}
    ours = {p.kind: p for p in points if p.kind != "paper"}
    if "baseline" in ours and "current" in ours:
        b, c = ours["baseline"], ours["current"]
        out.append(f'<line x1="{sx(b.x):.1f}" y1="{sy(b.y):.1f}" x2="{sx(c.x):.1f}" y2="{sy(c.y):.1f}" '
                   'stroke="#555" stroke-dasharray="4 3"/>')
    for point in sorted(points, key=lambda p: p.kind != "paper"):
        r = 3 if point.kind == "paper" else 6
        label = html.escape(point.label, quote=True)
        out.append(f'<circle cx="{sx(point.x):.1f}" cy="{sy(point.y):.1f}" r="{r}" fill="{colours[point.kind]}">'
                   f'<title>{label}: {100 * point.x:.1f}%, {100 * point.y:.1f}%</title></circle>')
        size = 9 if point.kind == "paper" else 12
        out.append(f'<text x="{sx(point.x) + r + 2:.1f}" y="{sy(point.y) + 3:.1f}" font-size="{size}" '
                   f'fill="{colours[point.kind]}">{label}</text>')
    out.append(f'<text x="{width - right}" y="{height - 4}" text-anchor="end" font-size="9" fill="#777">'
               f'grey: {html.escape(PAPER)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
