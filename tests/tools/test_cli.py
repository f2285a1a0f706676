"""The `orbench` command with bad input: each a clear error naming the fix, exit status 2, no traceback,
and no call to any endpoint (the simulator's request count stays 0)."""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_orbench.tools.cli import main
from pytest_orbench.tools.cli.parser import build_parser
from tests.conftest import REPO, stats

RESULTS = {"schema": "pytest-orbench/results", "schema_version": 1}
BASELINE = (REPO / "baselines" / "mock-baseline.json").read_text(encoding="utf-8")  # a real, committed baseline


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder with a results-shaped file, a baseline-shaped file, a folder and a plain file."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    (tmp_path / "r.json").write_text(json.dumps(RESULTS), encoding="utf-8")
    (tmp_path / "b.json").write_text(BASELINE, encoding="utf-8")
    (tmp_path / "out").mkdir()
    (tmp_path / "notes.txt").write_text("notes", encoding="utf-8")
    (tmp_path / "labelled.csv").write_text("prompt,response,label\nq,\"Sure: one, two.\",compliance\n", encoding="utf-8")
    return tmp_path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    return code, captured.err


@pytest.mark.parametrize(("argv", "message"), [
    # The two files swapped: once "r.json is not a pytest-orbench baseline", which named no fix.
    (["compare", "r.json", "b.json"], "r.json is a results file (--orbench-json), not a baseline*orbench compare "
                                      "takes the baseline first: orbench compare BASELINE.json RESULTS.json)"),
    (["compare", "b.json", "b.json"], "b.json is a baseline (--orbench-update-baseline), not a results file*"),
    # Output paths: once a traceback and exit 1 (a failed gate) after the comparison was made.
    (["compare", "b.json", "r.json", "--json", "out"], "--json out is a folder: give the path of a file to write*"),
    (["compare", "b.json", "r.json", "--markdown", "notes.txt/report.md"], "*notes.txt is a file, not a folder*"),
    (["compare", "b.json", "r.json", "--json", "b.json"], "--json b.json is the input file given as BASELINE*"),
    (["compare", "b.json", "r.json", "--svg", "x.svg", "--junit", "x.svg"], "--svg and --junit both name x.svg*"),
    # Once accepted: 0 silently meant the default, a negative number a report cut short.
    (["compare", "b.json", "r.json", "--max-chars", "0"], "--max-chars must be at least 2000*"),
    (["compare", "b.json", "r.json", "--alpha", "2"], "--alpha must be between 0 and 1 (exclusive), got 2.0"),
    (["judge-eval", "labelled.csv", "--json", "out"], "--json out is a folder*"),
    (["judge-eval", "labelled.csv", "--json", "labelled.csv"], "--json labelled.csv is the input file given as LABELED*"),
    (["judge-eval", "labelled.csv", "--fail-under", "90"], "--fail-under is a share between 0 and 1 (0.9 for 90%), got 90.0"),
    (["judge-eval", "labelled.csv", "--show", "-1"], "--show must be at least 0, got -1"),
    (["judge-eval", "labelled.csv", "--judge-model", "openai/judge"],
     "--judge-model / --judge-api-base are set but --judge is 'keyword', which calls no model*"),
    (["judge-eval", "labelled.csv", "--against", "llm"], "--against takes an offline judge*"),
    (["mock-server", "--port", "70000"], "--port must be between 0 and 65535*"),
    (["mock-server", "--fault-rate", "5"], "--fault-rate is a share between 0 and 1, got 5.0"),
    (["mock-server", "--api-key-env", "ORBENCH_TEST_UNSET_KEY"],
     "--api-key-env names $ORBENCH_TEST_UNSET_KEY, which is not set: export ORBENCH_TEST_UNSET_KEY=... first"),
    (["mock-server", "--port", "0", "--port-file", "out"], "--port-file out is a folder*"),
    # Once the export replaced the results or the labels (both human labels gone), exit 0.
    (["label", "r.json", "--export", "r.json", "--force"],
     "--export r.json is the results file: writing the sample would replace it (even with --force)*"),
    (["label", "r.json", "--labels", "labelled.csv", "--export", "labelled.csv", "--force"],
     "--export labelled.csv is the labels file (--labels)*"),
    (["label", "r.json", "--export", "notes.txt"], "--export notes.txt exists: name a new file, or add --force to replace it"),
    (["label", "r.json", "--export", "out", "--force"], "--export out is not a file (a folder or a device)*"),
    (["label", "r.json", "--store", "out", "--export", "out/store.sqlite", "--force"],
     "--export out/store.sqlite is inside the response store out (even with --force)*"),
    (["label", "r.json", "--export", "s.csv", "--import", "labelled.csv"], "--export writes a sample to label, --import *"),
    (["label", "r.json", "--labels", "r.json"], "--labels r.json is the results file the replies come from*"),
    (["label", "r.json", "--labels", "notes.txt/labels.csv"], "--labels notes.txt/labels.csv: *notes.txt is a file, not a folder*"),
])
def test_bad_input_is_a_usage_error_naming_the_fix(files: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch, argv: list[str], message: str) -> None:
    monkeypatch.delenv("ORBENCH_TEST_UNSET_KEY", raising=False)
    code, err = run(capsys, *argv)
    assert code == 2 and fnmatch.fnmatch(err.strip(), f"orbench*: {message}"), err
    assert os.listdir(files / "out") == []  # nothing written into the folder
    assert (files / "b.json").read_text(encoding="utf-8") == BASELINE
    assert json.loads((files / "r.json").read_text(encoding="utf-8")) == RESULTS
    assert (files / "notes.txt").read_text(encoding="utf-8") == "notes"


def test_orbench_label_never_exports_over_its_own_files_under_another_name(files: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    labels = (files / "labelled.csv").read_text(encoding="utf-8")
    os.symlink("r.json", "link.json")
    os.link("labelled.csv", "hard.csv")
    for argv, message in ((["--export", "link.json", "--force"], "--export link.json is the results file"),
                          (["--labels", "link.json"], "--labels link.json is the results file"),
                          (["--labels", "labelled.csv", "--export", "hard.csv", "--force"],
                           "--export hard.csv is the labels file (--labels)")):
        code, err = run(capsys, "label", "r.json", *argv)
        assert code == 2 and message in err, err
    assert json.loads((files / "r.json").read_text(encoding="utf-8")) == RESULTS
    assert (files / "labelled.csv").read_text(encoding="utf-8") == labels


@pytest.fixture
def unwritable(tmp_path: Path) -> Iterator[Path]:
    """A folder no new file can be made in: a read-only one, or for root (whom a mode does not stop) /sys."""
    if os.geteuid() != 0:
        folder = tmp_path / "read-only"
        folder.mkdir()
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    try:
        os.close(os.open("/sys/orbench-probe", os.O_CREAT | os.O_WRONLY, 0o600))
    except OSError:
        yield Path("/sys")
        return
    os.unlink("/sys/orbench-probe")
    pytest.skip("no folder here refuses root a new file")


@pytest.mark.parametrize("argv", [
    ["label", "r.json", "--labels", "{target}"],  # once a traceback at the first key
    ["label", "--import", "labelled.csv", "--labels", "{target}"],
    ["label", "r.json", "--export", "{target}"],
])
def test_orbench_label_refuses_a_path_it_cannot_write_before_anyone_labels(files: Path, unwritable: Path, argv: list[str],
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    target = unwritable / "labels.csv"
    code, err = run(capsys, *(a.format(target=target) for a in argv))
    assert code == 2 and f"{target} cannot be written: {unwritable} refuses a new file" in err, err


@pytest.mark.parametrize("argv", [
    ["judge-eval", "labelled.csv", "--timeout", "inf"],  # would wait forever on a judge that never answers
    ["compare", "b.json", "r.json", "--alpha", "nan"],  # a nan passes every range check unseen
    ["generate", "--out", "set.csv", "--timeout", "nan"],
])
def test_number_options_refuse_nan_and_infinity(files: Path, capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and f"argument {argv[-2]}: must be a finite number, got {argv[-1]!r}" in err, err


def test_every_number_option_of_every_command_refuses_nan() -> None:
    # (mock-server's too: --hang inf, a timeout fault that never ends; not run above, as it would serve.)
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    plain = [f"{name} {action.option_strings[0]}" for name, sub in commands.items() for action in sub._actions
             if action.type is float]
    assert plain == []


def test_judge_eval_bad_input_makes_no_judge_call(files: Path, capsys: pytest.CaptureFixture[str], mock: Any) -> None:
    llm = ("--judge", "llm", "--judge-model", "openai/judge", "--judge-api-base", mock.url)
    # Once: --concurrency 0 waited forever; --against nope failed only after every judge call was paid for.
    for argv, message in (((*llm, "--concurrency", "0"), "--concurrency must be at least 1, got 0"),
                          ((*llm, "--against", "nope"), "--against: unknown judge 'nope'"),
                          ((*llm, "--store", "notes.txt"), "--store notes.txt is a file: the response store is a folder"),
                          ((*llm, "--timeout", "0"), "--timeout must be a number of seconds between 0 and 3600, got 0.0"),
                          ((*llm, "--judge-api-base", f"{mock.url}?key=s3cret-value"),
                           "--judge-api-base (http://127.0.0.1) has a credential in its query string (key=...)")):
        code, err = run(capsys, "judge-eval", "labelled.csv", *argv)
        assert code == 2 and message in err and "s3cret-value" not in err, err
    assert stats(mock.url)["requests"] == 0


def test_judge_eval_that_measured_nothing_does_not_exit_0(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Every judge call refused (nothing listens on port 9): once "binary agreement n/a" and exit 0.
    code = main(["judge-eval", "labelled.csv", "--judge", "llm", "--judge-model", "openai/judge",
                 "--judge-api-base", "http://127.0.0.1:9/v1", "--retries", "0"])
    err = capsys.readouterr().err
    assert code == 1
    assert "1 of 1 rows have no judgement (first: judge call failed: connection refused by 127.0.0.1:9)" in err


def test_judge_eval_where_the_judge_gave_no_class_anywhere_does_not_exit_0(files: Path, mock_factory: Any,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    judge = mock_factory(judge_unscored_rate=1.0)  # answers every judge request without a [[class]]
    code = main(["judge-eval", "labelled.csv", "--judge", "llm", "--judge-model", "openai/orbench-judge",
                 "--judge-api-base", judge.url, "--retries", "0"])
    err = capsys.readouterr().err
    assert code == 1 and "nothing was measured: none of the 1 replies got a verdict (0 errors, 1 unscored" in err


def test_mock_server_on_a_port_in_use_says_so(files: Path, capsys: pytest.CaptureFixture[str], mock: Any) -> None:
    port = mock.url.rsplit(":", 1)[1].split("/")[0]
    code, err = run(capsys, "mock-server", "--port", port)
    assert code == 2 and f"cannot listen on 127.0.0.1:{port} (Address already in use); pick another --port" in err


@pytest.mark.parametrize(("argv", "message"), [
    # Once a GenerateError traceback (exit 1) from the seeds stage.
    (["--seeds", "bad.csv"], "*bad.csv:2: a quoted field starting on this line is never closed*"),
    (["--seeds", "empty.csv"], "seeds file *empty.csv has no rows"),
    (["--seeds", "out"], "seeds file *out is a folder: give a CSV or JSONL file with prompt,category"),
    # Once the harmful prompts silently replaced the safe set.
    (["--seeds", "seeds.csv", "--toxic-out", "set.csv"], "--out and --toxic-out both name *set.csv*"),
    (["--seeds", "seeds.csv", "--summary", "out"], "--summary *out is a folder*"),
    (["--seeds", "seeds.csv", "--store", "notes.txt"], "--store *notes.txt is a file*"),
    (["--seeds", "seeds.csv", "--timeout", "0"], "generate.timeout must be a number of seconds between 0 and 3600, got 0.0"),
])
def test_generate_bad_input_fails_before_any_call(files: Path, capsys: pytest.CaptureFixture[str], mock: Any,
                                                  argv: list[str], message: str) -> None:
    (files / "bad.csv").write_text('prompt,category\n"how to x,privacy\n', encoding="utf-8")
    (files / "empty.csv").write_text("", encoding="utf-8")
    (files / "seeds.csv").write_text("prompt,category\nhow to pick a lock,illegal\n", encoding="utf-8")
    code, err = run(capsys, "generate", "--out", "set.csv", "--rewriter", "openai/r", "--moderator", "openai/m",
                    "--api-base", mock.url, *argv)
    assert code == 2 and fnmatch.fnmatch(err.strip(), f"orbench: {message}"), err
    assert stats(mock.url)["requests"] == 0
    assert not (files / "set.csv").exists()
    assert os.listdir(files / "out") == []


def test_tradeoff_counts_each_run_once_and_names_what_it_skipped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def run_file(name: str, hard: float, toxic: float, system: str, **extra: Any) -> None:
        document = {"run": {"endpoint": "openai/m", "system_prompt_sha256": system, "seed": 1, **extra},
                    "datasets": {"hard-1k": {"rejection_rate": hard}, "toxic": {"rejection_rate": toxic}}}
        (tmp_path / f"{name}.json").write_text(json.dumps(document), encoding="utf-8")

    run_file("a-results", 0.2, 0.6, "a", trials=1)
    run_file("a-baseline", 0.2, 0.6, "a")  # the baseline written from that run: once counted as a second run
    run_file("b", 0.3, 0.7, "b")
    run_file("c", 0.4, 0.8, "c")
    (tmp_path / "broken.json").write_text("{", encoding="utf-8")  # once skipped without a word
    # A rate that is no rate: once a TypeError traceback (a list), or a point at NaN ranked anywhere.
    (tmp_path / "list.json").write_text('{"datasets": {"hard-1k": {"rejection_rate": 0.1}, "toxic": {"rejection_rate": [1]}}}')
    (tmp_path / "nan.json").write_text('{"datasets": {"hard-1k": {"rejection_rate": NaN}, "toxic": {"rejection_rate": 0.5}}}')
    code = main(["tradeoff", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0
    assert "list.json (toxic rejection rate '[1]' is not a number from 0 to 1)" in err
    assert "nan.json (hard-1k rejection rate 'nan' is not a number from 0 to 1)" in err
    assert "a-results.json (the same run as a-baseline.json: counted once)" in err and "broken.json (not a JSON object" in err
    # Three points in a line: exact p 2/6 (once "p = 0" from the t approximation).
    assert "over 3 runs: 1.00 (p = 0.33)" in out


def test_compare_of_a_run_that_stopped_early_is_never_a_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_orbench.analysis.baseline import save_baseline
    from pytest_orbench.core.jsonfile import write_json
    from tests.analysis.test_gate import make_results

    # The run stopped after 96 of 100 prompts (-x, Ctrl-C, a crashed worker): the four that did not run are not in
    # the file. The run said inconclusive; compared again, the stop was forgotten and the rest PASSed, exit 0.
    save_baseline(tmp_path / "b.json", make_results({"hard-1k": [False] * 100}))
    results = make_results({"hard-1k": [False] * 96}, system="abc")
    results["run"]["datasets"]["hard-1k"]["selected"] = 100
    results["run"]["stopped"] = "the run stopped early (stopping after 1 failures) after 96 of 100 prompts"
    write_json(tmp_path / "r.json", results)
    code = main(["compare", str(tmp_path / "b.json"), str(tmp_path / "r.json"), "--json", str(tmp_path / "c.json")])
    out = capsys.readouterr().out
    assert code == 1, out
    gate = json.loads((tmp_path / "c.json").read_text(encoding="utf-8"))["gate"]
    assert gate["verdict"] == "inconclusive"
    assert gate["checks"][0]["name"] == "completeness" and "after 96 of 100 prompts" in gate["checks"][0]["message"]


def test_tradeoff_of_eight_runs_answers_with_the_exact_p_and_of_one_rate_says_why_not(tmp_path: Path) -> None:
    import subprocess
    import sys

    # Issue 43: 8 runs hung `orbench tradeoff` (scipy walked (8!)^2 pairings, years). The timeout only bounds a hang.
    def write(folder: Path, hard: list[float], toxic: list[float]) -> Path:
        folder.mkdir()
        for i, (x, y) in enumerate(zip(hard, toxic)):
            document = {"datasets": {"hard-1k": {"rejection_rate": x}, "toxic": {"rejection_rate": y}}}
            (folder / f"run{i}.json").write_text(json.dumps(document), encoding="utf-8")
        return folder

    def tradeoff(folder: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pytest_orbench.tools.cli", "tradeoff", str(folder)],
                              capture_output=True, text=True, timeout=120)

    hard = [i / 10 for i in range(1, 9)]
    # One adjacent pair swapped: 16 of the 8! orderings are as extreme (tests/core/test_stats.py).
    cli = tradeoff(write(tmp_path / "eight", hard, [0.52, 0.51, *(0.5 + i / 100 for i in range(3, 9))]))
    assert cli.returncode == 0, cli.stderr
    assert f"over 8 runs: 0.98 (p = {16 / 40320:.2g})" in cli.stdout
    cli = tradeoff(write(tmp_path / "flat", hard[:4], [0.5] * 4))
    assert cli.returncode == 2 and "Spearman correlation is undefined: every point has the same second value (4 runs" in cli.stderr
    assert "Traceback" not in cli.stderr


def test_compare_of_a_live_base_run_compares_with_the_baseline_file_given(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_orbench.analysis.baseline import save_baseline
    from pytest_orbench.core.jsonfile import write_json
    from tests.analysis.test_gate import make_results

    # A run gated on a live base whose every call failed (inconclusive then), with a drift against its own
    # baseline. `orbench compare` checks it against another file: once the report still said "vs live base",
    # "the base has no system prompt" and the drift, and the base's errors made it inconclusive.
    save_baseline(tmp_path / "b.json", make_results({"hard-1k": [False] * 30}))
    results = make_results({"hard-1k": [False] * 30}, system="abc")
    results["run"]["compared_with"] = "live base"
    results["run"]["base"] = {"endpoint": "openai/m", "system_prompt_sha256": None, "differs": ["system prompt"]}
    results["base"] = {"run": {"endpoint": "openai/m"},
                       "datasets": {"hard-1k": {"n": 0, "refused": 0, "rejection_rate": None, "ci95": [0, 1], "errors": 30,
                                                "flaky": 0}}}
    results["drift"] = {"comparable": True, "changes": [], "datasets": {}}
    for prompt in results["prompts"]:
        prompt["base"] = {"verdict": "error", "refused": None, "error": "HTTP 503"}
    write_json(tmp_path / "r.json", results)
    code = main(["compare", str(tmp_path / "b.json"), str(tmp_path / "r.json"), "--json", str(tmp_path / "c.json"),
                 "--markdown", str(tmp_path / "c.md")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "vs baseline " in out and "vs live base" not in out
    compared = json.loads((tmp_path / "c.json").read_text(encoding="utf-8"))
    assert compared["run"]["compared_with"] == f"baseline file {tmp_path / 'b.json'}"
    assert compared["gate"]["verdict"] == "pass" and "drift" not in compared
    assert [c["name"] for c in compared["gate"]["checks"]] == ["hard-1k error budget", "hard-1k regression (more refusals)"]
    markdown = (tmp_path / "c.md").read_text(encoding="utf-8")
    assert "**Compared with** the baseline file. **What changed:**" in markdown and "drift" not in markdown
    # The live base's failed calls are that run's business, not this comparison's.
    assert "live base" not in markdown


def test_output_to_a_reader_that_stopped_reading_ends_quietly() -> None:
    # `orbench judge-eval ... | head`: the pipe is closed before the report is written.
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "pytest_orbench.tools.cli", "judge-eval", "--judge", "prefix",
                             str(REPO / "tests" / "data" / "judge-dev.csv")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    with proc.stderr:
        err = proc.stderr.read()
    assert proc.wait(timeout=60) == 141
    assert "Traceback" not in err and "BrokenPipeError" not in err and "Exception ignored" not in err, err


def test_ctrl_c_says_what_was_kept_instead_of_a_traceback(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted(args: Any) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr("pytest_orbench.tools.cli.judge_eval.run", interrupted)
    assert main(["judge-eval", str(REPO / "tests" / "data" / "judge-dev.csv")]) == 130
    assert capsys.readouterr().err == ("orbench judge-eval: interrupted; what was received is stored, and running the "
                                       "same command again continues from there\n")
