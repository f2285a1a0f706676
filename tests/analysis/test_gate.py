"""Baseline comparison and gate as pure functions, on hand-built results."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from pytest_orbench import __version__
from pytest_orbench.analysis.baseline import (
    BaselineError,
    baseline_document,
    check_comparable,
    load_baseline,
    save_baseline,
)
from pytest_orbench.analysis.document import assess, results_document
from pytest_orbench.analysis.gate import GateConfigError, evaluate, parse_gate
from pytest_orbench.analysis.pairs import compare
from pytest_orbench.analysis.summary import summarize
from pytest_orbench.core.records import ResultsError, load_results
from pytest_orbench.render.markdown import render_markdown
from pytest_orbench.render.markdown_escape import md_escape
from pytest_orbench.render.markdown_fit import render_markdown_within
from pytest_orbench.render.terminal import gate_lines


def make_results(refused: dict[str, list[bool | None]], *, system: str | None = None, judge_version: str = "1",
                 categories: int = 2, sample: int | None = None) -> dict[str, Any]:
    expected = {"hard-1k": "answer", "toxic": "refuse"}
    records = []
    for name, flags in refused.items():
        for i, flag in enumerate(flags):
            records.append({
                "id": f"{name}-{i:04d}", "dataset": name, "category": f"c{i % categories}", "expected": expected[name],
                "prompt_sha256": f"sha-{name}-{i}", "prompt": f"prompt {i} @someone <b>x</b>",
                "verdict": "error" if flag is None else "direct_refusal" if flag else "direct_answer",
                "refused": flag, "matched": None, "from_store": False, "fetched": True, "reply_excerpt": "reply",
            })
    run = {"endpoint": "openai/m", "model": "openai/m", "target": None, "api_base": None, "params": {"temperature": 0},
           "system_prompt_sha256": system, "system_prompt_source": None, "judge": {"id": "keyword", "version": judge_version},
           "seed": 1, "sample": sample,
           "datasets": {n: {"repo": "r", "revision": "rev", "sha256": f"file-{n}", "file": n} for n in refused}}
    return results_document(run, summarize(records, {n: expected[n] for n in refused}), records)


def test_flip_counts_delta_and_exact_p() -> None:
    # 6 safe prompts newly refused, 1 newly answered; 3 toxic prompts newly answered.
    base = make_results({"hard-1k": [False] * 99 + [True], "toxic": [True] * 50})
    now = make_results({"hard-1k": [True] * 6 + [False] * 94, "toxic": [False] * 3 + [True] * 47}, system="abc")
    comparison = compare(baseline_document(base), now)
    hard, toxic = comparison["hard-1k"], comparison["toxic"]
    assert (hard["newly_refused"], hard["newly_answered"], hard["baseline_refused"], hard["refused"]) == (6, 1, 1, 6)
    assert hard["delta"] == pytest.approx(0.05)
    assert hard["p_value"] == pytest.approx(sum(__import__("math").comb(7, k) for k in (6, 7)) / 2**7)
    assert hard["delta_ci95"][0] < 0.05 < hard["delta_ci95"][1]
    assert toxic["newly_answered"] == 3 and toxic["p_value"] == pytest.approx(1 / 8)
    assert set(hard["categories"]) == {"c0", "c1"}
    assert hard["newly_refused_ids"] == [f"hard-1k-{i:04d}" for i in range(6)]


def test_gate_regression_needs_both_tolerance_and_significance() -> None:
    base = baseline_document(make_results({"hard-1k": [False] * 200}))
    now = make_results({"hard-1k": [True] * 8 + [False] * 192})  # +4 pp, p = 1/256
    results = assess(now, base, parse_gate({}))
    assert results["gate"]["verdict"] == "fail"
    check = next(c for c in results["gate"]["checks"] if c["kind"] == "regression")
    assert check["observed"] == pytest.approx(0.04) and check["p_value"] == pytest.approx(1 / 256)
    tolerant = assess(make_results({"hard-1k": [True] * 8 + [False] * 192}), base, parse_gate({"tolerance_pp": 5}))
    assert tolerant["gate"]["verdict"] == "pass"
    noisy = assess(make_results({"hard-1k": [True] * 2 + [False] * 198}), base, parse_gate({}))
    assert noisy["gate"]["verdict"] == "pass"  # 2 flips: p = 0.25, noise


def test_toxic_regression_is_fewer_refusals() -> None:
    base = baseline_document(make_results({"toxic": [True] * 100}))
    results = assess(make_results({"toxic": [False] * 10 + [True] * 90}), base, parse_gate({}))
    failed = [c for c in results["gate"]["checks"] if c["outcome"] == "fail"]
    assert [c["name"] for c in failed] == ["toxic regression (fewer refusals)"]
    assert failed[0]["observed"] == pytest.approx(0.10)
    better = assess(make_results({"toxic": [True] * 100}), baseline_document(make_results({"toxic": [False] * 10 + [True] * 90})), parse_gate({}))
    assert better["gate"]["passed"]


def test_no_move_is_plus_zero_in_every_output() -> None:
    import math

    from pytest_orbench.analysis.wording import pp

    # Toxic unchanged: its check once said "-0.0 pp in the regression direction" (and the JSON -0.0) beside
    # the table's "+0.0 pp"; refusal shares summed in another order leave -1e-17, once printed "-0.0 pp".
    base = baseline_document(make_results({"toxic": [True] * 30}))
    check = next(c for c in assess(make_results({"toxic": [True] * 30}), base, parse_gate({}))["gate"]["checks"]
                 if c["kind"] == "regression")
    assert check["message"].startswith("+0.0 pp in the regression direction") and math.copysign(1, check["observed"]) == 1
    assert (pp(-1e-17), pp(-0.0), pp(-0.0004), pp(-0.0006), pp(0.05)) == ("+0.0 pp", "+0.0 pp", "+0.0 pp", "-0.1 pp", "+5.0 pp")


def test_absolute_limits_and_error_budget() -> None:
    results = make_results({"hard-1k": [True] * 15 + [False] * 85, "toxic": [True] * 80 + [False] * 20})
    gate = evaluate(results, parse_gate({"hard-1k": {"max_rejection": 0.10}, "toxic": {"min_rejection": 0.90}}))
    assert gate["verdict"] == "fail"
    names = {c["name"]: c for c in gate["checks"]}
    assert names["hard-1k rejection rate at most 10.0%"]["observed"] == pytest.approx(0.15)
    assert names["toxic rejection rate at least 90.0%"]["outcome"] == "fail"
    errored = make_results({"hard-1k": [None] * 3 + [False] * 97})
    for i, error in enumerate(["HTTP 503 from x", "not requested: the run's spend reached the --orbench-max-cost limit"] * 2):
        if i < 3:
            errored["prompts"][i]["error"] = error
    assert evaluate(errored, parse_gate({}))["verdict"] == "inconclusive"
    # The check says why, not only how many (once only "3 of 100 prompts errored"): a spend limit, an endpoint down.
    budget = next(c for c in evaluate(errored, parse_gate({}))["checks"] if c["name"] == "hard-1k error budget")
    assert budget["message"].endswith("too many to conclude anything; most common error: HTTP 503 from x (2x)")
    assert evaluate(errored, parse_gate({"error_budget": 0.05}))["verdict"] == "ungated"  # within budget, nothing gated


def test_one_paired_prompt_is_said_in_the_singular() -> None:
    now = make_results({"hard-1k": [True] * 40 + [False] * 60})
    gate = assess(now, baseline_document(make_results({"hard-1k": [False]})), parse_gate({}))["gate"]
    assert [w.split("; ")[-1] if "covers" in w else w.split(" is too")[0] for w in gate["warnings"]] == [
        "the regression check covers 1 paired prompt (update the baseline from a run of the same prompts to check them all)",
        "hard-1k: this sample of 1 paired prompt"]


def test_a_check_that_could_not_fail_is_inconclusive_never_a_pass() -> None:
    # A sample drawn with another seed shares few or no prompts with the baseline: with n paired prompts the
    # smallest one-sided p is 0.5 ** n, so at alpha 0.05 four or fewer can never show a regression.
    now = make_results({"hard-1k": [True] * 40 + [False] * 60})
    few = baseline_document(make_results({"hard-1k": [False] * 4}))
    gate = assess(now, few, parse_gate({}))["gate"]
    (check,) = [c for c in gate["checks"] if c["kind"] == "regression"]
    assert gate["verdict"] == "inconclusive" and check["outcome"] == "inconclusive"
    assert check["message"].startswith("only 4 paired prompts: even if every one regressed, p would be 0.0625 >= alpha 0.05")
    assert check["message"].endswith("run the baseline's prompts (the same datasets, sample size and seed)")  # 96 unpaired
    # Every prompt paired (a four-prompt file, a live base asked the same prompts): running the baseline's
    # prompts again would change nothing; the set is too small.
    tiny = make_results({"hard-1k": [True] * 4})
    gate = assess(tiny, baseline_document(make_results({"hard-1k": [False] * 4})), parse_gate({}))["gate"]
    (check,) = [c for c in gate["checks"] if c["kind"] == "regression"]
    assert check["outcome"] == "inconclusive" and check["message"].endswith(
        "compare more prompts (a larger --orbench-sample, or a larger dataset)")
    none = baseline_document(make_results({"hard-1k": [False] * 10}))
    for prompt in none["prompts"]:
        prompt["id"] = "other-" + prompt["id"]
    gate = assess(make_results({"hard-1k": [False] * 10}), none, parse_gate({}))["gate"]
    assert gate["verdict"] == "inconclusive"
    assert "no prompt of this run is in the baseline: nothing was compared" in gate["checks"][-1]["message"]
    five = baseline_document(make_results({"hard-1k": [False] * 5}))  # 0.5 ** 5 < 0.05: a real check
    assert assess(make_results({"hard-1k": [False] * 5}), five, parse_gate({}))["gate"]["verdict"] == "pass"


def test_a_run_that_stopped_early_is_inconclusive_unless_it_already_failed() -> None:
    from pytest_orbench.analysis.document import mark_stopped

    base = baseline_document(make_results({"hard-1k": [False] * 200}))
    results = assess(make_results({"hard-1k": [False] * 200}), base, parse_gate({}))
    mark_stopped(results["gate"], "the run stopped early (stopping after 1 failures) after 65 of 200 prompts")
    assert results["gate"]["verdict"] == "inconclusive" and not results["gate"]["passed"]
    assert results["gate"]["checks"][0]["name"] == "completeness"
    failed = assess(make_results({"hard-1k": [True] * 8 + [False] * 192}), base, parse_gate({}))
    mark_stopped(failed["gate"], "the run was interrupted after 120 of 200 prompts")
    assert failed["gate"]["verdict"] == "fail"
    ungated = assess(make_results({"hard-1k": [False] * 20}), None, parse_gate({}))
    mark_stopped(ungated["gate"], "the run was interrupted after 20 of 200 prompts")
    assert ungated["gate"]["verdict"] == "inconclusive" and "note" not in ungated["gate"]


def test_prompts_that_did_not_run_are_named_with_what_the_checks_cover() -> None:
    # 200 prompts in the run, 60 ran (-k deselected the rest): the regression check covers 60 pairs and says so.
    base = baseline_document(make_results({"hard-1k": [False] * 200}))
    ran = make_results({"hard-1k": [False] * 60})
    ran["run"]["datasets"]["hard-1k"]["selected"] = 200
    results = assess(ran, base, parse_gate({}))
    assert results["gate"]["verdict"] == "pass" and results["datasets"]["hard-1k"]["comparison"]["not_run"] == 140
    assert ("hard-1k: 140 of the run's 200 prompts did not run (deselected with -k, -m, node ids, --deselect, --lf or "
            "--sw, or the run stopped) and were not checked; the regression check covers the 60 paired prompts that "
            "ran") in results["gate"]["warnings"]
    assert any("this sample of 60 paired prompts can only detect" in w for w in results["gate"]["warnings"])
    # Too few ran to detect anything: the advice is to run them, not to sample more.
    few = make_results({"hard-1k": [False] * 3})
    few["run"]["datasets"]["hard-1k"]["selected"] = 200
    (check,) = [c for c in assess(few, base, parse_gate({}))["gate"]["checks"] if c["kind"] == "regression"]
    assert check["outcome"] == "inconclusive" and check["message"].endswith(
        "197 of the run's prompts did not run: run them all (without -k, -m, node ids, --deselect, --lf or --sw)")
    # Absolute limits alone: the same warning, about the rates.
    limited = make_results({"hard-1k": [False] * 60})
    limited["run"]["datasets"]["hard-1k"]["selected"] = 200
    gate = assess(limited, None, parse_gate({"hard-1k": {"max_rejection": 0.1}}))["gate"]
    assert gate["warnings"][0].endswith("were not checked; its rejection-rate limits cover the 60 that ran")
    # Every prompt ran: no such warning.
    whole = make_results({"hard-1k": [False] * 200})
    whole["run"]["datasets"]["hard-1k"]["selected"] = 200
    whole_gate = assess(whole, base, parse_gate({}))["gate"]
    assert not any("did not run" in w for w in whole_gate["warnings"])


def test_sampled_run_warns_below_detectable_increase() -> None:
    base = baseline_document(make_results({"hard-1k": [False] * 50}, sample=50))
    results = assess(make_results({"hard-1k": [False] * 50}, sample=50), base, parse_gate({}))
    assert results["datasets"]["hard-1k"]["comparison"]["detectable"] > 0.1
    assert any("can only detect an increase of about" in w for w in results["gate"]["warnings"])


def test_sampled_run_within_a_rate_limit_its_interval_crosses_says_so() -> None:
    # 20 sampled prompts: 8 safe ones refused (40.0%, 95% interval [21.9%, 61.3%]) under "at most 50%", 16
    # toxic ones (80.0%, [58.4%, 91.9%]) over "at least 70%". Once two silent passes.
    limits = parse_gate({"hard-1k": {"max_rejection": 0.5}, "toxic": {"min_rejection": 0.7}})
    flags = {"hard-1k": [True] * 8 + [False] * 12, "toxic": [True] * 16 + [False] * 4}
    gate = evaluate(make_results(flags, sample=20), limits, sampled=True)
    assert gate["verdict"] == "pass"
    assert gate["warnings"] == [
        "hard-1k: the rejection rate 40.0% of these 20 prompts is within the limit (at most 50.0%), but its 95% "
        "interval [21.9%, 61.3%] reaches past it, so the dataset's rate may not meet the limit (run more prompts to "
        "check it)",
        "toxic: the rejection rate 80.0% of these 20 prompts is within the limit (at least 70.0%), but its 95% "
        "interval [58.4%, 91.9%] reaches past it, so the dataset's rate may not meet the limit (run more prompts to "
        "check it)"]
    # A whole dataset is its own rate; a sample whose interval clears the limit is checked.
    assert evaluate(make_results(flags), limits)["warnings"] == []
    clear = parse_gate({"hard-1k": {"max_rejection": 0.7}, "toxic": {"min_rejection": 0.5}})
    assert evaluate(make_results(flags, sample=20), clear, sampled=True)["warnings"] == []


@pytest.mark.parametrize(("gate", "message"), [
    ({"alpha": 2}, "gate.alpha must be between 0 and 1"),
    ({"alpha": 0}, "gate.alpha must be between 0 and 1 (exclusive), got 0"),
    ({"hard-1k": {"alpha": 1.0}}, "gate.hard-1k.alpha must be between 0 and 1 (exclusive), got 1.0"),
    ({"hard-1k": {"max_rejection": "low"}}, "gate.hard-1k.max_rejection must be a number"),
    ({"hard-1k": {"maximum": 0.1}}, "unknown key(s) ['maximum']"),
    ({"tolerance": 1}, "gate.tolerance: expected one of"),
])
def test_gate_config_errors(gate: dict[str, Any], message: str) -> None:
    with pytest.raises(GateConfigError, match=__import__("re").escape(message)):
        parse_gate(gate)


def test_incomparable_baselines_are_refused_with_what_differs() -> None:
    base = baseline_document(make_results({"hard-1k": [False] * 5}))
    other_judge = make_results({"hard-1k": [False] * 5}, judge_version="2")
    with pytest.raises(BaselineError, match="judge: baseline keyword v1, this run keyword v2"):
        check_comparable(base, other_judge["run"], {})
    moved = make_results({"hard-1k": [False] * 5})
    moved["run"]["datasets"]["hard-1k"]["revision"] = "rev2"
    with pytest.raises(BaselineError, match="hard-1k revision: baseline rev, this run rev2"):
        check_comparable(base, moved["run"], {})
    with pytest.raises(BaselineError, match="prompt text differs for the same id: hard-1k-0003"):
        check_comparable(base, moved["run"] | {"datasets": base["run"]["datasets"]}, {"hard-1k-0003": "other"})
    changes = check_comparable(base, make_results({"hard-1k": [False] * 5}, system="new")["run"], {})
    assert changes == [{"what": "system prompt sha256", "baseline": None, "current": "new"}]


def test_baseline_file_is_stable_reviewable_and_validated(tmp_path: Path) -> None:
    path = tmp_path / "baseline.json"
    save_baseline(path, make_results({"hard-1k": [False, True, None]}))
    text = path.read_text()
    lines = text.splitlines()
    prompt_lines = [line for line in lines if line.strip().startswith('{"category"')]
    assert len(prompt_lines) == 3  # one prompt per line
    assert json.loads(text)["schema_version"] == 1
    save_baseline(path, make_results({"hard-1k": [False, True, None]}))
    assert path.read_text() == text  # stable
    assert set(json.loads(prompt_lines[0].rstrip(","))) == {"id", "dataset", "category", "prompt_sha256", "verdict", "refused"}
    assert load_baseline(path)["prompts"][1]["refused"] is True
    for content, message in (("{", "is not valid JSON"), ("{}", "is not a pytest-orbench baseline"),
                             ('{"schema": "pytest-orbench/baseline", "schema_version": 9}', "has schema version 9")):
        path.write_text(content)
        with pytest.raises(BaselineError, match=message):
            load_baseline(path)
    with pytest.raises(BaselineError, match="cannot read baseline .*--orbench-update-baseline"):
        load_baseline(tmp_path / "missing.json")


def _drop(key: str) -> Any:
    return lambda d: [p.pop(key) for p in d["prompts"]]


@pytest.mark.parametrize(("damage", "message"), [
    (_drop("refused"), 'prompts[0] (id hard-1k-0000) has no "refused" (and 2 more like it)'),
    (_drop("prompt_sha256"), 'prompts[0] (id hard-1k-0000) has no "prompt_sha256" (and 2 more like it)'),
    (_drop("id"), 'prompts[0] has no "id" (and 2 more like it)'),
    (lambda d: d["prompts"][1].update(refused="yes"), 'prompts[1] (id hard-1k-0001) has "refused": "yes", not true or false or null'),
    (lambda d: d["prompts"].__setitem__(1, "x"), 'prompts[1] is "x", not an object'),
    (lambda d: d["run"].update(judge="keyword"), 'run has "judge": "keyword", not an object or null'),
    (lambda d: d["run"]["datasets"].update({"hard-1k": []}), 'run.datasets["hard-1k"] is [], not an object'),
    (lambda d: d.update(datasets=[]), "`datasets` is [], not an object"),
    (lambda d: d.update(prompts={}), "`prompts` is {}, not a list"),
    # A merge that kept both sides of a conflict: two verdicts for one prompt, one of which would silently win.
    (lambda d: d["prompts"].append(d["prompts"][1] | {"refused": False}),
     "prompts[3] (id hard-1k-0001) repeats the id of prompts[1]; each prompt may appear once"),
])
def test_damaged_baseline_is_refused_naming_the_prompt_and_key(tmp_path: Path, damage: Any, message: str) -> None:
    error = _damaged(tmp_path / "baseline.json", damage)
    assert error.startswith(f"baseline {tmp_path / 'baseline.json'} is damaged: {message}")
    assert error.endswith("Restore it from git, or regenerate it with --orbench-update-baseline")


def _damaged(path: Path, damage: Any) -> str:
    """The error of loading a three-prompt baseline after `damage` edited its JSON."""
    save_baseline(path, make_results({"hard-1k": [False, True, None]}))
    data = json.loads(path.read_text())
    damage(data)
    path.write_text(json.dumps(data))
    with pytest.raises(BaselineError) as info:
        load_baseline(path)
    return str(info.value)


def _set(index: int, **values: Any) -> Any:
    return lambda d: d["prompts"][index].update(values)


@pytest.mark.parametrize(("damage", "message"), [
    # A verdict flipped by hand without `refused` (or the reverse): the comparison reads the trial counts,
    # --orbench-strict `refused` and a reviewer the verdict; each would see another baseline.
    (_set(1, verdict="direct_answer"), 'prompts[1] (id hard-1k-0001) has "verdict": "direct_answer" but "refused": true'),
    (_set(0, refused=True), 'prompts[0] (id hard-1k-0000) has "verdict": "direct_answer" but "refused": true'),
    (_set(0, verdict="answered"), 'prompts[0] (id hard-1k-0000) has "verdict": "answered", not one of direct_answer'),
    (_set(1, refused_share=1.0, refused_trials=0, scored_trials=1),
     'prompts[1] (id hard-1k-0001) has "refused": true but "refused_trials": 0 of "scored_trials": 1'),
    (_set(1, refused_share=0.5, refused_trials=1, scored_trials=1),
     'prompts[1] (id hard-1k-0001) has "refused_share": 0.5 but "refused_trials": 1 of "scored_trials": 1'),
    # The summary edited, or a prompt removed, without the other: the chart and a reviewer read the summary,
    # the comparison the prompts.
    (lambda d: d["datasets"]["hard-1k"].update(rejection_rate=0.05),
     'datasets["hard-1k"] has "rejection_rate": 0.05, but its 3 prompts give 0.5: the summary and the prompts disagree'),
    (lambda d: d["prompts"].pop(0), 'datasets["hard-1k"] has "total": 3, but its 2 prompts give 2'),
    (lambda d: d["datasets"].pop("hard-1k"), 'prompts of dataset "hard-1k" are listed (3) but `datasets` has no "hard-1k"'),
    # A dataset without its identity would be compared without checking its revision and file.
    (lambda d: d["run"]["datasets"].pop("hard-1k"), '`datasets` has "hard-1k", but `run.datasets` does not record its'),
])
def test_hand_edited_baseline_that_contradicts_itself_is_refused(tmp_path: Path, damage: Any, message: str) -> None:
    assert _damaged(tmp_path / "baseline.json", damage).startswith(f"baseline {tmp_path / 'baseline.json'} is damaged: {message}")


def test_baseline_with_a_key_twice_or_conflict_markers_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "baseline.json"
    save_baseline(path, make_results({"hard-1k": [False, True, None]}))
    text = path.read_text()
    # json.loads keeps the last of two values silently: the edit would decide unseen which verdict counts.
    path.write_text(text.replace('"refused": false', '"refused": false, "refused": true', 1))
    with pytest.raises(BaselineError, match=re.escape('is damaged: the key "refused" appears twice in one object (in the '
                                                      'object with "id": "hard-1k-0000")')):
        load_baseline(path)
    lines = text.splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if '"id": "hard-1k-0001"' in line)
    conflicted = lines[:at] + ["<<<<<<< HEAD\n", lines[at], "=======\n", lines[at], ">>>>>>> other\n"] + lines[at + 1:]
    path.write_text("".join(conflicted))
    with pytest.raises(BaselineError, match=f"is damaged: it holds git merge-conflict markers \\(line {at + 1}: <<<<<<<\\)"):
        load_baseline(path)
    results = tmp_path / "results.json"
    results.write_text(json.dumps(make_results({"hard-1k": [False]})).replace('"refused": false', '"refused": true, "refused": false'))
    with pytest.raises(ResultsError, match='the key "refused" appears twice'):
        load_results(results)


@pytest.mark.parametrize(("version", "message"), [
    (2, f"has schema version 2, written by a newer pytest-orbench (plugin_version {__version__}); this one ({__version__}) "
        "reads version 1. Upgrade pytest-orbench"),
    ("1", 'has schema version "1"; this plugin reads version 1 (an integer). Regenerate it'),
    (True, "has schema version true; this plugin reads version 1 (an integer)"),
])
def test_baseline_schema_version_says_which_way_to_go(tmp_path: Path, version: Any, message: str) -> None:
    path = tmp_path / "baseline.json"
    save_baseline(path, make_results({"hard-1k": [False, True]}))
    data = json.loads(path.read_text()) | {"schema_version": version}
    path.write_text(json.dumps(data))
    with pytest.raises(BaselineError, match=re.escape(message)):
        load_baseline(path)


def test_baseline_trial_counts_come_together(tmp_path: Path) -> None:
    path = tmp_path / "baseline.json"
    save_baseline(path, make_results({"hard-1k": [False, True, None]}))
    data = json.loads(path.read_text())
    assert not any("scored_trials" in p for p in data["prompts"])  # as before trials existed: still read
    assert load_baseline(path)["prompts"][1]["refused"] is True
    data["prompts"][1].update(refused_share=2 / 3, refused_trials=2, scored_trials=3)
    data["datasets"]["hard-1k"]["rejection_rate"] = (0 + 2 / 3) / 2  # the mean share of the two scored prompts
    path.write_text(json.dumps(data))
    assert load_baseline(path)["prompts"][1]["scored_trials"] == 3
    for trials, shown in (({"scored_trials": 1}, "refused_trials missing, scored_trials 1"),
                          ({"refused_trials": 2, "scored_trials": 1}, "refused_trials 2, scored_trials 1")):
        prompt = {k: v for k, v in data["prompts"][2].items() if "trials" not in k} | trials
        path.write_text(json.dumps(data | {"prompts": data["prompts"][:2] + [prompt]}))
        with pytest.raises(BaselineError, match=re.escape(f"prompts[2] (id hard-1k-0002) has {shown}; both are needed, "
                                                          "with 0 <= refused_trials <= scored_trials")):
            load_baseline(path)


@pytest.mark.parametrize(("damage", "message"), [
    (_drop("refused"), 'prompts[0] (id hard-1k-0000) has no "refused" (and 1 more like it)'),
    (lambda d: d["prompts"][1].update(category=5), 'prompts[1] (id hard-1k-0001) has "category": 5, not a string'),
    (lambda d: d["datasets"]["hard-1k"].pop("total"), 'datasets["hard-1k"] has no "total"'),
    (lambda d: d["datasets"]["hard-1k"].update(ci95=[0.1]), 'datasets["hard-1k"] has "ci95": [0.1], not two numbers'),
    (lambda d: d["run"].pop("endpoint"), 'run has no "endpoint"'),
    (lambda d: d["run"].update(trials="3"), 'run has "trials": "3", not an integer or null'),
])
def test_damaged_results_file_is_refused(tmp_path: Path, damage: Any, message: str) -> None:
    data = make_results({"hard-1k": [False, True]})
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data))
    assert load_results(path)["prompts"][1]["refused"] is True
    damage(data)
    path.write_text(json.dumps(data))
    with pytest.raises(ResultsError, match=f"^results file {re.escape(str(path))} is damaged: {re.escape(message)}"):
        load_results(path)


def test_markdown_shows_the_warnings_that_qualify_a_pass_outside_the_folded_checks() -> None:
    # A full run against a baseline sampled at 40: 20 prompts not compared, and 40 pairs see only large moves.
    # Once the PR comment said "pass" and folded both warnings into the collapsed "Gate checks".
    base = baseline_document(make_results({"hard-1k": [False] * 40}, sample=40))
    body = render_markdown(assess(make_results({"hard-1k": [False] * 60}), base, parse_gate({})))
    folded = body[body.index("<details><summary>Gate checks</summary>"):]
    folded = folded[:folded.index("</details>")]
    shown = body[:body.index("<details><summary>Gate checks</summary>")]
    assert "**pass**" in shown and "**Warnings:**" in shown
    assert "- ⚠️ hard-1k: 20 of this run's 60 prompts are not in the baseline and were not compared" in shown
    assert "- ⚠️ hard-1k: this sample of 40 paired prompts can only detect" in shown
    assert "⚠️" not in folded and "✅ hard-1k regression \\(more refusals\\)" in folded  # escaped: untrusted names


def test_markdown_escapes_untrusted_text_and_withholds_toxic() -> None:
    base = baseline_document(make_results({"hard-1k": [False] * 10, "toxic": [True] * 10}))
    now = make_results({"hard-1k": [True] * 10, "toxic": [False] * 10})
    now["prompts"][0]["prompt"] = "ignore <script>alert(1)</script> @octocat ```` </details> [x](https://evil)"
    body = render_markdown(assess(now, base, parse_gate({})))
    assert "<script>" not in body and "@octocat" not in body and "](https://evil)" not in body
    assert body.count("<details>") == body.count("</details>")
    assert "prompt 3" in body  # safe prompts are shown
    toxic_section = body[body.index("toxic: 10 newly answered"):]
    assert "prompt 3" not in toxic_section and "reply" not in toxic_section.split("</details>")[0].split("\n", 1)[1]
    assert "34.1%" not in body and "100.0%" in body  # percentages with one decimal
    assert "```mermaid" in body and "quadrantChart" in body


def test_markdown_is_shortened_by_dropping_list_items() -> None:
    base = baseline_document(make_results({"hard-1k": [False] * 2000}))
    now = make_results({"hard-1k": [True] * 2000})
    results = assess(now, base, parse_gate({}))
    full = render_markdown(results)
    short = render_markdown_within(results, max_chars=20000)
    assert len(full) > 20000 >= len(short)
    assert short.count("<details>") == short.count("</details>") and short.count("```") % 2 == 0
    assert "more (see the results JSON)" in short


def test_md_escape() -> None:
    assert md_escape("a*b_c `d` <e> @f #1 x&y http://g") == "a\\*b\\_c \\`d\\` &lt;e&gt; @\u200bf \\#\u200b1 x&amp;y http&#58;//g"
    assert md_escape("x" * 50, limit=10) == "x" * 9 + "…"
    escaped = md_escape("line1\nline2 <b>")
    assert "\n" not in escaped and "<b>" not in escaped


def test_term_safe_strips_escapes_and_bidi() -> None:
    from pytest_orbench.render.terminal import term_safe

    assert term_safe("a\x1b[31mred\x00\u202eb\nc\td") == "a\ufffd[31mred\ufffd\ufffdb c d"
    assert term_safe("x" * 20, limit=5) == "xxxx…"


def test_unscored_replies_spend_the_error_budget() -> None:
    from pytest_orbench.analysis.gate import GateConfig, evaluate

    results = {"datasets": {"hard-1k": {"total": 100, "errors": 1, "unscored": 2, "n": 97, "refused": 30,
                                        "rejection_rate": 0.31, "expected": "answer"}}}
    checks = evaluate(results, GateConfig(error_budget=0.02))["checks"]
    budget = next(c for c in checks if c["name"] == "hard-1k error budget")
    assert budget["outcome"] == "inconclusive"
    assert "1 of 100 prompts errored and 2 went unscored (3.0%, budget 2.0%)" in budget["message"]


def test_no_baseline_and_no_limits_is_ungated_never_pass() -> None:
    results = assess(make_results({"hard-1k": [False] * 90 + [True] * 10, "toxic": [False] * 98 + [True] * 2}), None,
                     parse_gate({}))
    gate = results["gate"]
    assert gate["verdict"] == "ungated" and not gate["passed"] and gate["note"] == "no baseline, no limits: rates only"
    from pytest_orbench.render.terminal import gate_lines

    assert gate_lines(results)[0].startswith("orbench gate: UNGATED: no baseline, no limits: rates only")
    body = render_markdown(results)
    assert "⚪ **ungated**: no baseline, no limits: rates only" in body and "pass" not in body.split("\n")[1]
    # One limit is enough to gate: then PASS means the limit was checked.
    limited = assess(make_results({"toxic": [True] * 100}), None, parse_gate({"toxic": {"min_rejection": 0.9}}))
    assert limited["gate"]["verdict"] == "pass"


@pytest.mark.parametrize(("p_values", "adjusted"), [
    ([0.01, 0.04, 0.03], [0.03, 0.06, 0.06]),
    ([0.2], [0.2]),
    ([0.5, 0.5], [1.0, 1.0]),
    ([0.001, 1.0, 0.02, 0.6], [0.004, 1.0, 0.06, 1.0]),
])
def test_holm_step_down(p_values: list[float], adjusted: list[float]) -> None:
    from pytest_orbench.analysis.gate import holm

    assert holm(p_values) == pytest.approx(adjusted)


def test_regressions_are_decided_on_holm_adjusted_p() -> None:
    # Each dataset alone would fail at alpha 0.05 (p = 1/32 = 0.031); across two checks Holm adjusts the
    # smaller to 0.0625: family-wise, neither fails.
    base = baseline_document(make_results({"hard-1k": [False] * 200, "toxic": [True] * 200}))
    now = make_results({"hard-1k": [True] * 5 + [False] * 195, "toxic": [False] * 5 + [True] * 195})
    results = assess(now, base, parse_gate({}))
    checks = [c for c in results["gate"]["checks"] if c["kind"] == "regression"]
    assert [c["p_value"] for c in checks] == pytest.approx([1 / 32, 1 / 32])
    assert [c["p_adjusted"] for c in checks] == pytest.approx([1 / 16, 1 / 16])
    assert results["gate"]["verdict"] == "pass" and "Holm-adjusted over 2 regression checks" in checks[0]["message"]
    assert results["datasets"]["hard-1k"]["comparison"]["p_adjusted"] == pytest.approx(1 / 16)
    alone = assess(make_results({"hard-1k": [True] * 5 + [False] * 195}),
                   baseline_document(make_results({"hard-1k": [False] * 200})), parse_gate({}))
    assert alone["gate"]["verdict"] == "fail"  # one check: no adjustment
    from pytest_orbench.render.terminal import P_EXPLAINED, terminal_lines

    lines = terminal_lines(results["run"], results["datasets"])
    assert P_EXPLAINED in lines and any("p adj." in line for line in lines)
    assert "| p | p adj. |" in render_markdown(results)


def test_a_baseline_sharing_no_dataset_is_refused_naming_both() -> None:
    base = baseline_document(make_results({"toxic": [True] * 10}))
    now = make_results({"hard-1k": [False] * 10})
    with pytest.raises(BaselineError, match="shares no dataset with this run: the baseline has toxic, this run has hard-1k"):
        assess(now, base, parse_gate({}))


def test_a_partly_shared_baseline_compares_what_it_can_and_says_what_not() -> None:
    base = baseline_document(make_results({"hard-1k": [False] * 50}))
    results = assess(make_results({"hard-1k": [False] * 50, "toxic": [True] * 50}), base, parse_gate({}))
    gate = results["gate"]
    assert gate["compared"] == ["hard-1k"] and gate["not_compared"] == ["toxic"] and gate["baseline_only"] == []
    assert "comparison" not in results["datasets"]["toxic"]
    from pytest_orbench.render.terminal import gate_lines

    assert "  not compared (not in the baseline): toxic" in gate_lines(results)
    assert "Not compared: toxic (not in the baseline)" in render_markdown(results)


def test_served_model_change_is_named_even_under_the_same_model_string() -> None:
    old = make_results({"hard-1k": [False] * 10})
    old["run"]["served"] = {"models": {"gpt-4o-2024-08-06": 10}, "system_fingerprints": {"fp_a": 10}}
    old["run"]["endpoint"] = "openai/gpt-4o"
    now = make_results({"hard-1k": [False] * 10})
    now["run"]["served"] = {"models": {"gpt-4o-2024-11-20": 10}, "system_fingerprints": {"fp_b": 10}}
    now["run"]["endpoint"] = "openai/gpt-4o"
    results = assess(now, baseline_document(old), parse_gate({}))
    served = next(c for c in results["changes"] if c["what"] == "served model")
    assert served["message"] == "gpt-4o-2024-08-06 → gpt-4o-2024-11-20 (both openai/gpt-4o)"
    fingerprint = next(c for c in results["changes"] if c["what"] == "system fingerprint")
    assert fingerprint["message"] == "fp_a → fp_b (both openai/gpt-4o)"  # said once, not "system fingerprint" twice
    assert r"served model: gpt-4o-2024-08-06 → gpt-4o-2024-11-20 \(both openai/gpt-4o\)" in render_markdown(results)


def test_a_served_version_is_named_with_the_endpoint_that_served_it() -> None:
    # "openai/orc-r12 served orc-r10-2025-01 -> orc-r12-2025-06" gave the old version to the new model.
    old = make_results({"hard-1k": [False] * 10})
    old["run"]["served"] = {"models": {"orc-r10-2025-01": 10}}
    old["run"]["endpoint"] = "openai/orc-r10"
    now = make_results({"hard-1k": [False] * 10})
    now["run"]["served"] = {"models": {"orc-r12-2025-06": 10}}
    now["run"]["endpoint"] = "openai/orc-r12"
    results = assess(now, baseline_document(old), parse_gate({}))
    served = next(c for c in results["changes"] if c["what"] == "served model")
    assert served["message"] == "orc-r10-2025-01 (baseline's openai/orc-r10) → orc-r12-2025-06 (openai/orc-r12)"


def test_another_api_base_is_named_not_reported_as_the_same_endpoint() -> None:
    # The same model string at another server (a new gateway, the live base's --orbench-base-api-base)
    # was compared as "nothing in the configuration (same endpoint, ...)".
    old = make_results({"hard-1k": [False] * 10})
    old["run"]["api_base"] = "http://old-gateway:8000/v1"
    now = make_results({"hard-1k": [False] * 10})
    now["run"]["api_base"] = "http://new-gateway:8000/v1"
    results = assess(now, baseline_document(old), parse_gate({}))
    assert results["changes"] == [{"what": "api_base", "baseline": "http://old-gateway:8000/v1",
                                   "current": "http://new-gateway:8000/v1",
                                   "message": "http://old-gateway:8000/v1 → http://new-gateway:8000/v1"}]
    body = render_markdown(results)
    assert "- api\\_base: http&#58;//old-gateway:8000/v1 → http&#58;//new-gateway:8000/v1" in body  # (no autolink)
    assert "same endpoint" not in body
    assert "  changed: api_base: http://old-gateway:8000/v1 → http://new-gateway:8000/v1" in gate_lines(results)
    now["run"]["api_base"] = None  # the provider's own API (or its base URL variable)
    assert check_comparable(baseline_document(old), now["run"], {})[0]["message"] == "http://old-gateway:8000/v1 → none"
    now["run"]["api_base"] = "http://old-gateway:8000/v1"
    assert check_comparable(baseline_document(old), now["run"], {}) == []
    # A local server on another free port (the demo's simulator, a test proxy) is no new deployment...
    old["run"]["api_base"], now["run"]["api_base"] = "http://127.0.0.1:46425/v1", "http://localhost:44405/v1"
    assert check_comparable(baseline_document(old), now["run"], {}) == []
    # ...but another path, scheme or a non-local host is.
    for other in ("http://127.0.0.1:44405/v2", "https://127.0.0.1:44405/v1", "http://10.0.0.5:46425/v1"):
        now["run"]["api_base"] = other
        assert check_comparable(baseline_document(old), now["run"], {})[0]["what"] == "api_base", other


def test_detectable_effect_warning_never_claims_more_than_100_pp() -> None:
    base = baseline_document(make_results({"hard-1k": [False] * 3}, sample=3))
    results = assess(make_results({"hard-1k": [False] * 3}, sample=3), base, parse_gate({}))
    (warning,) = results["gate"]["warnings"]
    assert "is too small to detect any increase" in warning and "pp (alpha" not in warning


def test_chart_labels_neither_overlap_nor_clip() -> None:
    import xml.etree.ElementTree as ET

    from pytest_orbench.render.chart import Point, paper_points, svg, text_box

    points = paper_points() + [Point("baseline", 0.341, 0.753, "baseline"), Point("current", 0.43, 0.80, "current")]
    root = ET.fromstring(svg(points))
    ns = "{http://www.w3.org/2000/svg}"
    width, height = float(root.get("width", 0)), float(root.get("height", 0))
    boxes = []
    for text in root.iter(f"{ns}text"):
        if text.get("transform") or text.get("font-size") not in ("9", "12") or text.text is None:
            continue  # titles, axis and tick labels, the source line
        x, y = float(text.get("x", 0)), float(text.get("y", 0))
        boxes.append((text.text, text_box(x, y, text.text, float(text.get("font-size", 11)), text.get("text-anchor", "start"))))
    labels = [b for b in boxes if not b[0][0].isdigit() or b[0].isdigit()]
    for i, (a_text, a) in enumerate(labels):
        assert 0 <= a[0] and a[2] <= width and 0 <= a[1] and a[3] <= height, a_text  # nothing clipped
        for b_text, b in labels[i + 1:]:
            overlap = not (a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1])
            assert not overlap, (a_text, b_text)
    shown = {t for t, _ in boxes}
    key = [t.split("  ", 1)[1] for t in shown if "  " in t]
    # Every model is named on the plot or in the key, which numbers the crowded ones.
    assert {p.label for p in points} <= shown | set(key)
    assert {str(n) for n in range(1, len(key) + 1)} <= shown


def test_repeated_trials_compare_refusal_shares_and_old_baselines_still_compare() -> None:
    base = make_results({"hard-1k": [False] * 60})
    now = make_results({"hard-1k": [False] * 60})
    # With 3 trials: 20 prompts refused once of three before; now 12 of them twice of three, 8 unchanged.
    for i, prompt in enumerate(base["prompts"]):
        prompt.update(refused_trials=1 if i < 20 else 0, scored_trials=3, refused_share=(1 if i < 20 else 0) / 3)
    for i, prompt in enumerate(now["prompts"]):
        refused = 2 if i < 12 else 1 if i < 20 else 0
        prompt.update(refused_trials=refused, scored_trials=3, refused_share=refused / 3, refused=refused >= 2)
    block = compare(baseline_document(base), now)["hard-1k"]
    assert block["delta"] == pytest.approx(12 / 3 / 60) and block["newly_refused"] == 12 and block["improved"] == 0
    assert block["test"] == "paired sign-flip permutation, exact" and block["p_value"] == pytest.approx(0.5 ** 12)
    # A baseline from before trials existed (no trial counts): each prompt is one trial.
    old = baseline_document(make_results({"hard-1k": [False] * 60}))
    for prompt in old["prompts"]:
        for key in ("refused_share", "refused_trials", "scored_trials"):
            prompt.pop(key, None)
    block = compare(old, now)["hard-1k"]
    assert block["delta"] == pytest.approx((12 * 2 / 3 + 8 / 3) / 60) and block["n"] == 60


def _with_trials(results: dict[str, Any], refused_trials: list[int], trials: int = 3) -> dict[str, Any]:
    """The same prompts asked `trials` times each, with these refused trials; the summaries recomputed."""
    for prompt, refused in zip(results["prompts"], refused_trials):
        prompt.update(refused_trials=refused, scored_trials=trials, refused_share=refused / trials,
                      refused=2 * refused >= trials, verdict="direct_refusal" if 2 * refused >= trials else "direct_answer")
    results["datasets"] = summarize(results["prompts"], {n: d["expected"] for n, d in results["datasets"].items()})
    return results


def test_rates_from_refusal_shares_have_honest_intervals() -> None:
    from scipy.stats import binomtest

    # One prompt asked three times, refused once: its rate is 1/3, and 1 of 3 trials is all that is known.
    one = _with_trials(make_results({"hard-1k": [False]}, categories=1), [1])["datasets"]["hard-1k"]
    ci = binomtest(1, 3).proportion_ci(method="wilson")
    assert one["rejection_rate"] == pytest.approx(1 / 3)
    assert one["ci95"] == pytest.approx([ci.low, ci.high])  # was [33.3%, 33.3%]
    # 100 prompts, one refusal in 300 trials: the interval may not be tighter than the trials allow.
    rare = _with_trials(make_results({"hard-1k": [False] * 100}, categories=1), [1] + [0] * 99)["datasets"]["hard-1k"]
    ci = binomtest(1, 300).proportion_ci(method="wilson")
    assert rare["ci95"][1] >= ci.high - 1e-12  # the normal interval over prompts said at most 0.99%


def test_paired_interval_on_refusal_shares_is_not_of_zero_width() -> None:
    shares = [0, 1, 2, 3, 1, 0, 2, 1, 0, 0]
    base = _with_trials(make_results({"hard-1k": [False] * 10}), shares)
    now = _with_trials(make_results({"hard-1k": [False] * 10}, system="abc"), shares)
    block = compare(baseline_document(base), now)["hard-1k"]
    assert block["delta"] == 0 and block["p_value"] == 1.0
    lo, hi = block["delta_ci95"]
    assert lo < 0 < hi  # ten prompts of three trials cannot pin the change to exactly 0 (was [0, 0])


def test_detectable_regression_accounts_for_holm_across_checks() -> None:
    from scipy.optimize import brentq
    from scipy.stats import norm

    # Two regression checks of 50 paired prompts, nothing moved (a deterministic endpoint): a regression in
    # one dataset alone must reach alpha / 2 (Holm's first step). Connor (1987) with psi = d, solved for d.
    z_a, z_b = norm.ppf(1 - 0.05 / 2), norm.ppf(0.8)
    d = brentq(lambda d: (z_a + z_b * (1 - d) ** 0.5) ** 2 / d - 50, 1e-6, 1)
    base = baseline_document(make_results({"hard-1k": [False] * 50, "toxic": [True] * 50}, sample=50))
    results = assess(make_results({"hard-1k": [False] * 50, "toxic": [True] * 50}, sample=50), base, parse_gate({}))
    assert results["datasets"]["hard-1k"]["comparison"]["detectable"] == pytest.approx(d, abs=1e-4)  # 15.0 pp, not 11.7
    assert any(f"can only detect an increase of about {100 * d:.1f} pp" in w and "alpha 0.05 / 2 regression checks" in w
               for w in results["gate"]["warnings"])


def test_trade_off_chart_shows_the_change_the_table_shows() -> None:
    from pytest_orbench.render.chart import tradeoff_svg

    # The baseline errored on 10 safe prompts that this run refuses: on the 90 paired prompts nothing moved
    # (the table: 0.0% -> 0.0%, +0.0 pp), so the chart may not draw a +10 pp move in over-refusal.
    base = make_results({"hard-1k": [None] * 10 + [False] * 90, "toxic": [True] * 50})
    now = make_results({"hard-1k": [True] * 10 + [False] * 90, "toxic": [True] * 50}, system="abc")
    results = assess(now, baseline_document(base), parse_gate({}))
    comparison = results["datasets"]["hard-1k"]["comparison"]
    assert (comparison["n"], comparison["rate"], comparison["delta"]) == (90, 0.0, 0.0)
    assert "current: 0.0%, 100.0%</title>" in tradeoff_svg(results)
    assert "this run: [0, 1]" in render_markdown(results)  # the point at the paired rates (Mermaid reads 1, not 1.000)


def _live_base(now: dict[str, Any], base_flags: list[bool | None], error: str) -> dict[str, Any]:
    """`now` compared with a live base whose replies were `base_flags` (None: that call errored)."""
    base = make_results({"hard-1k": base_flags})
    now["run"]["compared_with"] = "live base"
    now["base"] = {"run": {"endpoint": "openai/base"},
                   "datasets": {n: {k: d[k] for k in ("n", "refused", "rejection_rate", "ci95", "errors", "flaky")}
                                for n, d in base["datasets"].items()}}
    for prompt, flag in zip(now["prompts"], base_flags):
        prompt["base"] = {"verdict": "error" if flag is None else "direct_answer", "refused": flag,
                          "error": error if flag is None else None}
    return assess(now, baseline_document(base), parse_gate({}))


def test_a_live_base_that_got_no_reply_is_named_not_taken_for_a_sampling_mismatch() -> None:
    # Once: "no prompt of this run is in the baseline ... run the baseline's prompts" and the base's 20
    # DNS errors counted nowhere (the run's error budget passed, `calls` said 0 errors).
    gate = _live_base(make_results({"hard-1k": [False] * 20}), [None] * 20, "DNS lookup failed for api.example")["gate"]
    checks = {c["name"]: c for c in gate["checks"]}
    assert gate["verdict"] == "inconclusive"
    budget = checks["hard-1k live base error budget"]
    assert budget["outcome"] == "inconclusive" and budget["observed"] == 1.0
    assert budget["message"].endswith("most common error: DNS lookup failed for api.example (20x)")
    regression = checks["hard-1k regression (more refusals)"]
    assert regression["outcome"] == "inconclusive"
    assert regression["message"].startswith("nothing was compared: every prompt errored or went unscored under the live base")
    assert "baseline's prompts" not in regression["message"]


def test_a_live_base_that_errored_beyond_the_budget_is_inconclusive_within_it_compares() -> None:
    half = _live_base(make_results({"hard-1k": [False] * 40}), [False] * 20 + [None] * 20, "HTTP 503")["gate"]
    assert half["verdict"] == "inconclusive"  # once a pass on the 20 pairs left, the other half unmentioned
    one = _live_base(make_results({"hard-1k": [False] * 100}), [False] * 99 + [None], "HTTP 503")["gate"]
    assert one["verdict"] == "pass"
    assert {c["name"]: c["outcome"] for c in one["checks"]}["hard-1k live base error budget"] == "pass"


def test_terminal_table_shows_no_made_up_delta_when_nothing_was_paired() -> None:
    from pytest_orbench.render.terminal import terminal_lines

    results = assess(make_results({"hard-1k": [None] * 10}), baseline_document(make_results({"hard-1k": [False] * 10})),
                     parse_gate({}))
    row = next(line for line in terminal_lines(results["run"], results["datasets"]) if line.startswith("hard-1k      0"))
    assert "nothing compared" in row and "+0.0 pp" not in row and "-100.0" not in row


def test_markdown_tells_endpoint_errors_from_judge_errors_as_the_json_does() -> None:
    # Once "No reply for 5 of 10 prompts" counted the 3 replies the judge left unjudged, beside a
    # `run.calls.errors` of 2: a judge failure is not a missing reply.
    from pytest_orbench.render.markdown import error_reasons

    results = make_results({"hard-1k": [None] * 5 + [False] * 5})
    for n, prompt in enumerate(results["prompts"][:5]):
        prompt["error"], prompt["error_from"] = (("HTTP 503 from e.x: busy", "endpoint") if n < 2 else
                                                 ("judge call failed: HTTP 401 from j.x (the key was rejected)", "judge"))
    del results["prompts"][0]["error_from"]  # a results file from before error_from: the endpoint's
    assert error_reasons(results) == (2, [("HTTP 503 from e.x: busy", 2)])
    assert error_reasons(results, source="judge") == (3, [("judge call failed: HTTP 401 from j.x (the key was rejected)", 3)])
    body = render_markdown(results)
    reply_line = next(line for line in body.splitlines() if line.startswith("**No reply for"))
    judge_line = next(line for line in body.splitlines() if line.startswith("**No judgement for"))
    assert reply_line.startswith("**No reply for 2 of 10 prompts** (endpoint errors") and "judge" not in reply_line
    assert judge_line.startswith("**No judgement for 3 of 10 prompts** (judge errors") and "(3)" in judge_line
    results["prompts"][1]["error_from"] = "judge"
    assert "**No reply for 1 of 10 prompts**" in render_markdown(results)


def _toxic_live_base(errors: list[str]) -> dict[str, Any]:
    """A toxic run compared with a live base whose every call failed with `errors[i]`."""
    now = make_results({"toxic": [True] * len(errors)})
    now["run"]["compared_with"] = "live base"
    base = make_results({"toxic": [None] * len(errors)})
    now["base"] = {"run": {"endpoint": "openai/base"},
                   "datasets": {n: {k: d[k] for k in ("n", "refused", "rejection_rate", "ci95", "errors", "flaky")}
                                for n, d in base["datasets"].items()}}
    for prompt, error in zip(now["prompts"], errors):
        prompt["base"] = {"verdict": "error", "refused": None, "error": error, "error_from": "endpoint"}
    return assess(now, baseline_document(base), parse_gate({}))


def test_a_live_base_error_quoting_a_toxic_prompt_is_withheld_from_the_gate_and_the_report() -> None:
    import cmarkgfm

    from pytest_orbench.analysis.wording import WITHHELD_ERROR
    from pytest_orbench.render.terminal import gate_lines

    # An endpoint that echoes the request: the toxic prompt's text (as is, or JSON-escaped in a body)
    # reached the gate's check message, and from there the PR comment, which never shows toxic prompts.
    echoed = [f"HTTP 400 from e.x: bad request: {json.dumps({'content': f'prompt {i} @someone <b>x</b>'})}"
              for i in range(10)]
    results = _toxic_live_base(echoed)
    check = next(c for c in results["gate"]["checks"] if c["name"] == "toxic live base error budget")
    assert check["message"].endswith(f"most common error: {WITHHELD_ERROR} (10x)")
    body = render_markdown(results)
    assert "prompt 3" not in body and "withheld: the error quotes a toxic prompt" in body
    assert "**Under the live base, no reply for 10 of 10 prompts**" in body and "No judgement" not in body
    assert not any("prompt 3" in line for line in gate_lines(results))
    # Not quoting the prompt, the error is shown, and stays text: no link, image, HTML or formatting forms.
    nasty = "HTTP 503 from e.x: [click](https://evil.example) ![i](https://evil.example/i.png) **bold** <b>x</b>"
    results = _toxic_live_base([nasty] * 10)
    check = next(c for c in results["gate"]["checks"] if c["name"] == "toxic live base error budget")
    assert nasty in check["message"]
    rendered = cmarkgfm.github_flavored_markdown_to_html(render_markdown(results))
    assert "[click]" in rendered and "<a " not in rendered and "<img" not in rendered and "<strong>bold" not in rendered
    assert "<b>" not in rendered


def test_junit_shows_invisible_characters_of_untrusted_check_text_instead_of_obeying_them() -> None:
    from pytest_orbench.render.junit import junit_xml

    results = make_results({"hard-1k": [False] * 4})
    results["gate"] = {"checks": [{"name": "hard-1k live base error budget", "dataset": "hard-1k", "outcome": "inconclusive",
                                   "message": "most common error: 'evil\u202etxt.exe' \x1b[31mred\x1b[0m"}]}
    xml = junit_xml(results)
    assert "\u202e" not in xml and "\x1b" not in xml
    assert "evil[U+202E]txt.exe" in xml and "[U+001B][31mred" in xml


def test_markdown_heads_the_compared_column_with_what_it_was_compared_with() -> None:
    live = render_markdown(_live_base(make_results({"hard-1k": [False] * 20}), [False] * 20, "none"))
    assert "| dataset | expect | n | live base | current |" in live and "| dataset | category | n | live base |" in live
    base = baseline_document(make_results({"hard-1k": [False] * 20}))
    filed = render_markdown(assess(make_results({"hard-1k": [False] * 20}), base, parse_gate({})))
    assert "| dataset | expect | n | baseline | current |" in filed and "| live base |" not in filed


def test_a_whole_dataset_too_small_to_see_a_regression_says_so_a_large_one_does_not() -> None:
    # A file of 12 prompts of your own, run whole: the pass said nothing, though only a jump of tens of
    # points could have failed it.
    small = assess(make_results({"hard-1k": [False] * 12}), baseline_document(make_results({"hard-1k": [False] * 12})),
                   parse_gate({}))["gate"]
    assert small["verdict"] == "pass"
    assert any(w.startswith("hard-1k: these 12 paired prompts can only detect an increase of about") for w in small["warnings"])
    large = assess(make_results({"hard-1k": [False] * 600}), baseline_document(make_results({"hard-1k": [False] * 600})),
                   parse_gate({}))["gate"]
    assert large["verdict"] == "pass" and not large["warnings"]
