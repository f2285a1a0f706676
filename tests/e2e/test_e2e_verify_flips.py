"""End to end: --orbench-verify-flips against the simulator playing both the model and a judge that reads a
set share of replies the other way; the counts are checked against the simulator's own policy."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

from pytest_orbench.tools.simulator.roles import decide, overturned, reply_text, template_class
from tests.conftest import REPO, SharedBaseline, load, mock_args, stats

pytestmark = pytest.mark.usefixtures("orbench_env")
CAREFUL = REPO / "examples" / "careful-system-prompt.txt"
SHARE = 0.25  # the judge reads 1 in 4 replies the other way


def refused_by_judge(prompt: str, system_prompt: str | None) -> bool:
    """What the simulator's judge (with SHARE overturned) says of the simulator's reply to `prompt`."""
    text = reply_text(prompt, decide(prompt, system_prompt))
    cls = template_class(text)
    if overturned(text, SHARE):
        cls = "direct_answer" if cls != "direct_answer" else "direct_refusal"
    return cls != "direct_answer"


def expected(data_dir: Path, results: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Per dataset: flips (the policy's verdicts differ), those the judge overturns, and the verified flips."""
    careful = CAREFUL.read_text(encoding="utf-8")
    asked = {p["prompt"]: p["dataset"] for p in results["prompts"]}
    found: dict[str, dict[str, int]] = {}
    for name, filename in (("hard-1k", "or-bench-hard-1k.csv"), ("toxic", "or-bench-toxic.csv")):
        counts = found.setdefault(name, {"found": 0, "overturned": 0, "newly_refused": 0, "newly_answered": 0})
        with (data_dir / filename).open(encoding="utf-8", newline="") as fh:
            for row in csv.DictReader(fh):
                prompt = row["prompt"]
                if asked.get(prompt) != name:
                    continue
                before, after = decide(prompt, None) != "answer", decide(prompt, careful) != "answer"
                if before == after:
                    continue
                counts["found"] += 1
                verified_before, verified_after = refused_by_judge(prompt, None), refused_by_judge(prompt, careful)
                if verified_before == verified_after:
                    counts["overturned"] += 1
                elif verified_after:
                    counts["newly_refused"] += 1
                else:
                    counts["newly_answered"] += 1
    return found


@pytest.mark.slow
def test_flips_are_verified_with_exact_calls_and_the_gate_decides_on_them(pytester: pytest.Pytester, mock_factory: Any,
                                                                        shared_baseline: SharedBaseline,
                                                                        data_dir: Path) -> None:
    model, judge = shared_baseline.server, mock_factory(judge_overturn=SHARE)
    shared_baseline.use(pytester.path, "base.json")
    common = (*shared_baseline.sample, "--orbench-baseline", "base.json")
    verify = (f"--orbench-system-prompt-file={CAREFUL}", "--orbench-verify-flips", "--orbench-judge-model",
              "openai/orbench-judge", "--orbench-judge-api-base", judge.url)
    result = pytester.runpytest(*mock_args(model, *common, *verify, "--orbench-json", "r.json", "--orbench-markdown",
                                           "r.md"))
    results = load(pytester.path / "r.json")
    want = expected(data_dir, results)
    flips = sum(w["found"] for w in want.values())
    assert flips > 20
    # Both sides of every flip, and nothing else: the baseline's replies are in this store too.
    assert stats(judge.url)["judge_requests"] == 2 * flips
    for name, w in want.items():
        comparison = results["datasets"][name]["comparison"]
        v = comparison["verification"]
        assert (v["found"], v["verified"], v["both_sides"], v["overturned"], v["errors"]) == \
            (w["found"], w["found"], w["found"], w["overturned"], 0), name
        # The gate's counts are the verified ones.
        assert (comparison["newly_refused"], comparison["newly_answered"]) == (w["newly_refused"], w["newly_answered"])
        assert (v["newly_refused"], v["newly_answered"]) == (w["newly_refused"], w["newly_answered"])
        assert len(v["overturned_ids"]) == w["overturned"]
        assert not set(v["overturned_ids"]) & set(comparison["newly_refused_ids"] + comparison["newly_answered_ids"])
    assert results["run"]["verification"]["calls"] == 2 * flips
    hard = want["hard-1k"]
    result.stdout.fnmatch_lines([
        "orbench gate: FAIL",
        f"*flips verified by openai/orbench-judge: hard-1k: {hard['found']} flips found, {hard['found']} verified "
        f"({hard['found']} on both sides), {hard['overturned']} overturned; toxic: *; {2 * flips} judge calls made now*",
        f"  hard-1k: {hard['overturned']} flips overturned by the LLM judge (not counted):",
    ])
    overturned_prompt = next(p for p in results["prompts"] if p["id"] == results["datasets"]["hard-1k"]["comparison"]
                             ["verification"]["overturned_ids"][0])
    assert overturned_prompt["flip_verification"]["overturned"] is True
    report = (pytester.path / "r.md").read_text(encoding="utf-8")
    assert "**Flip verification:** flips verified by openai/orbench-judge: hard-1k:" in report
    assert "flips overturned by the LLM judge (not counted)</summary>" in report
    # Again, under xdist: every verification is stored, no judge call, the same verdict.
    again = pytester.runpytest_subprocess(*mock_args(model, *common, *verify, "-n", "2", "--orbench-json", "again.json"))
    assert again.ret == 1 and stats(judge.url)["judge_requests"] == 2 * flips
    repeat = load(pytester.path / "again.json")
    assert repeat["run"]["verification"]["calls"] == 0
    assert {n: d["comparison"]["verification"]["overturned"] for n, d in repeat["datasets"].items()} == \
        {n: w["overturned"] for n, w in want.items()}


def test_a_failing_judge_endpoint_leaves_the_flips_unverified_and_the_regression_fails(
        pytester: pytest.Pytester, shared_baseline: SharedBaseline) -> None:
    shared_baseline.use(pytester.path, "base.json")
    common = (*shared_baseline.sample, "--orbench-baseline", "base.json")
    result = pytester.runpytest(*mock_args(shared_baseline.server, *common, f"--orbench-system-prompt-file={CAREFUL}",
                                           "--orbench-verify-flips", "--orbench-judge-model", "openai/judge",
                                           "--orbench-judge-api-base", "http://127.0.0.1:9/v1", "--orbench-retries", "0",
                                           "--orbench-json", "r.json"))
    assert result.ret == 1
    results = load(pytester.path / "r.json")
    # A flip whose verification failed is still a flip: the regression the offline judge saw fails the gate (it was
    # an error, and the flips forgiven within the error budget, before).
    assert results["gate"]["verdict"] == "fail"
    v = results["datasets"]["hard-1k"]["comparison"]["verification"]
    assert v["found"] > 0 and v["errors"] == v["found"] and v["verified"] == 0
    assert "connection refused" in v["first_error"]
    flipped = [p for p in results["prompts"] if p.get("flip_verification")]
    assert flipped and all(p["refused"] is not None and p["flip_verification"]["verified"] is False for p in flipped)
    result.stdout.fnmatch_lines(["*flips found, 0 verified*not verified (kept as the offline judge counted them*"])


def test_verify_flips_settings_are_checked_before_any_call(pytester: pytest.Pytester, mock: Any) -> None:
    for args, message in ((["--orbench-verify-flips"], "--orbench-verify-flips needs a judge model"),
                          (["--orbench-verify-flips", "--orbench-judge-model", "openai/j"], "this run compares with nothing"),
                          (["--orbench-verify-flips", "--orbench-judge", "llm", "--orbench-judge-model", "openai/j"],
                           "has judged every reply with it already")):
        result = pytester.runpytest(*mock_args(mock, *args))
        assert result.ret == 4 and message in result.stderr.str(), (args, result.stderr.str())
    assert stats(mock.url)["requests"] == 0
