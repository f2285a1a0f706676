"""Adapting the keyword judge to labels: time and peak memory of reading them into features, of the fit and of
the audit's ten cross-validation folds, by number of labels. Prints a Markdown table.

    python benchmarks/adaptation.py [--sizes 100,2000,10000,100000] [--labels FILE] [--before] [--timeout 900]

The labelled replies are made up from the project's own labelled replies (tests/data/judge-dev.csv) and, when
$ORBENCH_DATA_DIR holds it, OR-Bench-Hard-1K's prompts: each reply is the opening of one labelled reply (whose
label it takes) followed by up to five sentences drawn from all of them, so that the replies differ and their
features grow with their number as real ones do. `--labels FILE` draws from another labels CSV instead (the
dev data of docs/judges.md, say; nothing of it is written anywhere).

Each size runs in a process of its own: its peak RSS (ru_maxrss) is that size's, and "added" is the peak less
the RSS once the labels were made. `--before` also fits with adaptation.py as of 59d4887 (an n x n solve per
Newton step) in a process limited to 4 GiB of address space and --timeout seconds, and reports how far its
weights are from today's where it finishes. Times are wall-clock seconds, CPU seconds in brackets: this VM is
shared, so read the CPU time.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import re
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
BEFORE = "59d4887"  # the commit before issue 41's fit
SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


def material(labels: Path) -> tuple[list[tuple[str, str, str]], list[str]]:
    """(prompt, reply, label) rows to open replies with, and sentences to continue them."""
    from pytest_orbench.judging.labels import load_labels

    rows = [(r.prompt, r.response, r.label) for r in load_labels(labels) if r.label]
    sentences = [s for _, reply, _ in rows for s in SENTENCE.split(reply) if s.strip()]
    data_dir = os.environ.get("ORBENCH_DATA_DIR")
    hard = Path(data_dir) / "or-bench-hard-1k.csv" if data_dir else None
    if hard is not None and hard.is_file():
        with hard.open(encoding="utf-8", newline="") as fh:
            sentences += [r["prompt"] for r in csv.DictReader(fh) if r.get("prompt")]
    return rows, sentences


def made_up(rows: list[tuple[str, str, str]], sentences: list[str], n: int, seed: int = 0) -> list[Any]:
    from pytest_orbench.judging.labels import Label

    rng = random.Random(seed)
    out = []
    for i in range(n):
        prompt, reply, label = rng.choice(rows)
        own = [s for s in SENTENCE.split(reply) if s.strip()]
        rest = own[1:rng.randint(1, len(own))] + rng.sample(sentences, rng.randint(0, 5))
        rng.shuffle(rest)
        out.append(Label(f"{prompt} ({i})", " ".join([own[0], *rest]), label))
    return out


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def since(start: tuple[float, float]) -> list[float]:
    wall, cpu = clock()
    return [round(wall - start[0], 2), round(cpu - start[1], 2)]


def child(n: int, labels: Path, before: bool) -> dict[str, Any]:
    from pytest_orbench.judging import adaptation
    from pytest_orbench.judging.keyword_weights import load_model

    rows, sentences = material(labels)
    chosen = made_up(rows, sentences, n)
    base = load_model()
    made = rss_mib()
    out: dict[str, Any] = {"n": n, "rss_labels_mib": round(made, 1)}
    if before:
        # The fit of 59d4887 on the same replies' features (read here, not timed).
        import importlib.util
        import tempfile

        source = subprocess.run(["git", "show", f"{BEFORE}:pytest_orbench/judging/adaptation.py"], cwd=REPO,
                                capture_output=True, text=True, check=True).stdout
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as fh:
            fh.write(source)
        spec = importlib.util.spec_from_file_location("adaptation_before", fh.name)
        assert spec is not None and spec.loader is not None
        old = importlib.util.module_from_spec(spec)
        sys.modules["adaptation_before"] = old  # (its dataclasses look their module up)
        spec.loader.exec_module(old)
        examples = old.examples_of(chosen)
        made = rss_mib()
        start = clock()
        try:
            intercept, weights = old.fit(base, examples)
        except MemoryError as exc:
            out["before"] = {"error": f"MemoryError {exc}"[:120]}
        else:
            out["before"] = {"fit_s": since(start), "peak_mib": round(rss_mib(), 1), "added_mib": round(rss_mib() - made, 1)}
            now = adaptation.fit(base, [adaptation.Example(e.features, e.refused) for e in examples])
            out["before"]["max_weight_difference"] = max(
                [abs(intercept - now[0])] + [abs(w - now[1][f]) for f, w in weights.items()])
        return out
    start = clock()
    design = adaptation.labels_design(chosen)
    out["read_s"] = since(start)
    out["features"], out["nonzeros"] = len(design.vocabulary), int(design.matrix.nnz)
    start = clock()
    adaptation._fitted(base, design, adaptation.STRENGTH)
    out["fit_s"] = since(start)
    start = clock()
    adaptation.cross_validated(base, chosen)
    out["audit_s"] = since(start)
    out["peak_mib"] = round(rss_mib(), 1)
    out["added_mib"] = round(rss_mib() - made, 1)
    return out


def run_child(n: int, labels: Path, before: bool, timeout: float) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", str(n), "--labels", str(labels)] + (["--before"] if before else [])
    limit = (lambda: resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))) if before else None
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, preexec_fn=limit)
    except subprocess.TimeoutExpired:
        return {"n": n, "before": {"error": f"no result after {timeout:g} s"}} if before else {"n": n, "error": "timeout"}
    if done.returncode:
        tail = (done.stderr.strip().splitlines() or ["?"])[-1][:120]
        return {"n": n, "before": {"error": tail}} if before else {"n": n, "error": tail}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def seconds(pair: list[float] | None) -> str:
    return "" if not pair else f"{pair[0]:.2f} ({pair[1]:.2f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100,2000,10000,100000")
    parser.add_argument("--labels", default=str(REPO / "tests" / "data" / "judge-dev.csv"))
    parser.add_argument("--before", action="store_true", help=f"also fit with the adaptation.py of {BEFORE}")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per size and fit before giving up")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, Path(args.labels), args.before)))
        return 0
    print("| labels | features | nonzeros | read into features s | fit s | audit (10 folds) s | peak RSS MiB "
          "| added MiB |" + (f" {BEFORE}'s fit s | its added MiB | max weight difference |" if args.before else ""))
    print("|--:|--:|--:|--:|--:|--:|--:|--:|" + ("--|--:|--:|" if args.before else ""))
    for n in (int(s) for s in args.sizes.split(",")):
        now = run_child(n, Path(args.labels), False, args.timeout)
        print(json.dumps(now), file=sys.stderr, flush=True)
        row = (f"| {n:,} | {now.get('features', '')} | {now.get('nonzeros', '')} | {seconds(now.get('read_s'))} | "
               f"{seconds(now.get('fit_s'))} | {seconds(now.get('audit_s'))} | {now.get('peak_mib', now.get('error', ''))} | "
               f"{now.get('added_mib', '')} |")
        if args.before:
            old = run_child(n, Path(args.labels), True, args.timeout)["before"]
            print(json.dumps(old), file=sys.stderr, flush=True)
            difference = old.get("max_weight_difference")
            row += (f" {seconds(old.get('fit_s')) or old.get('error', '')} | {old.get('added_mib', '')} | "
                    f"{'' if difference is None else f'{difference:.1e}'} |")
        print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
