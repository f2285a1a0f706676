#!/usr/bin/env python3
"""Train the keyword judge's weights from labelled replies, and measure it leave-one-source-out.

    python scripts/train_judge.py                      # fit on ../shared/judge-data/refusal-dev.csv,
                                                       # ../shared/judge-data/refusal-dev-chatgpt.csv and
                                                       # tests/data/judge-dev.csv, write the package's
                                                       # pytest_orbench/data/refusal-model.json
    python scripts/train_judge.py --loso [--json F]    # fit on all dev sources but one, measure on that one
    python scripts/train_judge.py --check              # retrain; exit 1 if the shipped weights differ
    python scripts/train_judge.py --data A.csv --data B.csv   # other labelled files (repeat --data)

Each labelled file needs prompt,response,label and a `source` column; the sources of all files are
pooled (each keeps its name; two files may not share one). The project's own trap replies
(`--project`, written for this project: caveats, sympathy, refusals mid-answer) are a further
source that is always in the training rows. Everything fitted here (which features are kept, their
weights, the L2 strength, the hybrid band) is chosen from the training rows only; in `--loso` the
held-out dev source is measured with the same figures as `orbench judge-eval` (binary agreement with
Wilson interval, Cohen's kappa, bias), and `tests/data/judge-holdout.csv`, never trained on, is
measured with the model fitted on everything.

Needs numpy and scipy (dependencies of the package); the judge itself reads the weights in pure Python.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

# The fits are small: BLAS threads would only spin beside the work (a quarter more CPU for --loso
# alone, more than twice as much beside other processes, as in the test suite). Set before numpy loads it.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from scipy import sparse  # noqa: E402
from scipy.optimize import minimize  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_orbench.core.jsonfile import write_atomic  # noqa: E402
from pytest_orbench.judging.keyword_features import features  # noqa: E402
from pytest_orbench.judging.keyword_judge import KeywordJudge  # noqa: E402
from pytest_orbench.judging.keyword_weights import MODEL_SCHEMA, RefusalModel, weights_digest  # noqa: E402
from pytest_orbench.judging.prefix_judge import PrefixJudge  # noqa: E402
from pytest_orbench.tools.judge_eval import Example, LabeledError, evaluate, judge_examples, load_labeled  # noqa: E402

DEFAULT_DATA = (ROOT.parent / "shared" / "judge-data" / "refusal-dev.csv",
                ROOT.parent / "shared" / "judge-data" / "refusal-dev-chatgpt.csv")
DEFAULT_OUT = ROOT / "pytest_orbench" / "data" / "refusal-model.json"
DEFAULT_PROJECT = ROOT / "tests" / "data" / "judge-dev.csv"
HOLDOUT = ROOT / "tests" / "data" / "judge-holdout.csv"
PROJECT = "project"  # the source name of the project's own trap replies
GENERATION = "12"  # bump when features() changes meaning; the weight digest covers retraining
L2_CANDIDATES = (50.0, 100.0, 300.0)  # chosen per fit by leave-one-source-out inside the training rows
# Candidates whose mean held-out accuracy is this close to the best count as tied, and the weakest penalty
# among them is taken: when the held-out sources cannot tell the penalties apart, the one that fits the
# labelled rows closest. (With four sources, 30 to 300 generalise within 0.2 pp of each other; 300, ahead
# by 0.1 pp, would cost rbr-gold 5 pp fitted against 50. 30, tried, breaks hand-written checks in
# tests/judging/test_keyword_judge.py: a sympathetic answer read as a deflection, a refusal followed by an answer decided
# without the LLM.)
L2_TOLERANCE = 0.005
MIN_ROWS = 3  # a feature must occur in this many training replies to get a weight
CV_FOLDS = 5
MAX_SENT = 0.30  # the hybrid band sends at most this share of any source to the LLM (cross-validated)
DECIMALS = 4  # weights are rounded, so a retrain on another machine gives the same file
SMALLEST = 0.002  # weights nearer zero than this are dropped: a smaller file, no measurable change


def refused(example: Example) -> int:
    return int(example.label != "compliance")


class Data:
    """Examples with their feature sets, computed once; the fits made of them, kept (--loso fits the same rows with
    the same L2 strength many times: choosing the L2 strength when each source is held out, and on everything)."""

    def __init__(self, examples: list[Example]) -> None:
        self.examples = examples
        self.features = [features(e.prompt, e.response) for e in examples]
        self.y = np.array([refused(e) for e in examples], dtype=float)
        self.source = [e.source or "-" for e in examples]
        # Every feature's column, in name order, and each reply's features as its columns in that order.
        self.names = sorted(set().union(*self.features))
        column = {f: j for j, f in enumerate(self.names)}
        self.columns = [np.array(sorted(column[f] for f in found), dtype=np.int64) for found in self.features]
        self.fits: dict[tuple[tuple[int, ...], float], tuple[float, dict[str, float]]] = {}


def _fit(data: Data, rows: Sequence[int], l2: float) -> tuple[float, dict[str, float]]:
    """L2-penalised logistic regression; every source weighs the same in total. The same rows and L2 strength give
    the same fit: made once."""
    key = (tuple(rows), l2)
    if key not in data.fits:
        data.fits[key] = _fit_once(data, rows, l2)
    return data.fits[key]


def _fit_once(data: Data, rows: Sequence[int], l2: float) -> tuple[float, dict[str, float]]:
    picked = [data.columns[i] for i in rows]
    found = np.concatenate(picked) if picked else np.zeros(0, dtype=np.int64)
    # The features of at least MIN_ROWS of these replies (a reply's features are a set: one count per reply),
    # numbered in name order.
    kept = np.bincount(found, minlength=len(data.names)) >= MIN_ROWS
    number = np.cumsum(kept) - 1
    names = [data.names[j] for j in np.flatnonzero(kept)]
    per_source = Counter(data.source[i] for i in rows)
    w = np.array([1000.0 / per_source[data.source[i]] for i in rows])
    row = np.repeat(np.arange(len(rows)), [len(p) for p in picked])
    cell = kept[found]
    x = sparse.csr_matrix((np.ones(int(cell.sum())), (row[cell], number[found[cell]])), shape=(len(rows), len(names)))
    y = data.y[list(rows)]

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        z = x @ theta[1:] + theta[0]
        p = 1 / (1 + np.exp(-z))
        value = -(w * (y * np.log(p + 1e-12) + (1 - y) * np.log(1 - p + 1e-12))).sum() + 0.5 * l2 * theta[1:] @ theta[1:]
        g = w * (p - y)
        return float(value), np.concatenate([[g.sum()], x.T @ g + l2 * theta[1:]])

    theta = minimize(loss, np.zeros(len(names) + 1), jac=True, method="L-BFGS-B",
                     options={"maxiter": 5000}).x
    weights = {f: round(float(theta[1 + j]), DECIMALS) for j, f in enumerate(names)}
    return round(float(theta[0]), DECIMALS), {f: v for f, v in weights.items() if abs(v) >= SMALLEST}


def _scores(data: Data, rows: Sequence[int], intercept: float, weights: dict[str, float]) -> np.ndarray:
    z = np.array([intercept + sum(weights.get(f, 0.0) for f in data.features[i]) for i in rows])
    scores: np.ndarray = 1 / (1 + np.exp(-z))
    return scores


def _choose_l2(data: Data, rows: Sequence[int]) -> float:
    """The L2 strength whose fits on the other training sources best predict each one (mean accuracy);
    among candidates within L2_TOLERANCE of the best, the smallest."""
    sources = sorted({data.source[i] for i in rows} - {PROJECT})  # measured on real replies only
    if len(sources) < 2:
        return L2_CANDIDATES[1]
    scores: dict[float, float] = {}
    for l2 in L2_CANDIDATES:
        accuracies = []
        for held in sources:
            train = [i for i in rows if data.source[i] != held]
            test = [i for i in rows if data.source[i] == held]
            b, wts = _fit(data, train, l2)
            accuracies.append(float(np.mean((_scores(data, test, b, wts) >= 0.5) == data.y[test])))
        scores[l2] = float(np.mean(accuracies))
    best = max(scores.values())
    return min(l2 for l2, score in scores.items() if score >= best - L2_TOLERANCE)


def _cross_validated(data: Data, rows: Sequence[int], l2: float) -> np.ndarray:
    """Out-of-fold scores for `rows` (folds interleaved within each source, deterministic)."""
    scores = np.zeros(len(rows))
    fold_of = {}
    for source in sorted({data.source[i] for i in rows}):
        mine = [i for i in rows if data.source[i] == source]
        order = sorted(mine, key=lambda i: hashlib.sha256(f"{data.examples[i].response}|{i}".encode()).hexdigest())
        fold_of.update({i: k % CV_FOLDS for k, i in enumerate(order)})
    position = {i: k for k, i in enumerate(rows)}
    for fold in range(CV_FOLDS):
        train = [i for i in rows if fold_of[i] != fold]
        test = [i for i in rows if fold_of[i] == fold]
        b, wts = _fit(data, train, l2)
        scores[[position[i] for i in test]] = _scores(data, test, b, wts)
    return scores


def _choose_band(data: Data, rows: Sequence[int], scores: np.ndarray) -> tuple[float, float]:
    """The band around the threshold that the hybrid judge sends to the LLM.

    On cross-validated scores: among bands that send at most MAX_SENT of every source of real replies,
    the one whose decided replies agree best in the worst such source (ties: the narrower band)."""
    y = data.y[list(rows)]
    sources = np.array([data.source[i] for i in rows])
    masks = [sources == s for s in sorted(set(sources) - {PROJECT})]  # real replies, not the hand-written traps
    best: tuple[float, float, float, float] | None = None
    grid = [round(float(v), 2) for v in np.arange(0.02, 0.51, 0.01)]
    for low in grid:
        for high in [round(1 - v, 2) for v in grid]:
            decided = (scores < low) | (scores >= high)
            sent = max(1 - (decided & m).sum() / m.sum() for m in masks)
            if sent > MAX_SENT:
                continue
            worst = min(float(np.mean((scores[d] >= 0.5) == y[d])) if d.sum() else 1.0
                        for d in (decided & m for m in masks))
            if best is None or (worst, -sent) > (best[0], -best[1]):
                best = (worst, sent, low, high)
    return (best[2], best[3]) if best else (0.5, 0.5)


def train(data: Data, rows: Sequence[int]) -> dict[str, Any]:
    """A model document fitted on `rows` only."""
    l2 = _choose_l2(data, rows)
    intercept, weights = _fit(data, rows, l2)
    band = _choose_band(data, rows, _cross_validated(data, rows, l2))
    per_source = Counter(data.source[i] for i in rows)
    document: dict[str, Any] = {
        "schema": MODEL_SCHEMA,
        "generation": GENERATION,
        "trained_on": {"rows": dict(sorted(per_source.items())), "l2": l2, "min_rows": MIN_ROWS,
                       "cv_folds": CV_FOLDS, "band_max_sent": MAX_SENT},
        "threshold": 0.5,
        "band": list(band),
        "intercept": intercept,
        "weights": dict(sorted(weights.items())),
    }
    document["digest"] = weights_digest(document)
    return document


def _figures(examples: list[Example], judge: Any) -> dict[str, Any]:
    judgements = judge_examples(judge, examples)
    result = evaluate(examples, judgements, judge.meta())
    confident = [j for j in judgements if not isinstance(j, str) and j.verdict.refused is not None and j.confident]
    right = sum(1 for e, j in zip(examples, judgements)
                if not isinstance(j, str) and j.confident and j.verdict.refused is not None
                and bool(j.verdict.refused) == bool(refused(e)))
    return {
        "rows": len(examples),
        "binary_agreement": result["binary_agreement"],
        "kappa_binary": result["kappa"]["binary"],
        "bias": result["bias"],
        "three_class_agreement": result["three_class_agreement"],
        "hybrid": {"sent_to_llm": 1 - len(confident) / len(examples),
                   "decided_agreement": right / len(confident) if confident else None},
    }


def loso(data: Data) -> dict[str, Any]:
    """Fit on all sources but one, measure on that one; the prefix list beside it."""
    report: dict[str, Any] = {"method": "leave-one-source-out", "sources": {}}
    for held in sorted(set(data.source) - {PROJECT}):
        train_rows = [i for i, s in enumerate(data.source) if s != held]
        test = [data.examples[i] for i, s in enumerate(data.source) if s == held]
        document = train(data, train_rows)
        judge = KeywordJudge(RefusalModel.from_json(document))
        report["sources"][held] = {
            "keyword": _figures(test, judge),
            "prefix": _figures(test, PrefixJudge()),
            "trained_on": document["trained_on"],
            "band": document["band"],
        }
    everything = RefusalModel.from_json(train(data, list(range(len(data.examples)))))
    holdout = [replace(e, source="holdout") for e in load_labeled(HOLDOUT)]
    report["holdout"] = {"file": str(HOLDOUT.relative_to(ROOT)), "keyword": _figures(holdout, KeywordJudge(everything)),
                         "prefix": _figures(holdout, PrefixJudge())}
    return report


def _pct(figure: dict[str, Any]) -> str:
    lo, hi = figure["ci95"]
    return f"{100 * figure['value']:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}]"


def print_loso(report: dict[str, Any]) -> None:
    print("leave-one-source-out: fitted on the other sources, measured on this one")
    head = (f"{'source':<20} {'rows':>5}  {'keyword agreement':<22} {'kappa':>6} {'bias':>8}  "
            f"{'hybrid: sent':>12} {'decided agree':>13}  {'prefix agreement':<22} {'prefix bias':>11}")
    print(head)
    rows = [(s, f) for s, f in report["sources"].items()]
    rows.append((f"holdout ({report['holdout']['file']}, never trained on)", report["holdout"]))
    for source, fig in rows:
        k, p = fig["keyword"], fig["prefix"]
        decided = k["hybrid"]["decided_agreement"]
        print(f"{source:<20} {k['rows']:>5}  {_pct(k['binary_agreement']):<22} {k['kappa_binary']['value']:>6.3f} "
              f"{100 * k['bias']['value']:>+7.1f}pp  {100 * k['hybrid']['sent_to_llm']:>11.1f}% "
              f"{'n/a' if decided is None else f'{100 * decided:.1f}%':>13}  {_pct(p['binary_agreement']):<22} "
              f"{100 * p['bias']['value']:>+9.1f}pp")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_sources(paths: Sequence[Path]) -> tuple[list[Example], dict[str, dict[str, Any]]]:
    """The labelled rows of every file, pooled, and per file its sha256 and rows per source.

    LabeledError when a file is missing or unreadable, has rows without a source (or named PROJECT),
    or shares a source name with another file (their rows would be weighed and held out as one)."""
    examples: list[Example] = []
    files: dict[str, dict[str, Any]] = {}
    owner: dict[str, Path] = {}
    for path in paths:
        if not path.is_file():
            raise LabeledError(f"no labelled file at {path}; pass --data PATH (a CSV with source,prompt,response,label)")
        rows = load_labeled(path)
        sources = Counter(e.source for e in rows)
        if "" in sources or PROJECT in sources:
            raise LabeledError(f"{path} has rows without a source (or named {PROJECT!r}); the fit weighs sources "
                               "equally and --loso holds one out")
        shared = sorted(s for s in sources if s in owner)
        if shared:
            raise LabeledError(f"{path} and {owner[shared[0]]} share the source {', '.join(map(repr, shared))}; "
                               "each source must come from one file (rename it in one of them)")
        owner.update({s: path for s in sources})
        if path.name in files:
            raise LabeledError(f"two labelled files are named {path.name}; rename one")
        files[path.name] = {"sha256": _sha256(path), "rows": dict(sorted(sources.items()))}
        examples.extend(rows)
    return examples, files


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", action="append",
                        help="labelled replies with a source column; repeat for several files, whose sources are "
                             f"pooled (default: {' and '.join(str(p) for p in DEFAULT_DATA)})")
    parser.add_argument("--project", default=str(DEFAULT_PROJECT),
                        help="the project's own trap replies, always trained on (default tests/data/judge-dev.csv)")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="where to write the model (default: the package data)")
    parser.add_argument("--loso", action="store_true", help="measure leave-one-source-out instead of writing the model")
    parser.add_argument("--check", action="store_true", help="retrain and compare with --out; exit 1 when they differ")
    parser.add_argument("--json", help="with --loso: write the figures here")
    args = parser.parse_args(argv)
    paths = [Path(p) for p in (args.data or DEFAULT_DATA)]
    try:
        examples, files = load_sources(paths)
        project = [replace(e, source=PROJECT) for e in load_labeled(Path(args.project))]
    except LabeledError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sources = Counter(e.source for e in examples)
    data = Data(examples + project)
    names = " + ".join(files)
    if args.loso:
        if len(sources) < 2:
            print("error: --loso needs at least two sources", file=sys.stderr)
            return 2
        report = loso(data)
        report["data"] = {"files": files, "rows": dict(sorted(sources.items()))}
        print_loso(report)
        if args.json:
            write_atomic(Path(args.json), json.dumps(report, indent=2, sort_keys=True) + "\n")
            print(f"wrote {args.json}")
        return 0
    document = train(data, list(range(len(data.examples))))
    document["trained_on"]["data_sha256"] = {name: f["sha256"] for name, f in files.items()}
    document["trained_on"]["project_sha256"] = _sha256(Path(args.project))
    text = json.dumps(document, indent=1, sort_keys=True) + "\n"
    out = Path(args.out)
    if args.check:
        same = out.is_file() and json.loads(out.read_text(encoding="utf-8"))["digest"] == document["digest"]
        print(f"{out}: {'matches' if same else 'differs from'} a retrain on {names} (digest {document['digest']})")
        return 0 if same else 1
    write_atomic(out, text)
    print(f"wrote {out}: {len(document['weights'])} weights, l2 {document['trained_on']['l2']:g}, "
          f"band {document['band']}, judge version {GENERATION}.{document['digest']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
