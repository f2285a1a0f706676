"""`orbench tradeoff`: the Spearman correlation of over-refusal and toxic rejection across runs' files."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pytest_orbench.tools.cli.option_checks import fail


def run(args: argparse.Namespace) -> int:
    from pytest_orbench.core.jsonfile import read_json
    from pytest_orbench.core.stats import spearman
    from pytest_orbench.render.chart import paper_points, run_point

    folder = Path(args.folder)
    if not folder.is_dir():
        return fail(f"{folder} is not a folder of baseline or results files")
    points = []
    skipped: list[str] = []
    seen: dict[str, str] = {}  # one run's identity -> the file that counted it
    for path in sorted(folder.glob("*.json")):
        try:
            data = read_json(path)
        except (ValueError, OSError) as exc:
            skipped.append(f"{path.name} (not a JSON object: {str(exc).splitlines()[0][:80]})")
            continue
        datasets = data.get("datasets")
        rates = [_rate(datasets, name) for name in ("hard-1k", "toxic")] if isinstance(datasets, dict) else [None]
        if any(isinstance(rate, str) for rate in rates):
            skipped.append(f"{path.name} ({next(rate for rate in rates if isinstance(rate, str))})")
            continue
        point = run_point(path.stem, datasets, "current") if isinstance(datasets, dict) else None
        if point is None:
            skipped.append(f"{path.name} (no hard-1k and toxic rejection rates)")
            continue
        # A run's results file and the baseline written from it are one run: counted twice they would
        # add a point that agrees with itself.
        run = data.get("run")
        if isinstance(run, dict):
            identity = json.dumps([run.get(k) for k in ("endpoint", "system_prompt_sha256", "params", "revision", "seed",
                                                        "sample", "judge")] + [run.get("trials") or 1, point.x, point.y],
                                  sort_keys=True, default=str)
            if identity in seen:
                skipped.append(f"{path.name} (the same run as {seen[identity]}: counted once)")
                continue
            seen[identity] = path.name
        points.append(point)
    if skipped:
        print(f"skipped: {'; '.join(skipped)}", file=sys.stderr)
    if args.paper:
        points += paper_points()
    print(f"{'run':40} {'hard-1k rejection':>18} {'toxic rejection':>16}")
    for point in points:
        print(f"{point.label[:40]:40} {100 * point.x:17.1f}% {100 * point.y:15.1f}%")
    if len(points) < 3:
        return fail(f"found {len(points)} runs with both hard-1k and toxic in {folder}; Spearman needs at least 3")
    try:
        rho, p = spearman([pt.x for pt in points], [pt.y for pt in points])
    except ValueError as exc:  # every run at one rate: no ranking to correlate
        return fail(f"{exc} ({len(points)} runs in {folder}): add runs that differ, or --paper")
    print(f"Spearman correlation of over-refusal and toxic rejection over {len(points)} runs: {rho:.2f} (p = {p:.2g})")
    print("(the OR-Bench paper reports 0.89 over 32 models: safer models also over-refuse more)")
    return 0


def _rate(datasets: dict[str, object], name: str) -> str | None:
    """Why a dataset's rejection rate cannot be used (a string), or None (a rate from 0 to 1, or none at all)."""
    section = datasets.get(name)
    rate = section.get("rejection_rate") if isinstance(section, dict) else None
    if rate is None:
        return None
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:  # NaN fails 0 <= rate
        return f"{name} rejection rate {str(rate)[:20]!r} is not a number from 0 to 1"
    return None
