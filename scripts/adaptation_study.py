#!/usr/bin/env python3
"""How much k labels of a model's own replies buy the keyword judge, and how strongly to anchor it.

    python scripts/adaptation_study.py [--data F ...] [--json out.json] [--seeds 10]

For each source of the dev data held out in turn: the judge is trained on the other sources
(scripts/train_judge.py's `train`, leave-one-source-out), then k replies of the held-out source are
labelled (k = 25, 50, 100, 200; `--seeds` draws each) and the judge is adapted to them
(pytest_orbench.judging.adaptation.fit) for every anchoring strength of the grid. Measured on the rest of that
source: binary agreement and bias before and after. The strength that gains most on average, without
a loss for k >= 50 on any source, is the one to ship (adaptation.STRENGTH).

`--few`: what adapting on very few labels does (k = 1 to 50, `--seeds` random draws each, the shipped
strength), and what the checks of `adaptation.label_checks` would say of those draws: how often a draw has one
class only, how often true labels would be taken for inverted ones (never wanted), and how often the same
labels with refusal and compliance swapped are caught.

Two ways of drawing the k: at random, and as `orbench label` draws (half in proportion to the strata,
half from the replies the held-out-trained judge is unsure of). For the second, the audit's estimate
(cross-validated agreement on the k, weighted by stratum) is compared with the truth on the rest.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from train_judge import PROJECT, Data, train  # noqa: E402

from pytest_orbench.judging.adaptation import Example, cross_validated, fit  # noqa: E402
from pytest_orbench.judging.audit import figures  # noqa: E402
from pytest_orbench.judging.keyword_weights import RefusalModel  # noqa: E402
from pytest_orbench.judging.labels import Label  # noqa: E402
from pytest_orbench.tools.judge_eval import load_labeled  # noqa: E402
from pytest_orbench.tools.labeling import Candidate, draw  # noqa: E402

SHARED = ROOT.parent / "shared" / "judge-data"
DEFAULT_DATA = [SHARED / "refusal-dev.csv", SHARED / "refusal-dev-chatgpt.csv"]
KS = (25, 50, 100, 200)
STRENGTHS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0)


def score(model_intercept: float, weights: dict[str, float], features: frozenset[str]) -> float:
    import math

    z = model_intercept + sum(weights.get(f, 0.0) for f in features)
    return 1 / (1 + math.exp(-z)) if z > -700 else 0.0


def agreement_and_bias(intercept: float, weights: dict[str, float], rows: Sequence[Example],
                       threshold: float) -> tuple[float, float]:
    judged = [score(intercept, weights, e.features) >= threshold for e in rows]
    agree = sum(j == e.refused for j, e in zip(judged, rows)) / len(rows)
    bias = (sum(judged) - sum(e.refused for e in rows)) / len(rows)
    return agree, bias


def base_models(data: Data, cache: Path) -> dict[str, dict[str, Any]]:
    """The judge trained without each source (cached: training takes minutes)."""
    sources = sorted(set(data.source) - {PROJECT})
    digest = hashlib.sha256(json.dumps([(e.source, e.response, e.label) for e in data.examples]).encode()).hexdigest()[:12]
    path = cache / f"adaptation-bases-{digest}.json"
    if path.is_file():
        return json.loads(path.read_text())  # type: ignore[no-any-return]
    bases = {}
    for held in sources:
        print(f"training without {held} ...", file=sys.stderr, flush=True)
        bases[held] = train(data, [i for i, s in enumerate(data.source) if s != held])
    path.write_text(json.dumps(bases))
    return bases


def study(data: Data, bases: dict[str, dict[str, Any]], seeds: int) -> dict[str, Any]:
    out: dict[str, Any] = {"strengths": list(STRENGTHS), "ks": list(KS), "seeds": seeds, "sources": {}}
    for held, document in bases.items():
        base = RefusalModel.from_json(document)
        rows = [i for i, s in enumerate(data.source) if s == held]
        examples = {i: Example(frozenset(data.features[i]), bool(data.y[i])) for i in rows}
        before_all = agreement_and_bias(base.intercept, base.weights, [examples[i] for i in rows], base.threshold)
        per_source: dict[str, Any] = {"rows": len(rows), "base_agreement": before_all[0], "base_bias": before_all[1],
                                      "random": {}, "label_design": {}}
        low, high = base.band
        scores = {i: base.score(set(data.features[i])) for i in rows}
        for k in KS:
            if k >= len(rows) // 2:
                continue
            cells: dict[str, dict[float, list[tuple[float, float, float, float]]]] = {"random": {s: [] for s in STRENGTHS}}
            audits: list[tuple[float, float]] = []
            cells["label_design"] = {s: [] for s in STRENGTHS}
            for seed in range(seeds):
                rng = random.Random(f"{held}/{k}/{seed}")
                draws = {"random": rng.sample(rows, k)}
                pool = [Candidate(str(i), held, "", "", data.examples[i].prompt, data.examples[i].response, False,
                                  low <= scores[i] < high, scores[i] >= base.threshold) for i in rows]
                drawn = draw(pool, k, seed)
                draws["label_design"] = [int(c.id) for c, _, _ in drawn]
                strata = {int(c.id): (s, share) for c, s, share in drawn}
                for design, chosen in draws.items():
                    rest = [examples[i] for i in rows if i not in set(chosen)]
                    before = agreement_and_bias(base.intercept, base.weights, rest, base.threshold)
                    for strength in STRENGTHS:
                        intercept, weights = fit(base, [examples[i] for i in chosen], strength)
                        after = agreement_and_bias(intercept, weights, rest, base.threshold)
                        cells[design][strength].append((before[0], after[0], before[1], after[1]))
                # The audit's estimate of the adapted judge (label design, the shipped strength) against the truth.
                labels = [Label(data.examples[i].prompt, data.examples[i].response,
                                data.examples[i].label, stratum=strata[i][0], stratum_share=strata[i][1])
                          for i in draws["label_design"]]
                from pytest_orbench.judging.adaptation import STRENGTH

                cv = cross_validated(base, labels, STRENGTH)
                estimate = figures(labels, [p >= base.threshold for p in cv])["agreement"]["value"]
                intercept, weights = fit(base, [examples[i] for i in draws["label_design"]], STRENGTH)
                truth = agreement_and_bias(intercept, weights, [examples[i] for i in rows
                                                                if i not in set(draws["label_design"])], base.threshold)[0]
                audits.append((estimate, truth))
            for design, by_strength in cells.items():
                per_source[design][k] = {
                    str(strength): {
                        "before": statistics.mean(c[0] for c in cell), "after": statistics.mean(c[1] for c in cell),
                        "gain": statistics.mean(c[1] - c[0] for c in cell), "worst_gain": min(c[1] - c[0] for c in cell),
                        "abs_bias_before": statistics.mean(abs(c[2]) for c in cell),
                        "abs_bias_after": statistics.mean(abs(c[3]) for c in cell),
                    } for strength, cell in by_strength.items()}
            per_source["label_design"][k]["audit"] = {
                "mean_abs_error": statistics.mean(abs(e - t) for e, t in audits),
                "mean_error": statistics.mean(e - t for e, t in audits),
                "max_abs_error": max(abs(e - t) for e, t in audits)}
        out["sources"][held] = per_source
        print(f"done {held}", file=sys.stderr, flush=True)
    return out


FEW = (1, 5, 10, 20, 30, 40, 50)


def few(data: Data, bases: dict[str, dict[str, Any]], seeds: int) -> dict[str, Any]:
    """Adapting on k = 1..50 random labels of the held-out source, as labelled and swapped."""
    from pytest_orbench.judging.adaptation import STRENGTH, inversion

    out: dict[str, Any] = {}
    for held, document in bases.items():
        base = RefusalModel.from_json(document)
        rows = [i for i, s in enumerate(data.source) if s == held]
        examples = {i: Example(frozenset(data.features[i]), bool(data.y[i])) for i in rows}
        judged = {i: base.score(set(data.features[i])) >= base.threshold for i in rows}
        per_k: dict[str, Any] = {}
        for k in FEW:
            cells: list[dict[str, Any]] = []
            for seed in range(seeds):
                chosen = random.Random(f"few/{held}/{k}/{seed}").sample(rows, k)
                rest = [examples[i] for i in rows if i not in set(chosen)]
                before = agreement_and_bias(base.intercept, base.weights, rest, base.threshold)
                cell: dict[str, Any] = {"classes": len({examples[i].refused for i in chosen}), "before": before[0]}
                for name, swap in (("true", False), ("swapped", True)):
                    drawn = [Example(examples[i].features, examples[i].refused != swap) for i in chosen]
                    intercept, weights = fit(base, drawn, STRENGTH)
                    after = agreement_and_bias(intercept, weights, rest, base.threshold)
                    cell[name] = {"after": after[0], "abs_bias": abs(after[1]),
                                  "inverted": inversion([judged[i] for i in chosen], [e.refused for e in drawn])
                                  is not None}
                cells.append(cell)
            two = [c for c in cells if c["classes"] == 2]
            one = [c for c in cells if c["classes"] == 1]

            def gain(group: list[dict[str, Any]], name: str) -> dict[str, float] | None:
                if not group:
                    return None
                gains = [c[name]["after"] - c["before"] for c in group]
                return {"mean": statistics.mean(gains), "worst": min(gains),
                        "losses_over_1pp": sum(g < -0.01 for g in gains) / len(gains)}

            per_k[str(k)] = {
                "draws": len(cells), "one_class": len(one) / len(cells),
                "gain_two_classes": gain(two, "true"), "gain_one_class": gain(one, "true"),
                "gain_swapped": gain(cells, "swapped"),
                "true_called_inverted": sum(c["true"]["inverted"] for c in cells) / len(cells),
                "swapped_caught": sum(c["swapped"]["inverted"] for c in cells) / len(cells),
            }
        out[held] = {"rows": len(rows), "base_agreement": statistics.mean(judged[i] == bool(data.y[i]) for i in rows),
                     "k": per_k}
        print(f"done {held}", file=sys.stderr, flush=True)
    return out


def print_few(result: dict[str, Any]) -> None:
    def pp(value: float) -> str:
        return f"{100 * value:+.1f}"

    print("| held-out source | k | one class | gain, both classes (mean / worst / losses > 1 pp) | gain, one class "
          "(mean / worst) | gain, swapped labels | true labels called inverted | swapped labels caught |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|")
    for source, per_source in result.items():
        for k, cell in per_source["k"].items():
            two, one, swapped = cell["gain_two_classes"], cell["gain_one_class"], cell["gain_swapped"]
            print(f"| {source} | {k} | {100 * cell['one_class']:.0f}% | "
                  + (f"{pp(two['mean'])} / {pp(two['worst'])} / {100 * two['losses_over_1pp']:.0f}% | " if two else "- | ")
                  + (f"{pp(one['mean'])} / {pp(one['worst'])} | " if one else "- | ")
                  + f"{pp(swapped['mean'])} | {100 * cell['true_called_inverted']:.0f}% | "
                  f"{100 * cell['swapped_caught']:.0f}% |")


TIE = 0.001  # mean gains within 0.1 pp are a tie: the stronger pull towards the shipped weights is the safer


def choose(result: dict[str, Any], design: str = "random") -> float:
    """Among the strengths never worse on average for k >= 50 on any source, the strongest anchoring whose mean
    gain over sources and k is within TIE of the best."""
    means: dict[float, float] = {}
    for strength in STRENGTHS:
        gains, safe = [], True
        for per_source in result["sources"].values():
            for k, cell in per_source[design].items():
                figure = cell[str(strength)]
                gains.append(figure["gain"])
                if int(k) >= 50 and figure["gain"] < 0:
                    safe = False
        if safe:
            means[strength] = statistics.mean(gains)
    assert means, "no strength is safe for k >= 50"
    best = max(means.values())
    return max(strength for strength, mean in means.items() if mean >= best - TIE)


def print_table(result: dict[str, Any], strength: float) -> None:
    print(f"anchoring strength {strength:g} (chosen: the strongest within 0.1 pp of the best mean gain, never worse on "
          "average for k >= 50)")
    print("| held-out source | replies | k | shipped judge | adapted (random k) | gain | worst seed | |bias| before -> after "
          "| adapted (orbench label's draw) | audit error (mean abs / max) |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for source, per_source in result["sources"].items():
        for k, cell in per_source["random"].items():
            r = cell[str(strength)]
            d = per_source["label_design"][k][str(strength)]
            audit = per_source["label_design"][k]["audit"]
            print(f"| {source} | {per_source['rows']} | {k} | {100 * r['before']:.1f}% | {100 * r['after']:.1f}% | "
                  f"{100 * r['gain']:+.1f} pp | {100 * r['worst_gain']:+.1f} pp | {100 * r['abs_bias_before']:.1f} -> "
                  f"{100 * r['abs_bias_after']:.1f} pp | {100 * d['after']:.1f}% ({100 * d['gain']:+.1f} pp) | "
                  f"{100 * audit['mean_abs_error']:.1f} / {100 * audit['max_abs_error']:.1f} pp |")
    print()
    print("mean gain over every source, by k and strength (random k):")
    for strength in STRENGTHS:
        row = []
        for k in KS:
            gains = [p["random"][str(k) if str(k) in p["random"] else k][str(strength)]["gain"]
                     for p in result["sources"].values() if (str(k) in p["random"] or k in p["random"])]
            row.append(f"k={k}: {100 * statistics.mean(gains):+.1f}" if gains else f"k={k}: -")
        print(f"  strength {strength:>5g}: " + "  ".join(row))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", action="append", help="labelled replies with a source column (repeatable; default "
                        "../shared/judge-data/refusal-dev.csv and refusal-dev-chatgpt.csv)")
    parser.add_argument("--project", default=str(ROOT / "tests" / "data" / "judge-dev.csv"))
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--cache", default=os.environ.get("TMPDIR", "/tmp"), help="where the trained bases are cached")
    parser.add_argument("--json", help="write every figure here")
    parser.add_argument("--few", action="store_true", help="k = 1..50 labels: what adapting on so few does, and the "
                        "label checks (one class, inverted)")
    args = parser.parse_args(argv)
    paths = [Path(p) for p in (args.data or DEFAULT_DATA)]
    examples = [e for path in paths for e in load_labeled(path)]
    from dataclasses import replace

    project = [replace(e, source=PROJECT) for e in load_labeled(Path(args.project))]
    data = Data(examples + project)
    bases = base_models(data, Path(args.cache))
    if args.few:
        small = few(data, bases, args.seeds)
        print_few(small)
        if args.json:
            Path(args.json).write_text(json.dumps(small, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        return 0
    result = study(data, bases, args.seeds)
    # JSON keys are strings: normalise the k keys before choosing.
    result = json.loads(json.dumps(result))
    strength = choose(result)
    result["chosen_strength"] = strength
    print_table(result, strength)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
