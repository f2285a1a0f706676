"""End to end: a gate that never passes silently. Ungated runs, baselines that share no dataset,
baselines only from complete runs, Holm across checks, served versions, store age and revision,
secrets in nested settings and in URLs, and the small truths of the summary; litellm against the simulator."""

from __future__ import annotations

import csv
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_orbench.tools.simulator.config import MockConfig
from pytest_orbench.tools.simulator.roles import decide
from pytest_orbench.tools.simulator.server import MockServer
from tests.conftest import SharedBaseline, load, mock_args, raise_at_call, stats

pytestmark = pytest.mark.usefixtures("orbench_env")
CAREFUL = "Be careful."


def hard_prompts(data_dir: Path) -> list[str]:
    with (data_dir / "or-bench-hard-1k.csv").open(encoding="utf-8", newline="") as fh:
        return [row["prompt"] for row in csv.DictReader(fh)]


def write_set(path: Path, prompts: list[str]) -> None:
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["prompt", "category"])
        for i, prompt in enumerate(prompts):
            writer.writerow([prompt, f"c{i % 3}"])


def age_the_store(store: Path, hours: float) -> None:
    """Every stored reply made older by `hours` (the store's own `created` column): the age a test would otherwise
    wait for."""
    with sqlite3.connect(store / "responses.sqlite3") as conn:
        assert conn.execute("UPDATE responses SET created = created - ?", (hours * 3600,)).rowcount > 0
    conn.close()


def answered_by_default(data_dir: Path, *, flip: bool, count: int, skip: int = 0) -> list[str]:
    """Safe prompts the simulator answers without a system prompt; `flip`: ones it refuses when told to be careful."""
    chosen = [p for p in hard_prompts(data_dir)
              if decide(p, None) == "answer" and (decide(p, CAREFUL) != "answer") == flip]
    assert len(chosen) >= skip + count
    return chosen[skip:skip + count]


# -- ungated -------------------------------------------------------------------------------------

def test_no_baseline_and_no_limits_says_ungated_never_pass(pytester: pytest.Pytester, mock: Any) -> None:
    result = pytester.runpytest(*mock_args(mock, "--orbench-sample", "15", "--orbench-json", "r.json",
                                           "--orbench-markdown", "r.md"))
    assert result.ret == 0  # nothing was gated, nothing fails the run
    result.stdout.fnmatch_lines(["orbench gate: UNGATED: no baseline, no limits: rates only*"])
    assert "PASS" not in result.stdout.str()
    data = load(pytester.path / "r.json")
    assert data["gate"]["verdict"] == "ungated" and data["gate"]["passed"] is False
    assert "⚪ **ungated**: no baseline, no limits: rates only" in (pytester.path / "r.md").read_text(encoding="utf-8")
    limited = pytester.runpytest(*mock_args(mock, "--orbench-sample", "15", "--orbench-datasets", "toxic",
                                            "--orbench-config", "limits.yaml"))
    assert limited.ret == pytest.ExitCode.USAGE_ERROR  # no such file: named, not ignored
    pytester.makefile(".yaml", limits="gate:\n  toxic:\n    min_rejection: 0.5\n")
    limited = pytester.runpytest(*mock_args(mock, "--orbench-sample", "15", "--orbench-seed", "1", "--orbench-datasets",
                                            "toxic", "--orbench-config", "limits.yaml"))
    limited.stdout.fnmatch_lines(["orbench gate: PASS"])  # a limit was checked: PASS means something


# -- which datasets a baseline covers ------------------------------------------------------------

def test_baseline_sharing_no_dataset_is_refused_before_any_call(pytester: pytest.Pytester, mock: Any) -> None:
    common = ("--orbench-sample", "10", "--orbench-seed", "3", "--orbench-baseline", "b.json")
    made = pytester.runpytest(*mock_args(mock, *common, "--orbench-datasets", "toxic", "--orbench-update-baseline"))
    assert made.ret == 0
    calls = stats(mock.url)["requests"]
    other = pytester.runpytest(*mock_args(mock, *common, "--orbench-datasets", "hard-1k"))
    assert other.ret == pytest.ExitCode.USAGE_ERROR
    other.stderr.fnmatch_lines(["*the baseline shares no dataset with this run: the baseline has toxic, "
                                "this run has hard-1k*"])
    assert stats(mock.url)["requests"] == calls  # refused before any endpoint call
    both = pytester.runpytest(*mock_args(mock, *common, "--orbench-datasets", "hard-1k,toxic", "--orbench-json", "r.json"))
    both.stdout.fnmatch_lines(["  not compared (not in the baseline): hard-1k"])
    data = load(pytester.path / "r.json")
    assert data["gate"]["compared"] == ["toxic"] and data["gate"]["not_compared"] == ["hard-1k"]
    assert "comparison" in data["datasets"]["toxic"] and "comparison" not in data["datasets"]["hard-1k"]


# -- baselines only from complete runs -----------------------------------------------------------

@pytest.mark.slow
def test_interrupted_run_never_writes_or_changes_a_baseline(pytester: pytest.Pytester, mock: Any) -> None:
    common = ("--orbench-sample", "20", "--orbench-seed", "5", "--orbench-baseline", "b.json")
    assert pytester.runpytest(*mock_args(mock, *common, "--orbench-update-baseline")).ret == 0
    before = (pytester.path / "b.json").read_bytes()
    # Ctrl-C after 15 of the 40 prompts: KeyboardInterrupt, as SIGINT raises it, in the middle of the run.
    pytester.makeconftest(raise_at_call(15, "KeyboardInterrupt"))
    # In a process of its own, as a user's run would be (an interrupt must not reach this test's process).
    interrupted = pytester.runpytest_subprocess(*mock_args(mock, *common, "--orbench-update-baseline",
                                                           "--orbench-refresh", "--orbench-json", "r.json"))
    assert interrupted.ret == pytest.ExitCode.INTERRUPTED
    interrupted.stdout.fnmatch_lines(["baseline NOT written: the run was interrupted after * prompts; *b.json is unchanged"])
    assert (pytester.path / "b.json").read_bytes() == before
    assert load(pytester.path / "r.json")["run"]["baseline_update"]["written"] is False
    # 15 of 40 prompts compared: the verdict says so, never a pass.
    assert load(pytester.path / "r.json")["gate"]["verdict"] == "inconclusive"
    interrupted.stdout.fnmatch_lines(["orbench gate: INCONCLUSIVE",
                                      "*INCONCLUSIVE: completeness: the run was interrupted after * of 40 prompts*"])
    fresh = pytester.runpytest_subprocess(*mock_args(mock, "--orbench-sample", "20", "--orbench-baseline", "new.json",
                                                     "--orbench-update-baseline", "--orbench-refresh"))
    assert fresh.ret == pytest.ExitCode.INTERRUPTED and not (pytester.path / "new.json").exists()


def test_a_run_that_deselected_every_prompt_says_nothing_was_compared(pytester: pytest.Pytester, mock: Any) -> None:
    result = pytester.runpytest(*mock_args(mock, "--orbench-sample", "5", "-k", "no-such-prompt", "--orbench-json", "r.json"))
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED and stats(mock.url)["requests"] == 0
    result.stdout.fnmatch_lines(["orbench: no prompt ran: nothing was asked, judged or compared; no results file was written"])
    assert not (pytester.path / "r.json").exists()


def test_a_run_stopped_by_x_is_inconclusive_not_a_pass(pytester: pytest.Pytester, shared_baseline: SharedBaseline) -> None:
    shared_baseline.use(pytester.path, "b.json")
    common = (*shared_baseline.sample, "--orbench-baseline", "b.json")
    # One failure in the 10th test (any failure: an endpoint error within the budget did it for a user) under -x.
    pytester.makeconftest(raise_at_call(10))
    stopped = pytester.runpytest(*mock_args(shared_baseline.server, *common, "-x", "--orbench-json", "r.json"))
    assert stopped.ret == pytest.ExitCode.TESTS_FAILED
    stopped.stdout.fnmatch_lines(["orbench gate: INCONCLUSIVE", "*INCONCLUSIVE: completeness: the run stopped early "
                                  "(stopping after 1 failures) after 9 of 200 prompts*"])
    assert load(pytester.path / "r.json")["gate"]["verdict"] == "inconclusive"


@pytest.mark.slow
def test_stopped_deselected_or_failing_runs_never_become_baselines(
        pytester: pytest.Pytester, mock_factory: Callable[..., MockServer], data_dir: Path) -> None:
    failing = mock_factory(fault_rate=1.0, faults=("500",), fault_attempts=99)
    stopped = pytester.runpytest(*mock_args(failing, "--orbench-sample", "10", "--orbench-retries", "0", "-x",
                                            "--orbench-baseline", "b.json", "--orbench-update-baseline"))
    stopped.stdout.fnmatch_lines(["baseline NOT written: the run stopped early (stopping after 1 failures)*"])
    assert stopped.ret == pytest.ExitCode.TESTS_FAILED and not (pytester.path / "b.json").exists()

    flaky = mock_factory(fault_rate=0.3, faults=("500",), fault_attempts=99)
    errors = pytester.runpytest(*mock_args(flaky, "--orbench-sample", "30", "--orbench-retries", "0",
                                           "--orbench-baseline", "b.json", "--orbench-update-baseline"))
    errors.stdout.fnmatch_lines(["baseline NOT written: *errored or went unscored, over the error budget (2.0%)*"])
    assert errors.ret == pytest.ExitCode.TESTS_FAILED and not (pytester.path / "b.json").exists()

    healthy = mock_factory()
    subset = pytester.runpytest(*mock_args(healthy, "--orbench-sample", "30", "-k", "privacy",
                                           "--orbench-baseline", "b.json", "--orbench-update-baseline"))
    subset.stdout.fnmatch_lines(["baseline NOT written: only * of the run's 60 prompts ran*a baseline needs every prompt*"])
    assert not (pytester.path / "b.json").exists()

    full = pytester.runpytest(*mock_args(healthy, "--orbench-datasets", "mini.csv:answer", "--orbench-baseline", "b.json",
                                         "--orbench-update-baseline"))
    assert full.ret == pytest.ExitCode.USAGE_ERROR  # no such file yet: named before anything else
    write_set(pytester.path / "mini.csv", hard_prompts(data_dir)[:30])
    full = pytester.runpytest(*mock_args(healthy, "--orbench-datasets", "mini.csv:answer", "--orbench-baseline", "b.json",
                                         "--orbench-update-baseline"))
    full.stdout.fnmatch_lines(["baseline updated: *b.json (review and commit it)"])
    before = (pytester.path / "b.json").read_bytes()
    sampled = pytester.runpytest(*mock_args(healthy, "--orbench-datasets", "mini.csv:answer", "--orbench-sample", "10",
                                            "--orbench-baseline", "b.json", "--orbench-update-baseline"))
    sampled.stdout.fnmatch_lines(["baseline NOT written: this run is a sample (10 per dataset) and *b.json holds a full run*"])
    assert sampled.ret == pytest.ExitCode.TESTS_FAILED and (pytester.path / "b.json").read_bytes() == before
    # Once written, each narrowing the baseline silently: a smaller sample, or a dataset left out.
    write_set(pytester.path / "more.csv", hard_prompts(data_dir)[30:40])
    (pytester.path / "b.json").unlink()  # as the refusal says, to start a sampled baseline
    two = ("--orbench-datasets", "mini.csv:answer,more.csv:answer", "--orbench-baseline", "b.json", "--orbench-update-baseline")
    assert pytester.runpytest(*mock_args(healthy, *two, "--orbench-sample", "8", "--orbench-seed", "1")).ret == 0
    before = (pytester.path / "b.json").read_bytes()
    smaller = pytester.runpytest(*mock_args(healthy, *two, "--orbench-sample", "4", "--orbench-seed", "1"))
    smaller.stdout.fnmatch_lines(["baseline NOT written: this run is a sample of 4 per dataset and *b.json holds 8 per "
                                  "dataset; update it from a sample at least as large*"])
    fewer = pytester.runpytest(*mock_args(healthy, *two[2:], "--orbench-datasets", "mini.csv:answer", "--orbench-sample", "8",
                                          "--orbench-seed", "1"))
    fewer.stdout.fnmatch_lines(["baseline NOT written: *b.json holds more, which this run did not ask; run it too, or "
                                "delete the file first*"])
    assert smaller.ret == fewer.ret == pytest.ExitCode.TESTS_FAILED and (pytester.path / "b.json").read_bytes() == before


# -- Holm across the run's regression checks ------------------------------------------------------

def test_regression_checks_share_one_family_wise_alpha(pytester: pytest.Pytester, mock: Any, data_dir: Path) -> None:
    # Two sets of 30 safe prompts; the careful system prompt makes the simulator refuse exactly 5 more
    # in each: one-sided p = 1/32 = 0.031 per set, below alpha alone, 0.0625 after Holm over both.
    for name, skip in (("one", 0), ("two", 5)):
        prompts = answered_by_default(data_dir, flip=True, count=5, skip=skip)
        prompts += answered_by_default(data_dir, flip=False, count=25, skip=25 * (skip // 5))
        write_set(pytester.path / f"{name}.csv", prompts)
    pytester.path.joinpath("careful.txt").write_text(CAREFUL, encoding="utf-8")
    sets = ("--orbench-datasets", "one.csv:answer,two.csv:answer", "--orbench-baseline", "b.json")
    assert pytester.runpytest(*mock_args(mock, *sets, "--orbench-update-baseline")).ret == 0
    both = pytester.runpytest(*mock_args(mock, *sets, "--orbench-system-prompt-file", "careful.txt", "--orbench-json",
                                         "r.json", "--orbench-markdown", "r.md"))
    data = load(pytester.path / "r.json")
    checks = [c for c in data["gate"]["checks"] if c["kind"] == "regression"]
    assert [(c["p_value"], c["p_adjusted"]) for c in checks] == [(pytest.approx(1 / 32), pytest.approx(1 / 16))] * 2
    assert data["gate"]["verdict"] == "pass" and both.ret == 0
    both.stdout.fnmatch_lines(["*p adj.*", "p: one-sided p that the change is a regression (exact McNemar with one trial "
                               "per prompt, *p = 1: no change in the regression direction)*"])
    assert "| p | p adj. |" in (pytester.path / "r.md").read_text(encoding="utf-8")
    alone = pytester.runpytest(*mock_args(mock, "--orbench-datasets", "one.csv:answer", "--orbench-baseline", "b.json",
                                          "--orbench-system-prompt-file", "careful.txt"))
    alone.stdout.fnmatch_lines(["orbench gate: FAIL", "*one regression (more refusals)*p = 0.0312*"])


# -- what the provider serves, how old stored replies are, the application's revision -------------

def test_a_provider_update_behind_the_same_name_is_caught_once_the_store_is_too_old(
        pytester: pytest.Pytester, data_dir: Path) -> None:
    prompts = answered_by_default(data_dir, flip=True, count=12) + answered_by_default(data_dir, flip=False, count=18)
    write_set(pytester.path / "mini.csv", prompts)
    old = MockServer(MockConfig()).start()
    port = int(old.url.rsplit(":", 1)[1].split("/")[0])
    sets = ("--orbench-datasets", "mini.csv:answer", "--orbench-baseline", "b.json")
    try:
        made = pytester.runpytest(*mock_args(old, *sets, "--orbench-update-baseline"))
        assert made.ret == 0
    finally:
        old.stop()
    assert load(pytester.path / "b.json")["run"]["served"]["models"] == {"orbench-mock-2026-01-15": 30}
    # The provider now serves a stricter model behind the same name and URL.
    new = MockServer(MockConfig(strictness=0.70, served_model="orbench-mock-2026-03-01",
                                system_fingerprint="fp_orbench_2"), port=port).start()
    try:
        stale = pytester.runpytest(*mock_args(new, *sets))
        assert stats(new.url)["completions"] == 0 and stale.ret == 0  # replayed from the store: blind to it
        age_the_store(pytester.path / ".orbench", hours=2)  # as if the baseline's replies were stored two hours ago
        fresh = pytester.runpytest(*mock_args(new, *sets, "--orbench-store-max-age", "1h", "--orbench-json", "r.json"))
        assert stats(new.url)["completions"] == 30
    finally:
        new.stop()
    fresh.stdout.fnmatch_lines([
        "orbench: 30 prompts, 0 stored, 30 to fetch*(30 stored replies older than 1h are asked again)",
        "orbench gate: FAIL",
        "  changed: served model: orbench-mock-2026-01-15 → orbench-mock-2026-03-01 (both openai/orbench-mock)",
        "  changed: system fingerprint: fp_orbench_1 → fp_orbench_2 (both openai/orbench-mock)",
    ])
    data = load(pytester.path / "r.json")
    assert data["datasets"]["mini"]["comparison"]["newly_refused"] >= 10
    assert {p["served_model"] for p in data["prompts"]} == {"orbench-mock-2026-03-01"}
    assert data["run"]["store_max_age"] == "1h"


def test_a_target_whose_code_changed_is_asked_again_under_a_new_revision(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(myapp="""
        import os
        def answer(prompt, system_prompt):
            if os.environ.get("APP_STRICT") == "1" and "how" in prompt.lower():
                return "I'm sorry, but I can't help with that."
            return "Here is a detailed answer: 1. First step. 2. Second step. 3. Third step, with numbers: 42."
    """)
    pytester.makeini("[pytest]\npythonpath = .\n")
    pytester.makefile(".yaml", orbench="target: myapp:answer\ndatasets: xstest-safe\n")
    base = ("--orbench", "-p", "no:cacheprovider", "--orbench-baseline", "b.json")
    assert pytester.runpytest(*base, "--orbench-revision", "r1", "--orbench-update-baseline").ret == 0
    assert load(pytester.path / "b.json")["run"]["revision"] == "r1"
    monkeypatch.setenv("APP_STRICT", "1")  # the application changed
    same = pytester.runpytest(*base, "--orbench-revision", "r1")
    same.stdout.fnmatch_lines(["orbench: 250 prompts, 250 stored, 0 to fetch*", "orbench gate: PASS"])  # replayed
    bumped = pytester.runpytest(*base, "--orbench-revision", "r2", "--orbench-json", "r.json")
    bumped.stdout.fnmatch_lines(["orbench: 250 prompts, 0 stored, 250 to fetch*", "orbench gate: FAIL",
                                 "  changed: revision: r1 → r2"])
    assert load(pytester.path / "r.json")["datasets"]["xstest-safe"]["comparison"]["newly_refused"] > 10


# -- secrets anywhere in settings -----------------------------------------------------------------

def test_nested_credentials_are_refused_and_env_references_never_written(
        pytester: pytest.Pytester, mock_factory: Callable[..., MockServer], monkeypatch: pytest.MonkeyPatch) -> None:
    token = "gw-7f3c2a91d4e85b60"
    server = mock_factory(required_header=("X-Gateway-Token", token))
    pytester.makefile(".yaml", orbench=f"litellm_kwargs:\n  extra_headers:\n    X-Gateway-Token: {token}\n")
    refused = pytester.runpytest(*mock_args(server, "--orbench-sample", "5"))
    assert refused.ret == pytest.ExitCode.USAGE_ERROR and stats(server.url)["requests"] == 0
    refused.stderr.fnmatch_lines(["*litellm_kwargs.extra_headers.X-Gateway-Token holds a literal credential*"
                                  "{X-Gateway-Token: {env: X_GATEWAY_TOKEN}}*"])
    assert token not in refused.stdout.str() + refused.stderr.str()
    pytester.makefile(".yaml", orbench="litellm_kwargs:\n  extra_headers:\n    X-Gateway-Token: {env: GATEWAY_TOKEN}\n"
                                       "    X-Team: team-zebra-42\n")
    unset = pytester.runpytest(*mock_args(server, "--orbench-sample", "5"))
    assert unset.ret == pytest.ExitCode.USAGE_ERROR
    unset.stderr.fnmatch_lines(["*reads $GATEWAY_TOKEN ({env: GATEWAY_TOKEN}), which is not set*"])
    monkeypatch.setenv("GATEWAY_TOKEN", token)
    ran = pytester.runpytest(*mock_args(server, "--orbench-sample", "5", "--orbench-json", "r.json", "--orbench-markdown",
                                        "r.md", "--orbench-baseline", "b.json", "--orbench-update-baseline",
                                        "--orbench-store", "store"))
    assert ran.ret == 0 and stats(server.url)["header_ok"] == 10  # the header was sent with every request
    results = load(pytester.path / "r.json")
    assert results["run"]["params"]["extra_headers"] == ["X-Gateway-Token", "X-Team"]  # names only
    written = [pytester.path / "r.json", pytester.path / "r.md", pytester.path / "b.json",
               *(pytester.path / "store").iterdir()]
    for path in written:
        assert token.encode() not in path.read_bytes() and b"team-zebra-42" not in path.read_bytes(), path
    assert token not in ran.stdout.str() + ran.stderr.str()



def test_an_endpoint_that_echoes_the_url_puts_no_value_of_it_in_any_output(pytester: pytest.Pytester, mock: Any) -> None:
    # A gateway's 404 quotes the URL it was asked, query and all: the fetch process scrubs the query's values (a
    # key named like one is refused before any call) from the error before any report, file or terminal sees it.
    value = "tenant-Qx81zz9"
    args = mock_args(mock, "--orbench-api-base", f"{mock.url}?tenant={value}", "--orbench-datasets", "toxic",
                     "--orbench-sample", "3", "--orbench-json", "r.json", "--orbench-markdown", "r.md",
                     "--orbench-html", "r.html", "--orbench-junit", "o.xml", "--junitxml", "j.xml")
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert "no route /v1?tenant=***" in (pytester.path / "r.json").read_text(encoding="utf-8")  # the echo came back
    written = {name: (pytester.path / name).read_text(encoding="utf-8")
               for name in ("r.json", "r.md", "r.html", "o.xml", "j.xml")}
    for name, text in {**written, "terminal": result.stdout.str() + result.stderr.str()}.items():
        assert value.lower() not in text.lower(), name
    refused = pytester.runpytest(*mock_args(mock, "--orbench-api-base", f"{mock.url}?api-key={value}"))
    assert refused.ret == pytest.ExitCode.USAGE_ERROR and value not in refused.stdout.str() + refused.stderr.str()
    refused.stderr.fnmatch_lines(["*has a credential in its query string (api-key=...)*api_key_env*"])


# -- small truths ----------------------------------------------------------------------------------

def test_the_summary_says_what_it_did(pytester: pytest.Pytester, mock: Any, data_dir: Path) -> None:
    write_set(pytester.path / "mini.csv", hard_prompts(data_dir)[:30])
    whole = pytester.runpytest(*mock_args(mock, "--orbench-datasets", "mini.csv:answer,toxic", "--orbench-sample", "40",
                                          "--orbench-seed", "9", "--orbench-json", "r.json"))
    whole.stdout.fnmatch_lines(["orbench: * | sample 40/dataset, seed 9 (mini: all 30) | *"])
    data = load(pytester.path / "r.json")
    over = data["datasets"]["mini"]["refused"]
    toxic = data["datasets"]["toxic"]["n"] - data["datasets"]["toxic"]["refused"]
    whole.stdout.fnmatch_lines([f"orbench: {over + toxic} xfailed = {over} over-refusals (mini) + {toxic} toxic answers (toxic)"])
    whole.assert_outcomes(passed=70 - over - toxic, xfailed=over + toxic)
    unsampled = pytester.runpytest(*mock_args(mock, "--orbench-datasets", "mini.csv:answer"))
    header = next(line for line in unsampled.stdout.lines if line.startswith("orbench: openai/orbench-mock"))
    assert "seed" not in header and "sample" not in header  # a seed matters only when sampling


def test_a_tiny_sample_says_it_can_detect_nothing(pytester: pytest.Pytester, mock: Any) -> None:
    common = ("--orbench-datasets", "toxic", "--orbench-sample", "3", "--orbench-seed", "4", "--orbench-baseline", "b.json")
    assert pytester.runpytest(*mock_args(mock, *common, "--orbench-update-baseline")).ret == 0
    small = pytester.runpytest(*mock_args(mock, *common))
    small.stdout.fnmatch_lines(["  warning: toxic: this sample of 3 paired prompts is too small to detect any increase*"])
    assert not any("pp (alpha" in line and "detect an increase of about" in line for line in small.stdout.lines)


def test_a_full_run_against_a_sampled_baseline_says_what_it_did_not_compare(pytester: pytest.Pytester, mock: Any,
                                                                           data_dir: Path) -> None:
    # The baseline was a sample; the run is every prompt. A PASS covers only the shared prompts: say how few.
    write_set(pytester.path / "mini.csv", hard_prompts(data_dir)[:60])
    common = ("--orbench-datasets", "mini.csv:answer", "--orbench-baseline", "b.json", "--orbench-json", "r.json")
    assert pytester.runpytest(*mock_args(mock, *common, "--orbench-sample", "12", "--orbench-seed", "2",
                                         "--orbench-update-baseline")).ret == 0
    full = pytester.runpytest(*mock_args(mock, *common))
    full.stdout.fnmatch_lines([
        "orbench gate: PASS",
        "  warning: mini: 48 of this run's 60 prompts are not in the baseline and were not compared; "
        "the regression check covers 12 paired prompts*",
        "  warning: mini: this sample of 12 paired prompts can only detect*",
    ])
    assert load(pytester.path / "r.json")["datasets"]["mini"]["comparison"]["not_in_baseline"] == 48


def test_a_reply_that_echoes_the_key_is_stored_and_reported_without_it(pytester: pytest.Pytester,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # A gateway in a debug mode that answers with the request's headers: the key came back in the reply
    # text, and went into the store, the results file and the report.
    import json
    import sqlite3
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Echo(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            text = f"I can help with that. Debug: you sent Authorization: {self.headers['Authorization']}"
            body = json.dumps({"id": "x", "object": "chat.completion", "created": 1, "model": "echo",
                               "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                            "finish_reason": "stop"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-echoed-SECRET-4242")
    try:
        result = pytester.runpytest("--orbench", "--orbench-model", "openai/echo", "--orbench-api-base",
                                    f"http://127.0.0.1:{server.server_address[1]}/v1", "-p", "no:cacheprovider",
                                    "--orbench-datasets", "hard-1k", "--orbench-sample", "3", "-rA",
                                    "--orbench-json", "r.json", "--orbench-markdown", "r.md")
    finally:
        server.shutdown()
        server.server_close()
    replies = sqlite3.connect(pytester.path / ".orbench" / "responses.sqlite3").execute(
        "SELECT record FROM responses").fetchall()
    assert len(replies) == 3 and all("Bearer ***" in r[0] for r in replies)
    written = "".join(r[0] for r in replies) + result.stdout.str() + (pytester.path / "r.json").read_text() + \
        (pytester.path / "r.md").read_text()
    assert "Debug: you sent Authorization: Bearer ***" in (pytester.path / "r.json").read_text()
    assert "SECRET-4242" not in written
