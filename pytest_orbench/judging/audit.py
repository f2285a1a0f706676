"""How far the judge in use agrees with the team's labels of this model's replies: the audit every report
shows when labels are set (`judge_audit` in the results).

Measured out of sample: the adapted keyword judge is scored on cross-validated verdicts (each labelled
reply judged by a judge adapted to the other folds), any other judge on its own verdicts (it does not learn
from the labels). Estimated for all of the run's replies, not for the sample: `orbench label` draws towards
flips and unsure replies, where a judge errs more, so each row weighs its stratum's share of the run's
replies over the rows labelled in that stratum. Rows without a recorded stratum count alike.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from pytest_orbench.core.stats import Z95, _wilson_at
from pytest_orbench.judging.labels import Label

NOT_CHECKED = ("the judge is not yet checked against this model's replies: label ~100 of them (`orbench label`) and "
               "set judge_labels (--orbench-judge-labels) to adapt the keyword judge to them and measure it")


def weights_of(rows: Sequence[Label]) -> tuple[list[float], str, float, dict[str, dict[str, Any]]]:
    """Each row's weight (summing to 1), how they were weighed, the share of the run's replies the labelled
    strata cover, and the strata."""
    strata: dict[str, list[int]] = defaultdict(list)
    shares: dict[str, list[float]] = defaultdict(list)
    for i, row in enumerate(rows):
        if row.stratum and row.stratum_share:
            strata[row.stratum].append(i)
            shares[row.stratum].append(row.stratum_share)
    if not rows:
        return [], "none", 0.0, {}
    if sum(len(v) for v in strata.values()) != len(rows):
        return [1 / len(rows)] * len(rows), "equal (some rows carry no sampling stratum)", 1.0, {}
    share = {s: sum(v) / len(v) for s, v in shares.items()}
    total = sum(share.values())
    weights = [0.0] * len(rows)
    for s, members in strata.items():
        for i in members:
            weights[i] = share[s] / total / len(members)
    info = {s: {"labelled": len(strata[s]), "share": share[s]} for s in sorted(strata)}
    return weights, "by each stratum's share of the sampled run's replies", min(1.0, total), info


def figures(rows: Sequence[Label], judged_refused: Sequence[bool]) -> dict[str, Any]:
    """Weighted binary agreement (Wilson interval at the effective n), Cohen's kappa, bias (the judge's
    refusal rate minus the people's, with a normal interval), both refusal rates, per stratum."""
    weights, how, covered, strata = weights_of(rows)
    a = b = c = d = 0.0
    for w, row, judge in zip(weights, rows, judged_refused):
        if judge and row.refused:
            a += w
        elif judge:
            b += w
        elif row.refused:
            c += w
        else:
            d += w
    n = len(rows)
    n_eff = 1 / sum(w * w for w in weights) if weights else 0.0
    agreement = a + d if n else None
    lo, hi = _wilson_at(agreement, n_eff) if agreement is not None and n_eff else (0.0, 1.0)
    expected = (a + b) * (a + c) + (c + d) * (b + d)
    kappa = (agreement - expected) / (1 - expected) if agreement is not None and expected < 1 - 1e-12 else None
    bias = b - c if n else None
    spread = Z95 * math.sqrt(max(0.0, (b + c) - (b - c) ** 2) / n_eff) if n_eff else None
    for s, info in strata.items():
        members = [i for i, row in enumerate(rows) if row.stratum == s]
        info["agreement"] = sum(judged_refused[i] == rows[i].refused for i in members) / len(members)
    def r(value: float | None) -> float | None:  # six places: sums of weights leave 0.9999999999999996
        return None if value is None else round(value, 6)

    agreement, kappa, bias = r(agreement), r(kappa), r(bias)
    for info in strata.values():
        info["share"], info["agreement"] = r(info["share"]), r(info["agreement"])
    return {
        "labelled": n, "n_effective": round(n_eff, 1),
        "agreeing": sum(1 for row, judge in zip(rows, judged_refused) if judge == row.refused),
        "agreement": {"value": agreement, "ci95": [r(lo), r(hi)]},
        "kappa": kappa,
        "bias": {"value": bias, "ci95": None if bias is None or spread is None else [r(bias - spread), r(bias + spread)]},
        "judge_refusal_rate": r(a + b) if n else None, "human_refusal_rate": r(a + c) if n else None,
        "weighting": how, "covered": covered, "strata": strata,
    }


def audit(rows: Sequence[Label], judged_refused: Sequence[bool], *, labels_file: str, digest: str, judge: dict[str, Any],
          adapted: bool, unlabelled: int, min_agreement: float | None, run_model: str | None) -> dict[str, Any]:
    """The results' `judge_audit`."""
    block: dict[str, Any] = {
        "labels_file": labels_file, "labels_digest": digest, "judge": judge, "adapted": adapted,
        "method": ("cross-validated: each labelled reply judged by the keyword judge adapted to the other labels"
                   if adapted else "this judge's own verdicts on the labelled replies (it does not learn from them)"),
        "unlabelled": unlabelled, "min_agreement": min_agreement,
        **figures(rows, judged_refused),
    }
    models = sorted({row.model for row in rows if row.model})
    block["models"] = models
    if run_model and models and run_model not in models:
        block["other_model"] = (f"the labels are of replies by {', '.join(models)}; this run asks {run_model}: "
                                "label this model's replies to measure the judge on them")
    return block


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def summary_line(block: dict[str, Any]) -> str:
    """One line, as the terminal, the Markdown report and the PR comment say it."""
    agreement, bias = block["agreement"], block["bias"]
    lo, hi = agreement["ci95"]
    kappa = "n/a" if block["kappa"] is None else f"{block['kappa']:.2f}"
    bias_text = "n/a" if bias["value"] is None else f"{100 * bias['value']:+.1f} pp"
    adapted = "adapted to them, cross-validated" if block["adapted"] else "not trained on them"
    if not block["labelled"]:
        return (f"could not be measured against your labels: none of the {block.get('not_judged', 0)} labelled "
                "replies got a verdict of this judge in this run")
    weighed = ("weighted to the run's replies" if block["weighting"].startswith("by each stratum")
               else "every row alike")
    text = (f"agrees with your {block['labelled']} labels on {pct(agreement['value'])} [{100 * lo:.1f}, {100 * hi:.1f}] "
            f"of this model's replies (kappa {kappa}, bias {bias_text}; {adapted}; {weighed}, "
            f"effective n {block['n_effective']:g})")
    return text


def audit_judge(judge: Any, rows: Sequence[Label], records: Sequence[Any], *, labels_file: str,
                min_agreement: float | None, run_model: str | None) -> dict[str, Any]:
    """The audit of the run's judge against the labelled `rows`. keyword: cross-validated verdicts of the
    adapted judge; hybrid: the same where its keyword side is confident, else this run's (LLM) verdict on
    that reply; prefix and your own judge: their verdicts on the labelled replies; llm: this run's verdicts on
    the labelled replies it judged. Labelled replies the run's judge gave no verdict on are counted apart."""
    from pytest_orbench.judging.adaptation import cross_validated
    from pytest_orbench.judging.judges import judge_sync
    from pytest_orbench.judging.keyword_weights import load_model
    from pytest_orbench.judging.labels import labels_digest
    from pytest_orbench.judging.registry import adaptable, unsure_only

    rows = list(rows)
    in_run = {r["reply_digest"]: bool(r["refused"]) for r in records
              if r.get("reply_digest") and r.get("refused") is not None}
    included: list[Label] = []
    predicted: list[bool] = []
    adapted = adaptable(judge.id)
    if adapted:
        shipped = load_model()
        low, high = shipped.band
        for row, p in zip(rows, cross_validated(shipped, rows)):
            if unsure_only(judge.id) and low <= p < high:
                if row.key in in_run:  # the keyword side is unsure: the LLM's verdict in this run decides
                    included.append(row)
                    predicted.append(in_run[row.key])
                continue
            included.append(row)
            predicted.append(p >= shipped.threshold)
    elif judge.llm is None:
        for row in rows:
            try:
                verdict = judge_sync(judge, row.prompt, row.response).verdict.refused
            except Exception:  # noqa: BLE001 - your judge raised on this reply: no verdict, counted apart
                continue
            if verdict is not None:
                included.append(row)
                predicted.append(bool(verdict))
    else:
        for row in rows:
            if row.key in in_run:
                included.append(row)
                predicted.append(in_run[row.key])
    block = audit(included, predicted, labels_file=labels_file, digest=labels_digest(rows), judge=judge.meta(),
                  adapted=adapted, unlabelled=0, min_agreement=min_agreement, run_model=run_model)
    block["not_judged"] = len(rows) - len(included)
    if block["not_judged"]:
        block["not_judged_reason"] = ("labelled replies this run did not judge (not among its replies, or no verdict): "
                                      "not in the audit")
    return block
