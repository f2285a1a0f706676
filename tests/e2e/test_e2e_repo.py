"""End to end: the plugin inside a repository that looks like a user's. Its own tests and conftest
need packages that are not installed; `--orbench-only` runs the prompts alone. Printed node ids can
be given back to pytest; values in the space form do not silently move the rootdir; a `target:` is
imported and checked before any call, with the rootdir importable (the example in docs/settings.md as written)."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, load, mock_args, stats

pytestmark = pytest.mark.usefixtures("orbench_env")
DEMO = (REPO / "scripts" / "demo").read_text(encoding="utf-8")


def user_tests(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_app="import flask\n\ndef test_home():\n    assert flask\n")
    pytester.makeini("[pytest]\naddopts = --strict-markers\ntestpaths = .\n")


def test_only_the_prompts_run_and_none_of_the_repository_tests_is_imported(pytester: pytest.Pytester, mock: Any) -> None:
    user_tests(pytester)
    everything = pytester.runpytest(*mock_args(mock, "--orbench-sample", "3"))
    assert everything.ret == pytest.ExitCode.INTERRUPTED  # their test cannot even be collected here
    everything.stdout.fnmatch_lines(["*ModuleNotFoundError: No module named 'flask'*"])
    only = pytester.runpytest(*mock_args(mock, "--orbench-only", "--orbench-sample", "3")[1:])  # without --orbench
    only.assert_outcomes(passed=only.parseoutcomes().get("passed", 0), xfailed=only.parseoutcomes().get("xfailed", 0))
    assert only.ret == 0 and "flask" not in only.stdout.str()
    assert sum(only.parseoutcomes().get(k, 0) for k in ("passed", "xfailed")) == 6


def test_printed_node_ids_select_prompt_tests(pytester: pytest.Pytester, mock: Any) -> None:
    user_tests(pytester)
    sample = ("--orbench-sample", "20", "--orbench-seed", "1")  # the same prompts in the listing and the run
    listed = pytester.runpytest(*mock_args(mock, *sample, "--orbench-only", "--collect-only", "-q", "--orbench-datasets",
                                           "toxic"))
    ids = [line for line in listed.stdout.lines if line.startswith("orbench/toxic::")]
    assert len(ids) == 20
    one = pytester.runpytest(*mock_args(mock, *sample, ids[3]))
    assert one.ret == 0 and "flask" not in one.stdout.str()  # naming prompt tests runs only those
    one.stdout.fnmatch_lines(["collected 40 items / 39 deselected / 1 selected"])
    assert sum(one.parseoutcomes().get(k, 0) for k in ("passed", "xfailed")) == 1 and one.parseoutcomes()["deselected"] == 39
    assert "hard-1k" not in one.stdout.str().split("orbench summary")[1]  # only what ran is reported
    assert stats(mock.url)["completions"] == 1
    dataset = pytester.runpytest(*mock_args(mock, "orbench/toxic", "--orbench-sample", "4", "--collect-only", "-q"))
    dataset.stdout.fnmatch_lines(["*4/8 tests collected (4 deselected)*"])
    wrong = pytester.runpytest(*mock_args(mock, "orbench/xstest-safe::contrast_homonyms-001"))
    assert wrong.ret == pytest.ExitCode.USAGE_ERROR
    wrong.stderr.fnmatch_lines(["*orbench/xstest-safe::contrast_homonyms-001: no such prompt test in this run "
                                "(datasets: hard-1k, toxic)*"])


def test_a_space_form_value_that_would_move_the_rootdir_is_a_usage_error(pytester: pytest.Pytester, mock: Any,
                                                                         tmp_path_factory: pytest.TempPathFactory,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere") / "b.json"
    elsewhere.write_text("{}", encoding="utf-8")
    pytester.makefile(".yaml", orbench="datasets: toxic\nsample: 2\n")
    moved = pytester.runpytest(*mock_args(mock, "--orbench-baseline", str(elsewhere)))
    assert moved.ret == pytest.ExitCode.USAGE_ERROR and stats(mock.url)["requests"] == 0
    moved.stderr.fnmatch_lines([f"*--orbench-baseline {elsewhere}: pytest took the value for a test path when it chose "
                                f"the rootdir*Write it as --orbench-baseline={elsewhere}"])
    joined = pytester.runpytest(*mock_args(mock, f"--orbench-baseline={elsewhere}"))
    joined.stderr.fnmatch_lines(["*is not a pytest-orbench baseline*"])  # read, from the right rootdir
    # PYTEST_ADDOPTS (a CI job's variable) is read before the rootdir is chosen, just as the command line.
    monkeypatch.setenv("PYTEST_ADDOPTS", f"--orbench-baseline {elsewhere}")
    from_env = pytester.runpytest(*mock_args(mock))
    assert from_env.ret == pytest.ExitCode.USAGE_ERROR and stats(mock.url)["requests"] == 0
    from_env.stderr.fnmatch_lines([f"*--orbench-baseline {elsewhere} (in PYTEST_ADDOPTS): pytest took the value for a "
                                   f"test path when it chose the rootdir*Write it as --orbench-baseline={elsewhere}"])


def test_readme_target_example_works_as_written(pytester: pytest.Pytester) -> None:
    pytester.mkpydir("myapp")
    pytester.path.joinpath("myapp", "chat.py").write_text(
        "def answer(prompt, system_prompt):\n"
        "    return 'Here is how: 1. Measure. 2. Mix. 3. Bake for 20 minutes at 180 C.'\n", encoding="utf-8")
    pytester.makefile(".yaml", orbench='target: "myapp.chat:answer"     # (prompt, system_prompt) -> str\n'
                                       "datasets: xstest-safe\nsample: 10\n")
    result = pytester.runpytest("--orbench", "-p", "no:cacheprovider")  # no pythonpath setting, plain pytest
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=10)


def test_a_target_that_returns_none_is_an_error_not_a_refusal_and_stops_the_calls(pytester: pytest.Pytester) -> None:
    # A function that forgot its `return`: read as empty replies, every prompt was a refusal (over-refusal 100%).
    pytester.makepyfile(app="from pathlib import Path\n\n"
                            "def answer(prompt, system_prompt):\n"
                            "    with Path('calls.txt').open('a') as log:\n"
                            "        log.write('x')\n"
                            "    reply = 'Here is how: 1. Measure. 2. Mix.'\n")
    pytester.makefile(".yaml", orbench="target: app:answer\ndatasets: xstest-safe\nsample: 30\nconcurrency: 1\n")
    result = pytester.runpytest("--orbench", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(['no reply for xstest-safe-*: target returned None, expected str (return "" for an empty '
                                 "reply)",
                                 "no reply for xstest-safe-*: not requested: target returned None*(so did the first 5 "
                                 "replies, and none had text, so no more calls are made)"])
    assert result.parseoutcomes()["errors"] == 30 and "passed" not in result.parseoutcomes()
    assert (pytester.path / "calls.txt").read_text() == "x" * 5


def test_a_sync_target_that_never_returns_is_an_error_and_pytest_still_exits(pytester: pytest.Pytester) -> None:
    # A socket read without a timeout: the call is given up on after --orbench-timeout, but its thread ran on, and
    # pytest printed its summary and then waited for that thread at exit, for ever (a CI job until its time limit).
    pytester.makepyfile(app="import threading\n\n"
                            "def answer(prompt, system_prompt):\n"
                            "    threading.Event().wait()\n")
    pytester.makefile(".yaml", orbench="target: app:answer\ndatasets: xstest-safe\nsample: 2\nseed: 1\n"
                                       "timeout: 0.5\nretries: 0\n")
    result = pytester.runpytest_subprocess("--orbench", "-p", "no:cacheprovider", timeout=60)
    result.stdout.fnmatch_lines(["*no reply for xstest-safe-*: target timed out after 0.5s*"])
    assert result.parseoutcomes()["errors"] == 2


@pytest.mark.parametrize(("module", "target", "message"), [
    ("", "missing.chat:answer", "*cannot load target 'missing.chat:answer': No module named 'missing'*on sys.path*"),
    ("def other(prompt, system_prompt):\n    return ''\n", "app:answer", "*cannot load target 'app:answer'*answer*"),
    # The module imported: the error used to say it must be importable (on sys.path), which it was.
    ("def answer(prompt, system_prompt):\n    return ''\n", "app:anwser",
     "*cannot load target 'app:anwser': module 'app' has no attribute 'anwser' (the module was imported from *app.py); "
     "did you mean 'app:answer'?"),
    ("def answer(prompt, system_prompt):\n    return ''\n", "app.py:answer",
     "*cannot load target 'app.py:answer': 'app.py' is a file path; name the module, as an import would: 'app:answer'"),
    ("answer = 'a string'\n", "app:answer", "*target 'app:answer' is not callable (it is a str)*"),
    ("def answer(prompt):\n    return ''\n", "app:answer", "*must accept (prompt, system_prompt); its signature is app.answer(prompt)*"),
    ("raise KeyError('CONFIG')\n", "app:answer", "*importing app raised KeyError: 'CONFIG'*"),
])
def test_a_target_that_cannot_be_called_is_a_usage_error_before_any_call(pytester: pytest.Pytester, module: str,
                                                                          target: str, message: str) -> None:
    if module:
        pytester.makepyfile(app=module)
    pytester.makefile(".yaml", orbench=f"target: {target}\ndatasets: xstest-safe\n")
    result = pytester.runpytest("--orbench", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert "errors" not in result.stdout.str()  # one usage error, not 250 per-prompt errors


def demo_port() -> int:
    found = re.search(r'ORBENCH_DEMO_PORT:-(\d+)', DEMO)
    assert found, "scripts/demo names its simulator's port as ${ORBENCH_DEMO_PORT:-PORT}"
    return int(found.group(1))


def test_the_committed_baseline_records_the_store_keys_of_the_demos_replies(pytester: pytest.Pytester,
                                                                           data_dir: Path, tmp_path: Path) -> None:
    # The baseline had no reply keys (and the demo a new port each run): --orbench-verify-flips then verified only
    # this run's side of every flip, and the review page showed the baseline's side blank.
    from pytest_orbench.core.datasets.pinned import load_builtin
    from pytest_orbench.run.keys import PromptKeys
    from pytest_orbench.run.setting_build import build_settings

    baseline = load(REPO / "baselines" / "mock-baseline.json")
    settings = build_settings(pytester.parseconfig("--orbench", "--orbench-model", "openai/orbench-mock", "--orbench-api-base",
                                                   f"http://127.0.0.1:{demo_port()}/v1"))
    assert baseline["run"]["api_base"] == settings.api_base and baseline["run"]["params"] == settings.params
    datasets = [load_builtin(name, data_dir, tmp_path) for name in ("hard-1k", "toxic")]
    keys = PromptKeys(settings, datasets)
    expected = {p.id: keys.request(p).key for d in datasets for p in d.prompts}
    assert {p["id"]: p.get("reply_key") for p in baseline["prompts"]} == expected


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def demo_copy(root: Path) -> dict[str, str]:
    """scripts/demo in a copy of the files it reads, with this interpreter as its .venv (nothing installed), and
    the environment to run it with (its simulator on a free port)."""
    for folder in ("scripts", "baselines", "examples"):
        shutil.copytree(REPO / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(REPO / "pyproject.toml", root / "pyproject.toml")
    venv = root / ".venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").symlink_to(sys.executable)
    (venv / "orbench").symlink_to(Path(sys.executable).parent / "orbench")
    (venv / "activate").write_text(f'export PATH="{Path(sys.executable).parent}:$PATH"\n', encoding="utf-8")
    (root / ".venv" / ".orbench-installed").touch()  # newer than pyproject.toml: setup-venv installs nothing
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    return {**env, "ORBENCH_DEMO_PORT": str(free_port())}


@pytest.mark.slow
def test_the_demo_keeps_its_store_and_its_next_steps_work_on_its_files(tmp_path: Path) -> None:
    # The demo deleted its store: `orbench label` then found only the replies short enough to be in the results
    # (refusals), a second run asked everything again, and --orbench-verify-flips could not read the baseline's side.
    env = demo_copy(tmp_path)

    def demo(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "scripts/demo", "--orbench-sample", "15", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)

    # The maintainers' regeneration, at this test's port (of a sample: the full baseline goes first): the baseline
    # records the store keys of the replies kept.
    (tmp_path / "baselines" / "mock-baseline.json").unlink()
    first = demo("--orbench-update-baseline")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "30 to fetch" in first.stdout and (tmp_path / ".orbench").is_dir()
    baseline = load(tmp_path / "baselines" / "mock-baseline.json")
    assert len(baseline["prompts"]) == 30 and all(p.get("reply_key") for p in baseline["prompts"])
    results = load(tmp_path / "orbench-results.json")

    again = demo()
    assert again.returncode == 0, again.stdout + again.stderr
    assert "30 stored, 0 to fetch" in again.stdout and "orbench gate: PASS" in again.stdout
    verdicts = {p["id"]: p["verdict"] for p in results["prompts"]}
    assert {p["id"]: p["verdict"] for p in load(tmp_path / "orbench-results.json")["prompts"]} == verdicts
    steps = again.stdout.split("== next steps")[1].splitlines()[1:]
    assert steps[0].startswith(".venv/bin/orbench label ")
    assert [line.split("  #")[0].strip() for line in steps[1:4]] == [
        "scripts/demo --orbench-judge-labels orbench-labels.csv --orbench-baseline=",
        "scripts/demo --orbench-system-prompt-file examples/careful-system-prompt.txt",
        "scripts/demo --orbench-system-prompt-file examples/careful-system-prompt.txt --orbench-verify-flips"]

    # The next steps, on the demo's files: every reply of the sample whole from the store...
    label = subprocess.run([".venv/bin/orbench", "label", "--export", "sample.csv"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=120)
    assert label.returncode == 0 and "not in the store" not in label.stdout + label.stderr, label.stdout + label.stderr
    with (tmp_path / "sample.csv").open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 30
    # ... labelled (as the keyword judge reads them) and imported, the judge adapts to them: the printed command works.
    refused = {p["id"]: p["refused"] for p in results["prompts"]}
    with (tmp_path / "sample.csv").open("w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows({**row, "label": "refusal" if refused[row["id"]] else "compliance"} for row in rows)
    imported = subprocess.run([".venv/bin/orbench", "label", "--import", "sample.csv"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)
    assert imported.returncode == 0, imported.stdout + imported.stderr
    adapted = demo("--orbench-judge-labels", "orbench-labels.csv", "--orbench-baseline=")
    assert adapted.returncode == 0, adapted.stdout + adapted.stderr
    assert "agrees with your 30 labels" in adapted.stdout
    # ... and the simulator, as the LLM judge, verifies both sides of every flip.
    flips = demo("--orbench-system-prompt-file", "examples/careful-system-prompt.txt", "--orbench-verify-flips")
    assert flips.returncode in (0, 1), flips.stdout + flips.stderr
    assert "the simulator plays the LLM judge too" in flips.stdout
    verification = json.loads((tmp_path / "orbench-results.json").read_text(encoding="utf-8"))["datasets"]
    found = {name: d["comparison"]["verification"] for name, d in verification.items()}
    assert sum(v["found"] for v in found.values()) >= 2
    assert all(v["both_sides"] == v["verified"] == v["found"] and not v["errors"] for v in found.values()), found
