"""How far the judge in use agrees with the team's labels of this model's replies: the audit every report
shows when labels are set (`judge_audit` in the results).

Measured out of sample: the adapted keyword judge is scored on cross-validated verdicts (each labelled
reply judged by a judge adapted to the other folds), any other judge on its own verdicts (it does not learn
from the labels). Estimated for all of the run's replies, not for the sample: `orbench label` draws towards
flips and unsure replies, where a judge errs more, so each row weighs its stratum's share of the run's
replies over the rows labelled in that stratum. Rows without a recorded stratum count alike.
Of this model's replies only (`scope_of`): labels of other models' replies are counted apart, and when
there is none of this model's the audit says whose replies its figures are of. The gate's checks of the judge
against the labels (`gate_checks`) are worded here, beside the figures they read.
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
        return None if value is None else round(value, 6) + 0.0  # (+ 0.0: no "-0.00" in a report)

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


# Whose replies the audit's figures are of (`scope`), as every report words it.
SCOPES = {
    "this_model": "of this model's replies",
    "labelled": "of the labelled replies",  # no run to compare with (`orbench judge-eval`)
    "other_models": "of other models' replies, none of this model's",
    "unknown_model": "of replies by a model the labels do not name, none of them in this run",
}


def scope_of(rows: Sequence[Label], run_model: str | None, run_replies: set[str]) -> tuple[str, list[bool]]:
    """Which rows are replies of the model under test: the labels say it (model column) or the reply is one of
    this run's. Their figures are the audit's; without one, the audit is of the others and says so."""
    if run_model is None:
        return "labelled", [True] * len(rows)
    own = [row.model == run_model or row.key in run_replies for row in rows]
    if any(own) or not rows:  # (none judged at all: the audit says so, not whose they are)
        return "this_model", own
    return ("other_models" if any(row.model for row in rows) else "unknown_model"), [True] * len(rows)


def names(models: Sequence[str], most: int = 3) -> str:
    """Model names as a note says them: the first few, each cut short (the labels file is anyone's text)."""
    shown = ", ".join(m if len(m) <= 60 else m[:59] + "…" for m in models[:most])
    return shown + (f" and {len(models) - most} more" if len(models) > most else "")


def audit(rows: Sequence[Label], judged_refused: Sequence[bool], *, labels_file: str, digest: str, judge: dict[str, Any],
          adapted: bool, unlabelled: int, min_agreement: float | None, run_model: str | None,
          run_replies: set[str] | None = None, shipped_refused: Sequence[bool] | None = None) -> dict[str, Any]:
    """The results' `judge_audit`: the figures of the rows that are this model's replies (`scope`), the others
    counted apart, and (for an adapted judge) the shipped judge's agreement on the same rows."""
    scope, own = scope_of(rows, run_model, run_replies or set())
    mine = [i for i, keep in enumerate(own) if keep]
    block: dict[str, Any] = {
        "labels_file": labels_file, "labels_digest": digest, "judge": judge, "adapted": adapted,
        "method": ("cross-validated: each labelled reply judged by the keyword judge adapted to the other labels"
                   if adapted else "this judge's own verdicts on the labelled replies (it does not learn from them)"),
        "unlabelled": unlabelled, "min_agreement": min_agreement, "scope": scope,
        **figures([rows[i] for i in mine], [judged_refused[i] for i in mine]),
    }
    if shipped_refused is not None:
        shipped = figures([rows[i] for i in mine], [shipped_refused[i] for i in mine])
        block["unadapted"] = {"agreement": shipped["agreement"], "kappa": shipped["kappa"],
                              "note": "the shipped keyword judge's own verdicts, before it adapted to the labels"}
        # Every label the judge learned from, whoever's reply: does the adapted judge tell the kinds apart at all?
        learned, before = figures(rows, judged_refused), figures(rows, shipped_refused)
        block["all_labels"] = {"labelled": learned["labelled"], "kappa": learned["kappa"],
                               "unadapted_agreement": before["agreement"]["value"]}
    models = sorted({row.model for row in rows if row.model})
    block["models"] = models
    others = [i for i, keep in enumerate(own) if not keep]
    named = names(models)
    if others:
        rest = figures([rows[i] for i in others], [judged_refused[i] for i in others])
        whose = sorted({rows[i].model for i in others if rows[i].model})
        block["not_this_model"] = {"labelled": len(others), "models": whose, "agreement": rest["agreement"]}
        block["other_model"] = (
            f"{len(others)} more labels are of replies by {names(whose) or 'a model they do not name'} that are "
            f"not in this run: not counted above (the judge agrees with them on {pct(rest['agreement']['value'])})")
    elif scope == "other_models":
        block["other_model"] = (f"the labels are of replies by {named}; this run asks {run_model}: none is this "
                                "model's, so they do not measure the judge on it. Label this model's replies "
                                "(`orbench label`)")
    elif scope == "unknown_model":
        block["other_model"] = (f"the labels name no model and none of their replies is in this run: they do not "
                                f"measure the judge on {run_model}. Label this run's replies (`orbench label`), or "
                                f"name the model that wrote them in a model column")
    return block


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def weighed(block: dict[str, Any]) -> str:
    """How the rows were weighed, in words that hold: strata that cover only part of the run's replies stand
    for that part, not for the run."""
    if not block["weighting"].startswith("by each stratum"):
        return "every row alike"
    covered = block.get("covered", 1.0)
    if covered >= 0.9995:
        return "weighted to the run's replies"
    return (f"weighted to the {100 * covered:.1f}% of the run's replies in the labelled strata "
            f"({', '.join(block['strata'])}); the other {100 * (1 - covered):.1f}% has no label")


def summary_line(block: dict[str, Any]) -> str:
    """One line, as the terminal, the Markdown report and the PR comment say it."""
    agreement, bias = block["agreement"], block["bias"]
    lo, hi = agreement["ci95"]
    kappa = "n/a" if block["kappa"] is None else f"{block['kappa']:.2f}"
    bias_text = "n/a" if bias["value"] is None else f"{100 * bias['value']:+.1f} pp"
    adapted = "adapted to them, cross-validated" if block["adapted"] else "not trained on them"
    shipped = block.get("unadapted")
    if shipped:
        adapted += f"; the shipped judge before adapting: {pct(shipped['agreement']['value'])}"
    if not block["labelled"]:
        return (f"could not be measured against your labels: none of the {block.get('not_judged', 0)} labelled "
                "replies got a verdict of this judge in this run")
    whose = SCOPES.get(block.get("scope", "labelled"), SCOPES["labelled"])
    text = (f"agrees with your {block['labelled']} labels on {pct(agreement['value'])} [{100 * lo:.1f}, {100 * hi:.1f}] "
            f"{whose} (kappa {kappa}, bias {bias_text}; {adapted}; {weighed(block)}, "
            f"effective n {block['n_effective']:g})")
    return text


def gate_checks(block: dict[str, Any]) -> list[tuple[str, float | None, float, str, str]]:
    """The gate's checks of the judge against the labels, (name, observed, limit, outcome, message) each; a check
    that is not passed leaves the run inconclusive (docs/judges.md)."""
    checks = []
    minimum = block.get("min_agreement")
    if minimum is not None:
        # It decides only when your labels of this model's replies show that it agrees at least this much, the
        # whole 95% interval, not the point (one label reads 100% [20.7, 100]); other models' replies say nothing.
        agreement, (low, high) = block["agreement"]["value"], block["agreement"]["ci95"]
        own = block.get("scope") == "this_model"
        measured = (f"the judge agrees with your {block['labelled']} labels of this model's replies on "
                    f"{pct(agreement)} [{100 * low:.1f}, {100 * high:.1f}]")
        passed = own and agreement is not None and low >= minimum
        checks.append((
            f"judge agreement with your labels at least {100 * minimum:.1f}%", low if own else None, minimum,
            "pass" if passed else "inconclusive",
            f"{measured}, the lower bound of its 95% interval at least judge_min_agreement {100 * minimum:.1f}%" if passed
            else (f"none of your {block['labelled']} labels is of this model's replies, so they cannot show how far the "
                  f"judge agrees on it and its verdicts decide nothing: {block.get('other_model', '')}" if not own
                  else f"{measured}: the lower bound of its 95% interval is below judge_min_agreement "
                  f"{100 * minimum:.1f}%, so its verdicts decide nothing; label more of this model's replies "
                  "(`orbench label`) to narrow the interval or let the judge adapt, or choose another judge")))
    learned = block.get("all_labels")
    if learned and learned["labelled"]:
        # Labels that contradict what the replies say (answers labelled refusals) pass every check on the file, yet
        # the judge adapted to them can call nearly every reply one kind on both sides of a comparison, and a
        # regression passes unseen. Such a judge tells the kinds apart no better than chance on them, out of sample.
        kappa, shipped, n = learned["kappa"], learned["unadapted_agreement"], learned["labelled"]
        blind = kappa is None or kappa <= 0
        checks.append((
            "judge adapted to your labels tells refusals from answers", kappa, 0.0, "inconclusive" if blind else "pass",
            f"on the {n} labels it learned from, the adapted judge agrees no better than chance (cross-validated kappa "
            f"{'n/a' if kappa is None else f'{kappa:.2f}'}; the shipped judge before adapting agreed with them on "
            f"{pct(shipped)}), as labels that contradict what the replies say leave it: its verdicts decide nothing. "
            "Check the labels against the replies (`refusal` for those that decline, `compliance` for those that "
            "answer), or drop judge_labels" if blind else f"cross-validated kappa {kappa:.2f} on the {n} labels it "
            "learned from"))
    return checks


def audit_judge(judge: Any, rows: Sequence[Label], records: Sequence[Any], *, labels_file: str,
                min_agreement: float | None, run_model: str | None) -> dict[str, Any]:
    """The audit of the run's judge against the labelled `rows`. keyword: cross-validated verdicts of the
    adapted judge; hybrid: the same where its keyword side is confident, else this run's (LLM) verdict on
    that reply; prefix and your own judge: their verdicts on the labelled replies; llm: this run's verdicts on
    the labelled replies it judged. Labelled replies the run's judge gave no verdict on are counted apart."""
    from pytest_orbench.judging.adaptation import cross_validated, unadapted
    from pytest_orbench.judging.judges import judge_sync
    from pytest_orbench.judging.keyword_weights import load_model
    from pytest_orbench.judging.labels import labels_digest
    from pytest_orbench.judging.registry import adaptable, unsure_only

    rows = list(rows)
    in_run = {r["reply_digest"]: bool(r["refused"]) for r in records
              if r.get("reply_digest") and r.get("refused") is not None}
    run_replies = {r["reply_digest"] for r in records if r.get("reply_digest")} if run_model is not None else set()
    included: list[Label] = []
    predicted: list[bool] = []
    before: list[bool] = []  # the shipped keyword judge's verdicts on the included rows (an adapted judge's)
    adapted = adaptable(judge.id)
    if adapted:
        shipped = load_model()
        low, high = shipped.band
        for row, p, p0 in zip(rows, cross_validated(shipped, rows), unadapted(shipped, rows)):
            if unsure_only(judge.id) and low <= p < high:
                if row.key in in_run:  # the keyword side is unsure: the LLM's verdict in this run decides
                    included.append(row)
                    predicted.append(in_run[row.key])
                    before.append(p0 >= shipped.threshold)
                continue
            included.append(row)
            predicted.append(p >= shipped.threshold)
            before.append(p0 >= shipped.threshold)
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
                  adapted=adapted, unlabelled=0, min_agreement=min_agreement, run_model=run_model,
                  run_replies=run_replies, shipped_refused=before if adapted else None)
    block["not_judged"] = len(rows) - len(included)
    if block["not_judged"]:
        block["not_judged_reason"] = ("labelled replies this run did not judge (not among its replies, or no verdict): "
                                      "not in the audit")
    return block
