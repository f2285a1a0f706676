"""End to end: the prompt tests inside a project's own pytest session. Your tests beside them, -x,
selection (-k, node ids, --lf), and what the gate then says it compared; litellm against the simulator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import load, mock_args, raise_at_call, stats
from tests.e2e.test_e2e_trust import hard_prompts, write_set

pytestmark = pytest.mark.usefixtures("orbench_env")

YOURS_LAST = """
    import pytest

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(items):
        items.sort(key=lambda item: not item.nodeid.startswith("orbench/"))  # your tests after the prompts
"""


def test_your_failing_test_after_every_prompt_ran_under_x_leaves_the_run_complete(pytester: pytest.Pytester,
                                                                                  mock: Any) -> None:
    pytester.makepyfile(test_mine="def test_mine():\n    assert 0, 'my own test'\n")
    pytester.makeconftest(YOURS_LAST)
    result = pytester.runpytest(*mock_args(mock, "--orbench-sample", "5", "--orbench-seed", "5", "-x",
                                           "--orbench-baseline", "b.json", "--orbench-update-baseline",
                                           "--orbench-json", "r.json"))
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # your test failed: pytest's verdict, not the gate's
    outcomes = result.parseoutcomes()
    assert outcomes["failed"] == 1 and outcomes.get("passed", 0) + outcomes.get("xfailed", 0) == 10
    # Every prompt ran before -x stopped the session: nothing is unchecked, so the baseline is written.
    result.stdout.fnmatch_lines(["baseline updated: *b.json (review and commit it)"])
    result.stdout.no_fnmatch_line("*INCONCLUSIVE: completeness*")
    gate = load(pytester.path / "r.json")["gate"]
    assert [c["name"] for c in gate["checks"] if c["kind"] == "completeness"] == []
    assert (pytester.path / "b.json").is_file()


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_run_stopped_by_x_counts_the_prompts_it_selected(pytester: pytest.Pytester, mock: Any, workers: str) -> None:
    pytester.makeconftest(raise_at_call(3))
    args = mock_args(mock, "--orbench-sample", "5", "--orbench-seed", "5", "-k", "hard-1k", "-x", "-n", workers,
                     "--orbench-json", "r.json")
    result = pytester.runpytest_subprocess(*args) if workers != "0" else pytester.runpytest(*args)
    # -x under xdist ends the session as interrupted (xdist's way), after some of the prompts each worker ran.
    assert result.ret == (pytest.ExitCode.TESTS_FAILED if workers == "0" else pytest.ExitCode.INTERRUPTED)
    # 5 of the 10 sampled prompts were selected (-k hard-1k); -x stopped the run after 2 of them (one process).
    ran = "2" if workers == "0" else "*"
    result.stdout.fnmatch_lines([f"*INCONCLUSIVE: completeness: the run * after {ran} of 5 prompts*"])
    assert load(pytester.path / "r.json")["gate"]["verdict"] == "inconclusive"


def test_a_selection_against_a_baseline_says_how_many_prompts_it_did_not_check(pytester: pytest.Pytester, mock: Any,
                                                                                data_dir: Path) -> None:
    write_set(pytester.path / "mini.csv", hard_prompts(data_dir)[:30])  # categories c0, c1, c2: 10 each
    common = ("--orbench-datasets", "mini.csv:answer", "--orbench-baseline", "b.json")
    assert pytester.runpytest(*mock_args(mock, *common, "--orbench-update-baseline")).ret == 0
    subset = pytester.runpytest(*mock_args(mock, *common, "-k", "not c2", "--orbench-json", "r.json"))
    assert subset.ret == 0 and subset.parseoutcomes()["deselected"] == 10
    subset.stdout.fnmatch_lines(["orbench gate: PASS", "*warning: mini: 10 of the run's 30 prompts did not run (deselected "
                                 "with -k, -m, node ids, --deselect, --lf or --sw, or the run stopped) and were not "
                                 "checked; the regression check covers the 20 paired prompts that ran"])
    assert load(pytester.path / "r.json")["datasets"]["mini"]["comparison"]["not_run"] == 10


def test_a_session_in_which_no_prompt_ran_says_what_it_fetched_and_writes_no_baseline(pytester: pytest.Pytester,
                                                                                      mock: Any) -> None:
    # Your test fails under -x before any prompt test runs, once the calls that started while pytest
    # collected have all been answered: they are paid for, stored, and a re-run reuses them.
    stats_url = mock.url.rsplit("/v1", 1)[0] + "/stats"
    pytester.makepyfile(test_mine=f"""
        import json, time, urllib.request

        def test_mine():
            deadline = time.time() + 60
            while time.time() < deadline:
                with urllib.request.urlopen({stats_url!r}) as resp:
                    if json.load(resp)["completions"] >= 10:
                        break
                time.sleep(0.05)
            assert 0, "my own test"
    """)
    common = ("--orbench-sample", "5", "--orbench-seed", "5", "--orbench-baseline", "b.json")
    stopped = pytester.runpytest(*mock_args(mock, *common, "-x", "--orbench-update-baseline"))
    assert stopped.ret == pytest.ExitCode.TESTS_FAILED and stats(mock.url)["completions"] == 10
    stopped.stdout.fnmatch_lines([
        "orbench: no prompt test ran: nothing was judged or compared and no results file was written; 10 replies "
        "fetched meanwhile are stored, and the next run reuses them",
        "baseline NOT written: no prompt ran (every prompt test was deselected, or the session stopped before the "
        "first); a baseline needs every prompt; *b.json is unchanged"])
    assert not (pytester.path / "b.json").exists()
    # Only your passing tests selected: pytest alone would exit 0, but the baseline asked for was not written.
    pytester.makepyfile(test_mine="def test_mine():\n    pass\n")
    mine = pytester.runpytest(*mock_args(mock, *common, "-k", "test_mine", "--orbench-update-baseline"))
    assert mine.ret == pytest.ExitCode.TESTS_FAILED and not (pytester.path / "b.json").exists()
    mine.stdout.fnmatch_lines(["orbench: no prompt ran: nothing was asked, judged or compared; no results file was written",
                               "baseline NOT written: no prompt ran*"])
    rerun = pytester.runpytest(*mock_args(mock, *common, "--orbench-update-baseline"))
    assert rerun.ret == 0 and stats(mock.url)["completions"] == 10  # the replies fetched under -x, reused
    rerun.stdout.fnmatch_lines(["baseline updated: *b.json (review and commit it)"])


def test_prompt_node_ids_beside_your_own_tests_run_both(pytester: pytest.Pytester, mock: Any) -> None:
    pytester.makepyfile(test_mine="def test_a():\n    pass\n\ndef test_b():\n    assert 0\n")
    common = ("--orbench-sample", "3", "--orbench-seed", "5")
    listed = pytester.runpytest(*mock_args(mock, *common, "--collect-only", "-q"))
    prompt = next(line for line in listed.stdout.lines if line.startswith("orbench/toxic::"))
    both = pytester.runpytest(*mock_args(mock, *common, "test_mine.py::test_a", prompt, "-v"))
    # As pytest does with several node ids: the named test of yours and the named prompt test, nothing else.
    both.stdout.fnmatch_lines(["test_mine.py::test_a PASSED*", f"{prompt} *"])
    outcomes = both.parseoutcomes()
    assert both.ret == 0 and outcomes.get("passed", 0) + outcomes.get("xfailed", 0) == 2
    assert outcomes["deselected"] == 5 and "test_b" not in both.stdout.str()
    assert stats(mock.url)["completions"] == 1


def test_a_run_stopped_by_x_counts_the_replies_fetched_for_prompts_that_did_not_run(pytester: pytest.Pytester,
                                                                                   mock: Any) -> None:
    # The fetch runs ahead of the tests: by the time -x stops the run after 2 prompt tests, all 10 replies
    # are paid for. They are stored (a re-run reuses them) and counted apart from the 2 calls the run reports.
    stats_url = mock.url.rsplit("/v1", 1)[0] + "/stats"
    pytester.makeconftest(f"""
        import json, time, urllib.request
        SEEN = []

        def pytest_runtest_call(item):
            SEEN.append(item)
            deadline = time.time() + 60
            while len(SEEN) == 1 and time.time() < deadline:
                with urllib.request.urlopen({stats_url!r}) as resp:
                    if json.load(resp)["completions"] >= 10:
                        break
                time.sleep(0.05)
            if len(SEEN) == 3:
                raise RuntimeError("boom")
    """)
    common = ("--orbench-sample", "5", "--orbench-seed", "5")
    stopped = pytester.runpytest(*mock_args(mock, *common, "-x", "--orbench-json", "r.json"))
    assert stopped.ret == pytest.ExitCode.TESTS_FAILED and stats(mock.url)["completions"] == 10
    stopped.stdout.fnmatch_lines([
        "calls: 2 made this run, 0 replies from the store, 0 errors after retries*; 8 more fetched for prompts that "
        "did not run (stored; not counted here)",
        "*INCONCLUSIVE: completeness: the run stopped early (stopping after 1 failures) after 2 of 10 prompts: the "
        "prompts that did not run were not checked; 8 replies fetched for them are stored, and the next run reuses them"])
    assert load(pytester.path / "r.json")["run"]["calls"]["fetched_not_run"] == 8
    pytester.makeconftest("")
    rerun = pytester.runpytest(*mock_args(mock, *common, "--orbench-json", "again.json"))
    assert rerun.ret == 0 and stats(mock.url)["completions"] == 10
    calls = load(pytester.path / "again.json")["run"]["calls"]
    assert calls["made"] == 0 and calls["stored"] == 10 and "fetched_not_run" not in calls


def test_runxfail_fails_the_mismatches_instead_of_passing_them(pytester: pytest.Pytester, mock: Any) -> None:
    common = ("--orbench-sample", "5", "--orbench-seed", "5")
    normal = pytester.runpytest(*mock_args(mock, *common)).parseoutcomes()
    assert normal["xfailed"] > 0
    # pytest's --runxfail turns pytest.xfail() into a no-op: a mismatch would pass as if it behaved as expected.
    run = pytester.runpytest(*mock_args(mock, *common, "--runxfail"))
    outcomes = run.parseoutcomes()
    assert run.ret == pytest.ExitCode.TESTS_FAILED
    assert (outcomes["failed"], outcomes["passed"], outcomes.get("xfailed", 0)) == (normal["xfailed"], normal["passed"], 0)
    run.stdout.fnmatch_lines([f"orbench: {normal['xfailed']} failed (--runxfail) = *",
                              "FAILED orbench/*over-refusal*"])


@pytest.mark.parametrize("dry", ["--collect-only", "--setup-only", "--setup-plan", "--fixtures", "--fixtures-per-test",
                                 "--markers"])
def test_pytest_dry_runs_ask_nothing(pytester: pytest.Pytester, mock: Any, dry: str) -> None:
    pytester.makepyfile(test_mine="def test_mine():\n    pass\n")
    result = pytester.runpytest(*mock_args(mock, "--orbench-sample", "3", "--orbench-seed", "5", "-q", dry))
    assert result.ret == 0 and stats(mock.url)["requests"] == 0
    assert not (pytester.path / ".orbench").exists()  # no fetch was planned, so the store was not even opened
    if dry in ("--collect-only", "--setup-plan"):
        result.stdout.fnmatch_lines(["*orbench/toxic::*"])  # the prompt tests are shown
    result.stdout.no_fnmatch_line("orbench: no prompt*")


def test_help_shows_while_the_settings_are_wrong(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    result = pytester.runpytest("--orbench", "--orbench-model", "openai/gpt-4o-mini", "--help")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*--orbench-model*"])


def test_a_warm_rerun_imports_neither_litellm_nor_the_judges_reading_rules_nor_yaml(pytester: pytest.Pytester,
                                                                                     mock: Any) -> None:
    # Every reply and verdict is stored: nothing is asked or judged, and a run configured by options alone
    # reads no YAML. Each of these imports cost a re-run of 1,974 prompts 2-15 ms (lexical: ~150 patterns).
    pytester.makeconftest("""
        import sys

        def pytest_unconfigure(config):
            heavy = ("litellm", "pytest_orbench.judging.keyword_features", "pytest_orbench.fetch.child", "yaml", "tomllib", "statistics")
            with open("imported.txt", "a") as fh:
                fh.write(" ".join(m for m in heavy if m in sys.modules) + "\\n")
    """)
    args = mock_args(mock, "--orbench-sample", "6", "--orbench-seed", "5")
    assert pytester.runpytest_subprocess(*args).ret == 0
    assert pytester.runpytest_subprocess(*args).ret == 0
    cold, warm = (pytester.path / "imported.txt").read_text().splitlines()
    assert "pytest_orbench.judging.keyword_features" in cold.split()  # the first run judged its replies
    assert warm == ""


def test_the_plugins_modules_are_imported_as_python_does_and_your_asserts_still_rewritten(
        pytester: pytest.Pytester, mock: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # pytest marks every module of an installed plugin's package for assertion rewriting (as the conftest
    # does here, for a source tree that is not installed as a wheel). With PYTHONDONTWRITEBYTECODE set it
    # then parsed, rewrote and compiled the plugin's ~25 modules on every run, ignoring pip's compiled files.
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    pytester.makeconftest("""
        import sys
        import pytest

        pytest.register_assert_rewrite("pytest_orbench")

        def pytest_sessionfinish(session):
            with open("loaders.txt", "w") as fh:
                for name in ("pytest_orbench.run.session", "pytest_orbench.core.store", "test_mine"):
                    fh.write(f"{name} {type(sys.modules[name].__loader__).__name__}\\n")
    """)
    pytester.makepyfile(test_mine="def test_mine():\n    mine = 2\n    assert mine == 3\n")
    result = pytester.runpytest_subprocess(*mock_args(mock, "--orbench-sample", "2", "--orbench-seed", "5",
                                                      "-W", "ignore::pytest.PytestAssertRewriteWarning"))
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*assert 2 == 3*"])  # your test's assert still shows its values
    assert (pytester.path / "loaders.txt").read_text().splitlines() == [
        "pytest_orbench.run.session SourceFileLoader", "pytest_orbench.core.store SourceFileLoader",
        "test_mine AssertionRewritingHook"]


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["n0", "n2"])
def test_your_objects_are_still_finalized_at_exit(pytester: pytest.Pytester, mock: Any, workers: list[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # Your conftest keeps a buffered file in a reference cycle and never closes it: CPython's collections at
    # exit free the cycle, which flushes the file. The plugin once froze the heap at exit to skip them
    # (0.2-0.3 s): both files stayed empty, on the controller and on every xdist worker.
    pytester.makeconftest("""
        import os

        class Sink:
            def __init__(self, path):
                self.me = self  # a reference cycle: only the collector frees it
                self.file = open(path, "w")

        WHO = os.environ.get("PYTEST_XDIST_WORKER", "main")
        KEPT = Sink(f"module-{WHO}.txt")  # alive until the interpreter clears the modules

        def pytest_configure(config):
            config.sink = Sink(f"config-{WHO}.txt")  # alive as long as pytest's config (sys.meta_path holds it)
            config.sink.file.write("configure\\n")
            KEPT.file.write("configure\\n")

        def pytest_sessionfinish(session):
            session.config.sink.file.write("session finish\\n")
    """)
    pytester.makepyfile(test_mine="def test_mine():\n    pass\n")
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # this suite's own worker name, under -n
    result = pytester.runpytest_subprocess(*mock_args(mock, "--orbench-sample", "2", "--orbench-seed", "5", *workers))
    assert result.ret == 0
    for who in ["main", *(["gw0", "gw1"] if workers else [])]:
        assert (pytester.path / f"config-{who}.txt").read_text() == "configure\nsession finish\n", who
        assert (pytester.path / f"module-{who}.txt").read_text() == "configure\n", who
