"""End to end: the fetch path never hangs, fails fast, says what happened, and fetches each prompt once
for the whole session (xdist included), through litellm against the simulator."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_orbench.fetch.loop import STOPPING
from pytest_orbench.tools.simulator.server import MockServer
from tests.conftest import load, mock_args, stats
from tests.fetch.events import Run, run_notes, stored_replies, wait_for

pytestmark = pytest.mark.usefixtures("orbench_env")


def closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again when this returns: nothing listens there


def test_an_endpoint_on_a_closed_port_stops_every_call_at_once(pytester: pytest.Pytester) -> None:
    # 1,974 prompts took minutes of retries before. What is proved here is a count, at any size: only the
    # requests already in flight (at most the concurrency, 16) were made; every other prompt was never asked.
    port = closed_port()
    result = pytester.runpytest("--orbench", "--orbench-model", "openai/orbench-mock", "--orbench-api-base",
                                f"http://127.0.0.1:{port}/v1", "-p", "no:cacheprovider", "--orbench-json", "r.json",
                                "--orbench-sample", "20")
    data = load(pytester.path / "r.json")
    first = f"connection refused by 127.0.0.1:{port}"
    errors = [p["error"] for p in data["prompts"]]
    assert set(errors) <= {first, f"not requested: {first} (no prompt was answered, so no more calls are made)"}
    assert 1 <= errors.count(first) <= 16 and len(errors) == 40  # asked: only those in flight, no retries
    assert data["run"]["calls"]["errors"] == 40 and data["gate"]["verdict"] == "inconclusive"
    assert "HTTP 500" not in result.stdout.str()  # nothing claims a server answered
    # 1,974 errors were listed twice (ERRORS and the short summary: ~6,000 lines): the first 10, then a count.
    lines = result.stdout.lines
    assert sum(line.startswith("ERROR orbench/") for line in lines) == 10
    assert sum(" ERROR at setup of " in line for line in lines) == 10
    result.stdout.fnmatch_lines(["... and 30 more prompt errors not listed above (the first 10 are; -vv lists all)*"])
    assert result.parseoutcomes()["errors"] == 40  # pytest's own count keeps every one


def test_an_unknown_host_is_one_message_naming_it(pytester: pytest.Pytester) -> None:
    everything = pytester.runpytest("--orbench", "--orbench-model", "openai/orbench-mock", "--orbench-api-base",
                                    "http://no-such-host.invalid/v1", "-p", "no:cacheprovider", "--orbench-sample", "6",
                                    "-vv")
    everything.stdout.fnmatch_lines(["*DNS lookup failed for no-such-host.invalid*"])
    assert everything.parseoutcomes()["errors"] == 12
    assert sum(line.startswith("ERROR orbench/") for line in everything.stdout.lines) == 12  # -vv lists every error
    assert "more prompt errors not listed" not in everything.stdout.str()


def test_a_model_string_without_a_provider_is_a_usage_error_before_any_call(pytester: pytest.Pytester, mock: Any) -> None:
    result = pytester.runpytest("--orbench", "--orbench-model", "orbench-mock-no-provider", "--orbench-api-base", mock.url,
                                "-p", "no:cacheprovider", "--orbench-sample", "2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR and stats(mock.url)["requests"] == 0
    result.stderr.fnmatch_lines(["*model 'orbench-mock-no-provider': litellm cannot tell which provider serves it*"
                                 "write it as provider/model, e.g. openai/orbench-mock-no-provider"])


@pytest.mark.parametrize(("fault", "message"), [
    ("503", "HTTP 503 from 127.0.0.1:*: The server had an error"),
    ("malformed", "malformed reply (not JSON) from 127.0.0.1:*"),
    # A 200 that is JSON but no chat completion: litellm calls it a 500; no server sent one.
    ("not_completion", "malformed reply from 127.0.0.1:* (empty or not a chat completion): *Received: 'hello'*"),
    ("disconnect", "connection to 127.0.0.1:* closed before a reply (or the endpoint may expect https://)"),
    # httpx follows the 307s until it gives up; litellm called that an "HTTP 500" no server sent.
    ("redirect_loop", "too many redirects from 127.0.0.1:* (a redirect loop: check api_base)"),
])
def test_errors_say_what_happened(pytester: pytest.Pytester, mock_factory: Callable[..., MockServer],
                                  fault: str, message: str) -> None:
    server = mock_factory(fault_rate=1.0, faults=(fault,), fault_attempts=99)
    result = pytester.runpytest(*mock_args(server, "--orbench-sample", "3", "--orbench-retries", "1",
                                           "--orbench-datasets", "toxic"))
    result.stdout.fnmatch_lines([f"no reply for toxic-*: {message}"])
    assert stats(server.url)["completions"] == 0 and result.parseoutcomes()["errors"] == 3


@pytest.mark.parametrize(("fault", "message"), [
    ("403", "HTTP 403 from 127.0.0.1:* (the key has no access): This key has no access to the model"),
    ("redirect_loop", "too many redirects from 127.0.0.1:*"),
])
def test_an_endpoint_that_refuses_every_call_is_asked_once(pytester: pytest.Pytester,
                                                            mock_factory: Callable[..., MockServer],
                                                            fault: str, message: str) -> None:
    # A 403 (litellm raises it as a generic error, not PermissionDeniedError) was asked again for every
    # prompt, as was a redirect loop (a made-up HTTP 500): both are the same for every call.
    server = mock_factory(fault_rate=1.0, faults=(fault,), fault_attempts=99)
    result = pytester.runpytest(*mock_args(server, "--orbench-sample", "10", "--orbench-datasets", "toxic",
                                           "--orbench-concurrency", "1", "--orbench-json", "r.json"))
    result.stdout.fnmatch_lines([f"no reply for toxic-*: {message}"])
    errors = {p["error"].split(" (no prompt was answered")[0] for p in load(pytester.path / "r.json")["prompts"]}
    assert len(errors) == 2 and {e.removeprefix("not requested: ") for e in errors} == {min(errors, key=len)}
    assert result.parseoutcomes()["errors"] == 10
    assert len(stats(server.url)["by_prompt"]) == 1  # one prompt asked (a redirect loop: its 21 hops), no other
    assert "HTTP 500" not in result.stdout.str()


def test_a_timeout_says_how_long_it_waited(pytester: pytest.Pytester, mock_factory: Callable[..., MockServer]) -> None:
    server = mock_factory(fault_rate=1.0, faults=("timeout",), fault_attempts=99, hang=5)
    result = pytester.runpytest(*mock_args(server, "--orbench-sample", "2", "--orbench-retries", "0",
                                           "--orbench-datasets", "toxic", "--orbench-timeout", "1"))
    result.stdout.fnmatch_lines(["no reply for toxic-*: timed out after 1 s"])


def test_a_reply_cut_at_max_tokens_before_any_text_is_an_error_naming_the_fix_not_a_refusal(
        pytester: pytest.Pytester, mock_factory: Callable[..., MockServer]) -> None:
    # A reasoning model that spends the paper's 1,000 tokens thinking answers "" with finish_reason=length.
    # Read as an empty reply, every prompt was a refusal: over-refusal 100%, and a PR that moved to such a
    # model failed (or its baseline passed everything) for the wrong reason.
    server = mock_factory(reasoning_tokens=1000)
    args = ["--orbench-sample", "4", "--orbench-seed", "1", "--orbench-datasets", "hard-1k", "--orbench-retries", "2"]
    result = pytester.runpytest(*mock_args(server, *args))
    result.stdout.fnmatch_lines(["no reply for hard-1k-*: no reply text: the model reached max_tokens (1000) before "
                                 "writing any (finish_reason=length; *); raise --orbench-max-tokens"])
    assert result.parseoutcomes()["errors"] == 4 and "passed" not in result.parseoutcomes()
    assert stats(server.url)["completions"] == 4  # asking again would give the same: not retried
    # A whole run of them is not paid for: after five such replies and none with text, the calls stop.
    result = pytester.runpytest(*mock_args(server, "--orbench-sample", "20", "--orbench-seed", "2", "--orbench-datasets",
                                           "toxic", "--orbench-concurrency", "2"))
    result.stdout.fnmatch_lines(["no reply for toxic-*: not requested: no reply text: the model reached max_tokens (1000) "
                                 "* (so did the first 5 replies, and none had text, so no more calls are made)"])
    assert result.parseoutcomes()["errors"] == 20 and 4 + 5 <= stats(server.url)["completions"] <= 4 + 6
    # With room for the visible text after the reasoning, the same prompts are answered and judged.
    result = pytester.runpytest(*mock_args(server, *args, "--orbench-max-tokens", "3000"))
    outcomes = result.parseoutcomes()
    assert "errors" not in outcomes and outcomes.get("passed", 0) + outcomes.get("xfailed", 0) == 4


def test_an_endpoint_that_never_answers_stops_the_calls_after_one_prompts_retries(
        pytester: pytest.Pytester, mock_factory: Callable[..., MockServer]) -> None:
    server = mock_factory(fault_rate=1.0, faults=("timeout",), fault_attempts=99, hang=5)
    result = pytester.runpytest(*mock_args(server, "--orbench-sample", "20", "--orbench-retries", "1",
                                           "--orbench-datasets", "toxic", "--orbench-timeout", "0.5",
                                           "--orbench-concurrency", "2"))
    assert result.parseoutcomes()["errors"] == 20
    assert stats(server.url)["requests"] <= 4  # every prompt was asked twice, 20 rounds of timeouts
    result.stdout.fnmatch_lines(["no reply for toxic-*: not requested: timed out after 0.5 s (no prompt was answered, so "
                                 "no more calls are made)"])


def test_a_reply_that_trickles_in_is_cut_at_the_timeout(pytester: pytest.Pytester,
                                                        mock_factory: Callable[..., MockServer]) -> None:
    # A byte every 0.2 s: no single read waits a second, so a timeout per read never fires; the timeout
    # is on the whole request (it took minutes per attempt, the body's length times 0.2 s).
    server = mock_factory(fault_rate=1.0, faults=("trickle",), fault_attempts=99)
    started = time.monotonic()
    result = pytester.runpytest_subprocess(*mock_args(server, "--orbench-sample", "2", "--orbench-retries", "1",
                                                      "--orbench-datasets", "toxic", "--orbench-timeout", "1"), timeout=90)
    assert time.monotonic() - started < 45
    result.stdout.fnmatch_lines(["no reply for toxic-*: timed out after 1 s"])
    assert result.parseoutcomes()["errors"] == 2 and stats(server.url)["requests"] == 4


def test_a_store_that_cannot_be_written_is_a_usage_error_before_any_call(pytester: pytest.Pytester, mock: Any) -> None:
    (pytester.path / "not-a-folder").write_text("")  # a read-only folder too, but that needs a user other than root
    result = pytester.runpytest(*mock_args(mock, "--orbench-sample", "2", "--orbench-store", "not-a-folder/store"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR and stats(mock.url)["requests"] == 0
    result.stderr.fnmatch_lines(["ERROR: pytest-orbench: --orbench-store */not-a-folder/store is inside */not-a-folder, "
                                 "which is a file: the response store is a folder; give a folder path (default .orbench)"])
    # A folder that is there, but whose database SQLite cannot use (here: not a database at all).
    (pytester.path / "damaged").mkdir()
    (pytester.path / "damaged" / "responses.sqlite3").write_text("not a database " * 100)
    result = pytester.runpytest(*mock_args(mock, "--orbench-sample", "2", "--orbench-store", "damaged"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR and stats(mock.url)["requests"] == 0
    result.stderr.fnmatch_lines(["ERROR: pytest-orbench: the response store */damaged is damaged (*/responses.sqlite3: "
                                 "file is not a database); it holds only replies that can be asked again: delete that "
                                 "file (or move it aside), or point --orbench-store elsewhere (store: in orbench.yaml)"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


def test_a_fetch_child_that_cannot_import_litellm_fails_the_prompts_not_the_wait(pytester: pytest.Pytester,
                                                                                 mock: Any) -> None:
    # The child imports whatever `litellm` comes first on its path: here, one that fails to import.
    pytester.makepyfile(litellm="raise ImportError('litellm is broken in this environment')\n")
    pytester.syspathinsert()
    started = time.monotonic()
    result = pytester.runpytest(*mock_args(mock, "--orbench-sample", "5", "--orbench-datasets", "toxic"))
    assert time.monotonic() - started < 60
    result.stdout.fnmatch_lines(["no reply for toxic-*: the fetch process exited with status 1*ImportError: litellm is "
                                 "broken in this environment*"])
    assert result.parseoutcomes()["errors"] == 5 and stats(mock.url)["requests"] == 0


def test_xdist_fetches_each_prompt_once_in_one_process_and_matches_serial(pytester: pytest.Pytester,
                                                                          mock_factory: Callable[..., MockServer]) -> None:
    serial_server, xdist_server = mock_factory(latency=0.02), mock_factory(latency=0.02)
    common = ("--orbench-sample", "20", "--orbench-seed", "5", "--orbench-concurrency", "8")
    serial = pytester.runpytest(*mock_args(serial_server, *common, "--orbench-json", "s.json", "--orbench-store", "s"))
    parallel = pytester.runpytest_subprocess(*mock_args(xdist_server, *common, "-n", "2", "--orbench-json", "x.json",
                                                        "--orbench-store", "x"), timeout=240)
    assert parallel.ret == serial.ret == 0
    served = stats(xdist_server.url)
    assert served["completions"] == 40 and served["duplicates"] == 0
    assert served["max_in_flight"] <= 8  # one concurrency budget for the whole session
    a, b = load(pytester.path / "s.json"), load(pytester.path / "x.json")
    assert [(p["id"], p["verdict"]) for p in a["prompts"]] == [(p["id"], p["verdict"]) for p in b["prompts"]]
    assert b["run"]["calls"]["made"] == 40
    parallel.stdout.fnmatch_lines(["orbench: 40 prompts, 0 stored, 40 to fetch, 8 at a time"])


def test_xdist_asks_again_what_is_too_old_and_never_replays_it(pytester: pytest.Pytester, mock: MockServer) -> None:
    # Workers once counted a reply as fresh for 60 s past the max age: rerun within a minute, the tests took
    # the old replies from the store and the session ended before the fetcher (which said "10 to fetch")
    # had made a call. The replies were stale; the report said they came from the store.
    # Both ways to call a reply too old, one after the other on the same store: --orbench-refresh (max age 0),
    # then --orbench-store-max-age 1s once the replies the first stored are older than that.
    import sqlite3

    from pytest_orbench.core.store_database import STORE_FILE

    def newest() -> float:
        conn = sqlite3.connect(pytester.path / ".orbench" / STORE_FILE)
        try:
            return float(conn.execute("SELECT MAX(created) FROM responses").fetchone()[0])
        finally:
            conn.close()

    args = mock_args(mock, "--orbench-sample", "5", "--orbench-seed", "3", "--orbench-datasets", "toxic")
    assert pytester.runpytest(*args).ret == 0 and stats(mock.url)["completions"] == 5
    for n, age in enumerate((["--orbench-refresh"], ["--orbench-store-max-age", "1s"]), start=2):
        stored_until = newest()
        wait_for(lambda until=stored_until: time.time() > until + 1.05, "every stored reply to be older than 1 s")
        again = pytester.runpytest_subprocess(*args, *age, "-n", "2", "--orbench-json", "r.json", timeout=240)
        assert again.ret == 0, age
        assert stats(mock.url)["completions"] == 5 * n, age
        data = load(pytester.path / "r.json")
        assert data["run"]["calls"]["made"] == 5 and data["run"]["calls"]["stored"] == 0, age
        assert all(p["fetched"] and not p["from_store"] for p in data["prompts"]), age


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_long_runs_say_how_far_the_fetch_got(pytester: pytest.Pytester, mock_factory: Callable[..., MockServer],
                                             workers: list[str]) -> None:
    # The replies come when the test lets them: a progress line at 0 replies, then one at 3 (the first goes
    # alone, then 2 of the 4 in flight), then the rest; however slow the machine, the lines say how far it got.
    gate = threading.Semaphore(0)
    server = mock_factory(gate=gate)
    run = Run(mock_args(server, "--orbench-sample", "6", "--orbench-concurrency", "4", "--orbench-datasets", "toxic",
                        "--orbench-progress-every", "1", "-v", *workers), pytester.path)
    try:
        run.wait_for_output(r"orbench: 0/6 replies")
        gate.release(3)
        run.wait_for_output(r"orbench: 3/6 replies")
    finally:
        gate.release(100)
    outlines = run.finish().splitlines()
    assert run.returncode == 0, outlines[-20:]
    lines = [line for line in outlines if line.startswith("orbench: ") and " replies (" in line]
    assert len(lines) >= 2, outlines  # every second, each on a line of its own ...
    assert all(re.fullmatch(r"orbench: \d+/6 replies \(\d+%\), [\d.]+/s, ETA (\d+ s|unknown), 0 errors so far", line)
               for line in lines), lines
    done = [int(re.match(r"orbench: (\d+)/", line)[1]) for line in lines]  # type: ignore[index]
    assert done == sorted(done) and done[-1] > done[0], done  # ... saying how far the fetch got


def test_progress_lines_can_be_turned_off(pytester: pytest.Pytester, mock_factory: Callable[..., MockServer]) -> None:
    server = mock_factory(latency=0.5)
    result = pytester.runpytest_subprocess(*mock_args(server, "--orbench-sample", "24", "--orbench-concurrency", "4",
                                                      "--orbench-datasets", "toxic", "--orbench-progress-every", "0"),
                                           timeout=240)
    assert result.ret == 0 and not [line for line in result.outlines if " replies (" in line], result.outlines
    requests = stats(server.url)["requests"]
    result = pytester.runpytest(*mock_args(server, "--orbench-sample", "24", "--orbench-progress-every", "-1"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR and stats(server.url)["requests"] == requests
    result.stderr.fnmatch_lines(["*progress_every must be 0 (no progress lines) or a number of seconds, got -1.0*"])


def on_a_terminal(args: list[str], cwd: Path, timeout: float = 120,
                  on_output: Callable[[str], None] | None = None) -> str:
    """Runs pytest with a pseudo-terminal as its output; returns every byte it wrote, decoded. `on_output` is
    given all of it so far each time more comes."""
    import os
    import pty
    import subprocess
    import sys

    main, secondary = pty.openpty()
    env = {**os.environ, "COLUMNS": "120", "LINES": "40", "TERM": "xterm"}
    proc = subprocess.Popen([sys.executable, "-m", "pytest", *args], cwd=cwd, stdout=secondary, stderr=secondary,
                            stdin=subprocess.DEVNULL, env=env)
    os.close(secondary)
    chunks = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the other end closed: pytest is done
            break
        if not chunk:
            break
        chunks.append(chunk)
        if on_output is not None:
            on_output(b"".join(chunks).decode("utf-8", "replace"))
    os.close(main)
    proc.wait(timeout=30)
    return b"".join(chunks).decode("utf-8", "replace")


def screen(raw: str) -> list[str]:
    """What a terminal shows after the output (carriage returns, backspaces, ANSI colours)."""

    raw = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", raw)
    lines, line, col = [], [], 0
    for ch in raw:
        if ch == "\n":
            lines.append("".join(line).rstrip())
            line, col = [], 0
        elif ch == "\r":
            col = 0
        elif ch == "\b":
            col = max(0, col - 1)
        else:
            line[col:col + 1] = [ch] if col < len(line) else [" "] * (col - len(line)) + [ch]
            col += 1
    return lines + ["".join(line).rstrip()]


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminal")
@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_on_a_terminal_progress_is_one_status_updated_in_place(pytester: pytest.Pytester,
                                                               mock_factory: Callable[..., MockServer],
                                                               workers: list[str]) -> None:
    # The first reply comes, then the others wait until the status has been shown twice (the xdist controller
    # shows it only after a second without results): however slow the machine, the tests wait long enough.
    status = re.compile(r"orbench: \d+/16 replies \(\d+%\), [\d.]+/s, ETA \d+ s, 0 errors so far")
    gate = threading.Semaphore(1)
    server = mock_factory(gate=gate)

    def release_once_shown_twice(raw: str) -> None:
        if len(status.findall(raw)) >= 2 and stats(server.url)["held"]:
            gate.release(100)

    try:
        raw = on_a_terminal(mock_args(server, "--orbench-sample", "16", "--orbench-concurrency", "4",
                                      "--orbench-datasets", "toxic", *workers), pytester.path,
                            on_output=release_once_shown_twice)
    finally:
        gate.release(100)
    shown = status.findall(raw)
    assert len(shown) >= 2, raw[-2000:]  # updated while the tests wait ...
    assert "\b" in raw  # ... in place ...
    lines = screen(raw)
    assert not any(status.search(line) for line in lines), "\n".join(lines)  # ... and gone from the screen
    assert "orbench: 16 prompts, 0 stored, 16 to fetch, 4 at a time" in lines  # a line of its own (xdist's status too)
    assert any(re.search(r"16 passed|\d+ passed, \d+ xfailed", line) for line in lines), "\n".join(lines)


def fetch_processes() -> dict[int, int]:
    """Running fetch processes (python -m pytest_orbench.fetch.child and its forks): pid -> parent pid."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"pytest_orbench.fetch.child" in cmdline:
            found[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return found


def fetch_children(parent: int | None = None) -> list[int]:
    """Running fetch processes started by the process `parent` (default: this one)."""
    import os

    parent = os.getpid() if parent is None else parent
    return [pid for pid, ppid in fetch_processes().items() if ppid == parent]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_usage_error_during_collection_leaves_no_fetch_process(pytester: pytest.Pytester, mock: Any) -> None:
    # The fetch process starts at configure (a cold store needs calls); the unknown node id is found
    # during collection, before any call. The session ends there, and so does the fetch process.
    assert fetch_children() == []
    result = pytester.runpytest(*mock_args(mock, "--orbench-sample", "5", "orbench/toxic::no-such-prompt"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR and stats(mock.url)["requests"] == 0
    result.stderr.fnmatch_lines(["*orbench/toxic::no-such-prompt: no such prompt test in this run*"])
    assert fetch_children() == []


def test_when_nothing_can_deselect_a_prompt_the_calls_start_while_pytest_collects(
        pytester: pytest.Pytester, mock: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # The user's test module is still being imported (collection is not over) when the first call arrives.
    monkeypatch.setenv("ORBENCH_TEST_STATS", mock.url.rsplit("/v1", 1)[0] + "/stats")
    pytester.makepyfile(test_slow_collection="""
        import json, os, time, urllib.request
        deadline, seen = time.monotonic() + 30, False
        while not seen and time.monotonic() < deadline:
            with urllib.request.urlopen(os.environ["ORBENCH_TEST_STATS"]) as reply:
                seen = json.load(reply)["requests"] > 0
            time.sleep(0.05)
        open("seen-during-collection", "w").write(str(seen))

        def test_mine():
            pass
    """)
    result = pytester.runpytest(*mock_args(mock, "--orbench-sample", "5"))
    assert result.ret in (0, 1)
    assert (pytester.path / "seen-during-collection").read_text() == "True"
    result.stdout.fnmatch_lines(["orbench: 10 prompts, 0 stored, 10 to fetch, 16 at a time"])


@pytest.mark.parametrize("deselect", ["-k", "conftest"])
def test_prompts_that_may_be_deselected_are_asked_only_after_collection(
        pytester: pytest.Pytester, mock: Any, deselect: str) -> None:
    # -k, or a conftest that sees the items, may drop prompt tests: only the ones left are asked.
    extra = ["-k", "hard"] if deselect == "-k" else []
    if deselect == "conftest":
        pytester.makeconftest("""
            def pytest_collection_modifyitems(config, items):
                dropped = [i for i in items if "toxic" in i.nodeid]
                config.hook.pytest_deselected(items=dropped)
                items[:] = [i for i in items if i not in dropped]
        """)
    result = pytester.runpytest(*mock_args(mock, "--orbench-sample", "5", *extra))
    assert result.parseoutcomes()["deselected"] == 5
    assert stats(mock.url)["completions"] == 5


def forked_fetch_processes(session: int) -> list[int]:
    """Fetch processes forked by the fetch process of the pytest process `session` (the second shard of a
    large run); only that session's: tests of other xdist workers run fetch processes of their own."""
    processes = fetch_processes()
    return [pid for pid, parent in processes.items() if processes.get(parent) == session]


def start_run(cwd: Path, server: MockServer, *args: str) -> subprocess.Popen[str]:
    """pytest against `server` in a process of its own, its output (stdout and stderr) read as text."""
    return subprocess.Popen([sys.executable, "-m", "pytest", *mock_args(server, *args)], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def kill_midway(proc: subprocess.Popen[str], server: MockServer, candidates: Callable[[], list[int]],
                requests: int, gate: threading.Semaphore) -> tuple[int | None, str, float]:
    """SIGKILLs the first of `candidates()` once `server` has had `requests` requests (given up after 120 s,
    or when `proc` ends first), then lets the replies `gate` holds through; then (the pid killed, `proc`'s
    output, seconds from the kill to its end)."""
    import os
    import signal

    killed = None
    deadline = time.monotonic() + 120
    try:
        while killed is None and time.monotonic() < deadline and proc.poll() is None:
            found = candidates()
            if found and stats(server.url)["requests"] >= requests:
                killed = found[0]
                os.kill(killed, signal.SIGKILL)
            time.sleep(0.02)
    finally:
        gate.release(1000)
    started = time.monotonic()
    out, _ = proc.communicate(timeout=120)
    return killed, out, time.monotonic() - started


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists() or (__import__("os").cpu_count() or 1) < 2,
                    reason="reads /proc; two fetch processes need two cores")
def test_a_fetch_process_killed_midway_turns_its_prompts_into_errors_at_once(
        pytester: pytest.Pytester, mock_factory: Callable[..., MockServer]) -> None:
    gate = threading.Semaphore(40)  # 40 replies, then the requests in flight wait until the kill
    server = mock_factory(gate=gate)
    report = pytester.path / "run.json"
    proc = start_run(pytester.path, server, "--orbench-sample", "240", "--orbench-datasets", "toxic",
                     "--orbench-concurrency", "8", "--orbench-seed", "1", "--orbench-json", str(report), "-q")
    killed, out, seconds = kill_midway(proc, server, lambda: forked_fetch_processes(proc.pid), 40, gate)
    assert killed is not None, out
    assert seconds < 30, out  # no wait for a silent heartbeat
    results = json.loads(report.read_text())
    errors = results["datasets"]["toxic"]["errors"]
    asked = stats(server.url)["requests"]
    assert 0 < errors < 240 - 40, out  # the other process went on to the end
    assert f"fetch process {killed} (shard 2 of 2) was killed by signal 9 (SIGKILL) before asking for this prompt" in out
    assert asked + errors >= 240 and stats(server.url)["duplicates"] == 0


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_under_xdist_a_killed_fetch_process_is_an_error_at_once_naming_the_signal(
        pytester: pytest.Pytester, mock_factory: Callable[..., MockServer]) -> None:
    # Only the controller sees its child die; the workers waiting for replies learnt it from a heartbeat
    # gone stale after 30 s ("has said nothing for 30 s; it is taken for dead").
    gate = threading.Semaphore(4)  # 4 replies, then the requests in flight wait until the kill
    server = mock_factory(gate=gate)
    proc = start_run(pytester.path, server, "--orbench-sample", "40", "--orbench-datasets", "toxic",
                     "--orbench-concurrency", "4", "-n", "2", "-q")
    killed, out, seconds = kill_midway(proc, server, lambda: fetch_children(proc.pid), 8, gate)
    assert killed is not None, out
    assert seconds < 20, out
    assert "no reply for toxic-" in out and "the fetch process was killed by signal 9 (SIGKILL)" in out, out
    assert "taken for dead" not in out


def test_an_interrupted_run_counts_every_call_it_paid_for_and_says_what_it_waits_for(pytester: pytest.Pytester,
                                                          mock_factory: Callable[..., MockServer]) -> None:
    # Ctrl-C while calls are in flight: they finish and are stored (paid for), but their prompts' tests never
    # run. The results counted only the prompts that ran ("calls: 4 made" after 8 calls).
    import signal

    gate = threading.Semaphore(4)  # the first 4 replies come; the next 4 requests wait in flight until released
    server = mock_factory(gate=gate)
    run = Run(mock_args(server, "--orbench-datasets", "toxic", "--orbench-sample", "12", "--orbench-seed", "3",
                        "--orbench-concurrency", "4", "--orbench-json", "r.json", "-v"), pytester.path)
    wait_for(lambda: stats(server.url)["held"] == 4, "4 requests in flight after 4 replies")
    run.wait_for_output(r"orbench/toxic::\S+ (PASSED|XFAIL)")  # a prompt test has run
    run.proc.send_signal(signal.SIGINT)
    run.wait_for_output("orbench: stopping the fetch at")  # said before the wait, not after it
    # The replies in flight come once the fetch loop has taken the stop: the line above is written before the
    # stop is sent, and replies let through then could come first (their workers would ask the next prompts).
    wait_for(lambda: STOPPING in run_notes(pytester.path / ".orbench"), "the fetch loop to take the stop")
    gate.release(100)
    out = run.finish()
    calls = load(pytester.path / "r.json")["run"]["calls"]
    served = stats(server.url)
    assert served["requests"] == served["completions"] == 8, out  # in flight: finished; none asked after the stop
    # Every call paid for is counted: the prompts that ran in `made`, the rest in `fetched_not_run`.
    assert calls["made"] + calls["fetched_not_run"] == served["requests"] and calls["fetched_not_run"] >= 4, out
    assert f"{calls['fetched_not_run']} more fetched for prompts that did not run (stored; not counted here)" in out
    # The wait for the calls in flight (up to a minute) is said, not left to look like a hang.
    assert re.search(r"orbench: stopping the fetch at \d+/12 replies: the requests in flight are paid for, so they "
                     r"finish and are stored for the next run \(waiting up to 60 s\)", out), out


# A pytester conftest: the KeyboardInterrupt of a Ctrl-C that lands inside pytest's resume of its output capture, between
# the dup2 that points the terminal's descriptor at the capture file and the state resume then records (where the
# flaky run's Ctrl-C landed: "_pytest/capture.py:555: KeyboardInterrupt"), once the first prompt test is over and the
# simulator holds 4 requests in flight.
CTRL_C_IN_CAPTURE_RESUME = """
    import json, os, time, urllib.request
    from _pytest import capture

    ARMED = []

    def pytest_runtest_logreport(report):
        if report.when == "teardown" and not ARMED:
            ARMED.append(True)

    def held():
        with urllib.request.urlopen(os.environ["ORBENCH_TEST_STATS"]) as resp:
            return json.load(resp)["held"]

    resume = capture.FDCaptureBase.resume

    def interrupted_resume(self):
        resume(self)
        if ARMED == [True] and self.targetfd == 1:
            ARMED.append(False)
            while held() < 4:
                time.sleep(0.02)
            self._state = "suspended"  # the line after the dup2 was not reached
            raise KeyboardInterrupt

    capture.FDCaptureBase.resume = interrupted_resume
"""


def test_a_ctrl_c_inside_pytests_capture_resume_still_says_the_wait_before_it(
        pytester: pytest.Pytester, mock_factory: Callable[..., MockServer], monkeypatch: pytest.MonkeyPatch) -> None:
    # Such a Ctrl-C left pytest's capture file holding the terminal: the stopping line and the summary came out only
    # at the end, after the wait for the replies in flight (a silent minute, the hang the line is there to rule out).
    gate = threading.Semaphore(4)  # the first 4 replies come; the next 4 requests wait in flight until released
    server = mock_factory(gate=gate)
    monkeypatch.setenv("ORBENCH_TEST_STATS", server.url.rsplit("/v1", 1)[0] + "/stats")
    pytester.makeconftest(CTRL_C_IN_CAPTURE_RESUME)
    run = Run(mock_args(server, "--orbench-datasets", "toxic", "--orbench-sample", "12", "--orbench-seed", "3",
                        "--orbench-concurrency", "4", "--orbench-json", "r.json", "-v"), pytester.path)
    run.wait_for_output("orbench: stopping the fetch at")
    # Said while the session waits for the replies the simulator holds: its fetch is not stopped (its run row, which
    # the stop clears, is there).
    assert run_notes(pytester.path / ".orbench"), run.text()
    wait_for(lambda: STOPPING in run_notes(pytester.path / ".orbench"), "the fetch loop to take the stop")
    gate.release(100)
    out = run.finish()
    assert "conftest.py" in out and "KeyboardInterrupt" in out, out  # the interrupt came where it was meant to
    calls = load(pytester.path / "r.json")["run"]["calls"]
    assert stats(server.url)["requests"] == calls["made"] + calls["fetched_not_run"] == 8, out


def test_a_second_ctrl_c_ends_the_wait_for_the_replies_in_flight_and_says_so(
        pytester: pytest.Pytester, mock_factory: Callable[..., MockServer]) -> None:
    # Ctrl-C twice (or `timeout`, which passes the group's SIGINT on to pytest once more): the second one came
    # during the wait for the replies in flight. The session then read the store as if the fetch were over and
    # said "no prompt ran: nothing was asked" while four replies were paid for and being stored.
    import signal

    gate = threading.Semaphore(0)  # every reply waits until the test lets it through
    server = mock_factory(gate=gate)
    args = mock_args(server, "--orbench-datasets", "toxic", "--orbench-sample", "8", "--orbench-seed", "3",
                     "--orbench-concurrency", "4")
    run = Run([*args, "-q"], pytester.path)
    # The first call goes alone (fetch/gate.py): the others wait for its reply, and are not asked after the stop.
    wait_for(lambda: stats(server.url)["held"] == 1, "the first request in flight")
    run.proc.send_signal(signal.SIGINT)
    run.wait_for_output("orbench: stopping the fetch at 0/8 replies")  # the session waits for the reply in flight
    run.proc.send_signal(signal.SIGINT)
    out = run.finish()
    assert stats(server.url)["completions"] == 0, out  # it did stop waiting
    assert "nothing was asked" not in out, out
    assert re.search(r"orbench: no prompt test ran: nothing was judged or compared and no results file was written; "
                     r"the fetch process \(pid \d+\) stores the replies it was asked for by itself, and the next run "
                     r"reuses them", out), out
    gate.release(100)
    wait_for(lambda: stored_replies(pytester.path / ".orbench") == 1, "the orphaned fetch process to store its reply")
    rerun = pytester.runpytest_subprocess(*args, timeout=120)
    rerun.stdout.fnmatch_lines(["orbench: 8 prompts, 1 stored, 7 to fetch, 4 at a time"])
    assert stats(server.url)["requests"] == 8  # none asked after the stop, none asked twice


def group_members(group: int) -> list[int]:
    """Live processes (zombies aside) in process group `group`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            found.append(int(entry.name))
    return found


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc; process groups")
# Both signals and both layouts, in two runs (the child ignores the signals the same way under xdist,
# where the controller's fetch process is the one in flight).
@pytest.mark.parametrize(("signame", "workers"), [("SIGINT", []), ("SIGTERM", ["-n", "2"])],
                         ids=["SIGINT", "SIGTERM-xdist"])
def test_a_signal_to_the_whole_process_group_still_stores_the_replies_in_flight(
        pytester: pytest.Pytester, mock_factory: Callable[..., MockServer], signame: str, workers: list[str]) -> None:
    # Ctrl-C in a terminal, a CI cancel or `kill -TERM -PGID` signal pytest's whole process group, the
    # fetch process included. The replies in flight are paid for: they must be stored as when pytest
    # alone is signalled, so a re-run does not ask them again.
    import os
    import signal

    gate = threading.Semaphore(1)  # the first reply comes; the 4 requests after it wait in flight until released
    server = mock_factory(gate=gate)
    args = mock_args(server, "--orbench-datasets", "toxic", "--orbench-sample", "8", "--orbench-seed", "3",
                     "--orbench-concurrency", "4")
    run = Run([*args, "-q", *workers], pytester.path, new_session=True)  # a group of its own, as in a shell
    try:
        # The first call went alone (fetch/gate.py); then 4 in flight.
        wait_for(lambda: stats(server.url)["held"] == 4, "4 requests in flight after the first reply")
        served = stats(server.url)
        assert served["requests"] == 5 and served["completions"] == 1
        os.killpg(run.pid, getattr(signal, signame))
        # Taken: pytest stops (SIGINT: it says so and waits for the drain) or is gone (SIGTERM); only then do the
        # replies in flight come, to a fetch process that was signalled too.
        wait_for(lambda: run.proc.poll() is not None or "orbench: stopping the fetch at" in run.text(),
                 f"pytest to take the {signame}")
        # ... and once the fetch process has taken the stop (else the replies let through could come first, and
        # their workers ask the next prompts).
        wait_for(lambda: STOPPING in run_notes(pytester.path / ".orbench"), "the fetch process to take the stop")
        gate.release(100)
        out = run.finish(timeout=60)  # bounded: the parent waits at most for the drain
        # An orphaned fetch process drains, then leaves.
        wait_for(lambda: group_members(run.pid) == [], "the process group to be empty", timeout=60)
    finally:
        gate.release(100)
        if run.proc.poll() is None or group_members(run.pid):
            os.killpg(run.pid, signal.SIGKILL)
            run.proc.wait(timeout=10)
    rerun = pytester.runpytest_subprocess(*args, timeout=120)
    rerun.stdout.fnmatch_lines(["orbench: 8 prompts, 5 stored, 3 to fetch, 4 at a time"])
    served = stats(server.url)
    assert served["completions"] == 8 and served["duplicates"] == 0, out  # the 4 in flight were stored, not asked again


def test_a_store_locked_at_the_start_is_said_before_it_is_waited_for(pytester: pytest.Pytester, mock: Any) -> None:
    # Another process held the store's write lock (a sqlite3 shell, a backup): the run waited up to 60 s
    # without a word before its first line.
    import sqlite3

    from pytest_orbench.core.store import Store
    from pytest_orbench.core.store_database import STORE_FILE

    Store(pytester.path / ".orbench").close()
    holder = sqlite3.connect(pytester.path / ".orbench" / STORE_FILE, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    store = pytester.path / ".orbench"
    said = (f"orbench: the response store {store} is locked by another process (a sqlite3 shell, a backup, another "
            "run's long write); waiting up to 60 s for it")
    try:
        run = Run(mock_args(mock, "--orbench-sample", "2", "--orbench-seed", "5"), pytester.path)
        run.wait_for_output(re.escape(said))  # said while the lock is held ...
    finally:
        holder.execute("COMMIT")  # ... and let go within the wait: the run goes on
        holder.close()
    out = run.finish()
    assert run.returncode == 0, out[-3000:]


def test_a_reply_holding_half_a_surrogate_pair_is_judged_not_the_end_of_the_fetch(pytester: pytest.Pytester,
                                                                                  mock_factory: Any) -> None:
    # A "\ud800" escape in the reply's JSON is no text UTF-8 can hold: storing it failed and ended the fetch
    # process, every prompt an error ("the fetch process failed: UnicodeEncodeError").
    server = mock_factory(reply_injection="bad \ud800 char")
    result = pytester.runpytest(*mock_args(server, "--orbench-datasets", "toxic", "--orbench-sample", "8",
                                           "--orbench-json", "r.json"))
    assert result.ret == 0, result.stdout.str()[-2000:]
    prompts = load(pytester.path / "r.json")["prompts"]
    assert all(p["verdict"] != "error" for p in prompts)
    refusals = [p for p in prompts if p["refused"]]
    assert refusals and all("bad \ufffd char" in p["reply_excerpt"] for p in refusals if p["reply_excerpt"])
