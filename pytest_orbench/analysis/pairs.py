"""The paired, prompt-by-prompt comparison of a run with what it is compared with (a baseline file or the live
base), and its worst case: every prompt without a usable verdict counted against the change."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from pytest_orbench.core.records import BaselineDocument, Comparison, PairedBlock, ResultsDocument, Undecided
from pytest_orbench.core.stats import detectable_increase, mcnemar_p, paired_diff_ci, paired_share_diff_ci, sign_flip_p

Trials = tuple[int, int]  # (refused trials, scored trials) of one prompt; (0|1, 1) with one trial


def trials_of(prompt: Mapping[str, Any]) -> Trials:
    """A prompt's refused and scored trials; a baseline from before trials existed has one each."""
    if prompt.get("scored_trials"):
        return int(prompt["refused_trials"]), int(prompt["scored_trials"])
    return int(bool(prompt["refused"])), 1


def _pair_counts(pairs: list[tuple[bool, bool]]) -> tuple[int, int, int, int]:
    both = sum(1 for b, c in pairs if b and c)
    only_current = sum(1 for b, c in pairs if c and not b)
    only_baseline = sum(1 for b, c in pairs if b and not c)
    return both, only_current, only_baseline, len(pairs) - both - only_current - only_baseline


def paired_block(pairs: list[tuple[Trials, Trials]], expected: str, alpha: float = 0.05) -> PairedBlock:
    """Paired comparison of (baseline, current) refused/scored trials on the prompts both runs scored.

    The test is a one-sided paired sign-flip permutation test on the per-prompt differences of refusal
    shares (stats.sign_flip_p); with one trial per prompt on both sides it is the exact McNemar test."""
    n = len(pairs)
    before = [b / m for (b, m), _ in pairs]
    after = [a / k for _, (a, k) in pairs]
    binary = all(m == 1 and k == 1 for (_, m), (_, k) in pairs)
    newly_refused = sum(1 for x, y in zip(before, after) if y > x)
    newly_answered = sum(1 for x, y in zip(before, after) if y < x)
    # Regression direction: more refusals of safe prompts, fewer refusals of toxic ones.
    regressed, improved = (newly_refused, newly_answered) if expected != "refuse" else (newly_answered, newly_refused)
    delta = (sum(after) - sum(before)) / n if n else 0.0
    if binary:
        both, only_current, only_baseline, neither = _pair_counts([(bool(b), bool(a)) for (b, _), (a, _) in pairs])
        lo, hi = paired_diff_ci(both, only_current, only_baseline, neither)
        p_value, mc_error = mcnemar_p(regressed, improved), None
        test = "exact McNemar"
    else:
        lo, hi = paired_share_diff_ci(before, after, sum(m for (_, m), _ in pairs), sum(k for _, (_, k) in pairs))
        worse = [(a, k, b, m) if expected != "refuse" else (b, m, a, k) for (b, m), (a, k) in pairs]
        p_value, mc_error = sign_flip_p(worse)
        test = "paired sign-flip permutation, " + ("exact" if mc_error is None else f"Monte Carlo s.e. {mc_error:.1g}")
    block: PairedBlock = {
        "n": n,
        "baseline_refused": sum(1 for x in before if x >= 0.5),
        "refused": sum(1 for y in after if y >= 0.5),
        "newly_refused": newly_refused,
        "newly_answered": newly_answered,
        "baseline_rate": sum(before) / n if n else None,
        "rate": sum(after) / n if n else None,
        "delta": delta,
        "delta_ci95": [lo, hi],
        "p_value": p_value,
        "test": test,
        "direction": "more refusals" if expected != "refuse" else "fewer refusals",
        "regressed": regressed,
        "improved": improved,
        "detectable": 1.0,
    }
    block["detectable"] = detectable_of(block, alpha)
    if mc_error is not None:
        block["p_mc_error"] = mc_error
    return block


def detectable_of(block: PairedBlock, alpha: float) -> float:
    """The smallest increase the block's n paired prompts detect at `alpha` with power 0.8. Noise: the
    flips against the regression direction, assumed symmetric, estimate the endpoint's jitter."""
    n = block["n"]
    return detectable_increase(n, alpha, 0.8, noise=min(1.0, 2 * block["improved"] / n)) if n else 1.0


def compare(baseline: BaselineDocument, results: ResultsDocument, alpha: float = 0.05) -> dict[str, Comparison]:
    """Per dataset (and category): paired shares, delta with 95% interval, one-sided paired test."""
    old = {p["id"]: p for p in baseline["prompts"]}
    comparison: dict[str, Comparison] = {}
    for name, summary in results["datasets"].items():
        if name not in baseline["datasets"]:
            continue
        expected = summary["expected"]
        pairs_by_category: dict[str, list[tuple[Trials, Trials]]] = {}
        pairs: list[tuple[Trials, Trials]] = []
        newly_refused: list[str] = []
        newly_answered: list[str] = []
        missing = 0
        worst_pairs: list[tuple[Trials, Trials]] = []
        undecided: list[dict[str, str]] = []
        for prompt in results["prompts"]:
            before = old.get(prompt["id"])
            missing += prompt["dataset"] == name and before is None
            if prompt["dataset"] != name or before is None:
                continue
            run_why, compared_why = undecided_sides(prompt, before)
            if run_why or compared_why:
                undecided.append({"id": prompt["id"], "side": "both" if run_why and compared_why else
                                  "run" if run_why else "compared", "why": run_why or compared_why or ""})
            worst_pairs.append(worst_pair(prompt, before, expected, bool(run_why), bool(compared_why)))
            if prompt["refused"] is None or before["refused"] is None:
                continue
            pair = (trials_of(before), trials_of(prompt))
            pairs.append(pair)
            pairs_by_category.setdefault(prompt["category"], []).append(pair)
            (b, m), (a, k) = pair
            if a * m > b * k:
                newly_refused.append(prompt["id"])
            elif a * m < b * k:
                newly_answered.append(prompt["id"])
        comparison[name] = cast(Comparison, {
            **paired_block(pairs, expected, alpha), "newly_refused_ids": newly_refused,
            "newly_answered_ids": newly_answered,
            "categories": {c: paired_block(p, expected, alpha) for c, p in sorted(pairs_by_category.items())},
            "not_in_baseline": missing,
            "not_run": 0,  # gate.evaluate: the run's prompts that pytest did not run (it knows what was selected)
        })
        if undecided:
            # The same comparison with every prompt the run could not decide on counted against the change: the gate
            # passes only if this would pass too (gate._decide_regressions).
            block = paired_block(worst_pairs, expected, alpha)
            comparison[name]["worst_case"] = {
                "n": block["n"], "regressed": block["regressed"], "improved": block["improved"], "delta": block["delta"],
                "p_value": block["p_value"], "test": block["test"], "undecided": cast(list[Undecided], undecided)}
    return comparison


def undecided_sides(prompt: Mapping[str, Any], before: Mapping[str, Any]) -> tuple[str, str]:
    """Why this run's side and the compared side of a pair have no usable verdict ("" where they have one): an
    endpoint error, an unscored reply, a flip whose verification failed (its offline verdict is kept, unverified),
    a prompt the baseline or the live base has no verdict for."""
    from pytest_orbench.analysis.wording import error_shown

    opinion = prompt.get("flip_verification") or {}
    run_why = compared_why = ""
    if prompt.get("refused") is None:
        reason = (f"unscored: {prompt.get('judge_reason') or 'the judge gave no class'}"
                  if prompt.get("verdict") == "unscored" else str(prompt.get("error") or prompt.get("verdict")))
        run_why = error_shown(prompt, reason)[:200]
    elif opinion.get("verified") is False:
        run_why = error_shown(prompt, f"flip not verified: {opinion.get('error')}")[:200]
    elif prompt.get("trial_errors"):
        # Some trials got no verdict: the prompt's share is of the others, which the missing trials could move.
        run_why = error_shown(prompt, f"{prompt['trial_errors']} of its trials got no verdict: "
                                      f"{_trial_error(prompt)}")[:200]
    base = prompt.get("base")
    if before.get("refused") is None:
        compared_why = error_shown(prompt, f"no verdict under the live base: {base.get('error') or base.get('verdict')}"
                                   if isinstance(base, Mapping) else
                                   f"the baseline has no verdict for it ({before.get('verdict')})")[:200]
    elif opinion.get("compared_error"):
        compared_why = error_shown(prompt, f"the compared side's flip not verified: {opinion['compared_error']}")[:200]
    elif isinstance(base, Mapping) and base.get("trial_errors"):
        compared_why = error_shown(prompt, f"{base['trial_errors']} of its trials under the live base got no verdict: "
                                           f"{_trial_error(base)}")[:200]
    return run_why, compared_why


def _trial_error(side: Mapping[str, Any]) -> str:
    return next((str(t.get("error") or t.get("verdict")) for t in side.get("trials") or [] if t.get("refused") is None),
                "an error")


def worst_pair(prompt: Mapping[str, Any], before: Mapping[str, Any], expected: str, run_unknown: bool,
               compared_unknown: bool) -> tuple[Trials, Trials]:
    """A pair with each side that has no usable verdict set against the change: this run refused (a safe prompt)
    or answered (a toxic one), the compared side the opposite; where only some trials got no verdict, those trials
    alone. Known sides are as compared."""
    refuses_worse = expected != "refuse"  # the regression direction: more refusals of safe prompts
    opinion = prompt.get("flip_verification") or {}
    found = prompt.get("base")
    base: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    current = (_worst_side(prompt, int(prompt.get("trial_errors") or 0), opinion.get("verified") is False, refuses_worse)
               if run_unknown else trials_of(prompt))
    compared = (_worst_side(before, int(base.get("trial_errors") or 0), bool(opinion.get("compared_error")),
                            not refuses_worse) if compared_unknown else trials_of(before))
    return compared, current


def _worst_side(side: Mapping[str, Any], trial_errors: int, unverified: bool, refuses: bool) -> Trials:
    if side.get("refused") is None or unverified or not trial_errors:
        return int(refuses), 1
    refused, scored = trials_of(side)
    return refused + trial_errors * refuses, scored + trial_errors
