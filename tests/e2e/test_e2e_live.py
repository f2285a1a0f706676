"""End to end: a live base asked in the same session, drift against a stale baseline, and repeated
trials on a nondeterministic endpoint; litellm against the simulator, nothing faked."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_orbench.tools.simulator.config import MockConfig
from pytest_orbench.tools.simulator.server import MockServer
from tests.conftest import mock_args, stats
from tests.e2e.test_e2e_trust import CAREFUL, age_the_store, answered_by_default, load, write_set

pytestmark = pytest.mark.usefixtures("orbench_env")


def mini_set(pytester: pytest.Pytester, data_dir: Path) -> tuple[list[str], list[str]]:
    """12 safe prompts a careful system prompt makes the simulator refuse, 18 it still answers."""
    flips = answered_by_default(data_dir, flip=True, count=12)
    steady = answered_by_default(data_dir, flip=False, count=18)
    write_set(pytester.path / "mini.csv", flips + steady)
    (pytester.path / "careful.txt").write_text(CAREFUL, encoding="utf-8")
    return flips, steady


def test_a_stricter_system_prompt_fails_live_with_the_exact_newly_refused_prompts(
        pytester: pytest.Pytester, mock_factory: Callable[..., MockServer], data_dir: Path) -> None:
    flips, _ = mini_set(pytester, data_dir)
    server = mock_factory()
    args = mock_args(server, "--orbench-datasets", "mini.csv:answer", "--orbench-system-prompt-file", "careful.txt",
                     "--orbench-base-system-prompt-file=", "--orbench-json", "r.json", "--orbench-markdown", "r.md")
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert stats(server.url)["completions"] == 60  # each prompt under head and under base
    result.stdout.fnmatch_lines([
        "orbench: *live base openai/orbench-mock, system prompt none*",
        "orbench: 30 prompts (60 replies: the live base too), 0 stored, 60 to fetch*",
        "orbench gate: FAIL",
        "  changed: system prompt sha256: none → *",
        "  FAIL: mini regression (more refusals): +40.0 pp * on 30 paired prompts (12 regressed, 0 improved)*",
        "  mini: 12 newly refused, 0 newly answered:",
    ])
    data = load(pytester.path / "r.json")
    comparison = data["datasets"]["mini"]["comparison"]
    by_id = {p["id"]: p for p in data["prompts"]}
    assert {by_id[i]["prompt"] for i in comparison["newly_refused_ids"]} == set(flips)
    assert data["run"]["compared_with"] == "live base" and data["run"]["base"]["differs"] == ["system_prompt_sha256"]
    assert data["base"]["datasets"]["mini"]["rejection_rate"] == 0.0
    assert "**Compared with** the live base" in (pytester.path / "r.md").read_text(encoding="utf-8")
    # Again: everything is in the store, for head and base alike.
    again = pytester.runpytest(*args)
    assert again.ret == pytest.ExitCode.TESTS_FAILED and stats(server.url)["completions"] == 60


def test_a_base_at_another_server_names_it_under_what_changed(
        pytester: pytest.Pytester, mock_factory: Callable[..., MockServer], data_dir: Path) -> None:
    # The same model at a new deployment, compared with the one it replaces: the report once said "What
    # changed: nothing in the configuration (same endpoint, ...)" though `differs` was ["api_base"].
    mini_set(pytester, data_dir)
    head, old = mock_factory(), mock_factory()
    result = pytester.runpytest(*mock_args(head, "--orbench-datasets", "mini.csv:answer",
                                           f"--orbench-base-api-base={old.url}", "--orbench-json", "r.json",
                                           "--orbench-markdown", "r.md"))
    assert result.ret == 0
    result.stdout.fnmatch_lines(["orbench gate: PASS", f"  changed: api_base: {old.url} → {head.url}"])
    data = load(pytester.path / "r.json")
    assert data["run"]["base"]["differs"] == ["api_base"]
    assert [c["what"] for c in data["changes"]] == ["api_base"]
    markdown = (pytester.path / "r.md").read_text(encoding="utf-8")
    assert "- api\\_base: " in markdown and "same endpoint" not in markdown


def test_identical_base_and_head_share_their_calls_and_compare_nothing(
        pytester: pytest.Pytester, mock_factory: Callable[..., MockServer], data_dir: Path) -> None:
    mini_set(pytester, data_dir)
    server = mock_factory(noise=0.2)
    result = pytester.runpytest(*mock_args(server, "--orbench-datasets", "mini.csv:answer",
                                           "--orbench-system-prompt-file", "careful.txt",
                                           "--orbench-base-system-prompt-file", "careful.txt", "--orbench-json", "r.json"))
    assert result.ret == 0 and stats(server.url)["completions"] == 30
    # The base's replies are the run's own: comparing them would check nothing, so the gate says so.
    result.stdout.fnmatch_lines(["orbench gate: UNGATED: the live base is the run's own configuration (nothing differs*"])
    assert load(pytester.path / "r.json")["run"]["compared_with"] is None


def test_a_no_op_pr_is_not_blamed_live_while_the_stale_baseline_would_fail(
        pytester: pytest.Pytester, data_dir: Path) -> None:
    mini_set(pytester, data_dir)
    sets = ("--orbench-datasets", "mini.csv:answer", "--orbench-baseline", "b.json")
    old = MockServer(MockConfig()).start()
    port = int(old.url.rsplit(":", 1)[1].split("/")[0])
    try:
        assert pytester.runpytest(*mock_args(old, *sets, "--orbench-update-baseline")).ret == 0
    finally:
        old.stop()
    # The provider now serves a stricter model behind the same name, and flips 5% of its decisions.
    new = MockServer(MockConfig(strictness=0.70, noise=0.05, served_model="orbench-mock-2026-03-01",
                                system_fingerprint="fp_orbench_2"), port=port).start()
    age_the_store(pytester.path / ".orbench", hours=2)  # as if the baseline's replies were stored two hours ago
    try:
        fresh = ("--orbench-store-max-age", "1h")
        # The pull request changes nothing: head and base are the same configuration.
        live = pytester.runpytest(*mock_args(new, *sets, *fresh, "--orbench-base-model", "openai/orbench-mock",
                                             "--orbench-json", "live.json"))
        calls_live = stats(new.url)["completions"]
        stale = pytester.runpytest(*mock_args(new, *sets, "--orbench-json", "stale.json"))
    finally:
        new.stop()
    assert calls_live == 30  # one configuration, asked once
    live.stdout.fnmatch_lines([
        "drift (base configuration now vs the baseline file, not gated): mini +* pp (p = *newly refused*; changed: "
        "*orbench-mock-2026-01-15 → orbench-mock-2026-03-01 (both openai/orbench-mock)*",
        "orbench gate: UNGATED: the live base is the run's own configuration (nothing differs*",
    ])
    assert live.ret == 0
    drift = load(pytester.path / "live.json")["drift"]
    assert drift["datasets"]["mini"]["delta"] >= 0.3 and drift["datasets"]["mini"]["p_value"] < 0.01
    # The same run against the committed baseline blames the pull request for what the provider did.
    assert stale.ret == pytest.ExitCode.TESTS_FAILED
    stale.stdout.fnmatch_lines(["orbench gate: FAIL"])


def test_trials_ask_each_prompt_k_times_and_list_flaky_prompts(
        pytester: pytest.Pytester, mock_factory: Callable[..., MockServer]) -> None:
    server = mock_factory(noise=0.2)
    args = mock_args(server, "--orbench-datasets", "hard-1k", "--orbench-sample", "12", "--orbench-seed", "3",
                     "--orbench-trials", "3", "--orbench-json", "r.json", "--orbench-markdown", "r.md")
    result = pytester.runpytest(*args)
    assert stats(server.url)["completions"] == 36  # 3 calls per prompt
    data = load(pytester.path / "r.json")
    prompts = data["prompts"]
    assert all(p["scored_trials"] == 3 and len(p["trials"]) == 3 for p in prompts)
    flaky = sorted(p["id"] for p in prompts if 0 < p["refused_trials"] < 3)
    summary = data["datasets"]["hard-1k"]
    assert flaky and summary["flaky"] == len(flaky) and summary["flaky_prompts"] == flaky
    assert summary["rejection_rate"] == pytest.approx(sum(p["refused_trials"] / 3 for p in prompts) / 12)
    assert all(p["refused"] == (p["refused_trials"] >= 2) for p in prompts)
    result.stdout.fnmatch_lines([f"flaky prompts (hard-1k): {len(flaky)} of 12 prompts' 3 trials disagree: *"])
    assert "flaky prompts (their 3 trials disagree)" in (pytester.path / "r.md").read_text(encoding="utf-8")
    # A baseline keeps the shares; the same run against it changes nothing and makes no call.
    assert pytester.runpytest(*args, "--orbench-baseline", "b.json", "--orbench-update-baseline").ret in (0, 1)
    baseline = load(pytester.path / "b.json")
    assert {p["id"]: p["refused_trials"] for p in baseline["prompts"]} == {p["id"]: p["refused_trials"] for p in prompts}
    again = pytester.runpytest(*args, "--orbench-baseline", "b.json")
    assert stats(server.url)["completions"] == 36
    again.stdout.fnmatch_lines(["orbench gate: PASS"])
    comparison = load(pytester.path / "r.json")["datasets"]["hard-1k"]["comparison"]
    assert comparison["delta"] == 0 and comparison["test"] == "paired sign-flip permutation, exact"


def test_base_settings_are_checked_before_any_call(pytester: pytest.Pytester, mock: MockServer) -> None:
    result = pytester.runpytest(*mock_args(mock, "--orbench-base-system-prompt-file", "missing.txt"))
    result.stderr.fnmatch_lines(["*--orbench-base-system-prompt-file missing.txt: cannot read it (No such file or "
                                 "directory); give '' for a base without a system prompt*"])
    pytester.makefile(".yaml", orbench="base:\n  modle: openai/x\n")
    result = pytester.runpytest(*mock_args(mock))
    result.stderr.fnmatch_lines(["*base: unknown key(s) *'modle'*; allowed: model, api_base*"])
    result = pytester.runpytest(*mock_args(mock, "--orbench-trials", "0"))
    result.stderr.fnmatch_lines(["*trials must be at least 1, got 0*"])
    assert stats(mock.url)["requests"] == 0


def test_offline_verdicts_are_stored_and_reused_per_judge_version(pytester: pytest.Pytester, mock: MockServer) -> None:
    import sqlite3

    args = mock_args(mock, "--orbench-datasets", "hard-1k", "--orbench-sample", "10", "--orbench-seed", "4",
                     "--orbench-json", "r.json")
    assert pytester.runpytest(*args).ret == 0
    db = pytester.path / ".orbench" / "responses.sqlite3"
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM verdicts").fetchone()[0] == 10
        conn.execute("UPDATE verdicts SET verdict = 'direct_refusal', reason = 'from the store'")
    pytester.runpytest(*args)
    prompts = load(pytester.path / "r.json")["prompts"]
    assert {(p["verdict"], p["judge_reason"]) for p in prompts} == {("direct_refusal", "from the store")}
    # Another judge (or version) has verdicts of its own.
    pytester.runpytest(*args, "--orbench-judge", "prefix")
    assert {p["judge_reason"] for p in load(pytester.path / "r.json")["prompts"]} != {"from the store"}
    assert stats(mock.url)["completions"] == 10


def test_a_run_whose_own_endpoint_cannot_be_reached_still_records_and_bills_the_live_base(
        pytester: pytest.Pytester, mock: MockServer) -> None:
    # The mirror case: the run's endpoint refuses every connection, the base answers. A prompt whose own
    # call failed once dropped the base's reply: its cost left run.spend.base, and with every prompt of
    # the run failed the session crashed (INTERNALERROR "the baseline shares no dataset with this run").
    args = ["--orbench", "--orbench-model", "openai/orbench-mock", "--orbench-api-base", "http://127.0.0.1:9/v1",
            "--orbench-base-api-base", mock.url, "--orbench-base-temperature", "0.5", "-p", "no:cacheprovider",
            "-p", "no:randomly", "--orbench-datasets", "toxic", "--orbench-sample", "6", "--orbench-seed", "4",
            "--orbench-json", "r.json"]
    result = pytester.runpytest(*args)
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    data = load(pytester.path / "r.json")
    assert stats(mock.url)["completions"] == 6
    assert all(p["error"] and p["base"]["verdict"] != "error" for p in data["prompts"])
    assert data["base"]["datasets"]["toxic"]["n"] == 6
    spent = data["run"]["spend"]["base"]
    assert spent["completion_tokens"] == sum(p["base"]["base_usage"]["completion_tokens"] for p in data["prompts"]) > 0
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["  INCONCLUSIVE: toxic error budget: 6 of 6 prompts errored*"])


def test_a_live_base_that_cannot_be_reached_stops_only_its_own_calls(pytester: pytest.Pytester, mock: MockServer) -> None:
    # The base's endpoint refuses every connection (nothing listens on port 9). Once its first refused
    # connection stopped every call of the session: prompts of the run under test became errors too.
    args = mock_args(mock, "--orbench-datasets", "toxic", "--orbench-sample", "20", "--orbench-seed", "4",
                     "--orbench-base-api-base=http://127.0.0.1:9/v1", "--orbench-base-temperature", "0.5",
                     "--orbench-json", "r.json")
    result = pytester.runpytest(*args)
    data = load(pytester.path / "r.json")
    assert [p["id"] for p in data["prompts"] if p["error"]] == []
    assert stats(mock.url)["completions"] == 20
    assert all("connection refused by 127.0.0.1:9" in p["base"]["error"] for p in data["prompts"])
    assert data["run"]["calls"]["errors"] == 20  # the base's failed replies: once "calls: 28 made, 0 errors"
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # inconclusive: the base answered nothing
    port = mock.url.split(":")[2].split("/")[0]  # where each side's calls go, said before any call
    result.stdout.fnmatch_lines([f"orbench: *| calls to 127.0.0.1:{port} (run), 127.0.0.1:9 (live base) |*"])
    result.stdout.fnmatch_lines(["  INCONCLUSIVE: toxic live base error budget: 20 of 20 prompts got no verdict under "
                                 "the live base (100.0%, budget 2.0%); most common error: *connection refused by 127.0.0.1:9*"])
