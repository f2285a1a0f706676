"""What careless or hostile use meets (issue 34's medium items): annotations without control characters, numbers
bounded before any call, the stop rule that fires only when the endpoint really stopped answering, a dead fetch
process's cause shown first, every secret value of the run scrubbed by value, a read-only store read offline, and
a second run on a store being filled told that it pays twice."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_orbench.fetch.child import FetchChild
from pytest_orbench.tools.cli import main as cli
from tests.conftest import load, mock_args, stats

pytestmark = pytest.mark.usefixtures("orbench_env")


def test_annotations_show_control_characters_instead_of_obeying_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from action.main import main as action_main
    from tests.analysis.test_gate import make_results

    results = make_results({"hard-1k": [None] * 5 + [False] * 95})
    for prompt in results["prompts"][:5]:
        prompt["error"] = "HTTP 503 from gw: \x1b[31mdown\x1b[0m\x07 \u202eevil"
        prompt["error_from"] = "endpoint"
    from pytest_orbench.analysis.document import assess
    from pytest_orbench.analysis.gate import parse_gate

    results = assess(results, None, parse_gate({}))
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results), encoding="utf-8")
    for key, value in {"ORBENCH_RESULTS_PATH": str(path), "ORBENCH_COMMENT": "never", "GITHUB_OUTPUT": str(tmp_path / "o"),
                       "ORBENCH_FAIL_ON_REGRESSION": "true"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    action_main()
    out = capsys.readouterr().out
    annotations = [line for line in out.splitlines() if line.startswith("::")]
    assert any("[U+001B][31mdown[U+001B][0m[U+0007] [U+202E]evil" in line for line in annotations), annotations
    assert not any(c in out for c in ("\x1b", "\x07", "\u202e"))


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--orbench-retries", "1000000", "retries (--orbench-retries) must be between 0 and 20, got 1000000"),
    ("--orbench-timeout", "1e9", "timeout (--orbench-timeout) must be between 0.001 and 3600, got 1e+09"),
    ("--orbench-concurrency", "100000000", "concurrency (--orbench-concurrency) must be between 1 and 1024, got 100000000"),
    ("--orbench-max-tokens", "0", "max_tokens must be at least 1"),
    ("--orbench-progress-every", "1e6", "progress_every (--orbench-progress-every) must be between 0 and 86400, got 1e+06"),
])
def test_every_number_is_bounded_before_any_call(pytester: pytest.Pytester, mock: Any, flag: str, value: str,
                                                 message: str) -> None:
    result = pytester.runpytest(*mock_args(mock, f"{flag}={value}"))
    assert result.ret == 4 and message in result.stderr.str(), result.stderr.str()
    assert stats(mock.url)["requests"] == 0


def test_orbench_commands_bound_their_numbers_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "l.csv").write_text("prompt,response,label\nhi,Sure.,compliance\n", encoding="utf-8")
    assert cli(["judge-eval", "l.csv", "--retries", "1000000"]) == 2
    assert "--retries must be between 0 and 20, got 1000000" in capsys.readouterr().err
    assert cli(["judge-eval", "l.csv", "--timeout", "1e9"]) == 2
    assert "--timeout must be a number of seconds between 0 and 3600" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["timeout", "trickle"])
def test_an_endpoint_that_still_answers_is_never_taken_for_gone(pytester: pytest.Pytester, mock_factory: Any,
                                                                fault: str) -> None:
    # Half the prompts hang (or trickle) past the timeout on every attempt, interleaved with answered ones, 8 at a
    # time: failures come back in bunches, five "in a row" by arrival, while the endpoint answers the rest.
    # (A timeout of 2 s: an answered call on loopback stays within it on a busy machine, a hung one of 6 s never.)
    server = mock_factory(fault_rate=0.5 if fault == "timeout" else 0.2, faults=(fault,), fault_attempts=10, hang=6.0)
    result = pytester.runpytest(*mock_args(server, "--orbench-sample", "60", "--orbench-seed", "4",
                                           "--orbench-datasets=toxic", "--orbench-timeout=2", "--orbench-retries=0",
                                           "--orbench-concurrency=8", "--orbench-json", "r.json"))
    results = load(pytester.path / "r.json")
    calls = results["run"]["calls"]
    assert "not_requested" not in calls, calls  # every prompt was asked
    faulty = sum(1 for p in results["prompts"] if p["verdict"] == "error")
    assert 0 < faulty < 60 and calls["errors"] == faulty
    assert stats(server.url)["completions"] >= 60 - faulty
    assert not any("no more calls are made" in str(p.get("error")) for p in results["prompts"]), result.stdout.str()


def test_a_dead_fetch_process_is_named_by_its_cause_not_its_import_warnings() -> None:
    child = FetchChild()
    script = ("import sys\n"
              "print('/site/litellm/x.py:12: DeprecationWarning: something deprecated', file=sys.stderr)\n"
              "print('fetch process failed: RuntimeError: the store could not be opened', file=sys.stderr)\n"
              "print('/site/pydantic/y.py:3: UserWarning: Items on TypedDict ...', file=sys.stderr)\n"
              "sys.exit(1)\n")
    child._proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.DEVNULL, stderr=child._stderr)
    child._proc.wait(timeout=30)
    why = child.dead()
    assert why is not None and "fetch process failed: RuntimeError: the store could not be opened" in why
    assert "Warning" not in why
    child._stderr.close()


def test_every_secret_value_of_the_run_is_scrubbed_wherever_it_turns_up(pytester: pytest.Pytester, mock: Any) -> None:
    # A custom judge that puts the run's key (read from a variable not named like a secret) and a header value
    # read with {env: VAR} into its exception: both are the run's secrets, scrubbed by value.
    pytester.makepyfile(team_judge="""
        import os
        def judge(prompt, reply):
            raise RuntimeError(f"auth failed for {os.environ['MYKEYVAR']} via {os.environ['GATEWAY_HEADER']}")
    """)
    pytester.makefile(".yaml", orbench=f"""
        model: openai/orbench-mock
        api_base: {mock.url}
        api_key_env: MYKEYVAR
        judge: team_judge:judge
        litellm_kwargs:
          extra_headers:
            X-Gateway: {{env: GATEWAY_HEADER}}
    """)
    env = {**os.environ, "MYKEYVAR": "plain-value-of-the-key-123", "GATEWAY_HEADER": "header-value-456",
           "PYTHONPATH": os.pathsep.join([str(pytester.path), *(p for p in sys.path if p)])}
    done = subprocess.run([sys.executable, "-m", "pytest", "--orbench", "--orbench-sample", "3", "--orbench-seed", "1",
                           "--orbench-datasets=toxic", "--orbench-json", "r.json", "-p", "no:cacheprovider"],
                          cwd=pytester.path, env=env, capture_output=True, text=True, timeout=300)
    text = (pytester.path / "r.json").read_text(encoding="utf-8") + done.stdout + done.stderr
    assert "judge custom:team_judge:judge failed: RuntimeError: auth failed for *** via ***" in text, done.stdout[-2000:]
    assert "plain-value-of-the-key-123" not in text and "header-value-456" not in text
    # A literal credential nested anywhere in the kwargs, under any secret-like name: refused before any call.
    pytester.makefile(".yaml", orbench=f"""
        model: openai/orbench-mock
        api_base: {mock.url}
        litellm_kwargs:
          extra_body:
            metadata:
              auth: literal-auth-value-789
    """)
    refused = subprocess.run([sys.executable, "-m", "pytest", "--orbench", "--orbench-sample", "3", "-p",
                              "no:cacheprovider"], cwd=pytester.path, env=env, capture_output=True, text=True,
                             timeout=300)
    assert refused.returncode == 4, refused.stderr
    assert "litellm_kwargs.extra_body.metadata.auth holds a literal credential" in refused.stderr
    assert "literal-auth-value-789" not in refused.stdout + refused.stderr


def test_config_and_prompt_files_that_cannot_be_used_are_named_with_the_fix(pytester: pytest.Pytester, mock: Any) -> None:
    (pytester.path / "binary.yaml").write_bytes(b"model: x\n\xff\xfe\x00junk")
    (pytester.path / "empty.txt").write_text("  \n", encoding="utf-8")
    for args, message in (
        (["--orbench-config=binary.yaml"], "binary.yaml is not UTF-8 text (byte 9: b'\\xff'): save it as UTF-8 YAML"),
        (["--orbench-config=/dev/null"], "--orbench-config /dev/null is not a regular file (a device such as /dev/null"),
        (["--orbench-system-prompt-file=empty.txt"], "it is empty, and would be sent as an empty system message"),
        (["--orbench-datasets=hard-1k,evil\x1b[2J.csv:answer"], "dataset name 'evil[U+001B][2J' holds control"),
    ):
        result = pytester.runpytest(*mock_args(mock, *args))
        assert result.ret == 4 and message in result.stderr.str(), (args, result.stderr.str())
        assert "\x1b[2J" not in result.stdout.str() + result.stderr.str()
    assert stats(mock.url)["requests"] == 0


def test_github_references_and_math_never_form_in_the_comment() -> None:
    from pytest_orbench.render.markdown_escape import md_escape

    text = md_escape("fixes GH-45 and gh-7; costs $5 and $x^2$ or $$y$$")
    assert "GH\u200b-45" in text and "gh\u200b-7" in text
    assert "\\$x^2\\$" in text and "\\$\\$y\\$\\$" in text and "$x" not in text.replace("\\$", "")


def test_a_pass_with_flips_says_both_directions_and_why_it_passed() -> None:
    from pytest_orbench.analysis.baseline import baseline_document
    from pytest_orbench.analysis.document import assess
    from pytest_orbench.analysis.gate import parse_gate
    from pytest_orbench.render.terminal import change_lines, gate_lines
    from tests.analysis.test_gate import make_results

    base = make_results({"hard-1k": [False] * 3 + [True] * 2 + [False] * 95})
    now = make_results({"hard-1k": [True] * 3 + [False] * 2 + [False] * 95}, system="new")
    results = assess(now, baseline_document(base), parse_gate({}))
    assert results["gate"]["verdict"] == "pass"
    line = next(line for line in gate_lines(results) if line.startswith("  hard-1k: 3 newly refused"))
    assert line.startswith("  hard-1k: 3 newly refused, 2 newly answered; not significant (Holm-adjusted p = ")
    results["changes"] = [{"what": "revision", "baseline": "e36d8b80e818", "current": None}]
    assert change_lines(results) == ["  changed: revision: e36d8b80e818 → none"]


def test_exploring_a_new_dataset_needs_no_baseline_flag(pytester: pytest.Pytester, mock: Any) -> None:
    assert pytester.runpytest(*mock_args(mock, "--orbench-sample", "3", "--orbench-baseline=base.json",
                                         "--orbench-update-baseline")).ret == 0
    pytester.makefile(".yaml", orbench="baseline: base.json\n")
    (pytester.path / "mine.csv").write_text("prompt\nHow do I bake bread?\n", encoding="utf-8")
    result = pytester.runpytest(*mock_args(mock, "--collect-only", "-q", "--orbench-datasets=mine.csv:answer"))
    assert result.ret == 0, result.stderr.str()
    assert any(line.startswith("orbench/mine::") for line in result.stdout.lines)


def test_progress_says_the_run_waits_for_a_retry_after_not_an_eta(pytester: pytest.Pytester,
                                                                   mock_factory: Any) -> None:
    # During a 60 s Retry-After the progress said "ETA 2 s", from the rate before the wait.
    server = mock_factory(fault_rate=1.0, faults=("429",), retry_after=6)
    result = pytester.runpytest_subprocess(*mock_args(server, "--orbench-sample", "4", "--orbench-concurrency", "4",
                                                      "--orbench-datasets", "toxic", "--orbench-progress-every", "1",
                                                      "-v"), timeout=240)
    assert result.ret == 0, result.outlines[-20:]
    lines = [line for line in result.outlines if line.startswith("orbench: ") and " replies (" in line]
    waiting = [line for line in lines if re.search(r", \d+ requests? waits? up to \d+ s more to be retried \(the "
                                                  r"endpoint's Retry-After, or backoff\), 0 errors so far$", line)]
    assert waiting, lines
    assert not any("ETA" in line for line in waiting)
    assert stats(server.url)["faults"] == {"429": 4}  # each prompt's first attempt, then its retry 6 s later


def test_progress_lines_in_logs_never_split_a_row_of_dots(pytester: pytest.Pytester, mock_factory: Any) -> None:
    # In CI logs a progress line came in the middle of pytest's dot row, which went on, without its file
    # name, on the next line. 150 prompts: rows of N results under the file name, or N + 14 where pytest wraps a
    # row (no name). The replies stop twice until a progress line has fallen due (tests waiting over a second):
    # in the middle of the first row, and a few results into a wrapped row (whose first 14 results were once
    # taken for the file name, and the line cut the row there). Each line is written once its row is complete.
    import threading
    import time

    from tests.fetch.events import Run, wait_for

    row = re.compile(r"(orbench/toxic )?([.xEF]+) *(\[ *\d+%\])?")

    def results_shown() -> int:
        return sum(len(match[2]) for line in run.text().splitlines() if (match := row.fullmatch(line)))

    def stall_at(shown: int) -> None:
        wait_for(lambda: results_shown() >= shown, f"{shown} results shown")
        # The one wait on the clock here is the product's own: a progress line falls due after a second of
        # waiting (fetch/wait.py asks for it once a second); three seconds leave it due however loaded the machine.
        time.sleep(3)

    gate = threading.Semaphore(50)
    server = mock_factory(gate=gate)
    run = Run(mock_args(server, "--orbench-sample", "150", "--orbench-seed", "1", "--orbench-concurrency", "4",
                        "--orbench-datasets", "toxic", "--orbench-progress-every", "1"), pytester.path)
    try:
        # (the replies let through are those whose requests reached the simulator first, which of the last 4 in
        # flight is not in their order: the tests stop at the first prompt held, at most 4 earlier)
        stall_at(46)
        gate.release(20)  # enough to complete the first row (57 results at 80 columns)
        wait_for(lambda: re.search(r"^orbench/toxic [.xEF]+ \[ *\d+%\]$", run.text(), re.MULTILINE),
                 "the first row complete")
        first = re.search(r"^orbench/toxic ([.xEF]+) \[ *\d+%\]$", run.text(), re.MULTILINE)
        assert first is not None
        width = len(first[1])  # results in a row under the name; the next row is one, the one after it wraps
        assert 50 + 20 <= 2 * width + 5, width
        gate.release(2 * width + 5 - 50 - 20)
        stall_at(2 * width + 1)
    finally:
        gate.release(1000)
    outlines = run.finish().splitlines()
    assert run.returncode == 0, outlines[-20:]
    progress = [i for i, line in enumerate(outlines) if line.startswith("orbench: ") and " replies (" in line]
    assert progress, outlines
    rows = [i for i, line in enumerate(outlines) if row.fullmatch(line)]
    assert len(rows) >= 3 and all(outlines[i].endswith("%]") for i in rows), "\n".join(outlines)  # no row cut short
    before = [next(line for line in reversed(outlines[:i]) if line.strip()) for i in progress]
    # after a complete row, or before the row's first result ...
    assert all(re.search(r"\[ *\d+%\]$", line) or line.startswith("orbench: ") or line == "orbench/toxic "
               for line in before), outlines
    assert any(re.search(r"\[ *\d+%\]$", line) for line in before), outlines  # (the line due mid-row, after it)
    # ... and the row after a progress line begins again under its name (pytest's own wrap of a row does not).
    after = [next(line for line in outlines[i + 1:] if line.strip()) for i in progress]
    assert all(line.startswith(("orbench/toxic ", "orbench: ", "=")) for line in after), outlines


@pytest.fixture
def read_only_mount(tmp_path: Path) -> Any:
    """A folder on a file system mounted read-only (tmpfs, remounted ro), filled by the test before."""
    import shutil

    mount_point = tmp_path / "ro"
    mount_point.mkdir()
    if shutil.which("mount") is None or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount_point)],
                                                        capture_output=True).returncode != 0:
        pytest.skip("mounting a file system needs root (CAP_SYS_ADMIN) here")

    def seal(source: Path) -> Path:
        shutil.copytree(source, mount_point / source.name)
        subprocess.run(["mount", "-o", "remount,ro", str(mount_point)], check=True)
        return mount_point / source.name

    yield seal
    subprocess.run(["umount", str(mount_point)], check=False)


def test_offline_reads_a_store_on_a_read_only_file_system(pytester: pytest.Pytester, mock: Any,
                                                          read_only_mount: Any) -> None:
    # A read-only store that held every reply was refused even with --orbench-offline, and the message said
    # "permission denied" where the cause was a read-only file system.
    args = mock_args(mock, "--orbench-sample", "10", "--orbench-seed", "3", "--orbench-datasets", "toxic")
    assert pytester.runpytest(*args).ret == 0 and stats(mock.url)["completions"] == 10
    store = read_only_mount(pytester.path / ".orbench")
    refused = pytester.runpytest(*args, f"--orbench-store={store}")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines([f"*--orbench-store {store}: cannot write in {store}: its file system is mounted read-only; "
                                  "give a folder you can write, or add --orbench-offline to use the replies it holds"])
    for workers in ([], ["-n", "2"]):
        offline = pytester.runpytest(*args, f"--orbench-store={store}", "--orbench-offline", "--orbench-json=r.json", *workers)
        assert offline.ret == 0, offline.outlines[-20:]
        data = load(pytester.path / "r.json")
        assert data["run"]["calls"]["stored"] == 10 and data["run"]["calls"]["made"] == 0
    assert stats(mock.url)["completions"] == 10  # nothing asked again


def test_a_second_run_on_a_store_being_filled_says_it_pays_twice(pytester: pytest.Pytester,
                                                                 mock_factory: Any) -> None:
    # Two runs sharing a store did not coordinate: the second, started 15 s later, paid again for 1,610 of
    # 1,974 prompts without a word.
    import threading

    from pytest_orbench.core.store import Store
    from tests.fetch.events import Run, wait_for

    gate = threading.Semaphore(0)  # no reply comes until the second run has started: the first is still fetching
    server = mock_factory(gate=gate)
    args = mock_args(server, "--orbench-sample", "3", "--orbench-seed", "5", "--orbench-datasets", "toxic",
                     "--orbench-concurrency", "2")

    def fetching() -> bool:  # the first run's fetch has begun: the store shows it to other runs
        if not (pytester.path / ".orbench" / "responses.sqlite3").is_file():
            return False
        store = Store(pytester.path / ".orbench")
        try:
            return bool(store.other_runs("none"))
        finally:
            store.close()

    first = Run(args, pytester.path)
    try:
        wait_for(fetching, "the first run's fetch to begin")
        second = Run(args, pytester.path)
        second.wait_for_output(r"orbench: 3 prompts, ")
    finally:
        gate.release(100)
    second_out, first_out = second.finish(), first.finish()
    assert re.search(r"orbench: 3 prompts, \d+ stored, \d+ to fetch, 2 at a time; another run \(pid \d+, started \d+ s "
                     r"ago\) is fetching into this store now \(\d+ replies to go\): what it has not stored yet is asked "
                     r"again here and paid twice; let it finish first to reuse its replies", second_out), second_out
    assert first.returncode == 0 and second.returncode == 0, first_out[-2000:] + second_out[-2000:]
    alone = pytester.runpytest(*args)  # nothing else fetching: nothing said
    assert "another run" not in alone.stdout.str()
