#!/usr/bin/env python3
"""How often honest labels contradict the shipped keyword judge's confident verdicts: the measurement behind
`adaptation.contradicted` (labels that read one kind of reply the other way round are refused).

    python scripts/contradiction_study.py [--data F ...] [--draws 5000] [--json out.json]

For each source of the dev data held out in turn, the judge trained on the other sources (as
scripts/adaptation_study.py, cached) scores the held-out replies: a new model's replies, as the shipped judge
meets them. Within the judge's confident band (P(refusal) below its low edge: a sure answer; at or above its high
edge: a sure refusal), the share people labelled the other way round, per source, per model (where the row id
names one: `dna:<model>:n`, `orfuzz:n:<model>`) and per stratum of confidence. Then label files as a team makes
them: `--draws` random draws of 30 to 400 rows of one model, and the 99% Wilson lower bound of the contradicted
share of each kind, the figure the check reads: its highest value over every draw is what honest labels reach.
The shipped judge on its own training rows is shown beside (in sample: far fewer contradictions).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from adaptation_study import DEFAULT_DATA, base_models  # noqa: E402
from train_judge import PROJECT, Data  # noqa: E402

from pytest_orbench.core.stats import wilson  # noqa: E402
from pytest_orbench.judging.adaptation import CONTRADICTED, CONTRADICTED_MANY, MANY, Z99  # noqa: E402
from pytest_orbench.judging.keyword_weights import RefusalModel, load_model  # noqa: E402
from pytest_orbench.tools.judge_eval import load_labeled  # noqa: E402

SIZES = (30, 50, 100, 200, 400)
# Strata of confidence: sure answers up to the band's low edge, sure refusals from its high edge.
ANSWER_STRATA = ((0.0, 0.01), (0.01, 0.10), (0.10, 1.0))
REFUSAL_STRATA = ((0.0, 0.95), (0.95, 0.99), (0.99, 1.01))


def model_of(source: str, row_id: str) -> str:
    parts = row_id.split(":")
    if row_id.startswith("dna:") and len(parts) > 2:
        return parts[1]
    if row_id.startswith("orfuzz:") and len(parts) > 2:
        return parts[2]
    return source


def ids_of(paths: list[Path]) -> list[str]:
    ids: list[str] = []
    for path in paths:
        with path.open(encoding="utf-8", newline="") as fh:
            ids += [row.get("id") or "" for row in csv.DictReader(fh)]
    return ids


def kinds(p: Any, refused: Any, band: tuple[float, float]) -> tuple[Any, Any, Any, Any]:
    """(sure refusals, those labelled compliance, sure answers, those labelled refusal) as boolean arrays."""
    low, high = band
    sure_refusal, sure_answer = p >= high, p < low
    return sure_refusal, sure_refusal & ~refused, sure_answer, sure_answer & refused


def lower(k: int, n: int) -> float:
    return wilson(k, n, Z99)[0] if n else 0.0


def measure(data: Data, groups: list[str], bases: dict[str, dict[str, Any]], draws: int) -> dict[str, Any]:
    import numpy as np

    shipped = load_model()
    rng = np.random.default_rng(41)
    out: dict[str, Any] = {"limit": CONTRADICTED, "many": [MANY, CONTRADICTED_MANY], "z": Z99, "sources": {}}
    plenty: list[Any] = [0.0, None]  # the highest bound of a kind with at least MANY sure replies in a draw, and where
    for held, document in bases.items():
        rows = [i for i, s in enumerate(data.source) if s == held]
        refused = data.y[rows].astype(bool)
        per: dict[str, Any] = {}
        for name, model in (("held_out", RefusalModel.from_json(document)), ("shipped", shipped)):
            p = np.array([model.score(set(data.features[i])) for i in rows])
            band = model.band if name == "held_out" else shipped.band
            low, high = band
            strata = []
            for a, b in ANSWER_STRATA + REFUSAL_STRATA:
                answers = (a, b) in ANSWER_STRATA
                a, b = (a, min(b, low)) if answers else (max(a, high), b)
                mask = (p >= a) & (p < b)
                against = refused[mask] if answers else ~refused[mask]
                strata.append({"from": a, "to": min(b, 1.0), "rows": int(mask.sum()), "contradicted": int(against.sum())})
            models: dict[str, Any] = {}
            for m in sorted({groups[i] for i in rows}) + ["(all)"]:
                sel = np.array([m == "(all)" or groups[i] == m for i in rows])
                sr, c1, sa, c2 = kinds(p[sel], refused[sel], band)
                entry = {"rows": int(sel.sum()), "sure_refusals": int(sr.sum()), "labelled_compliance": int(c1.sum()),
                         "sure_answers": int(sa.sum()), "labelled_refusal": int(c2.sum()),
                         "bound": max(lower(int(c1.sum()), int(sr.sum())), lower(int(c2.sum()), int(sa.sum())))}
                if name == "held_out" and m != "(all)":
                    highest = {}
                    for size in SIZES:
                        if size >= sel.sum():
                            continue
                        picks = np.argsort(rng.random((draws, int(sel.sum()))), axis=1)[:, :size]
                        for n, k in ((x[picks].sum(1), y[picks].sum(1)) for x, y in ((sr, c1), (sa, c2))):
                            bounds = [lower(int(a), int(b)) for a, b in zip(k, n)]
                            highest[str(size)] = max(highest.get(str(size), 0.0), *bounds)
                            many = [b for b, m in zip(bounds, n) if m >= MANY]
                            if many and max(many) > plenty[0]:
                                i = int(np.argmax([b if m >= MANY else -1 for b, m in zip(bounds, n)]))
                                plenty[:] = [max(many), f"{m}: {int(k[i])} of {int(n[i])} (a draw of {size})"]
                    entry["draws_highest_bound"] = highest
                models[m] = entry
            per[name] = {"band": list(band), "strata": strata, "models": models}
        out["sources"][held] = per
        print(f"done {held}", file=sys.stderr, flush=True)
    out["highest_of_many"] = plenty
    return out


def pct(k: int, n: int) -> str:
    return f"{k}/{n} ({100 * k / n:.1f}%)" if n else "-"


def print_report(result: dict[str, Any]) -> None:
    print(f"refused when the 99% lower bound of one kind's contradicted share is above {100 * result['limit']:.0f}%, "
          f"or above {100 * result['many'][1]:.0f}% with at least {result['many'][0]} of that kind labelled")
    print("| source | model | judge | sure refusals labelled compliance | sure answers labelled refusal | 99% bound | "
          "highest bound of draws of 30 / 50 / 100 / 200 / 400 |")
    print("|---|---|---|--:|--:|--:|--:|")
    highest = 0.0
    for source, per in result["sources"].items():
        for name in ("held_out", "shipped"):
            for m, e in per[name]["models"].items():
                draws = e.get("draws_highest_bound", {})
                highest = max([highest, *draws.values(), e["bound"]])
                shown = " / ".join(f"{100 * draws[str(s)]:.1f}" if str(s) in draws else "-" for s in SIZES)
                print(f"| {source} | {m} | {name.replace('_', '-')} | {pct(e['labelled_compliance'], e['sure_refusals'])} "
                      f"| {pct(e['labelled_refusal'], e['sure_answers'])} | {100 * e['bound']:.1f}% | "
                      f"{shown if draws else ''} |")
    print(f"\nhighest 99% bound of honest labels: {100 * highest:.1f}% (limit {100 * result['limit']:.0f}%: margin "
          f"{100 * (result['limit'] - highest):.1f} pp)")
    many, limit = result["many"]
    bound, where = result["highest_of_many"]
    print(f"of a kind with at least {many} sure replies labelled: {100 * bound:.1f}% ({where}; limit {100 * limit:.0f}%: "
          f"margin {100 * (limit - bound):.1f} pp)")
    print("\nby stratum of confidence (judge trained without the source): contradicted / rows")
    for source, per in result["sources"].items():
        cells = [f"[{s['from']:.2f}, {s['to']:.2f}): {pct(s['contradicted'], s['rows'])}" for s in per["held_out"]["strata"]]
        print(f"  {source}: " + "; ".join(cells))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", action="append", help="labelled replies with a source column (repeatable)")
    parser.add_argument("--project", default=str(ROOT / "tests" / "data" / "judge-dev.csv"))
    parser.add_argument("--draws", type=int, default=5000, help="random label files per model and size")
    parser.add_argument("--cache", default=os.environ.get("TMPDIR", "/tmp"), help="where the trained bases are cached")
    parser.add_argument("--json", help="write every figure here")
    args = parser.parse_args(argv)
    paths = [Path(p) for p in (args.data or DEFAULT_DATA)]
    examples = [e for path in paths for e in load_labeled(path)]
    ids = ids_of(paths)
    assert len(ids) == len(examples), "every labelled row is read (ids and rows align)"
    project = [replace(e, source=PROJECT) for e in load_labeled(Path(args.project))]
    data = Data(examples + project)
    groups = [f"{e.source}/{model_of(e.source, i)}" for e, i in zip(examples, ids)] + [PROJECT] * len(project)
    result = measure(data, groups, base_models(data, Path(args.cache)), args.draws)
    print_report(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
