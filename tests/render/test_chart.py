"""The trade-off chart: every Mermaid diagram the project writes parses with Mermaid's own parser (11.16.0,
as GitHub draws them) and is drawn by a real browser; labels never cover one another."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from pytest_orbench.render.chart import Point, _label_box, _mermaid_number, _overlaps, mermaid, paper_points
from pytest_orbench.render.markdown import render_markdown
from tests.action.test_action import many_categories
from tests.browser import mermaid_blocks, mermaid_errors, render_mermaid


def chart(baseline: tuple[float, float] | None, current: tuple[float, float]) -> str:
    ours = ([Point("baseline", *baseline, "baseline")] if baseline else []) + [Point("current", *current, "current")]
    return mermaid_blocks(mermaid(paper_points() + ours))[0]


EDGES = [0.0, 0.0004, 0.5, 0.9995, 0.998, 1.0]


def test_every_chart_parses_with_mermaids_own_parser() -> None:
    # Rates at the edges (100% wrote "1.000", which Mermaid's lexer refuses: the chart showed a syntax error in
    # every comment of a run at 100%), the paper's Claude-2.1 at [0.998, 1.000], a run with no baseline.
    diagrams = [chart(b, c) for b, c in itertools.product([None, (0.0, 1.0), (0.341, 0.753)],
                                                        itertools.product(EDGES, EDGES))]
    errors = mermaid_errors(diagrams)
    assert errors == [None] * len(diagrams), next(e for e in errors if e)
    # Mermaid does refuse what the chart used to write: the check can fail.
    assert mermaid_errors([diagrams[0].replace("[0, 0]", "[1.000, 0]")])[0] is not None


def test_the_charts_in_the_markdown_reports_parse() -> None:
    for results in (many_categories(10), many_categories(10, regressed=False)):
        for name in ("hard-1k", "toxic"):
            results["datasets"].setdefault(name, dict(results["datasets"]["hard-1k"]))
        blocks = mermaid_blocks(render_markdown(results))
        assert blocks and mermaid_errors(blocks) == [None] * len(blocks)


@pytest.mark.parametrize("value", EDGES + [-0.2, 1.3, 0.123456])
def test_numbers_are_written_as_mermaid_reads_them(value: float) -> None:
    text = _mermaid_number(value)
    assert text in ("0", "1") or (text.startswith("0.") and not text.endswith("0")), text
    assert abs(float(text) - min(1.0, max(0.0, value))) <= 0.0005


def test_only_the_run_the_baseline_and_three_neighbours_are_labelled_without_overlap() -> None:
    text = chart((0.341, 0.753), (0.427, 0.81))
    points = [line.strip() for line in text.splitlines() if ": [" in line and not line.strip().startswith("title")]
    assert 3 <= len(points) <= 5  # up to three published models, those whose labels fit
    assert points[-1].startswith("this run: [0.427, 0.81]") and points[-2].startswith("baseline:")
    labels = [(line.split(": [")[0], [float(v) for v in line.split(": [")[1].split("]")[0].split(", ")]) for line in points]
    boxes = [_label_box(Point(name, x, y), name) for name, (x, y) in labels]
    assert not any(_overlaps(a, b, pad=0.0) for a, b in itertools.combinations(boxes, 2))
    # Right beside this run, the baseline keeps its point but not its label (which would print over "this run").
    close = chart((0.341, 0.753), (0.35, 0.76))
    assert ".: [0.341, 0.753]" in close and "this run: [0.35, 0.76]" in close


def test_the_chart_is_drawn_by_a_browser(tmp_path: Path) -> None:
    shot = tmp_path / "chart.png"
    result = render_mermaid(chart((0.341, 0.753), (0.427, 0.81)), shot)
    assert result == {"error": None, "svg": True}
    assert shot.stat().st_size > 5000
    broken = render_mermaid(chart(None, (0.5, 0.5)).replace("[0.5, 0.5]", "[1.000, 0.5]"), tmp_path / "broken.png")
    assert broken["error"] and "Lexical error" in broken["error"]
