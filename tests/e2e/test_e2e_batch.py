"""--orbench-batch end to end: litellm's real batch calls (create_file, create_batch, retrieve_batch,
file_content) over HTTP to the simulator's Files and Batch API. A batch run equals a synchronous run
verdict for verdict; a killed or timed-out session leaves its batch to the next run, which polls it
instead of submitting again; an expired batch is followed by one for the missing prompts only."""

from __future__ import annotations

import re
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_orbench.core.store import Store
from pytest_orbench.tools.simulator.server import MockServer
from tests.conftest import load, mock_args, stats
from tests.fetch.events import Run, wait_for

pytestmark = pytest.mark.usefixtures("orbench_env")
SAMPLE = ("--orbench-sample", "12", "--orbench-seed", "3", "--orbench-datasets", "hard-1k,toxic")
N = 24  # prompts in SAMPLE
FAST = ("--orbench-batch", "--orbench-batch-poll", "0.05")


def verdicts(path: Path) -> list[tuple[str, str, str, str | None]]:
    return [(p["id"], p["verdict"], p["reply_excerpt"], p["error"]) for p in load(path)["prompts"]]


def judged(server: MockServer) -> list[str]:
    return ["--orbench-judge", "hybrid", "--orbench-judge-model", "openai/orbench-judge",
            "--orbench-judge-api-base", server.url]


def test_a_batch_run_equals_a_synchronous_run_verdict_for_verdict_split_over_files_under_xdist(
    pytester: pytest.Pytester, mock_factory: Callable[..., MockServer],
) -> None:
    # Some refusals come back as content_filter replies: in batches too
    sync_server = mock_factory(content_filter_rate=0.3)
    batch_server = mock_factory(content_filter_rate=0.3, batch_polls=3)
    sync = pytester.runpytest(*mock_args(sync_server, *SAMPLE, *judged(sync_server), "--orbench-store", "s",
                                         "--orbench-json", "s.json"))
    batch = pytester.runpytest_subprocess(*mock_args(batch_server, *SAMPLE, *judged(batch_server), *FAST,
                                                     "--orbench-batch-max-requests", "10", "--orbench-store", "b",
                                                     "--orbench-json", "b.json", "-n", "2"), timeout=240)
    assert batch.ret == sync.ret
    assert verdicts(pytester.path / "b.json") == verdicts(pytester.path / "s.json")
    assert {"filtered", "direct_answer"} <= {v[1] for v in verdicts(pytester.path / "b.json")}
    served = stats(batch_server.url)
    assert served["requests"] == 0  # no synchronous completion: every reply came from a batch
    assert served["batches_created"] == 3 and served["batch_sizes"] == [10, 10, 4]  # one submitter, split by 10
    assert served["batch_requests_answered"] == N and served["duplicates"] == 0
    assert served["judge_requests"] == stats(sync_server.url)["judge_requests"]  # the judge runs on batch replies too
    data = load(pytester.path / "b.json")
    assert data["run"]["calls"]["made"] == N and data["run"]["calls"]["errors"] == 0
    batch.stdout.fnmatch_lines([f"orbench: {N} prompts, 0 stored, {N} to fetch, through provider batches "
                                "(polled every 0.05 s, waiting up to 1d)*"])
    again = pytester.runpytest(*mock_args(batch_server, *SAMPLE, *judged(batch_server), *FAST, "--orbench-store", "b"))
    assert again.ret == sync.ret and stats(batch_server.url)["batches_created"] == 3  # stored: nothing to submit


def open_batches(store: Path) -> int:
    """Batches the response store folder `store` holds open (0 while it does not exist)."""
    if not (store / "responses.sqlite3").is_file():
        return 0
    opened = Store(store)
    try:
        return len(opened.batches())
    finally:
        opened.close()


def signal_while_polling(pytester: pytest.Pytester, server: MockServer, args: list[str], sig: signal.Signals) -> str:
    """Runs pytest in its own process, sends it `sig` once its batch is submitted and in the store (what the
    next run resumes), and returns what it printed."""
    run = Run(args, pytester.path)
    try:
        wait_for(lambda: open_batches(pytester.path / ".orbench") == 1, "the submitted batch in the store")
        assert stats(server.url)["batches_created"] == 1
        run.proc.send_signal(sig)
        return run.finish(timeout=60)
    finally:
        run.proc.kill()


@pytest.mark.slow
def test_a_killed_session_leaves_its_batch_to_the_next_run_which_polls_it_instead_of_submitting_again(
    pytester: pytest.Pytester, mock_factory: Callable[..., MockServer],
) -> None:
    server = mock_factory(batch_polls=10**6)  # never done while the first session polls it ...
    args = mock_args(server, *SAMPLE, *FAST, "--orbench-json", "r.json")
    signal_while_polling(pytester, server, args, signal.SIGKILL)
    assert server.state.batches is not None
    server.state.batches.polls = 2  # ... done within the next two retrievals, whichever session makes them
    assert stats(server.url)["batches_created"] == 1 and stats(server.url)["batch_requests_answered"] == 0
    store = Store(pytester.path / ".orbench")
    try:
        [(batch_id, keys)] = store.open_batches(f"openai {server.url}")
    finally:
        store.close()
    assert len(keys) == N
    resumed = pytester.runpytest(*args)
    served = stats(server.url)
    assert served["batches_created"] == 1 and served["batch_requests_answered"] == N  # the same batch, collected
    data = load(pytester.path / "r.json")
    assert data["run"]["calls"]["errors"] == 0 and resumed.ret in (0, 1)
    assert all(p["error"] is None for p in data["prompts"])


def test_ctrl_c_while_the_batch_is_open_says_it_is_open_not_stored(
    pytester: pytest.Pytester, mock_factory: Callable[..., MockServer],
) -> None:
    # Ctrl-C while the session polled its batch said "24 replies fetched meanwhile are stored, and the next run
    # reuses them": none was; the batch was open, and the next run collects it (it then reported "0 stored").
    server = mock_factory(batch_polls=10**6)  # never done: the batch is open when the session is interrupted
    out = signal_while_polling(pytester, server, mock_args(server, *SAMPLE, *FAST), signal.SIGINT)
    assert stats(server.url)["batch_requests_answered"] == 0, out
    assert (f"orbench: no prompt test ran: nothing was judged or compared and no results file was written; {N} requests "
            "wait in provider batches that are still open: the next run with this store collects them (they are not "
            "submitted again)") in out, out
    assert "replies fetched meanwhile are stored" not in out


@pytest.mark.slow
def test_a_session_that_stops_waiting_says_so_and_the_next_run_collects_the_same_batch(
    pytester: pytest.Pytester, mock_factory: Callable[..., MockServer],
) -> None:
    server = mock_factory(batch_polls=10**6)  # never done while the first session waits for it
    args = mock_args(server, *SAMPLE, *FAST, "--orbench-json", "r.json")
    waited = pytester.runpytest(*args, "--orbench-batch-wait", "1s")
    assert waited.ret == 1  # what was not answered is not a pass
    data = load(pytester.path / "r.json")
    assert data["gate"]["verdict"] == "inconclusive"
    errors = {p["error"] for p in data["prompts"]}
    assert len(errors) == 1
    [error] = errors
    assert error is not None
    assert "not answered yet: this session stopped waiting after 1 s (--orbench-batch-wait) while batch batch_" in error
    # How far the batch got in that second depends on how busy the machine is (validating, then in_progress).
    status = re.search(r"was (validating|in_progress); run again to collect it \(it is not submitted again\)$", error)
    assert status is not None, error
    listed = orbench_batches(pytester)
    listed.fnmatch_lines([f"batch_*  openai {server.url}  {status.group(1)}  0/{N}  {N}  20*",
                                 "1 open: the next run with this store (and --orbench-batch) polls them instead of "
                                 "submitting their prompts again"])
    assert server.state.batches is not None
    server.state.batches.polls = 2  # done within the next two retrievals
    collected = pytester.runpytest(*args)
    assert collected.ret in (0, 1)
    assert all(p["error"] is None for p in load(pytester.path / "r.json")["prompts"])
    served = stats(server.url)
    assert served["batches_created"] == 1 and served["batch_requests_answered"] == N
    orbench_batches(pytester).fnmatch_lines(["no open batches in .orbench"])
    orbench_batches(pytester, "--all").fnmatch_lines([f"batch_*  completed (collected)  {N}/{N}  {N}  *"])


def test_an_open_batch_older_than_the_store_max_age_is_not_resumed(
    pytester: pytest.Pytester, mock_factory: Callable[..., MockServer],
) -> None:
    # Never done within the first session's 1 s wait, however few polls a busy machine fits in it (none: still
    # validating): the provider finishes batches only once the test says so. What is checked is what the store
    # and the provider hold afterwards, never how far the polls got.
    server = mock_factory(batch_polls=10**6)
    args = mock_args(server, *SAMPLE, *FAST, "--orbench-json", "r.json")
    assert pytester.runpytest(*args, "--orbench-batch-wait", "1s").ret == 1  # leaves its batch open
    assert server.state.batches is not None
    server.state.batches.polls = 2  # from now on a batch is done at its second retrieval
    store = Store(pytester.path / ".orbench")
    (left,) = store.batches()
    store.close()
    assert left.status in ("validating", "in_progress") and left.prompts == N and not left.collected
    fresh = pytester.runpytest(*args, "--orbench-refresh")  # max age 0: that batch's replies would be too old
    assert fresh.ret in (0, 1) and all(p["error"] is None for p in load(pytester.path / "r.json")["prompts"])
    served = stats(server.url)
    # A second batch of every prompt, and only its requests ran: the first was closed unread, never collected.
    assert served["batches_created"] == 2 and served["batch_requests_answered"] == N and served["duplicates"] == 0
    store = Store(pytester.path / ".orbench")
    first, second = store.batches(collected=True)
    store.close()
    assert (first.id, first.status, first.collected) == (left.id, f"too old ({left.status})", True)
    assert (second.status, second.collected, second.prompts) == ("completed", True, N)


def orbench_batches(pytester: pytest.Pytester, *extra: str) -> pytest.LineMatcher:
    """What `orbench batches` prints, run in the test's folder."""
    import contextlib
    import io
    import os

    from pytest_orbench.tools.cli import main

    out = io.StringIO()
    here = os.getcwd()
    os.chdir(pytester.path)
    try:
        with contextlib.redirect_stdout(out):
            assert main(["batches", *extra]) == 0
    finally:
        os.chdir(here)
    return pytest.LineMatcher(out.getvalue().splitlines())


def test_an_expired_batch_is_followed_by_a_batch_of_the_missing_prompts_only(
    pytester: pytest.Pytester, mock_factory: Callable[..., MockServer],
) -> None:
    server = mock_factory(batch_polls=2, batch_expire_share=0.25, batch_expire_count=1)
    result = pytester.runpytest(*mock_args(server, *SAMPLE, *FAST, "--orbench-json", "r.json"))
    assert result.ret in (0, 1)
    served = stats(server.url)
    assert served["batch_sizes"] == [N, N - N // 4]  # the second batch asks only what the first left undone
    assert served["batch_requests_answered"] == N and served["duplicates"] == 0  # nothing paid for twice
    assert all(p["error"] is None for p in load(pytester.path / "r.json")["prompts"])


def test_requests_that_keep_failing_in_batches_become_errors_as_in_a_synchronous_run(
    pytester: pytest.Pytester, mock_factory: Callable[..., MockServer],
) -> None:
    server = mock_factory(batch_polls=1, batch_fail_rate=0.2)  # the same requests fail every time
    result = pytester.runpytest(*mock_args(server, *SAMPLE, *FAST, "--orbench-retries", "1", "--orbench-json", "r.json"))
    served = stats(server.url)
    failed = served["batch_sizes"][1]
    assert 0 < failed < N and served["batch_sizes"] == [N, failed]  # one more batch (retries 1), of the failed ones
    errors = [p["error"] for p in load(pytester.path / "r.json")["prompts"] if p["error"]]
    assert len(errors) == failed
    assert all(e.startswith("HTTP 500 in batch batch_") and e.endswith("(asked in 2 batches)") for e in errors)
    assert result.ret == 1


def test_a_batch_reply_cut_at_max_tokens_before_any_text_is_an_error_and_not_asked_again(
    pytester: pytest.Pytester, mock_factory: Callable[..., MockServer],
) -> None:
    server = mock_factory(batch_polls=1, reasoning_tokens=1000)  # every reply: "" with finish_reason=length
    pytester.runpytest(*mock_args(server, *SAMPLE, *FAST, "--orbench-retries", "2", "--orbench-json", "r.json"))
    assert stats(server.url)["batch_sizes"] == [N]  # another batch would say the same
    errors = [p["error"] for p in load(pytester.path / "r.json")["prompts"]]
    assert len(errors) == N and all(e and e.startswith("no reply text: the model reached max_tokens (1000)") for e in errors)


def test_a_live_base_is_asked_in_its_own_batch(pytester: pytest.Pytester, mock_factory: Callable[..., MockServer]) -> None:
    server = mock_factory(batch_polls=1)
    pytester.makefile(".txt", prompt="You are a careful assistant.")
    result = pytester.runpytest(*mock_args(server, *SAMPLE, *FAST, "--orbench-system-prompt-file", "prompt.txt",
                                           "--orbench-base-system-prompt-file", "", "--orbench-json", "r.json"))
    assert result.ret in (0, 1)
    served = stats(server.url)
    assert served["batch_sizes"] == [N, N] and served["requests"] == 0
    data = load(pytester.path / "r.json")
    assert all(p["error"] is None and p["base"]["error"] is None for p in data["prompts"])


@pytest.mark.parametrize(("extra", "message"), [
    (("--orbench-offline",), "*--orbench-offline makes no calls and --orbench-batch submits them; pick one"),
    (("--orbench-batch-wait", "never"), "*--orbench-batch-wait 'never': give how long to wait*"),
    # Once the store max age's words: "use a number with a unit (7d, 12h, 30m, 45s), 0 to always ask again, or never".
    *(((f"--orbench-batch-wait={wait}",), f"*--orbench-batch-wait '{wait}': give how long to wait, a number above 0 with "
                                        "a unit (24h, 2h, 30m, 90s); a run that stops waiting is resumed by the next one")
      for wait in ("-5h", "5", "soon")),
    (("--orbench-batch-poll", "0"), "*batch_poll must be a positive number of seconds, got 0.0"),
    # Once "... is a anthropic model: write it as provider/model", which it already was.
    (("--orbench-model", "anthropic/claude-x"), "*model: --orbench-batch submits OpenAI-format batch files through "
                                                "litellm, for openai, azure, hosted_vllm, litellm_proxy models; "
                                                "'anthropic/claude-x' is a model of anthropic, whose batch API is not "
                                                "supported: run it without --orbench-batch"),
])
def test_batch_settings_that_cannot_work_are_refused_before_any_call(
    pytester: pytest.Pytester, mock: MockServer, extra: tuple[str, ...], message: str,
) -> None:
    result = pytester.runpytest(*mock_args(mock, *SAMPLE, "--orbench-batch", *extra))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert stats(mock.url)["requests"] == 0 and stats(mock.url)["batches_created"] == 0


def test_batch_prices_decide_the_max_cost_check_and_the_recorded_spend(
    pytester: pytest.Pytester, mock_factory: Callable[..., MockServer],
) -> None:
    server = mock_factory(batch_polls=1)
    pytester.makefile(".yaml", orbench="litellm_kwargs:\n  input_cost_per_token: 0.000002\n  output_cost_per_token: "
                                       "0.000004\n  input_cost_per_token_batches: 0.000001\n  "
                                       "output_cost_per_token_batches: 0.000002\n")
    args = mock_args(server, *SAMPLE, "--orbench-estimate-output-tokens", "100", "--orbench-json", "r.json")
    estimate = pytester.runpytest(*args, "--orbench-estimate")
    line = next(x for x in estimate.outlines if x.startswith("  total:"))
    sync_cost, batch_cost = (float(part.split("$")[1]) for part in line.split(", "))
    assert batch_cost == pytest.approx(sync_cost / 2, abs=1e-4)
    limit = f"{(sync_cost + batch_cost) / 2:.4f}"  # over the synchronous estimate, under the batch one
    refused = pytester.runpytest(*args, "--orbench-max-cost", limit)
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    ran = pytester.runpytest(*args, *FAST, "--orbench-max-cost", limit)
    assert ran.ret in (0, 1) and stats(server.url)["batch_requests_answered"] == N
    spend = load(pytester.path / "r.json")["run"]["spend"]["endpoint"]
    tokens = spend["prompt_tokens"] * 0.000001 + spend["completion_tokens"] * 0.000002  # the batch price
    assert spend["cost_usd"] == pytest.approx(tokens, rel=1e-6)


@pytest.mark.slow
def test_a_refused_connection_or_a_rejected_key_ends_a_batch_run_with_what_happened(
    pytester: pytest.Pytester, mock_factory: Callable[..., MockServer],
) -> None:
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = ["--orbench", "--orbench-model", "openai/orbench-mock", "-p", "no:cacheprovider", "-p", "no:randomly",
            *SAMPLE, *FAST, "--orbench-batch-max-requests", "5", "--orbench-json", "r.json"]
    refused = pytester.runpytest(*args, "--orbench-api-base", f"http://127.0.0.1:{port}/v1")
    assert refused.ret == 1
    assert {p["error"] for p in load(pytester.path / "r.json")["prompts"]} == {
        f"uploading the batch file failed: connection refused by 127.0.0.1:{port}"}
    server = mock_factory(api_key="sk-the-right-one")
    rejected = pytester.runpytest(*args, "--orbench-api-base", server.url)
    assert rejected.ret == 1
    errors = {p["error"] for p in load(pytester.path / "r.json")["prompts"]}
    assert len(errors) == 1 and errors.pop().startswith("uploading the batch file failed: HTTP 401 from 127.0.0.1:")
    assert stats(server.url)["batches_created"] == 0
    assert stats(server.url)["batch_calls"] == 1  # one upload of five files tried: a rejected key ends the run
