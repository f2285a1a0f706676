"""Results that stay usable at scale: above records.FULL_PROMPTS_MAX prompts the results JSON keeps the summary,
the gate and the prompts that matter, and every prompt's record goes to a JSON Lines file beside it, which
`orbench compare`, the Action and load_results read as one document."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_orbench.analysis.baseline import baseline_document, save_baseline
from pytest_orbench.analysis.document import assess
from pytest_orbench.analysis.gate import parse_gate
from pytest_orbench.core import records
from pytest_orbench.core.records import ResultsError, load_results
from pytest_orbench.render.outputs import write_outputs
from pytest_orbench.tools.cli import main as cli
from tests.analysis.test_gate import make_results
from tests.conftest import load, mock_args


def large_run(n: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A run of n safe prompts against a baseline: 30 newly refused, 10 newly answered, 5 errors."""
    before = make_results({"hard-1k": [False] * (n - 10) + [True] * 10})
    now = make_results({"hard-1k": [True] * 30 + [None] * 5 + [False] * (n - 45) + [False] * 10}, system="new")
    for prompt in now["prompts"][30:35]:
        prompt["error"], prompt["error_from"] = "HTTP 503 from gw", "endpoint"
    baseline = baseline_document(before)
    return assess(now, baseline, parse_gate({})), dict(baseline)


def test_a_large_run_writes_the_prompts_that_matter_and_every_record_beside_it(tmp_path: Path) -> None:
    results, _ = large_run(records.FULL_PROMPTS_MAX + 1)
    written = write_outputs(results, {"json": tmp_path / "r.json"})  # type: ignore[arg-type]
    assert written == [tmp_path / "r.prompts.jsonl", tmp_path / "r.json"]
    head = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    kept = {p["id"] for p in head["prompts"]}
    assert kept == {f"hard-1k-{i:04d}" for i in range(35)} | {f"hard-1k-{i:04d}" for i in range(10_001 - 10, 10_001)}
    described = head["prompts_file"]
    assert (described["path"], described["schema"], described["schema_version"], described["records"]) == (
        "r.prompts.jsonl", "pytest-orbench/prompts", 1, 10_001)
    assert head["datasets"] == results["datasets"] and head["gate"] == results["gate"]
    lines = (tmp_path / "r.prompts.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 10_001 and json.loads(lines[0]) == results["prompts"][0]
    assert load_results(tmp_path / "r.json")["prompts"] == results["prompts"]  # one document again
    assert (tmp_path / "r.json").stat().st_size < (tmp_path / "r.prompts.jsonl").stat().st_size / 20


def test_up_to_the_limit_the_results_json_stays_one_file(tmp_path: Path) -> None:
    results, _ = large_run(records.FULL_PROMPTS_MAX)
    assert write_outputs(results, {"json": tmp_path / "r.json"}) == [tmp_path / "r.json"]  # type: ignore[arg-type]
    head = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert "prompts_file" not in head and len(head["prompts"]) == records.FULL_PROMPTS_MAX


def test_a_smaller_run_leaves_no_prompts_file_of_an_earlier_large_one(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # The earlier run's r.prompts.jsonl stayed beside the later r.json: two files of two runs that disagree.
    monkeypatch.setattr(records, "FULL_PROMPTS_MAX", 50)
    large, _ = large_run(51)
    assert write_outputs(large, {"json": tmp_path / "r.json"}) == [tmp_path / "r.prompts.jsonl", tmp_path / "r.json"]  # type: ignore[arg-type]
    small, _ = large_run(50)
    assert write_outputs(small, {"json": tmp_path / "r.json"}) == [tmp_path / "r.json"]  # type: ignore[arg-type]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]
    assert load_results(tmp_path / "r.json")["prompts"] == small["prompts"]
    (tmp_path / "r.prompts.jsonl").write_text('{"note": "mine"}\n', encoding="utf-8")  # not a prompts file: kept
    write_outputs(small, {"json": tmp_path / "r.json"})  # type: ignore[arg-type]
    assert (tmp_path / "r.prompts.jsonl").read_text(encoding="utf-8") == '{"note": "mine"}\n'


def test_the_two_files_of_one_run_must_stay_together(tmp_path: Path) -> None:
    results, _ = large_run(records.FULL_PROMPTS_MAX + 1)
    write_outputs(results, {"json": tmp_path / "r.json"})  # type: ignore[arg-type]
    lines = tmp_path / "r.prompts.jsonl"
    original = lines.read_bytes()
    lines.write_bytes(original.replace(b'"refused": true', b'"refused": false', 1))  # edited, or another run's
    with pytest.raises(ResultsError, match=r"r.prompts.jsonl is not the prompts file .*r.json was written with"):
        load_results(tmp_path / "r.json")
    lines.unlink()
    with pytest.raises(ResultsError, match=r"keeps only the prompts that matter; every prompt's record is in .*"
                                           r"r.prompts.jsonl, which cannot be read .*keep the two files together"):
        load_results(tmp_path / "r.json")
    head = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    head["prompts_file"]["path"] = "../elsewhere.jsonl"
    (tmp_path / "r.json").write_text(json.dumps(head), encoding="utf-8")
    with pytest.raises(ResultsError, match="must name a file beside it"):
        load_results(tmp_path / "r.json")


def test_compare_and_the_action_read_the_two_part_form(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from action.main import main as action_main

    results, _ = large_run(records.FULL_PROMPTS_MAX + 1)
    before = make_results({"hard-1k": [False] * (records.FULL_PROMPTS_MAX + 1 - 10) + [True] * 10})
    save_baseline(tmp_path / "baseline.json", before)  # type: ignore[arg-type]
    write_outputs(results, {"json": tmp_path / "r.json"})  # type: ignore[arg-type]
    monkeypatch.chdir(tmp_path)
    assert cli(["compare", "baseline.json", "r.json", "--markdown", "c.md"]) == 1
    out = capsys.readouterr().out
    # Paired over every prompt (the JSON alone holds 45): 10,001 less the 5 errors.
    assert "orbench gate: FAIL" in out and "on 9996 paired prompts (30 regressed, 10 improved)" in out
    assert (tmp_path / "c.md").is_file()
    for key, value in {"ORBENCH_RESULTS_PATH": str(tmp_path / "r.json"), "ORBENCH_COMMENT": "never",
                       "GITHUB_OUTPUT": str(tmp_path / "o"), "GITHUB_STEP_SUMMARY": str(tmp_path / "summary"),
                       "ORBENCH_FAIL_ON_REGRESSION": "true"}.items():
        monkeypatch.setenv(key, value)
    assert action_main() == 1
    summary = (tmp_path / "summary").read_text(encoding="utf-8")
    assert "fail" in summary and "9996 paired prompts" in summary


@pytest.mark.usefixtures("orbench_env")
def test_a_run_above_the_limit_writes_both_files_and_says_so(pytester: pytest.Pytester, mock: Any,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(records, "FULL_PROMPTS_MAX", 20)  # in-process pytester: the same module
    result = pytester.runpytest(*mock_args(mock, "--orbench-sample", "30", "--orbench-datasets", "toxic",
                                           "--orbench-json", "r.json"))
    assert result.ret == 0
    result.stdout.fnmatch_lines(["wrote */r.json", "wrote */r.prompts.jsonl: every prompt's record, one per line (r.json keeps "
                                 "the summary, the gate and the flips and errors: over 20 prompts it names this file*"])
    assert len(load(pytester.path / "r.json")["prompts"]) == 0  # no flips, no errors
    assert len(load_results(pytester.path / "r.json")["prompts"]) == 30


@pytest.mark.usefixtures("orbench_env")
@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_pytest_keeps_no_idle_report_nor_record_string_of_a_prompt(pytester: pytest.Pytester, mock: Any,
                                                                   workers: list[str]) -> None:
    # Bare pytest keeps three reports per test (~465 MiB at 80,000 tests); each prompt's also carried its
    # record as a JSON string to the end of the session.
    pytester.makeconftest("""
        import pytest

        @pytest.hookimpl(trylast=True)
        def pytest_terminal_summary(terminalreporter):
            reports = [r for reports in terminalreporter.stats.values() for r in reports if hasattr(r, "nodeid")]
            idle = len(terminalreporter.stats.get("", []))
            carrying = sum(1 for r in reports if any(name == "orbench" for name, _ in getattr(r, "user_properties", [])))
            terminalreporter.write_line(f"KEPT {idle} idle reports, {carrying} carrying a record")
    """)
    result = pytester.runpytest_subprocess(*mock_args(mock, "--orbench-sample", "12", "--orbench-datasets", "toxic",
                                                      "--junitxml", "j.xml", *workers), timeout=240)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["KEPT 0 idle reports, 0 carrying a record"])
    # --junitxml still shows each prompt's record as a property (it reads the teardown report, before the release)
    assert (pytester.path / "j.xml").read_text(encoding="utf-8").count('<property name="orbench"') == 12
