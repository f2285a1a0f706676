"""What a reviewer reads: the ids the gate prints select their tests, the command it prints re-runs them, and a
failed or inconclusive gate ends pytest's output in red."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, load, mock_args

pytestmark = pytest.mark.usefixtures("orbench_env")
CAREFUL = REPO / "examples" / "careful-system-prompt.txt"


@pytest.fixture
def mock(shared_mock: Any) -> Any:
    """This module's runs share one simulator and one store (`common`): each reply is fetched once for all."""
    return shared_mock


@pytest.fixture
def common(shared_store: Path) -> tuple[str, ...]:
    return "--orbench-sample", "50", "--orbench-seed", "3", "--orbench-baseline=base.json", f"--orbench-store={shared_store}"


@pytest.fixture
def regressed(pytester: pytest.Pytester, mock: Any, common: tuple[str, ...]) -> tuple[pytest.RunResult, dict[str, Any]]:
    assert pytester.runpytest(*mock_args(mock, *common, "--orbench-update-baseline")).ret == 0
    result = pytester.runpytest(*mock_args(mock, *common, f"--orbench-system-prompt-file={CAREFUL}", "--orbench-json",
                                           "r.json"))
    assert result.ret == 1
    return result, load(pytester.path / "r.json")


def test_the_ids_the_gate_prints_select_their_tests(pytester: pytest.Pytester, mock: Any, common: tuple[str, ...],
                                                    regressed: tuple[pytest.RunResult, dict[str, Any]]) -> None:
    result, results = regressed
    ids = results["datasets"]["hard-1k"]["comparison"]["newly_refused_ids"]
    assert len(ids) >= 2
    line = next(line for line in result.stdout.lines if line.strip().startswith("re-run them, with this run's options "
                                                                               "(model, endpoint, store): pytest "))
    command = re.search(r'-k "([^"]+)"', line)
    assert command is not None and command.group(1) == " or ".join(ids[:20])
    # That command, with the run's options, runs exactly those prompts (from the store: no call).
    rerun = pytester.runpytest(*mock_args(mock, *common, f"--orbench-system-prompt-file={CAREFUL}", "--orbench-only",
                                          "-k", command.group(1), "--orbench-json", "again.json"))
    assert sorted(p["id"] for p in load(pytester.path / "again.json")["prompts"]) == sorted(ids[:20])
    assert rerun.parseoutcomes()["deselected"] == 100 - len(ids[:20])
    # One id, with -k or as a node id under its dataset.
    one = pytester.runpytest(*mock_args(mock, *common, "--orbench-only", "-k", ids[0], "--collect-only", "-q"))
    assert [line for line in one.stdout.lines if line.startswith("orbench/")] == \
        [f"orbench/hard-1k::{next(p['category'] for p in results['prompts'] if p['id'] == ids[0])}-{ids[0].split('-')[-1]}"]
    node = pytester.runpytest(*mock_args(mock, *common, "--orbench-only", f"orbench/hard-1k::{ids[0]}", "--collect-only",
                                         "-q"))
    assert node.ret == 0 and sum(line.startswith("orbench/") for line in node.stdout.lines) == 1


@pytest.mark.parametrize("flags", [["--color=yes"], ["--color=yes", "-q"], ["--color=yes", "-qq"],
                                   ["--color=yes", "-n", "2"]], ids=["default", "q", "qq", "xdist"])
def test_a_failed_gate_ends_in_red(pytester: pytest.Pytester, mock: Any, flags: list[str], common: tuple[str, ...]) -> None:
    assert pytester.runpytest(*mock_args(mock, *common, "--orbench-update-baseline")).ret == 0
    result = pytester.runpytest_subprocess(*mock_args(mock, *common, f"--orbench-system-prompt-file={CAREFUL}", *flags))
    assert result.ret == 1
    last = [line for line in result.stdout.lines if line.strip()][-1]
    assert "\x1b[31m" in last and not last.startswith("\x1b[32m"), repr(last)  # red, not green
    assert "FAILED orbench gate - FAIL: hard-1k regression (more refusals)" in re.sub(r"\x1b\[[0-9;]*m", "",
                                                                                     result.stdout.str())


def test_a_passing_gate_stays_green(pytester: pytest.Pytester, mock: Any, common: tuple[str, ...]) -> None:
    assert pytester.runpytest(*mock_args(mock, *common, "--orbench-update-baseline")).ret == 0
    result = pytester.runpytest_subprocess(*mock_args(mock, *common, "--color=yes"))
    assert result.ret == 0
    last = [line for line in result.stdout.lines if line.strip()][-1]
    assert last.startswith("\x1b[32m") and not re.search(r"\b\d+ failed", last), repr(last)
    assert "FAILED orbench gate" not in result.stdout.str()


def test_the_failed_line_names_the_failed_checks_whole_and_no_path(
        pytester: pytest.Pytester, mock: Any, shared_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Started outside the rootdir, as scripts/demo is (--rootdir a temp folder), in a narrow terminal.
    common = ("--orbench-sample", "50", "--orbench-seed", "3", f"--orbench-baseline={pytester.path / 'base.json'}",
              f"--orbench-store={shared_store}", f"--rootdir={pytester.path}")
    assert pytester.runpytest(*mock_args(mock, *common, "--orbench-update-baseline")).ret == 0
    for name in ("CI", "BUILD_NUMBER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", "60")  # pytest cut its line here: "FAIL: hard-1k regression (more r..."
    monkeypatch.chdir(pytester.mkdir("elsewhere"))
    result = pytester.runpytest(*mock_args(mock, *common, f"--orbench-system-prompt-file={CAREFUL}", "-p",
                                           "no:xdist"))
    assert result.ret == 1
    (line,) = [line for line in result.stdout.lines if line.startswith("FAILED ")]
    assert line.startswith("FAILED orbench gate - FAIL: hard-1k regression (more refusals)"), line
    assert "..." not in line and "…" not in line and not line.endswith("(more")


@pytest.mark.parametrize(("width", "line"), [
    (None, "FAIL: hard-1k regression (more refusals); FAIL: toxic regression (fewer refusals); "
           "INCONCLUSIVE: hard-1k error budget"),
    (99, "FAIL: hard-1k regression (more refusals); FAIL: toxic regression (fewer refusals); and 1 more above"),
    (98, "FAIL: hard-1k regression (more refusals); and 2 more above"),
    (60, "FAIL: hard-1k regression (more refusals); and 2 more above"),
    (10, "FAIL: hard-1k regression (more refusals); and 2 more above"),  # the first named whole, however narrow
])
def test_the_gate_reason_fits_whole_checks_in_the_width(width: int | None, line: str) -> None:
    from pytest_orbench.render.terminal import gate_reason

    checks = [{"name": "hard-1k error budget", "outcome": "inconclusive"}, {"name": "x", "outcome": "pass"},
              {"name": "hard-1k regression (more refusals)", "outcome": "fail"},
              {"name": "toxic regression (fewer refusals)", "outcome": "fail"}]
    assert gate_reason({"gate": {"verdict": "fail", "checks": checks}}, width) == line  # type: ignore[typeddict-item]
