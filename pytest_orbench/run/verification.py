"""--orbench-verify-flips: an LLM judge's second opinion on the prompts that decide a paired gate.

A judge error on a prompt whose verdict did not change cancels out in a paired comparison; an error on a
flipped prompt is the verdict. So after the run, every prompt whose verdict differs from the compared side
(the baseline file, or the live base) goes to the LLM judge: this run's reply, and the compared side's
where it is stored (the live base's always is; a baseline file's when the store still holds it). The gate
then decides on the verified verdicts. Judge calls are stored like every judge call (by judge model,
prompt and reply): a re-run pays nothing twice. A verification that failed (an unreachable judge, no
class in its answer, the spend limit reached) leaves the flip as the offline judge counted it, marked unverified
(`flip_verification.verified` false): still a flip, and one the gate's worst case counts against the change.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from pytest_orbench.analysis.pairs import compare, trials_of
from pytest_orbench.core.endpoint import ModelSpec
from pytest_orbench.core.records import BaselineDocument, PromptRecord, ResultsDocument
from pytest_orbench.core.store import Store, reply_sha256
from pytest_orbench.judging.judges import Judgement
from pytest_orbench.run.settings import Settings
from pytest_orbench.run.verifier import Verifier


def flips(reference: BaselineDocument, results: ResultsDocument) -> dict[str, list[str]]:
    """The prompts whose verdict differs from the compared side, per dataset: what the gate counts."""
    return {name: [*c["newly_refused_ids"], *c["newly_answered_ids"]] for name, c in compare(reference, results).items()}


@dataclass
class Tally:
    found: int = 0
    verified: int = 0
    both_sides: int = 0
    overturned: int = 0
    errors: int = 0
    overturned_ids: list[str] = field(default_factory=list)
    first_error: str | None = None


def _keys(side: Mapping[str, Any]) -> list[tuple[str | None, str | None]]:
    """The store keys of a side's replies that count, each with the digest of the reply judged: each trial's, or
    the one reply's."""
    trials = side.get("trials")
    if trials:
        return [(t.get("reply_key"), t.get("reply_sha256")) for t in trials if t.get("refused") is not None]
    return [(side.get("reply_key"), side.get("reply_sha256"))]


def _combined(judgements: list[Judgement]) -> dict[str, Any]:
    """A side's verdict over its verified trials, as the session combines trials: refused when at least half
    of them refused; the verdict of a trial that agrees."""
    refused_trials = sum(1 for j in judgements if j.verdict.refused)
    share = refused_trials / len(judgements)
    refused = share >= 0.5
    shown = next(j for j in judgements if bool(j.verdict.refused) == refused)
    return {"verdict": shown.verdict.value, "refused": refused, "refused_share": share, "refused_trials": refused_trials,
            "scored_trials": len(judgements), "reason": shown.reason}


def _same(before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    """No flip between two sides (equal refusal shares, as baseline.compare pairs them)."""
    (b, m), (a, k) = trials_of(before), trials_of(after)
    return a * m == b * k


def _another_reply(keys: list[tuple[str | None, str | None]], replies: list[dict[str, Any] | None],
                   baseline: bool) -> str | None:
    """Why a stored reply under a side's reply key may not be the one its verdict was on (None: each is). The store
    keeps one reply per request: the same request asked again (by another run of that configuration on the store,
    after --orbench-store-max-age or with --orbench-refresh) replaces it, and a verdict of that other reply is not
    this side's to confirm or overturn."""
    if any(not digest for _, digest in keys):
        if baseline:
            return ("the baseline records no digest of the reply it judged (written by an older pytest-orbench), so the "
                    "stored reply cannot be shown to be that one: update the baseline to verify both sides")
        return "no digest of the reply judged was recorded, so the stored reply cannot be shown to be that one"
    if any(reply is None or reply_sha256(str(reply.get("text") or "")) != digest
           for (_, digest), reply in zip(keys, replies)):
        return ("the store holds another reply under its key now (the request was asked again since "
                + ("the baseline was written)" if baseline else "this run judged it, by another run on the store)"))
    return None


def verify(records: list[PromptRecord], reference: BaselineDocument, *, spec: ModelSpec, store: Store, retries: int,
           concurrency: int, live_base: bool, budget: float | None = None, limit: str = ""
           ) -> tuple[BaselineDocument, dict[str, dict[str, Any]], Verifier]:
    """Verify every flip of `records` against `reference`: the records (and, for the live base, their `base`)
    are updated in place with the verified verdicts; the returned reference carries the compared side's
    verified verdicts. Returns (reference, per-dataset tallies, the verifier with its calls and cost)."""
    by_id: dict[str, dict[str, Any]] = {r["id"]: cast(dict[str, Any], r) for r in records}
    summaries: dict[str, Any] = {}
    for r in records:
        summaries.setdefault(r["dataset"], {"expected": r["expected"]})
    results: ResultsDocument = {"schema": "", "schema_version": 0, "plugin_version": "", "run": {},
                                "datasets": summaries, "prompts": records}
    found = flips(reference, results)
    reference = copy.deepcopy(reference)
    old: dict[str, dict[str, Any]] = {p["id"]: cast(dict[str, Any], p) for p in reference["prompts"]}
    verifier = Verifier(spec, store, retries, concurrency, budget, limit)
    # Every reply to ask about: (prompt id, side, trial index) -> (prompt text, stored reply record).
    plan: list[tuple[str, str, int]] = []
    questions: list[tuple[str, dict[str, Any]]] = []
    missing: dict[tuple[str, str], str] = {}
    for ids in found.values():
        for pid in ids:
            record = by_id[pid]
            sides: list[tuple[str, Mapping[str, Any]]] = [("run", record)]
            compared: Mapping[str, Any] | None = record.get("base") if live_base else old.get(pid)
            if compared is not None and (live_base or not compared.get("scored_trials") or compared["scored_trials"] <= 1):
                sides.append(("compared", compared))
            for side, data in sides:
                keys = _keys(data)
                replies = [verifier.reply(k) for k, _ in keys]
                if not keys or any(r is None for r in replies):
                    missing[(pid, side)] = "its reply is not in the store"
                    continue
                other = _another_reply(keys, replies, baseline=side == "compared" and not live_base)
                if other is not None:
                    missing[(pid, side)] = other
                    continue
                for n, reply in enumerate(replies):
                    assert reply is not None
                    plan.append((pid, side, n))
                    questions.append((str(record["prompt"]), reply))
    answers = verifier.judge_all(questions)
    by_side: dict[tuple[str, str], list[Judgement | str]] = {}
    for (pid, side, _), answer in zip(plan, answers):
        by_side.setdefault((pid, side), []).append(answer)
    tallies: dict[str, dict[str, Any]] = {}
    for name, ids in found.items():
        tally = Tally(found=len(ids))
        for pid in ids:
            record = by_id[pid]
            run_side = by_side.get((pid, "run"))
            failed = missing.get((pid, "run")) or next((a for a in run_side or [] if isinstance(a, str)), None)
            offline = {k: record.get(k) for k in ("verdict", "refused", "judge_reason")}
            if failed is not None or not run_side:
                # Still a flip: the offline verdict stands, marked unverified. The gate counts it as the offline
                # judge did, and again against the change in its worst case (gate.py): never as no flip at all.
                tally.errors += 1
                tally.first_error = tally.first_error or str(failed)
                record["flip_verification"] = {"offline": offline, "verified": False, "error": str(failed)}
                continue
            mine = _combined([a for a in run_side if isinstance(a, Judgement)])
            reason = mine.pop("reason")
            record.update(mine)
            record["judge_reason"] = f"verified by {spec.model}: {reason}"
            record["matched"] = record["refused"] == (record["expected"] == "refuse")
            block: dict[str, Any] = {"offline": offline, "verified": True,
                                     "llm": {"verdict": mine["verdict"], "reason": reason[:300]}}
            compared_answers = by_side.get((pid, "compared"))
            if compared_answers and all(isinstance(a, Judgement) for a in compared_answers):
                theirs = _combined([a for a in compared_answers if isinstance(a, Judgement)])
                block["compared_llm"] = {"verdict": theirs["verdict"], "reason": str(theirs.pop("reason"))[:300]}
                target = record["base"] if live_base else old[pid]
                target.update(theirs)
                tally.both_sides += 1
            else:
                failure = next((a for a in compared_answers or [] if isinstance(a, str)), None)
                block["compared"] = ("not verified: " + (missing.get((pid, "compared")) or failure
                                                         or "it has several trials"))
                if failure is not None:
                    # The judge failed on the compared side's reply: that side's verdict is the offline one, unverified;
                    # the gate's worst case counts it against the change.
                    block["compared_error"] = failure
            tally.verified += 1
            before = record["base"] if live_base else old[pid]
            block["overturned"] = before.get("refused") is not None and _same(before, record)
            if block["overturned"]:
                tally.overturned += 1
                tally.overturned_ids.append(pid)
            record["flip_verification"] = block
        tallies[name] = {"found": tally.found, "verified": tally.verified, "both_sides": tally.both_sides,
                         "overturned": tally.overturned, "errors": tally.errors,
                         "overturned_ids": tally.overturned_ids, "first_error": tally.first_error}
    return reference, tallies, verifier


def verify_flips(settings: Settings, records: list[PromptRecord], reference: BaselineDocument, store: Store,
                 spent: float = 0.0) -> tuple[BaselineDocument, dict[str, Any]]:
    """`verify` with the run's settings: the verified reference, and the tallies and the judge's calls and cost.
    `spent`: what the run paid before (its endpoint, live base and judge calls); --orbench-max-cost caps the sum."""
    s = settings
    assert s.judge_spec is not None
    budget = limit = None
    if s.max_cost is not None:
        budget = max(0.0, s.max_cost - spent)
        limit = f"${s.max_cost:.4f}, of which the run's calls spent ${spent:.4f}"
    reference, tallies, verifier = verify(records, reference, spec=s.judge_spec, store=store, retries=s.retries,
                                          concurrency=s.concurrency, live_base=s.base is not None, budget=budget,
                                          limit=limit or "")
    return reference, {"tallies": tallies, "model": s.judge_spec.model, "calls": verifier.calls,
                       "cost_usd": None if verifier.cost is None else round(verifier.cost, 6),
                       "usage": verifier.usage, "not_requested": verifier.not_requested}
