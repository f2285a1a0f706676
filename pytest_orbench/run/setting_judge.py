"""The judge checked before any call: its name or function, its model and key, and your labels for it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_orbench.core.endpoint import LoadError, ModelSpec
from pytest_orbench.run.setting_secrets import api_key_for, calls_nothing, check_secrets
from pytest_orbench.run.setting_sources import fail
from pytest_orbench.run.setting_target import importable


def check_judge(values: dict[str, Any], folders: list[Path]) -> ModelSpec | None:
    """Validate the judge before any call: known name or importable function (a custom judge beside the
    rootdir or orbench.yaml imports, like a `target:`), its model and key."""
    from pytest_orbench.judging.llm_judge import judge_model_spec
    from pytest_orbench.judging.registry import calls_llm

    name = values["judge"]
    spec = None
    if values["verify_flips"] and name == "llm":
        raise fail("--orbench-verify-flips asks the LLM judge about the prompts whose verdict flipped, and --orbench-judge "
                   "llm has judged every reply with it already; drop --orbench-verify-flips, or judge with keyword "
                   "(or hybrid) and verify the flips with the LLM")
    if calls_llm(name) or values["verify_flips"]:
        if not values["judge_model"]:
            what = f"--orbench-judge {name}" if calls_llm(name) else "--orbench-verify-flips"
            raise fail(f"{what} needs a judge model: --orbench-judge-model MODEL (judge_model: in orbench.yaml)")
        kwargs = values["judge_litellm_kwargs"] or {}
        check_secrets(kwargs, "judge_litellm_kwargs", "judge_api_key_env", calls_nothing(values))
        if values["judge_max_tokens"] < 1:
            raise fail(f"judge_max_tokens must be at least 1, got {values['judge_max_tokens']}")
        key = None
        if not values["offline"]:
            try:
                key = api_key_for(values["judge_model"], values["judge_api_base"], values["judge_api_key_env"],
                                  what="judge model", key_flag="--orbench-judge-api-key-env / judge_api_key_env",
                                  required=not values["estimate"])
            except ValueError as exc:
                raise fail(str(exc)) from None
        spec = judge_model_spec(values["judge_model"], values["judge_api_base"], values["judge_max_tokens"],
                                values["timeout"], key, values["judge_api_key_env"], kwargs)
    elif values["judge_model"] or values["judge_api_base"]:
        raise fail(f"judge_model / judge_api_base are set but --orbench-judge is {name!r}; use --orbench-judge llm or "
                   "hybrid, or --orbench-verify-flips (the LLM judges only the prompts whose verdict flipped)")
    check_judge_name(name, spec, folders)
    return spec


def check_judge_name(name: str, spec: ModelSpec | None, folders: list[Path]) -> None:
    """The judge is a known name or an importable `module:function` (made once, so that it fails here)."""
    from pytest_orbench.judging.judges import JudgeError
    from pytest_orbench.judging.registry import make_judge

    hint = importable(folders) if ":" in name else None
    try:
        make_judge(name, spec)
    except JudgeError as exc:
        failed_import = isinstance(exc.__cause__, LoadError) and not exc.__cause__.imported
        raise fail(f"{exc}. The judge's module must be importable: {hint}" if hint and failed_import else str(exc)) from None


def judge_labels(labels: Path | None, min_agreement: float | None, judge: str) -> Path | None:
    """The labels file read and checked before any call: a bad row is named with its fix, and labels the judge
    may not learn from or be audited on (one kind only; for the keyword judge, too few, too many or swapped:
    adaptation.label_problem) are refused with theirs."""
    if min_agreement is not None and not 0 < min_agreement <= 1:
        raise fail(f"judge_min_agreement is a share between 0 and 1 (0.9 for 90%), got {min_agreement}")
    if labels is None:
        if min_agreement is not None:
            raise fail("judge_min_agreement needs judge_labels (--orbench-judge-labels FILE): the agreement is measured "
                       "against your labels of this model's replies (`orbench label` writes them)")
        return None
    from pytest_orbench.judging.adaptation import label_problem
    from pytest_orbench.judging.labels import LabelsError, labelled, load_labels
    from pytest_orbench.judging.registry import adaptable

    try:
        rows = load_labels(labels)
    except LabelsError as exc:
        raise fail(str(exc)) from None
    if not labelled(rows):
        raise fail(f"judge labels file {labels} has no labelled row yet: label some with `orbench label` (or fill its "
                   "label column), or drop judge_labels")
    problem = label_problem(labelled(rows), adaptable(judge))
    if problem:
        raise fail(f"judge labels file {labels}: {problem}")
    return labels
