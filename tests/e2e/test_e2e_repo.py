"""End to end: the plugin inside a repository that looks like a user's. Its own tests and conftest
need packages that are not installed; `--orbench-only` runs the prompts alone. Printed node ids can
be given back to pytest; values in the space form do not silently move the rootdir; a `target:` is
imported and checked before any call, with the rootdir importable (the example in docs/settings.md as written)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import mock_args, stats

pytestmark = pytest.mark.usefixtures("orbench_env")


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
    listed = pytester.runpytest(*mock_args(mock, "--orbench-only", "--collect-only", "-q", "--orbench-datasets", "toxic"))
    ids = [line for line in listed.stdout.lines if line.startswith("orbench/toxic::")]
    assert len(ids) == 655
    one = pytester.runpytest(*mock_args(mock, ids[3]))
    assert one.ret == 0 and "flask" not in one.stdout.str()  # naming prompt tests runs only those
    one.stdout.fnmatch_lines(["*1973 deselected, 1 * in *"])
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
