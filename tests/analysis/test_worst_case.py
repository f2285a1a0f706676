"""The gate's worst case as pure functions: a PASS must survive every undecided prompt counted against the change."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_orbench.analysis.baseline import baseline_document
from pytest_orbench.analysis.document import assess
from pytest_orbench.analysis.gate import parse_gate
from pytest_orbench.analysis.summary import summarize
from tests.analysis.test_gate import make_results


def _regression(name: str = "hard-1k") -> tuple[dict[str, Any], list[bool | None]]:
    """A baseline of 100 prompts, and a run with 6 newly refused (safe) or newly answered (toxic): p = 1/64, FAIL."""
    if name == "hard-1k":
        return baseline_document(make_results({name: [False] * 100})), [True] * 6 + [False] * 94
    return baseline_document(make_results({name: [True] * 100})), [False] * 6 + [True] * 94


def _verdict(baseline: dict[str, Any], flags: list[bool | None], name: str = "hard-1k",
             edit: Any = None, **gate: Any) -> dict[str, Any]:
    now = make_results({name: flags}, system="new")
    if edit is not None:
        edit(now)
        now["datasets"] = summarize(now["prompts"], {name: now["datasets"][name]["expected"]})
    return assess(now, baseline, parse_gate(gate))["gate"]


@pytest.mark.parametrize("name", ["hard-1k", "toxic"])
def test_errors_on_the_regressed_prompts_leave_the_gate_inconclusive_not_pass(name: str) -> None:
    baseline, flags = _regression(name)
    assert _verdict(baseline, flags, name)["verdict"] == "fail"
    # Two of the six flips errored (1 each of an endpoint error; 2% = the budget): 4 flips, p = 1/16, a pass before.
    hidden = [None, None] + flags[2:]
    gate = _verdict(baseline, hidden, name)
    assert gate["verdict"] == "inconclusive"
    check = next(c for c in gate["checks"] if c["kind"] == "regression")
    assert check["outcome"] == "inconclusive"
    assert check["p_value"] == pytest.approx(1 / 16)
    worst = check["worst_case"]
    assert worst["outcome"] == "fail" and worst["regressed"] == 6 and worst["p_value"] == pytest.approx(1 / 64)
    assert [u["id"] for u in worst["undecided"]] == [f"{name}-0000", f"{name}-0001"]
    assert "2 prompts had no usable verdict (2 endpoint errors)" in check["message"]
    assert f"{name}-0000 (error)" in check["message"]


def test_errors_that_could_not_hide_a_regression_leave_the_verdict_alone() -> None:
    baseline, _ = _regression()
    # No regression at all, one error: even counted as a regression, one flip is p = 0.5.
    gate = _verdict(baseline, [None] + [False] * 99)
    assert gate["verdict"] == "pass"
    check = next(c for c in gate["checks"] if c["kind"] == "regression")
    assert check["worst_case"]["outcome"] == "pass" and check["worst_case"]["regressed"] == 1
    # A real regression with an error elsewhere still fails: fail is never softened.
    _, flags = _regression()
    assert _verdict(baseline, flags[:-1] + [None])["verdict"] == "fail"


def test_an_unverified_flip_keeps_its_verdict_and_counts_against_the_change() -> None:
    baseline, flags = _regression()

    def unverified(now: dict[str, Any], ids: range = range(6), direction: str = "run") -> None:
        for prompt in now["prompts"][: len(ids)]:
            prompt["flip_verification"] = {"offline": {"verdict": prompt["verdict"]}, "verified": False,
                                           "error": "judge call failed: connection refused"}

    # Every flip's verification failed: still six flips, so still a FAIL (it was 6 errors and a PASS before).
    gate = _verdict(baseline, flags, edit=unverified)
    assert gate["verdict"] == "fail"
    budget = next(c for c in gate["checks"] if c["kind"] == "errors")
    assert "6 flips could not be verified" in budget["message"] and budget["outcome"] == "inconclusive"


def test_an_unverified_improvement_is_not_counted_as_one_in_the_worst_case() -> None:
    # 5 newly refused and 3 newly answered: p = 0.36, a pass. The 3 improvements unverified: worst case 5 of 5,
    # p = 1/32: would fail, so inconclusive.
    baseline = baseline_document(make_results({"hard-1k": [False] * 97 + [True] * 3}))
    flags: list[bool | None] = [True] * 5 + [False] * 95

    def unverified(now: dict[str, Any]) -> None:
        for prompt in now["prompts"][97:]:
            prompt["flip_verification"] = {"offline": {}, "verified": False, "error": "the judge gave no class: x"}

    assert _verdict(baseline, flags)["verdict"] == "pass"
    gate = _verdict(baseline, flags, edit=unverified, error_budget=0.05)
    check = next(c for c in gate["checks"] if c["kind"] == "regression")
    assert check["outcome"] == "inconclusive", check
    assert "3 flips not verified" in check["message"]


def test_a_compared_side_without_a_verdict_counts_against_the_change() -> None:
    # The baseline errored on 3 prompts this run refuses; 3 other flips: p = 1/8 pass, worst 6 flips p = 1/64.
    base_flags: list[bool | None] = [None] * 3 + [False] * 97
    baseline = baseline_document(make_results({"hard-1k": base_flags}))
    gate = _verdict(baseline, [True] * 6 + [False] * 94)
    check = next(c for c in gate["checks"] if c["kind"] == "regression")
    assert check["outcome"] == "inconclusive"
    assert "3 baseline errors" in check["message"]
    assert {u["side"] for u in check["worst_case"]["undecided"]} == {"compared"}


def test_a_rate_within_a_limit_only_without_its_errors_is_inconclusive() -> None:
    # 9 of 98 scored refused (9.2%) within at most 10%; 2 errors counted as refusals: 11 of 100, past it.
    now = make_results({"hard-1k": [True] * 9 + [False] * 89 + [None] * 2})
    gate = assess(now, None, parse_gate({"hard-1k": {"max_rejection": 0.10}, "error_budget": 0.05}))["gate"]
    limit = next(c for c in gate["checks"] if c["kind"] == "max_rejection")
    assert limit["outcome"] == "inconclusive" and "would be 11.0%" in limit["message"]
    # Far enough inside, the errors cannot matter.
    fine = make_results({"hard-1k": [True] * 2 + [False] * 96 + [None] * 2})
    assert assess(fine, None, parse_gate({"hard-1k": {"max_rejection": 0.10}}))["gate"]["verdict"] == "pass"
    # A minimum: 91 of 98 refused toxic (92.9%) at least 92%; 2 errors counted as answers: 91%, below it.
    toxic = make_results({"toxic": [True] * 91 + [False] * 7 + [None] * 2})
    gate = assess(toxic, None, parse_gate({"toxic": {"min_rejection": 0.92}, "error_budget": 0.05}))["gate"]
    assert gate["verdict"] == "inconclusive"
