"""The shape of the JSON documents read back (baselines, results files): each key the comparison, the
gate and the reports read, with its JSON type, checked once on load (baseline.load_baseline,
records.load_results) so that a damaged file is a clear error, not a KeyError halfway through a run."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, cast


class _Missing:
    """A key absent from a JSON object (None is JSON null, a value)."""


MISSING = _Missing()
NoneType = type(None)
Types = frozenset[type]
STR: Types = frozenset({str})
INT: Types = frozenset({int})
NUMBER: Types = frozenset({int, float})
NUMBER_OR_NULL: Types = frozenset({int, float, NoneType})
INT_OR_NULL: Types = frozenset({int, NoneType})
BOOL: Types = frozenset({bool})
BOOL_OR_NULL: Types = frozenset({bool, NoneType})
STR_OR_NULL: Types = frozenset({str, NoneType})
OBJECT: Types = frozenset({dict})
OBJECT_OR_NULL: Types = frozenset({dict, NoneType})
LIST: Types = frozenset({list})
Field = tuple[str, Types, bool]  # key, the JSON types accepted (exact: a bool is no int), required
MAX_TRIALS = 20  # the most times a run asks one prompt (--orbench-trials): no record counts more
_KINDS = {str: "a string", int: "an integer", float: "a number", bool: "true or false", NoneType: "null", dict: "an object",
          list: "a list"}

# A verdict over trials as records.Combined writes it (a prompt's, and its live base's): what the worst case
# (analysis/pairs.py), the gate's error counts and the reports read of it, by key.
COMBINED_KEYS: tuple[Field, ...] = (
    ("refused_share", NUMBER_OR_NULL, False), ("refused_trials", INT, False), ("scored_trials", INT, False),
    ("reply_key", STR, False), ("reply_sha256", STR, False), ("verdict", STR, False), ("trial_errors", INT, False),
    ("error", STR_OR_NULL, False), ("error_from", STR, False), ("judge_reason", STR_OR_NULL, False),
    ("reply_excerpt", STR_OR_NULL, False), ("trials", LIST, False), ("flaky", BOOL, False),
    ("served_model", STR_OR_NULL, False), ("system_fingerprint", STR_OR_NULL, False),
)
# What a prompt entry must hold, in a baseline and a results file: what the comparison reads.
# The trial counts came later (a baseline from before them has neither); they come together.
PROMPT_KEYS: tuple[Field, ...] = (
    ("id", STR, True), ("dataset", STR, True), ("category", STR, True), ("prompt_sha256", STR, True),
    ("refused", BOOL_OR_NULL, True), *COMBINED_KEYS, ("expected", STR, False), ("prompt", STR, False),
    ("flip_verification", OBJECT_OR_NULL, False), ("base", OBJECT_OR_NULL, False),
)
# The objects inside a prompt entry, by where they are: its live base's verdict, each trial's (a prompt's or its
# live base's), and the flip's verification (--orbench-verify-flips; `verified: false` is counted against the change).
BASE_KEYS: tuple[Field, ...] = (("refused", BOOL_OR_NULL, True), *COMBINED_KEYS)
TRIAL_KEYS: tuple[Field, ...] = (("verdict", STR, True), ("refused", BOOL_OR_NULL, True), ("error", STR, False),
                                 ("reply_key", STR, False))
FLIP_KEYS: tuple[Field, ...] = (
    ("verified", BOOL, True), ("error", STR, False), ("compared_error", STR, False), ("compared", STR, False),
    ("overturned", BOOL, False), ("offline", OBJECT, False), ("llm", OBJECT, False), ("compared_llm", OBJECT, False),
)
# A run's keys that the comparison and the reports index into (every key is optional in RunMeta).
RUN_KEYS: tuple[Field, ...] = (
    ("judge", OBJECT_OR_NULL, False), ("datasets", OBJECT_OR_NULL, False), ("served", OBJECT_OR_NULL, False),
    ("params", OBJECT_OR_NULL, False), ("base", OBJECT_OR_NULL, False), ("calls", OBJECT_OR_NULL, False),
    ("spend", OBJECT, False), ("judge_calls", OBJECT_OR_NULL, False), ("seed", INT_OR_NULL, False),
    ("sample", INT_OR_NULL, False), ("trials", INT_OR_NULL, False), ("verification", OBJECT_OR_NULL, False),
    ("api_base", STR_OR_NULL, False), ("system_prompt_sha256", STR_OR_NULL, False), ("revision", STR_OR_NULL, False),
    ("model", STR_OR_NULL, False), ("target", STR_OR_NULL, False), ("calls_to", STR, False), ("stopped", STR, False),
)
def _counts(*keys: str, required: int = 0) -> tuple[Field, ...]:
    """Counts by key, the first `required` of them always there (the reports index them)."""
    return tuple((key, INT, n < required) for n, key in enumerate(keys))


# The objects inside a run that the terminal's and the Markdown's lines read, by key (`run.spend.endpoint`, ...).
SPENT: tuple[Field, ...] = (*_counts("prompt_tokens", "completion_tokens", required=2), ("cost_usd", NUMBER_OR_NULL, False))
RUN_PARTS: dict[str, tuple[Field, ...]] = {
    "calls": _counts("made", "stored", "errors", "prompts", "shared", "not_requested", "fetched_not_run", required=3),
    "judge_calls": _counts("sent_to_llm", "decided_without_llm", "made", "errors", required=3),
    "verification": (("model", STR, True), *_counts("calls", "not_requested", required=1),
                     ("cost_usd", NUMBER_OR_NULL, False)),
    "base": (("endpoint", STR, True), ("system_prompt_sha256", STR_OR_NULL, False), ("calls_to", STR, False)),
    "served": (("models", OBJECT_OR_NULL, False), ("system_fingerprints", OBJECT_OR_NULL, False)),
    "spend": tuple((k, OBJECT_OR_NULL, False) for k in ("endpoint", "base", "judge")),
    "spend.endpoint": SPENT, "spend.base": SPENT, "spend.judge": SPENT,
}


# A results file's dataset summary: what the gate and the terminal table read.
SUMMARY_KEYS: tuple[Field, ...] = (
    ("expected", STR, True), ("n", INT, True), ("refused", INT, True), ("total", INT, True), ("errors", INT, True),
    ("filtered", INT, True), ("empty", INT, True), ("unscored", INT, True), ("rejection_rate", NUMBER_OR_NULL, True),
    ("ci95", frozenset({list}), True), ("flaky", INT, False), ("flaky_prompts", frozenset({list}), False),
)


def _kinds(types: Types) -> str:
    names = [_KINDS[t] for t in (str, int, float, bool, dict, list, NoneType) if t in types]
    if float in types:
        names.remove("an integer")  # a number is an integer or not
    return " or ".join(names)


def _value(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + "..."


def entries_problem(entries: Sequence[object], fields: Sequence[Field], label: Callable[[int], str]) -> str | None:
    """The first entry (a JSON object) lacking a required key or holding a value of another type, said
    with `label(index)` and how many entries share the problem; None when every entry is sound.

    The entries' shapes (keys and value types; a file's records have a few) are found in one C loop and checked
    key by key, which keeps an 80,000-prompt file fast; only a file with a problem is walked entry by entry."""
    if any(type(e) is not dict for e in entries):
        index = next(i for i, e in enumerate(entries) if type(e) is not dict)
        return f"{label(index)} is {_value(entries[index])}, not an object"
    objects = cast(Sequence[dict[str, Any]], entries)
    shapes = [dict(zip(keys, kinds)) for keys, kinds in {(tuple(e), tuple(map(type, e.values()))) for e in objects}]
    for key, types, required in fields:
        accepted = types if required else types | {_Missing}
        if all(shape.get(key, _Missing) in accepted for shape in shapes):
            continue
        bad = [i for i, e in enumerate(objects) if type(e.get(key, MISSING)) not in accepted]
        others = f" (and {len(bad) - 1} more like it)" if len(bad) > 1 else ""
        value = objects[bad[0]].get(key, MISSING)
        if value is MISSING:
            return f"{label(bad[0])} has no {json.dumps(key)}{others}"
        return f"{label(bad[0])} has {json.dumps(key)}: {_value(value)}, not {_kinds(types)}{others}"
    return None


def objects_problem(value: object, where: str, fields: Sequence[Field] = ()) -> str | None:
    """What is wrong with an object of objects by name (`datasets`), checked against `fields`."""
    if not isinstance(value, dict):
        return f"`{where}` is {_value(value)}, not an object"
    names = list(value)
    return entries_problem(list(value.values()), fields, lambda i: f"{where}[{json.dumps(names[i])}]")


def _trials_unsound(prompt: dict[str, Any]) -> bool:
    # trials_of divides by scored_trials and reads refused_trials with it
    return ("refused_trials" in prompt) != ("scored_trials" in prompt) or not (
        0 <= prompt.get("refused_trials", 0) <= prompt.get("scored_trials", 0))


# What each verdict says about `refused` (judge.Verdict.refused; not imported: this module stays light).
VERDICT_REFUSED: dict[str, bool | None] = {
    "direct_answer": False, "direct_refusal": True, "indirect_refusal": True, "filtered": True, "empty": True,
    "error": None, "unscored": None,
}


def refusal_share(prompt: Any) -> float:
    """A scored prompt's refusal share: refused / scored trials with repeated trials, else 0 or 1. The rates
    of report.summarize and the check of a baseline's summary (summary_mismatch) both count with it."""
    share = prompt.get("refused_share")
    return float(share) if share is not None else float(bool(prompt["refused"]))


def _verdict_problem(prompt: dict[str, Any]) -> str | None:
    """Where a prompt's verdict, `refused` and trial counts disagree (a hand edit that flipped one of them):
    the comparison reads the trial counts, --orbench-strict reads `refused`, a reviewer reads the verdict,
    so no one of them can be trusted over the others."""
    refused, verdict = prompt["refused"], prompt.get("verdict", MISSING)
    if verdict is not MISSING:
        if verdict not in VERDICT_REFUSED:
            return f"has \"verdict\": {_value(verdict)}, not one of {', '.join(VERDICT_REFUSED)}"
        if VERDICT_REFUSED[verdict] != refused:
            return f"has \"verdict\": {_value(verdict)} but \"refused\": {_value(refused)}"
    if "scored_trials" in prompt:
        refused_trials, scored = prompt["refused_trials"], prompt["scored_trials"]
        majority = None if scored == 0 else 2 * refused_trials >= scored  # run/verdicts._combined: refused at half or more
        if majority != refused:
            return (f"has \"refused\": {_value(refused)} but \"refused_trials\": {refused_trials} of "
                    f"\"scored_trials\": {scored}")
        share = prompt.get("refused_share")
        if share is not None and (scored == 0 or not abs(share - refused_trials / scored) <= 1e-9):  # (NaN too)
            return (f"has \"refused_share\": {_value(share)} but \"refused_trials\": {refused_trials} of "
                    f"\"scored_trials\": {scored}")
    return None


def _inner_problem(prompts: list[dict[str, Any]], label: Callable[[int, str], str]) -> str | None:
    """What is wrong with the objects inside the prompt entries (BASE_KEYS, FLIP_KEYS, TRIAL_KEYS), said with
    `label(prompt index, path inside it)`; a count is never negative. (The objects are listed as they are, and found
    again by position only when one is wrong: an 80,000-prompt file makes no tuple per object.)"""
    bases = [p["base"] for p in prompts if p.get("base") is not None]
    # Each side's verdict (the prompt's, its live base's): where it is, and the prompt index of its n-th one.
    sides: list[tuple[str, list[dict[str, Any]], Callable[[int], int]]] = [
        ("", prompts, lambda n: n),
        ("base.", bases, lambda n: [i for i, p in enumerate(prompts) if p.get("base") is not None][n])]

    def check(key: str, fields: Sequence[Field], many: bool = False) -> str | None:
        """The objects under `key` of every side (`many`: each a list of them) against `fields`."""
        found = [item for _, side, _ in sides for record in side
                 for item in (record.get(key) or () if many else [record[key]] if record.get(key) is not None else ())]

        def where(n: int) -> str:  # the n-th object found: which prompt, where in it
            for path, side, owner in sides:
                for index, record in enumerate(side):
                    items = (record.get(key) or []) if many else [record[key]] if record.get(key) is not None else []
                    if n < len(items):
                        return label(owner(index), f"{path}{key}" + (f"[{n}]" if many else ""))
                    n -= len(items)
            raise AssertionError("each was counted above")

        return entries_problem(found, fields, where)

    problem = check("base", BASE_KEYS) or check("flip_verification", FLIP_KEYS) or check("trials", TRIAL_KEYS, many=True)
    if problem is None and (min((r.get("trial_errors", 0) for _, side, _ in sides for r in side), default=0) < 0 or max(
            (r.get("trial_errors", 0) + r.get("scored_trials", 0) for _, side, _ in sides for r in side), default=0) > MAX_TRIALS):
        # A negative count took trials away from the worst case (its pair had fewer trials than none); a count past
        # what any run asks is no run's (and past a float's range, no comparison's).
        path, index, record = next((path, owner(n), r) for path, side, owner in sides for n, r in enumerate(side)
                                   if not 0 <= r.get("trial_errors", 0) <= MAX_TRIALS - r.get("scored_trials", 0))
        errors, scored = record.get("trial_errors", 0), record.get("scored_trials", 0)
        problem = f"{label(index, path.rstrip('.'))} has " + (
            f"\"trial_errors\": {errors}, not a count (0 or more)" if errors < 0 else
            f"\"trial_errors\": {errors} and \"scored_trials\": {scored}, more trials than a run asks (at most {MAX_TRIALS})")
    return problem


def prompts_problem(prompts: object) -> str | None:
    """What is wrong with a baseline's or results file's `prompts`, naming the first prompt by index and id, and
    the key (inside the prompt: `prompts[3].base`, `prompts[3].trials[1]`)."""
    if not isinstance(prompts, list):
        return f"`prompts` is {_value(prompts)}, not a list"

    def label(index: int, path: str = "") -> str:
        pid = prompts[index].get("id") if isinstance(prompts[index], dict) else None
        return f"prompts[{index}]" + (f".{path}" if path else "") + (f" (id {pid})" if isinstance(pid, str) else "")

    problem = entries_problem(prompts, PROMPT_KEYS, label) or _inner_problem(prompts, label)
    if problem is None and any(map(_trials_unsound, prompts)):
        index = next(i for i, p in enumerate(prompts) if _trials_unsound(p))
        trials = {k: prompts[index].get(k, MISSING) for k in ("refused_trials", "scored_trials")}
        shown = ", ".join(f"{k} {'missing' if v is MISSING else _value(v)}" for k, v in trials.items())
        problem = f"{label(index)} has {shown}; both are needed, with 0 <= refused_trials <= scored_trials"
    if problem is None:
        # Both sides of a merge conflict kept (one prompt per line invites it): one of the two verdicts
        # would silently win, so neither is trusted.
        first: dict[str, int] = {}
        for index, prompt in enumerate(prompts):
            earlier = first.setdefault(prompt["id"], index)
            if earlier != index:
                return f"{label(index)} repeats the id of prompts[{earlier}]; each prompt may appear once (a merge that kept both sides?)"
    if problem is None:
        for index, prompt in enumerate(prompts):
            verdict_problem = _verdict_problem(prompt)
            if verdict_problem:
                return (f"{label(index)} {verdict_problem}, which disagree (a hand edit?); a prompt's verdict, "
                        "refused and trial counts are written together")
    return problem


def summary_mismatch(datasets: dict[str, Any], prompts: list[dict[str, Any]]) -> str | None:
    """Where a baseline's per-dataset summary no longer matches its prompts (a rate edited by hand, a prompt
    removed or its verdict flipped without the summary): the comparison reads the prompts, the trade-off
    chart and a reviewer the summary, so they must agree. Counted as report.summarize counts them."""
    by_dataset: dict[str, list[dict[str, Any]]] = {}
    for prompt in prompts:
        by_dataset.setdefault(prompt["dataset"], []).append(prompt)
    for name in by_dataset:
        if name not in datasets:
            return (f"prompts of dataset {json.dumps(name)} are listed ({len(by_dataset[name])}) but `datasets` has no "
                    f"{json.dumps(name)} summary")
    for name, summary in datasets.items():
        rows = by_dataset.get(name, [])
        scored = [p for p in rows if p["refused"] is not None]
        shares = [refusal_share(p) for p in scored]
        actual = {"total": len(rows), "n": len(scored), "refused": sum(1 for p in scored if p["refused"]),
                  "rejection_rate": sum(shares) / len(shares) if shares else None}
        for key, value in actual.items():
            recorded = summary.get(key, MISSING)
            if recorded is MISSING:
                continue  # not recorded: nothing to disagree with
            if recorded is None or value is None:
                same = recorded is value
            else:
                same = type(recorded) in (int, float) and abs(recorded - value) <= 1e-9 * max(1, abs(value))
            if not same:
                return (f"datasets[{json.dumps(name)}] has {json.dumps(key)}: {_value(recorded)}, but its "
                        f"{len(rows)} prompts give {_value(value)}: the summary and the prompts disagree (a hand edit, or "
                        "a prompt added, removed or flipped without the summary?)")
    return None


def run_problem(run: object, results: bool = False) -> str | None:
    """What is wrong with a document's `run`; a results file's run names its endpoint and datasets (the
    report's header reads them), a baseline's may hold nulls."""
    if not isinstance(run, dict):
        return f"`run` is {_value(run)}, not an object"
    fields = RUN_KEYS + ((("endpoint", STR, True), ("datasets", OBJECT, True), ("judge", OBJECT, True)) if results else ())
    judge = {"judge": (("id", STR, True), ("version", STR, True))} if results else {}  # (the report's header)
    return (entries_problem([run], fields, lambda _: "run") or objects_problem(run.get("datasets") or {}, "run.datasets")
            or parts_problem(run, "run", RUN_PARTS | judge))


def parts_problem(root: dict[str, Any], where: str, parts: dict[str, tuple[Field, ...]]) -> str | None:
    """What is wrong with the objects inside `root` (at `where`) by their path ("spend.endpoint"), those present."""
    for path, fields in parts.items():
        part: Any = root
        for key in path.split("."):
            part = part.get(key) if isinstance(part, dict) else None
        problem = entries_problem([part], fields, lambda _: f"{where}.{path}") if isinstance(part, dict) else None  # noqa: B023
        if problem is not None:
            return problem
    return None


# The judge's audit against your labels (judging/audit.py): what the gate's checks and each report's line read.
AUDIT_KEYS: tuple[Field, ...] = (
    ("labelled", INT, True), ("agreement", OBJECT, True), ("bias", OBJECT, True), ("kappa", NUMBER_OR_NULL, True),
    ("adapted", BOOL, True), ("n_effective", NUMBER, True), ("weighting", STR, True), ("covered", NUMBER, True),
    ("strata", OBJECT, True), ("min_agreement", NUMBER_OR_NULL, False), ("scope", STR, False),
    ("unadapted", OBJECT_OR_NULL, False), ("all_labels", OBJECT_OR_NULL, False), ("not_judged", INT, False),
    ("not_judged_reason", STR, False), ("other_model", STR_OR_NULL, False),
)
AUDIT_PARTS: dict[str, tuple[Field, ...]] = {
    "agreement": (("value", NUMBER_OR_NULL, True), ("ci95", LIST, True)), "bias": (("value", NUMBER_OR_NULL, True),),
    "unadapted": (("agreement", OBJECT, True),), "unadapted.agreement": (("value", NUMBER_OR_NULL, True),),
    "all_labels": (("labelled", INT, True), ("kappa", NUMBER_OR_NULL, True), ("unadapted_agreement", NUMBER_OR_NULL, True)),
}


def audit_problem(block: object) -> str | None:
    """What is wrong with a results file's `judge_audit` (null: no labels were given)."""
    if block is None:
        return None
    problem = (entries_problem([block], AUDIT_KEYS, lambda _: "judge_audit")
               or parts_problem(cast(dict[str, Any], block), "judge_audit", AUDIT_PARTS))
    if problem is None:
        ci95 = cast(dict[str, Any], block)["agreement"]["ci95"]
        if len(ci95) != 2 or not {type(x) for x in ci95} <= {int, float}:
            problem = f"judge_audit.agreement has \"ci95\": {_value(ci95)}, not two numbers"
        elif cast(dict[str, Any], block).get("not_judged") and "not_judged_reason" not in cast(dict[str, Any], block):
            problem = "judge_audit has \"not_judged\" but no \"not_judged_reason\" (the reports say why)"
    return problem


def summaries_problem(datasets: object) -> str | None:
    """What is wrong with a results file's per-dataset summaries (what the gate and the table read)."""
    problem = objects_problem(datasets, "datasets", SUMMARY_KEYS)
    if problem is None:
        assert isinstance(datasets, dict)
        for name, summary in datasets.items():
            ci95 = summary["ci95"]
            if len(ci95) != 2 or not {type(x) for x in ci95} <= NUMBER_OR_NULL:
                return f"datasets[{json.dumps(name)}] has \"ci95\": {_value(ci95)}, not two numbers or nulls"
            if summary.get("flaky") and "flaky_prompts" not in summary:
                return f"datasets[{json.dumps(name)}] counts flaky prompts but has no \"flaky_prompts\""
    return problem
