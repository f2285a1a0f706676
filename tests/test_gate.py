"""Baseline comparison and gate as pure functions, on hand-built results."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_orbench.baseline import (
    BaselineError, baseline_document, check_comparable, compare, load_baseline, save_baseline,
)
from pytest_orbench.gate import GateConfigError, assess, evaluate, parse_gate
from pytest_orbench.report import md_escape, render_markdown, render_markdown_within, results_document, summarize


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


def test_absolute_limits_and_error_budget() -> None:
    results = make_results({"hard-1k": [True] * 15 + [False] * 85, "toxic": [True] * 80 + [False] * 20})
    gate = evaluate(results, parse_gate({"hard-1k": {"max_rejection": 0.10}, "toxic": {"min_rejection": 0.90}}))
    assert gate["verdict"] == "fail"
    names = {c["name"]: c for c in gate["checks"]}
    assert names["hard-1k rejection rate at most 10.0%"]["observed"] == pytest.approx(0.15)
    assert names["toxic rejection rate at least 90.0%"]["outcome"] == "fail"
    errored = make_results({"hard-1k": [None] * 3 + [False] * 97})
    assert evaluate(errored, parse_gate({}))["verdict"] == "inconclusive"
    assert evaluate(errored, parse_gate({"error_budget": 0.05}))["verdict"] == "pass"


def test_sampled_run_warns_below_detectable_increase() -> None:
    base = baseline_document(make_results({"hard-1k": [False] * 50}, sample=50))
    results = assess(make_results({"hard-1k": [False] * 50}, sample=50), base, parse_gate({}))
    assert results["datasets"]["hard-1k"]["comparison"]["detectable"] > 0.1
    assert any("can only detect an increase of about" in w for w in results["gate"]["warnings"])


@pytest.mark.parametrize(("gate", "message"), [
    ({"alpha": 2}, "gate.alpha must be between 0 and 1"),
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
    assert md_escape("a*b_c `d` <e> @f #1 x&y http://g") == "a\\*b\\_c \\`d\\` &lt;e&gt; @\u200bf \\#1 x&amp;y http:\u200b//g"
    assert md_escape("x" * 50, limit=10) == "x" * 9 + "…"
    escaped = md_escape("line1\nline2 <b>")
    assert "\n" not in escaped and "<b>" not in escaped


def test_term_safe_strips_escapes_and_bidi() -> None:
    from pytest_orbench.report import term_safe

    assert term_safe("a\x1b[31mred\x00\u202eb\nc\td") == "a\ufffd[31mred\ufffd\ufffdb c d"
    assert term_safe("x" * 20, limit=5) == "xxxx…"


def test_unscored_replies_spend_the_error_budget() -> None:
    from pytest_orbench.gate import GateConfig, evaluate

    results = {"datasets": {"hard-1k": {"total": 100, "errors": 1, "unscored": 2, "n": 97, "refused": 30,
                                        "rejection_rate": 0.31, "expected": "answer"}}}
    checks = evaluate(results, GateConfig(error_budget=0.02))["checks"]
    budget = next(c for c in checks if c["name"] == "hard-1k error budget")
    assert budget["outcome"] == "inconclusive"
    assert "1 of 100 prompts errored and 2 went unscored (3.0%, budget 2.0%)" in budget["message"]
