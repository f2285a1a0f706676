"""Baseline files (schema, load, atomic save), what may be compared with a run, and the live base's drift."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

from pytest_orbench import __version__
from pytest_orbench.analysis.pairs import compare
from pytest_orbench.core.document_checks import objects_problem, prompts_problem, run_problem, summary_mismatch
from pytest_orbench.core.endpoint import is_loopback, shown_params
from pytest_orbench.core.jsonfile import dumps, loads_document, write_atomic
from pytest_orbench.core.records import (
    BASELINE_SCHEMA,
    RESULTS_SCHEMA,
    BaselineDocument,
    BaselinePrompt,
    ResultsDocument,
    RunMeta,
    against_live_base,
)

BASELINE_SCHEMA_VERSION = 1
PROMPT_FIELDS = ("id", "dataset", "category", "prompt_sha256", "verdict", "refused", "refused_share", "refused_trials",
                 "scored_trials", "reply_key", "reply_sha256")
DATASET_FIELDS = ("n", "refused", "errors", "rejection_rate", "ci95", "expected", "total", "filtered", "empty", "unscored",
                  "flaky")


class BaselineError(Exception):
    """A baseline that cannot be read or compared; the message says what differs and what to do."""


def baseline_document(results: ResultsDocument) -> BaselineDocument:
    """What a committed baseline records: the run's identity, the aggregates and each prompt's verdict."""
    run = results["run"]
    return {
        "schema": BASELINE_SCHEMA,
        "schema_version": BASELINE_SCHEMA_VERSION,
        "plugin_version": __version__,
        "run": cast(RunMeta, {k: run.get(k) for k in (
            "endpoint", "model", "target", "api_base", "params", "system_prompt_sha256", "system_prompt_source",
            "judge", "seed", "sample", "datasets", "revision", "served",
        )}),
        "datasets": {name: {k: d.get(k) for k in DATASET_FIELDS} for name, d in results["datasets"].items()},
        # Trial counts only where known (a run's prompts have them; 0/1 of 1 with one trial).
        "prompts": [cast(BaselinePrompt, {k: p.get(k) for k in PROMPT_FIELDS if k in PROMPT_FIELDS[:6] or p.get(k) is not None})
                    for p in results["prompts"]],
    }


def save_baseline(path: Path, results: ResultsDocument) -> BaselineDocument:
    document = baseline_document(results)
    write_atomic(path, dumps(document))
    return document


def replace_problem(path: Path) -> str | None:
    """Why --orbench-update-baseline must not replace the file at `path` (None: it may): it holds something
    else than a baseline, such as a results file or a config given by mistake. A damaged baseline (merge
    conflict markers, a bad hand edit) still names its schema, and is replaced as asked."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror}"
    if not data.strip() or BASELINE_SCHEMA.encode() in data:
        return None
    what = ("a results file (--orbench-json)" if RESULTS_SCHEMA.encode() in data else
            "not a pytest-orbench baseline")
    return (f"--orbench-update-baseline would replace {path}, which is {what}: give the baseline's own path "
            "(e.g. baselines/prod.json), or delete that file first if it is really to be replaced")


def load_baseline(path: Path) -> BaselineDocument:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BaselineError(
            f"cannot read baseline {path}: {exc.strerror}. Create it with --orbench-update-baseline "
            "(and commit it), or fix the path"
        ) from None
    try:
        data = loads_document(text)
    except json.JSONDecodeError as exc:
        raise BaselineError(
            f"baseline {path} is not valid JSON (line {exc.lineno}: {exc.msg}); "
            "restore it from git or regenerate it with --orbench-update-baseline"
        ) from None
    except ValueError as exc:  # a merge conflict left in it, a key twice in one object
        raise BaselineError(
            f"baseline {path} is damaged: {exc}. Restore it from git, or regenerate it with --orbench-update-baseline "
            "(after a merge conflict: on the merged branch, from a complete run)"
        ) from None
    if isinstance(data, dict) and data.get("schema") == RESULTS_SCHEMA:
        raise BaselineError(f"{path} is a results file (--orbench-json), not a baseline: write the baseline with "
                            "--orbench-baseline PATH --orbench-update-baseline (orbench compare takes the baseline "
                            "first: orbench compare BASELINE.json RESULTS.json)")
    if not isinstance(data, dict) or data.get("schema") != BASELINE_SCHEMA:
        raise BaselineError(f"{path} is not a pytest-orbench baseline (no \"schema\": \"{BASELINE_SCHEMA}\")")
    version = data.get("schema_version")
    if type(version) is not int or version != BASELINE_SCHEMA_VERSION:  # (a bool is no version: True == 1)
        shown = json.dumps(version) if type(version) is not int else str(version)
        if type(version) is int and version > BASELINE_SCHEMA_VERSION:
            by = f" (plugin_version {data['plugin_version']})" if isinstance(data.get("plugin_version"), str) else ""
            raise BaselineError(
                f"baseline {path} has schema version {shown}, written by a newer pytest-orbench{by}; this one "
                f"({__version__}) reads version {BASELINE_SCHEMA_VERSION}. Upgrade pytest-orbench (regenerating it "
                "here would replace what the newer version records)"
            )
        raise BaselineError(
            f"baseline {path} has schema version {shown}; this plugin reads version {BASELINE_SCHEMA_VERSION} (an "
            "integer). Regenerate it with --orbench-update-baseline"
        )
    for key in ("run", "datasets", "prompts"):
        if key not in data:
            raise BaselineError(f"baseline {path} has no {key!r} section; regenerate it with --orbench-update-baseline")
    # Every key the comparison reads, with its type: a damaged baseline (a bad merge, a hand edit) is
    # refused here, before any endpoint call, not met as a KeyError mid-run or read as a wrong verdict.
    problem = (run_problem(data["run"]) or objects_problem(data["datasets"], "datasets") or prompts_problem(data["prompts"])
               or summary_mismatch(data["datasets"], data["prompts"]) or _identity_problem(data))
    if problem:
        raise BaselineError(
            f"baseline {path} is damaged: {problem}. Restore it from git, or regenerate it with --orbench-update-baseline"
        )
    return cast(BaselineDocument, data)


def _identity_problem(data: dict[str, Any]) -> str | None:
    """A dataset summarized without its identity (revision, file sha256) in `run.datasets`: check_comparable
    could not tell whether it is the run's dataset, and would compare it unchecked."""
    sets = data["run"].get("datasets") or {}
    for name in data["datasets"]:
        if name not in sets:
            return (f"`datasets` has {json.dumps(name)}, but `run.datasets` does not record its revision and sha256, "
                    "so it cannot be checked to be the run's dataset")
    return None


def _local_port_only(one: str | None, other: str | None) -> bool:
    """Two loopback URLs that differ in the port alone: a local server started on a free port each run (the
    simulator of `scripts/demo`, a test proxy), not another deployment; listing it under "changed" on every
    run would teach people to skip that line."""
    if not one or not other:
        return False
    a, b = urlsplit(one), urlsplit(other)
    return (is_loopback(a.hostname) and is_loopback(b.hostname) and a.scheme == b.scheme
            and a.path.rstrip("/") == b.path.rstrip("/"))


def check_comparable(baseline: BaselineDocument, run: RunMeta, prompt_hashes: dict[str, str]) -> list[dict[str, Any]]:
    """Raise BaselineError when the two runs measure different things; return the allowed changes.

    A different model, target, system prompt or parameters is the point of comparing; another
    dataset revision, file, judge or prompt text under the same id is not a comparison at all.
    """
    problems: list[str] = []
    old_names, new_names = list(baseline.get("datasets") or {}), list(run.get("datasets") or {})
    if new_names and not set(old_names) & set(new_names):
        raise BaselineError(
            f"the baseline shares no dataset with this run: the baseline has {', '.join(old_names) or 'none'}, "
            f"this run has {', '.join(new_names)}. Point --orbench-baseline at a baseline of these datasets, "
            "or create one with --orbench-update-baseline"
        )
    old_judge, new_judge = baseline["run"].get("judge") or {}, run.get("judge") or {}
    def judge_name(judge: dict[str, Any]) -> str:
        model = f" ({judge['model']})" if judge.get("model") else ""
        return f"{judge.get('id')} v{judge.get('version')}{model}"

    # The judge model decides verdicts as much as the judge's rules do.
    if judge_name(old_judge) != judge_name(new_judge):
        labels = "+labels." in str(old_judge.get("version")) or "+labels." in str(new_judge.get("version"))
        problems.append(f"judge: baseline {judge_name(old_judge)}, this run {judge_name(new_judge)}"
                        + (" (the judge adapts to judge_labels: a baseline judged with other labels, or none, counted "
                           "other verdicts; update it with the labels this run uses)" if labels else ""))
    old_sets, new_sets = baseline["run"].get("datasets") or {}, run.get("datasets") or {}
    for name in sorted(set(old_sets) & set(new_sets)):
        for field in ("revision", "sha256"):
            if old_sets[name].get(field) != new_sets[name].get(field):
                problems.append(f"{name} {field}: baseline {old_sets[name].get(field) or 'none'}, this run "
                                f"{new_sets[name].get(field) or 'none'}")
    changed = [p["id"] for p in baseline["prompts"] if p["id"] in prompt_hashes and prompt_hashes[p["id"]] != p["prompt_sha256"]]
    if changed:
        shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
        problems.append(f"prompt text differs for the same id: {shown}")
    if problems:
        raise BaselineError(
            "the baseline is not comparable with this run: " + "; ".join(problems)
            + ". Regenerate the baseline with --orbench-update-baseline in the change that caused this"
        )
    changes = []
    old_run = baseline["run"]
    for key, label in (("endpoint", "endpoint"), ("system_prompt_sha256", "system prompt sha256"), ("params", "params"),
                       ("revision", "revision")):
        before, now = (shown_params(r.get(key)) if key == "params" else r.get(key) for r in (old_run, run))
        if before != now:
            changes.append({"what": label, "baseline": before, "current": now})
    # The same model asked at another server (a new gateway, another vLLM deployment, the live base's
    # --orbench-base-api-base) can answer otherwise: said, as the judge's endpoint is. Both sides are
    # recorded without credentials or query (run/metadata.endpoint_meta).
    old_base, new_base = old_run.get("api_base"), run.get("api_base")
    # A live base is asked in this same session: there two local ports are two servers running side by side.
    live = against_live_base(run)
    if old_base != new_base and (live or not _local_port_only(old_base, new_base)):
        changes.append({"what": "api_base", "baseline": old_base, "current": new_base,
                        "message": f"{old_base or 'none'} → {new_base or 'none'}"})
    for key, label in (("api_base", "judge endpoint"), ("params", "judge params")):
        # The same judge model asked elsewhere or otherwise (another max_tokens, temperature): comparable, and
        # said. Baselines written before these were recorded have neither, and say nothing.
        if key in old_judge and key in new_judge and shown_params(old_judge[key]) != shown_params(new_judge[key]):
            changes.append({"what": label, "baseline": shown_params(old_judge[key]), "current": shown_params(new_judge[key])})
    changes += served_changes(old_run.get("served"), run.get("served"), str(old_run.get("endpoint")), str(run.get("endpoint")))
    return changes


def served_changes(old: dict[str, Any] | None, new: dict[str, Any] | None, old_endpoint: str,
                   endpoint: str) -> list[dict[str, Any]]:
    """What the provider changed on its own: the served model version or the system fingerprint, even
    under the same model string ("gpt-4o-2024-08-06 → gpt-4o-2024-11-20 (both openai/gpt-4o)"). Each
    served version is named with the endpoint that served it: a new model string serves its own."""
    if not old or not new:
        return []  # not known on one side (a baseline from before this was recorded, or before any reply)
    changes = []
    for key, label in (("models", "served model"), ("system_fingerprints", "system fingerprint")):
        before, after = ", ".join(sorted(old.get(key) or {})), ", ".join(sorted(new.get(key) or {}))
        if not before or not after or before == after:
            continue
        if old_endpoint == endpoint:
            message = f"{before} → {after} (both {endpoint})"
        else:
            message = f"{before} (baseline's {old_endpoint}) → {after} ({endpoint})"
        changes.append({"what": label, "baseline": before, "current": after, "message": message})
    return changes


def drift(baseline: BaselineDocument, base_results: ResultsDocument, alpha: float = 0.05) -> dict[str, Any]:
    """What changed without the pull request: the live base configuration now vs the recorded baseline
    (a provider updating a model behind the same name, nondeterminism). Reported, never gated."""
    hashes = {p["id"]: p["prompt_sha256"] for p in base_results["prompts"]}
    try:
        changes = check_comparable(baseline, base_results["run"], hashes)
    except BaselineError as exc:
        return {"comparable": False, "reason": str(exc), "datasets": {}}
    blocks = compare(baseline, base_results, alpha)
    return {
        "comparable": True, "changes": changes,
        "datasets": {name: {k: b[k] for k in ("n", "baseline_rate", "rate", "delta", "delta_ci95", "p_value", "test",
                                              "newly_refused", "newly_answered")} for name, b in blocks.items()},
    }
