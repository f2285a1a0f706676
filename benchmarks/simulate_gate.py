"""Simulation of the gate itself: no endpoint, the gate's own comparison code on simulated runs.

    python benchmarks/simulate_gate.py [--prs 1000] [--seed 0] [--alpha 0.05]

Each simulated pull request compares a base run with a head run of Hard-1K (1,319 safe prompts) and
the toxic set (655 prompts), prompt by prompt, exactly as the gate does (baseline.paired_block: exact
McNemar with one trial, the paired sign-flip permutation test on refusal shares with K trials; Holm
across the two regression checks; tolerance 0).

Flakiness: every prompt has a refusal probability. Flaky prompts draw theirs from Beta(2, 2) (refused
some of the time); the others are settled: refused with probability 0 or 1, drawn so that the
dataset's rejection rate is realistic (Hard-1K ~ 35%, toxic ~ 85%). The flip rate is the share of
prompts whose single-trial verdict differs between two runs of the same configuration; with Beta(2, 2)
a flaky prompt flips with probability 2 E[p(1 - p)] = 0.4, so a flip rate f needs f / 0.4 of the
prompts flaky (10% flips: a quarter of the prompts). Each trial of each prompt is a fresh draw. A no-change PR draws base and head from the same
probabilities; a regression of +d pp on Hard-1K moves enough settled-answered prompts to "refused
every time" for the expected rate to rise by d (no change on toxic). The false-alarm rate is the
share of no-change PRs the gate fails (family-wise over both checks); power is the share of +d PRs
it fails. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pytest_orbench.analysis.gate import holm  # noqa: E402
from pytest_orbench.analysis.pairs import paired_block  # noqa: E402

SETS = (("hard-1k", 1319, 0.35, "answer"), ("toxic", 655, 0.85, "refuse"))


FLIP_PER_FLAKY = 0.4  # 2 E[p (1 - p)] for p ~ Beta(2, 2)


def probabilities(rng: np.random.Generator, n: int, rate: float, flip: float) -> np.ndarray:
    flaky = rng.random(n) < flip / FLIP_PER_FLAKY
    p = np.where(rng.random(n) < rate, 1.0, 0.0)
    p[flaky] = rng.beta(2, 2, size=int(flaky.sum()))
    return p


def regress(p: np.ndarray, delta: float, rng: np.random.Generator) -> np.ndarray:
    """+delta on the expected rate: settled answered prompts become settled refused."""
    if delta <= 0:
        return p
    answered = np.flatnonzero(p == 0.0)
    moved = rng.choice(answered, size=int(round(delta * len(p))), replace=False)
    q = p.copy()
    q[moved] = 1.0
    return q


def run(p: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Refused trials per prompt out of k."""
    return rng.binomial(k, p)


def gate_fails(base: list[np.ndarray], head: list[np.ndarray], k: int, alpha: float) -> bool:
    checks = []
    for (_name, _n, _rate, expected), b, h in zip(SETS, base, head):
        block = paired_block([((int(x), k), (int(y), k)) for x, y in zip(b, h)], expected, alpha)
        worse = block["delta"] if expected != "refuse" else -block["delta"]
        checks.append((worse, block["p_value"]))
    adjusted = holm([p for _, p in checks])
    return any(worse > 0 and p < alpha for (worse, _), p in zip(checks, adjusted))


def simulate(prs: int, flip: float, k: int, delta: float, alpha: float, seed: int) -> tuple[float, float]:
    """Share of PRs the gate fails, and the mean share of Hard-1K prompts whose verdict differs."""
    rng = np.random.default_rng(seed)
    failed, discordant = 0, 0.0
    for _ in range(prs):
        probs = [probabilities(rng, n, rate, flip) for _, n, rate, _ in SETS]
        head_probs = [regress(probs[0], delta, rng), probs[1]]
        base = [run(p, k, rng) for p in probs]
        head = [run(p, k, rng) for p in head_probs]
        failed += gate_fails(base, head, k, alpha)
        discordant += float(np.mean(base[0] != head[0]))
    return failed / prs, discordant / prs


def prompts_needed(delta: float, noise: float, alpha: float) -> int:
    """Connor (1987) McNemar sample size for 80% power, one trial per prompt (the noise measured)."""
    from pytest_orbench.core.stats import detectable_increase

    lo, hi = 10, 200_000
    while lo < hi:
        mid = (lo + hi) // 2
        if detectable_increase(mid, alpha / 2, 0.8, noise=noise) <= delta:  # alpha/2: Holm's first step, two checks
            hi = mid
        else:
            lo = mid + 1
    return lo


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prs", type=int, default=1000, help="simulated pull requests per cell")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--flips", default="0,0.02,0.05,0.1")
    parser.add_argument("--trials", default="1,3")
    parser.add_argument("--deltas", default="0.02,0.03,0.05")
    args = parser.parse_args()
    flips = [float(x) for x in args.flips.split(",")]
    trials = [int(x) for x in args.trials.split(",")]
    deltas = [float(x) for x in args.deltas.split(",")]
    started = time.perf_counter()
    print(f"Gate simulation, {time.strftime('%Y-%m-%d')}: {args.prs} simulated PRs per cell, alpha {args.alpha} "
          f"family-wise (Holm over hard-1k and toxic), seed {args.seed}\n")
    print("| flip rate (measured) | trials K | false alarms (no change) | " + " | ".join(f"power +{100 * d:g} pp" for d in deltas)
          + " | Hard-1K prompts for 80% power at " + ", ".join(f"+{100 * d:g}" for d in deltas) + " pp (K = 1) |")
    print("|--:|--:|--:|" + "--:|" * len(deltas) + "--:|")
    for flip in flips:
        for k in trials:
            seed = args.seed + int(flip * 1000) * 10 + k
            false_alarm, noise = simulate(args.prs, flip, k, 0.0, args.alpha, seed)
            power = [simulate(args.prs, flip, k, d, args.alpha, seed + 1 + i)[0] for i, d in enumerate(deltas)]
            se = (false_alarm * (1 - false_alarm) / args.prs) ** 0.5
            needed = ", ".join(f"{prompts_needed(d, noise, args.alpha):,}" for d in deltas) if k == 1 else "—"
            print(f"| {100 * flip:g}% ({100 * noise:.1f}%) | {k} | {100 * false_alarm:.1f}% (s.e. {100 * se:.1f}) | "
                  + " | ".join(f"{100 * x:.1f}%" for x in power) + f" | {needed} |")
            sys.stdout.flush()
    print(f"\n({time.perf_counter() - started:.0f} s; calls to an endpoint: 0; cpu count {os.cpu_count()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
