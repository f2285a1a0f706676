"""`orbench judge-eval`: a judge measured against a file of human labels, and audited against --judge-labels."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_orbench.core.dependencies import compromised_problem
from pytest_orbench.tools.cli.judge_names import OFFLINE_JUDGES
from pytest_orbench.tools.cli.option_checks import at_least, fail

if TYPE_CHECKING:
    from pytest_orbench.judging.labels import Label


def run(args: argparse.Namespace) -> int:
    from pytest_orbench.calls.litellm_api import api_key_for
    from pytest_orbench.core.jsonfile import dumps, output_problem, write_atomic
    from pytest_orbench.core.store_database import store_problem
    from pytest_orbench.core.urls import api_base_problem
    from pytest_orbench.judging.judges import JudgeError
    from pytest_orbench.judging.labels import LabelsError
    from pytest_orbench.judging.llm_judge import judge_model_spec
    from pytest_orbench.judging.registry import adaptable, calls_llm, make_judge
    from pytest_orbench.tools.judge_eval import (
        LabeledError,
        compare_judges,
        evaluate,
        judge_examples,
        load_labeled,
        text_report,
    )

    sys.path.insert(0, os.getcwd())  # custom judges live in the user's project, as with pytest's rootdir
    problem = (at_least(args, "concurrency", 1) or at_least(args, "retries", 0) or at_least(args, "show", 0)
               or at_least(args, "judge_max_tokens", 1)
               or output_problem({"--json": Path(args.json) if args.json else None}, {"LABELED": Path(args.labeled)}))
    if problem:
        return fail(problem)
    if not 0 < args.timeout <= 3600:
        return fail(f"--timeout must be a number of seconds between 0 and 3600, got {args.timeout}")
    if args.fail_under is not None and not 0 <= args.fail_under <= 1:
        return fail(f"--fail-under is a share between 0 and 1 (0.9 for 90%), got {args.fail_under}")
    if not calls_llm(args.judge) and (args.judge_model or args.judge_api_base):
        return fail(f"--judge-model / --judge-api-base are set but --judge is {args.judge!r}, which calls no model; "
                     "use --judge llm or hybrid, or drop them")
    spec = None
    try:
        examples = load_labeled(Path(args.labeled))
        if calls_llm(args.judge):
            problem = compromised_problem()
            if problem:
                return fail(problem)
            if not args.judge_model:
                return fail(f"--judge {args.judge} needs --judge-model MODEL (a litellm model string)")
            problem = api_base_problem(args.judge_api_base)
            if problem:
                return fail(f"--judge-api-base {problem}")
            problem = store_problem(Path(args.store), "--store")
            if problem:
                return fail(problem)
            key = api_key_for(args.judge_model, args.judge_api_base, args.judge_api_key_env, what="judge model",
                              key_flag="--judge-api-key-env")
            spec = judge_model_spec(args.judge_model, args.judge_api_base, args.judge_max_tokens, args.timeout, key,
                                    args.judge_api_key_env)
        labels = _judge_labels(args)
        keyword_model = None
        if labels and adaptable(args.judge):
            from pytest_orbench.judging.adaptation import adapt
            from pytest_orbench.judging.keyword_weights import load_model

            keyword_model = adapt(load_model(), labels)
        judge = make_judge(args.judge, spec, keyword_model)
    except (LabeledError, JudgeError, ValueError, LabelsError) as exc:
        return fail(str(exc))
    other = None
    if args.against:  # checked before any judge call, like the judge itself
        if calls_llm(args.against):
            return fail(f"--against takes an offline judge ({OFFLINE_JUDGES})")
        try:
            other = make_judge(args.against)
        except JudgeError as exc:
            return fail(f"--against: {exc}")
    make_stage = None
    if judge.llm is not None:
        from pytest_orbench.core.store import Store
        from pytest_orbench.judging.llm_calls import JudgeStage

        llm = judge.llm
        store = Store(Path(args.store), check=True)
        make_stage = lambda: JudgeStage(llm, store, args.retries)  # noqa: E731
    judgements = judge_examples(judge, examples, make_stage, args.concurrency)
    result = evaluate(examples, judgements, judge.meta())
    result["source"] = {"file": str(args.labeled)}
    if labels:
        result["judge_audit"] = _labels_audit(args, judge, labels, make_stage)
    if other is not None:
        result["against"] = compare_judges(examples, judgements, judge_examples(other, examples), other.meta())
    for line in text_report(result, show=args.show, by=args.by):
        print(line)
    if labels:
        from pytest_orbench.judging.audit import summary_line
        from pytest_orbench.render.terminal import term_safe

        audit = result["judge_audit"]
        print(f"judge audit ({term_safe(args.judge_labels)}): the judge {term_safe(summary_line(audit))}")
        for note in (audit.get("other_model"),
                     audit.get("not_judged") and f"{audit['not_judged']} {audit['not_judged_reason']}"):
            if note:
                print(f"  {term_safe(str(note))}")
    if args.json:
        write_atomic(Path(args.json), dumps(result, records_key="disagreements"))
        print(f"wrote {args.json}")
    if result["errors"]:
        # Figures over the rows that were judged are not figures over the file: never an exit 0 (or a
        # --fail-under pass) for an evaluation the judge did not finish.
        first = next(d["reason"] for d in result["disagreements"] if d["verdict"] == "error")
        print(f"{result['errors']} of {result['rows']} rows have no judgement (first: {first}); the figures cover "
              f"only the {result['scored']} scored rows. Fix the judge or its endpoint and run again (LLM judgements "
              "already made are stored and reused)", file=sys.stderr)
        return 1
    agreement = result["binary_agreement"]["value"]
    if agreement is None:
        # Nothing was measured (every judgement failed or went unscored): never an exit 0 that reads as a result.
        print(f"nothing was measured: none of the {result['rows']} replies got a verdict ({result['errors']} errors, "
              f"{result['unscored']} unscored; each error is listed among the disagreements: --show N, or --json)", file=sys.stderr)
        return 1
    if args.fail_under is not None and agreement < args.fail_under:
        print(f"binary agreement below --fail-under {args.fail_under}", file=sys.stderr)
        return 1
    return 0


def _judge_labels(args: argparse.Namespace) -> list[Label]:
    """--judge-labels: the labelled rows (LabelsError names a bad row)."""
    from pytest_orbench.judging.labels import LabelsError, labelled, load_labels

    if not args.judge_labels:
        return []
    rows = labelled(load_labels(Path(args.judge_labels)))
    if not rows:
        raise LabelsError(f"judge labels file {args.judge_labels} has no labelled row yet: label some with `orbench "
                          "label`, or fill its label column")
    return rows


def _labels_audit(args: argparse.Namespace, judge: Any, labels: list[Label], make_stage: Any) -> dict[str, Any]:
    """The audit of `judge` against the labels: cross-validated for the adapted keyword judge; the judge's own
    verdicts on the labelled replies otherwise (LLM calls stored, as for FILE)."""
    from pytest_orbench.judging.audit import audit_judge
    from pytest_orbench.judging.registry import adaptable, calls_llm
    from pytest_orbench.tools.judge_eval import Example, judge_examples

    verdicts: list[dict[str, Any]] = []
    if calls_llm(judge.id) or not adaptable(judge.id):  # (the adaptable offline judge: cross-validated by the audit)
        rows = [Example(n, label.prompt, label.response, label.label, "") for n, label in enumerate(labels, start=1)]
        for label, judgement in zip(labels, judge_examples(judge, rows, make_stage, args.concurrency)):
            refused = getattr(getattr(judgement, "verdict", None), "refused", None)
            if refused is not None:
                verdicts.append({"reply_digest": label.key, "refused": refused})
    return audit_judge(judge, labels, verdicts, labels_file=str(args.judge_labels), min_agreement=args.fail_under,
                       run_model=None)
