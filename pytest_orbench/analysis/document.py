"""The results document's one builder: the run section, the summaries, the comparison and gate, a stop,
the live base, the flips' verification and the baseline update, in the order the JSON holds them."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from pytest_orbench import __version__
from pytest_orbench.analysis.baseline import check_comparable, drift, save_baseline
from pytest_orbench.analysis.gate import GateConfig, evaluate, gate_check
from pytest_orbench.analysis.pairs import compare
from pytest_orbench.analysis.summary import served_versions, summarize
from pytest_orbench.core.records import (
    NOT_REQUESTED,
    RESULTS_SCHEMA,
    RESULTS_SCHEMA_VERSION,
    BaselineDocument,
    DatasetSummary,
    GateResult,
    PromptRecord,
    ResultsDocument,
    RunMeta,
    Usage,
)
from pytest_orbench.judging.judges import Verdict


def results_document(run: RunMeta, summaries: dict[str, DatasetSummary], records: list[PromptRecord]
                     ) -> ResultsDocument:
    """The document's first fields: the run, the per-dataset summaries and the prompts (in the datasets' order)."""
    return {
        "schema": RESULTS_SCHEMA,
        "schema_version": RESULTS_SCHEMA_VERSION,
        "plugin_version": __version__,
        "run": run,
        "datasets": summaries,
        "prompts": sorted(records, key=lambda r: (list(summaries).index(r["dataset"]) if r["dataset"] in summaries else 99, r["id"])),
    }

def mark_stopped(gate: GateResult, reason: str, stored: int = 0) -> None:
    """A run that stopped early (-x, --maxfail, Ctrl-C, a crash) checked only what ran: its verdict is
    inconclusive, never a pass or ungated (a regression already found still fails). `stored`: replies
    fetched for prompts that did not run (paid for, stored for the next run)."""
    gate["checks"].insert(0, gate_check("completeness", "", "completeness", None, 1.0, "inconclusive",
                                    f"{reason}: the prompts that did not run were not checked"
                                    + (f"; {stored} replies fetched for them are stored, and the next run reuses them"
                                       if stored else "")))
    if gate["verdict"] != "fail":
        gate["verdict"], gate["passed"] = "inconclusive", False
        gate.pop("note", None)



def assess(results: ResultsDocument, baseline: BaselineDocument | None, config: GateConfig,
           uncompared: str | None = None) -> ResultsDocument:
    """Add the comparison with `baseline` (if any), what changed, and the gate verdict to `results`.
    `uncompared`: why no comparison was made though one was asked for; it is the note of an ungated
    verdict, else the first warning (absolute limits were checked, no regression was)."""
    not_compared: list[str] = []
    if baseline is not None:
        hashes = {p["id"]: p["prompt_sha256"] for p in results["prompts"]}
        results["changes"] = check_comparable(baseline, results["run"], hashes)
        for name, block in compare(baseline, results, config.alpha).items():
            results["datasets"][name]["comparison"] = block
        not_compared = [n for n in results["datasets"] if n not in baseline["datasets"]]
    results["gate"] = evaluate(results, config, sampled=bool(results["run"].get("sample")))
    if uncompared is not None:
        if results["gate"]["verdict"] == "ungated":
            results["gate"]["note"] = uncompared
        else:
            results["gate"]["warnings"].insert(0, uncompared)
    if baseline is not None:
        results["gate"]["compared"] = [n for n in results["datasets"] if n in baseline["datasets"]]
        results["gate"]["not_compared"] = not_compared  # in this run, not in the baseline
        results["gate"]["baseline_only"] = [n for n in baseline["datasets"] if n not in results["datasets"]]
    return results



def _spend(paid: list[tuple[float | None, Usage | None]]) -> dict[str, Any]:
    """Tokens and USD paid in this run, from (cost, usage) per prompt; cost is None when litellm knows no
    price for a model."""
    usages = [usage for _, usage in paid if usage]
    costs = [cost for cost, usage in paid if usage]
    return {
        "prompt_tokens": sum(u.get("prompt_tokens") or 0 for u in usages),
        "completion_tokens": sum(u.get("completion_tokens") or 0 for u in usages),
        "cost_usd": round(sum(c for c in costs if c), 6) if costs and all(c is not None for c in costs) else None,
    }


def endpoint_error(record: Mapping[str, Any]) -> int:
    """1 when this verdict (a prompt's, or its live base's) is an error of the endpoint, not of the judge."""
    return int(record.get("verdict") == Verdict.ERROR.value and record.get("error_from") != "judge")


def never_asked(record: Mapping[str, Any]) -> int:
    """1 when this endpoint error is for a call never made: the calls had stopped before it."""
    return int(bool(endpoint_error(record)) and str(record.get("error") or "").startswith(NOT_REQUESTED))


def run_section(run: RunMeta, records: list[PromptRecord], owners: list[PromptRecord], *, unrun: int,
                live_base: bool, llm_judge: bool, started: float, compared_with: str | None) -> RunMeta:
    """The run's section completed: calls, spend, the judge's calls, what served the replies, when, and what
    it is compared with. `owners`: the records that own their replies (calls are counted once per reply);
    `unrun`: calls made for prompt tests that then did not run."""
    run["calls"] = {
        "made": sum(r.get("calls_made", int(r["fetched"])) for r in owners),
        "stored": sum(r.get("calls_stored", int(r["from_store"])) for r in owners),
        # Replies the endpoint failed to give, the live base's included (its calls are counted in `made`
        # too); a reply the judge left without a judgement is the judge's error, not the endpoint's.
        "errors": sum(endpoint_error(r) + endpoint_error(r.get("base") or {}) for r in owners),
        # Of those, the prompts never asked: the calls had stopped (a rejected key, a refused connection).
        "prompts": len(records),
        "shared": len(records) - len(owners),
    }
    never = sum(never_asked(r) + never_asked(r.get("base") or {}) for r in owners)
    if never:
        run["calls"]["not_requested"] = never
    # Calls made for prompt tests that then did not run (-x, Ctrl-C after the fetch got ahead): paid for
    # and stored, but in no record; counted apart so the run's calls and spend are not mistaken for all of it.
    if unrun:
        run["calls"]["fetched_not_run"] = unrun
    run["spend"] = {"endpoint": _spend([(r["cost"], r["usage"]) for r in owners])}
    if live_base:
        run["spend"]["base"] = _spend([(r["base"]["base_cost"], r["base"]["base_usage"]) for r in owners if "base" in r])
    if llm_judge:
        # Per reply (every trial, the live base's too): what went to the LLM judge, the calls paid for now
        # (replies judged alike share one call) and the replies it left without a judgement.
        run["judge_calls"] = {
            "sent_to_llm": sum(r["judge_sent"] for r in owners),
            "decided_without_llm": sum(r["judge_decided"] for r in owners),
            "made": sum(r["judge_calls_made"] for r in owners),
            "errors": sum(r["judge_errors"] for r in owners),
        }
        run["spend"]["judge"] = _spend([(r["judge_cost"], r["judge_usage"]) for r in owners])
    run["served"] = served_versions(records)
    run["started"] = datetime.fromtimestamp(started, UTC).isoformat(timespec="seconds")
    run["duration_seconds"] = round(time.time() - started, 2)
    run["compared_with"] = compared_with
    return run


def plain_document(run: RunMeta, records: list[PromptRecord], expected: dict[str, str]) -> ResultsDocument:
    """A document of summaries alone, nothing compared (the live base's, as the run's reference)."""
    run["served"] = served_versions(records)
    return results_document(run, summarize(records, expected), records)


@dataclass(frozen=True)
class Reference:
    """What the run is compared with, and how the gate judges it."""

    config: GateConfig
    baseline: BaselineDocument | None = None  # the document compared with (the baseline file's, or the live base's)
    uncompared: str | None = None  # why nothing was compared though a comparison was asked for
    base_results: ResultsDocument | None = None  # the live base's own document, when one was asked
    baseline_file: BaselineDocument | None = None  # the baseline file, for the live base's drift from it


@dataclass(frozen=True)
class BaselineUpdate:
    """--orbench-update-baseline: the file, and why this run may not become it (None: it may)."""

    path: Path
    reason: str | None


def build_results(run: RunMeta, records: list[PromptRecord], expected: dict[str, str], reference: Reference, *,
                  judge_audit: dict[str, Any] | None = None, verification: dict[str, Any] | None = None,
                  stopped: str | None = None, stored: int = 0, update: BaselineUpdate | None = None) -> ResultsDocument:
    """The finished results document of a run: its summaries, the live base and its drift, the comparison and
    gate, the flips' verification, a stop (`stored`: replies fetched for prompts that did not run), and the
    baseline update (the file written here, when the run may become it)."""
    results = results_document(run, summarize(records, expected), records)
    results["judge_audit"] = judge_audit
    base_results = reference.base_results
    if base_results is not None:
        results["base"] = {"run": {k: base_results["run"][k] for k in ("endpoint", "system_prompt_sha256", "served")},
                           "datasets": {n: {k: d[k] for k in ("n", "refused", "rejection_rate", "ci95", "errors", "flaky")}
                                        for n, d in base_results["datasets"].items()}}
        if reference.baseline_file is not None:
            results["drift"] = drift(reference.baseline_file, base_results, reference.config.alpha)
    assess(results, reference.baseline, reference.config, reference.uncompared)
    if verification is not None:
        _attach_verification(results, verification)
    if stopped:
        # Recorded in the run, so that `orbench compare` of this file (which assesses it again) knows it too.
        results["run"]["stopped"] = stopped
        mark_stopped(results["gate"], stopped, stored=stored)
    if update is not None:
        results["run"]["baseline_update"] = {"path": str(update.path), "written": update.reason is None,
                                             "reason": update.reason}
        if update.reason is None:
            try:
                save_baseline(update.path, results)
            except OSError as exc:  # a full disk: said, and the run fails, instead of a traceback and no summary
                results["run"]["baseline_update"].update(written=False, reason=f"writing it failed: {exc.strerror or exc}")
    return results


def _attach_verification(results: ResultsDocument, verification: dict[str, Any]) -> None:
    """`datasets.<name>.comparison.verification` and the run's `verification` (judge model, calls, cost)."""
    for name, tally in verification["tallies"].items():
        summary = results["datasets"].get(name)
        comparison = summary.get("comparison") if summary is not None else None
        if comparison is None:
            continue
        # (--orbench-verify-flips: found, verified, overturned, errors and the verified flips' counts)
        cast(dict[str, Any], comparison)["verification"] = {
            **tally, "newly_refused": comparison["newly_refused"], "newly_answered": comparison["newly_answered"]}
    results["run"]["verification"] = {k: verification[k] for k in ("model", "calls", "cost_usd", "usage")}
    if verification.get("not_requested"):  # judge calls not made: --orbench-max-cost was reached
        results["run"]["verification"]["not_requested"] = verification["not_requested"]
