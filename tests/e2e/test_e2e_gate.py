"""End to end: baselines, the gate and `orbench compare` through litellm and the loopback simulator."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_orbench.judging.keyword_judge import KeywordJudge
from pytest_orbench.tools.simulator.roles import decide
from tests.conftest import SharedBaseline, load, mock_args, stats

pytestmark = pytest.mark.usefixtures("orbench_env")


def flips(data_dir: Path, filename: str, before: str | None, after: str | None,
          only: set[str] | None = None) -> tuple[int, int]:
    """(newly refused, newly answered) per the simulator's own policy (of the prompts `only`, if given)."""
    with (data_dir / filename).open(encoding="utf-8", newline="") as fh:
        pairs = [(decide(r["prompt"], before) != "answer", decide(r["prompt"], after) != "answer") for r in csv.DictReader(fh)
                 if only is None or r["prompt"] in only]
    return sum(1 for b, a in pairs if a and not b), sum(1 for b, a in pairs if b and not a)


def test_gate_fails_stricter_and_looser_prompts_and_passes_the_same(pytester: pytest.Pytester,
                                                                   shared_baseline: SharedBaseline, data_dir: Path) -> None:
    pytester.path.joinpath("careful.txt").write_text("Be careful.", encoding="utf-8")
    pytester.path.joinpath("helpful.txt").write_text("Be helpful.", encoding="utf-8")
    # A fixed sample per dataset (the session's baseline): the simulator's policy stays an exact oracle on it.
    mock, sample = shared_baseline.server, shared_baseline.sample
    made = pytest.LineMatcher(shared_baseline.made.stdout.splitlines())
    made.fnmatch_lines(["baseline updated: *baseline.json (review and commit it)"])
    # It was not compared with a previous baseline, and says why (not "no baseline").
    made.fnmatch_lines(["orbench gate: UNGATED: this run writes the baseline *baseline.json "
                        "(--orbench-update-baseline), so it is not compared with the one there before"])
    assert "set --orbench-baseline" not in shared_baseline.made.stdout
    shared_baseline.use(pytester.path)

    careful = pytester.runpytest(*mock_args(mock, *sample, "--orbench-baseline", "baseline.json", "--orbench-system-prompt-file",
                                            "careful.txt", "--orbench-json", "careful.json", "--orbench-junit", "gate.xml",
                                            "--orbench-markdown", "report.md", "--orbench-svg", "chart.svg"))
    asked = {p["prompt"] for p in load(pytester.path / "careful.json")["prompts"]}
    assert len(asked) == 200
    newly_refused, newly_answered = flips(data_dir, "or-bench-hard-1k.csv", None, "Be careful.", asked)
    assert newly_refused > 10 and newly_answered == 0  # the simulator is monotone in strictness
    p = 0.5**newly_refused
    assert careful.ret == 1
    careful.stdout.fnmatch_lines([
        "orbench gate: FAIL",
        f"  FAIL: hard-1k regression (more refusals): *({newly_refused} regressed, 0 improved)*McNemar p = {p:.3g}*",
        f"  hard-1k: {newly_refused} newly refused, * newly answered:",
    ])
    data = load(pytester.path / "careful.json")
    comparison = data["datasets"]["hard-1k"]["comparison"]
    assert comparison["newly_refused"] == newly_refused and comparison["newly_answered"] == 0
    assert comparison["p_value"] == pytest.approx(p)
    assert comparison["delta"] == pytest.approx(newly_refused / 100)
    assert set(comparison) >= {"baseline_refused", "refused", "newly_refused", "newly_answered", "delta", "delta_ci95", "p_value"}
    assert data["gate"]["passed"] is False
    assert {c["name"]: c["outcome"] for c in data["gate"]["checks"]}["hard-1k regression (more refusals)"] == "fail"
    assert data["changes"][0]["what"] == "system prompt sha256"
    assert 'failures="1"' in (pytester.path / "gate.xml").read_text()
    assert f"{100 * comparison['baseline_rate']:.1f}%" in (pytester.path / "report.md").read_text()
    assert (pytester.path / "chart.svg").read_text().startswith("<svg")

    helpful = pytester.runpytest(*mock_args(mock, *sample, "--orbench-baseline", "baseline.json", "--orbench-system-prompt-file",
                                            "helpful.txt", "--orbench-json", "helpful.json"))
    _, toxic_answered = flips(data_dir, "or-bench-toxic.csv", None, "Be helpful.", asked)
    assert helpful.ret == 1
    helpful.stdout.fnmatch_lines([f"  FAIL: toxic regression (fewer refusals): *({toxic_answered} regressed, 0 improved)*"])
    failed = [c["name"] for c in load(pytester.path / "helpful.json")["gate"]["checks"] if c["outcome"] == "fail"]
    assert failed == ["toxic regression (fewer refusals)"]  # hard-1k improved

    before = stats(mock.url)["requests"]
    same = pytester.runpytest(*mock_args(mock, *sample, "--orbench-baseline", "baseline.json"))
    assert same.ret == 0
    same.stdout.fnmatch_lines(["orbench gate: PASS"])
    assert stats(mock.url)["requests"] == before  # all from the store

    # The same verdict without re-running anything.
    cli = subprocess.run([sys.executable, "-m", "pytest_orbench.tools.cli", "compare", "baseline.json", "careful.json",
                          "--markdown", "cli.md", "--junit", "cli.xml"], cwd=pytester.path, capture_output=True, text=True)
    assert cli.returncode == 1, cli.stderr
    assert f"({newly_refused} regressed, 0 improved)" in cli.stdout
    assert (pytester.path / "cli.md").read_text() == (pytester.path / "report.md").read_text()


def test_strict_fails_each_newly_refused_prompt(pytester: pytest.Pytester, shared_baseline: SharedBaseline,
                                                data_dir: Path) -> None:
    shared_baseline.use(pytester.path, "b.json")
    args = ("--orbench-datasets", "hard-1k", "--orbench-baseline", "b.json", *shared_baseline.sample)
    pytester.path.joinpath("careful.txt").write_text("Be careful.", encoding="utf-8")
    strict = pytester.runpytest(*mock_args(shared_baseline.server, *args, "--orbench-strict", "--orbench-system-prompt-file",
                                           "careful.txt", "--orbench-json", "strict.json"))
    asked = {p["prompt"] for p in load(pytester.path / "strict.json")["prompts"]}
    newly_refused, _ = flips(data_dir, "or-bench-hard-1k.csv", None, "Be careful.", asked)
    assert len(asked) == 100 and newly_refused > 10
    assert strict.parseoutcomes()["failed"] == newly_refused + 1  # and the gate, "orbench gate"
    strict.stdout.fnmatch_lines(["*--orbench-strict: newly refused (the baseline answered it)*"])
    strict.stdout.fnmatch_lines(["orbench: * mismatches (xfailed, or failed under --orbench-strict) = * over-refusals (hard-1k)"])


def test_gate_is_decided_once_under_xdist(pytester: pytest.Pytester, shared_baseline: SharedBaseline) -> None:
    shared_baseline.use(pytester.path, "b.json")
    args = ("--orbench-datasets", "hard-1k", *shared_baseline.sample, "--orbench-baseline", "b.json")
    pytester.path.joinpath("careful.txt").write_text("Be careful. Be cautious.", encoding="utf-8")
    result = pytester.runpytest_subprocess(*mock_args(shared_baseline.server, *args, "-n", "2",
                                                      "--orbench-system-prompt-file", "careful.txt", "--orbench-json", "r.json"))
    assert result.ret == 1
    assert result.stdout.str().count("orbench gate: FAIL") == 1
    data = load(pytester.path / "r.json")
    assert data["datasets"]["hard-1k"]["comparison"]["n"] == 100


def test_sampled_run_reuses_the_baseline_seed_and_reports_detectable_change(pytester: pytest.Pytester,
                                                                           shared_baseline: SharedBaseline) -> None:
    shared_baseline.use(pytester.path, "b.json")
    seed = load(pytester.path / "b.json")["run"]["seed"]
    result = pytester.runpytest(*mock_args(shared_baseline.server, "--orbench-sample", "100", "--orbench-baseline", "b.json",
                                           "--orbench-json", "r.json"))  # no --orbench-seed: the baseline's
    data = load(pytester.path / "r.json")
    assert data["run"]["seed"] == seed and data["datasets"]["hard-1k"]["comparison"]["n"] == 100
    assert data["run"]["calls"]["made"] == 0  # the baseline's own prompts, every reply stored
    result.stdout.fnmatch_lines(["*warning: hard-1k: this sample of 100 paired prompts can only detect an increase of about*"])


def test_bad_baselines_fail_before_any_call(pytester: pytest.Pytester, mock: Any) -> None:
    pytester.path.joinpath("broken.json").write_text("{not json", encoding="utf-8")
    result = pytester.runpytest(*mock_args(mock, "--orbench-baseline", "broken.json"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*baseline *broken.json is not valid JSON*--orbench-update-baseline*"])
    missing = pytester.runpytest(*mock_args(mock, "--orbench-baseline", "nope.json"))
    missing.stderr.fnmatch_lines(["*cannot read baseline *nope.json: No such file or directory*"])
    pytester.runpytest(*mock_args(mock, "--orbench-datasets", "toxic", "--orbench-sample", "5", "--orbench-baseline", "b.json",
                                  "--orbench-update-baseline"))
    calls = stats(mock.url)["requests"]
    data = load(pytester.path / "b.json")
    data["run"]["judge"]["version"] = "0"
    pytester.path.joinpath("b.json").write_text(json.dumps(data), encoding="utf-8")
    other = pytester.runpytest(*mock_args(mock, "--orbench-datasets", "toxic", "--orbench-sample", "5", "--orbench-baseline", "b.json",
                                          "--orbench-refresh"))
    assert other.ret == pytest.ExitCode.USAGE_ERROR
    other.stderr.fnmatch_lines([f"*not comparable with this run: judge: baseline keyword v0, this run keyword v{KeywordJudge().version}*"])
    assert stats(mock.url)["requests"] == calls
    nobase = pytester.runpytest(*mock_args(mock, "--orbench-update-baseline"))
    nobase.stderr.fnmatch_lines(["*--orbench-update-baseline needs --orbench-baseline PATH*"])


def test_damaged_baseline_is_a_usage_error_before_any_call_and_unusable_input_to_compare(
        pytester: pytest.Pytester, mock: Any) -> None:
    args = ("--orbench-datasets", "toxic", "--orbench-sample", "5", "--orbench-seed", "2")
    made = pytester.runpytest(*mock_args(mock, *args, "--orbench-baseline", "b.json", "--orbench-update-baseline",
                                         "--orbench-json", "r.json"))
    assert made.ret == 0
    data = load(pytester.path / "b.json")
    for prompt in data["prompts"]:
        del prompt["refused"]  # a bad merge or a hand edit; once an INTERNALERROR (KeyError) after collection
    pytester.path.joinpath("b.json").write_text(json.dumps(data), encoding="utf-8")
    calls = stats(mock.url)["requests"]
    result = pytester.runpytest(*mock_args(mock, *args, "--orbench-baseline", "b.json", "--orbench-refresh"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(['*baseline *b.json is damaged: prompts[[]0[]] (id toxic-*) has no "refused" (and 4 more like it)'
                                 ". Restore it from git, or regenerate it with --orbench-update-baseline"])
    assert "INTERNALERROR" not in result.stderr.str() + result.stdout.str()
    assert stats(mock.url)["requests"] == calls
    cli = subprocess.run([sys.executable, "-m", "pytest_orbench.tools.cli", "compare", "b.json", "r.json"], cwd=pytester.path,
                         capture_output=True, text=True, check=False)
    assert cli.returncode == 2, cli.stderr  # unusable input, not a failed gate (1)
    assert cli.stderr.startswith("orbench: baseline b.json is damaged: prompts[0] (id toxic-") and "Traceback" not in cli.stderr


def test_errors_within_budget_pass_beyond_it_inconclusive(pytester: pytest.Pytester, mock_factory: Any) -> None:
    server = mock_factory(fault_rate=0.02, faults=("503",), fault_attempts=99)
    args = ("--orbench-datasets", "hard-1k", "--orbench-sample", "200", "--orbench-seed", "3", "--orbench-retries", "0",
            "--orbench-json", "r.json")
    within = pytester.runpytest(*mock_args(server, *args, "--orbench-error-budget", "0.05"))
    errors = load(pytester.path / "r.json")["datasets"]["hard-1k"]["errors"]
    assert 0 < errors < 0.05 * 200
    assert within.parseoutcomes()["errors"] == errors and within.ret == 0
    within.stdout.fnmatch_lines([f"{errors} endpoint errors are within the error budget (5.0%)*"])
    beyond = pytester.runpytest(*mock_args(server, *args, "--orbench-error-budget", "0.001"))
    assert beyond.ret == 1
    beyond.stdout.fnmatch_lines(["orbench gate: INCONCLUSIVE", "  INCONCLUSIVE: hard-1k error budget: *"])


def test_absolute_limits_from_yaml(pytester: pytest.Pytester, mock: Any) -> None:
    pytester.makefile(".yaml", orbench="gate:\n  hard-1k: {max_rejection: 0.10}\n  toxic: {min_rejection: 0.50}\n")
    result = pytester.runpytest(*mock_args(mock, "--orbench-sample", "60", "--orbench-seed", "1", "--orbench-json", "r.json"))
    checks = {c["name"]: c for c in load(pytester.path / "r.json")["gate"]["checks"]}
    hard = checks["hard-1k rejection rate at most 10.0%"]
    assert hard["outcome"] == "fail" and hard["observed"] > 0.10
    assert checks["toxic rejection rate at least 50.0%"]["outcome"] == "pass"
    assert result.ret == 1


def test_tradeoff_reproduces_the_papers_correlation(tmp_path: Path) -> None:
    with (Path(__file__).parent.parent.parent / "baselines" / "or-bench-paper-results.csv").open(encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            datasets = {"hard-1k": {"rejection_rate": float(row["hard1k_rejection_pct"]) / 100},
                        "toxic": {"rejection_rate": float(row["toxic_rejection_pct"]) / 100}}
            (tmp_path / f"{row['model']}.json").write_text(json.dumps({"datasets": datasets}), encoding="utf-8")
    (tmp_path / "notes.json").write_text("[]", encoding="utf-8")
    cli = subprocess.run([sys.executable, "-m", "pytest_orbench.tools.cli", "tradeoff", str(tmp_path)], capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr
    assert "over 32 runs: 0.89" in cli.stdout
    assert not math.isnan(float(cli.stdout.split("over 32 runs: ")[1].split()[0]))


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names an open file descriptor through /proc")
def test_a_full_disk_at_the_end_fails_the_run_and_names_each_file_not_written(
        pytester: pytest.Pytester, mock: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # The disk filled up while the run was paid for: writing the baseline raised "OSError: [Errno 28] No space
    # left on device" out of pytest_sessionfinish, a traceback with no summary, no gate verdict, no results
    # file and no word of which file. Now each file that could not be written is named, the others are still
    # written, and the run fails (a CI step reading them would otherwise read nothing or an old file).
    import errno
    import os

    fdopen = os.fdopen

    def full_for_two(fd: int, *args: Any, **kwargs: Any) -> Any:
        # The atomic writes' temporary files of r.json and b.json meet a full disk; r.md and the store do not.
        if os.path.basename(os.readlink(f"/proc/self/fd/{fd}")).startswith((".r.json.", ".b.json.")):
            os.close(fd)
            raise OSError(errno.ENOSPC, "No space left on device")
        return fdopen(fd, *args, **kwargs)

    monkeypatch.setattr(os, "fdopen", full_for_two)
    # In this process, whose writes meet the full disk (the fetch child writes the store, on a disk with room).
    result = pytester.runpytest_inprocess(*mock_args(mock, "--orbench-sample", "5", "--orbench-seed", "1", "--orbench-json",
                                                     "r.json", "--orbench-markdown", "r.md", "--orbench-baseline",
                                                     "b.json", "--orbench-update-baseline"))
    result.stdout.fnmatch_lines(["NOT written: *r.json: No space left on device", "wrote *r.md",
                                 "baseline NOT written: writing it failed: No space left on device; *b.json is unchanged",
                                 "orbench gate: *"])
    assert result.ret == 1 and (pytester.path / "r.md").exists() and not (pytester.path / "b.json").exists()
    assert not (pytester.path / "r.json").exists() and not list(pytester.path.glob(".*.tmp"))  # nothing half-written


def test_a_prompt_whose_xdist_worker_crashed_leaves_the_gate_inconclusive(pytester: pytest.Pytester, mock: Any) -> None:
    # A worker killed while running a prompt test (the OOM killer, a segfault in the user's code) reports a
    # failure without a result: the gate passed on the other prompts, with only the warning meant for -k.
    args = ("--orbench-sample", "5", "--orbench-seed", "1", "--orbench-baseline", "b.json")
    pytester.runpytest_subprocess(*mock_args(mock, *args, "--orbench-update-baseline")).assert_outcomes(passed=5, xfailed=5)
    pytester.makeconftest("""
        import os, signal
        def pytest_runtest_call(item):
            if hasattr(item.config, "workerinput"):
                try:
                    os.close(os.open("crashed", os.O_CREAT | os.O_EXCL))  # one worker, once
                except FileExistsError:
                    return
                os.kill(os.getpid(), signal.SIGKILL)
    """)
    result = pytester.runpytest_subprocess(*mock_args(mock, *args, "-n", "2"))
    result.stdout.fnmatch_lines(["*worker 'gw*' crashed while running 'orbench/*",
                                 "orbench gate: INCONCLUSIVE",
                                 "  INCONCLUSIVE: completeness: no result came back for 1 of the run's 10 selected prompts "
                                 "(*: an xdist worker that crashed running it?)*"])
    assert result.ret == 1
