"""Cost before spending, end to end against the simulator: --orbench-estimate calls nothing and leaves out
stored replies; --orbench-max-cost refuses a run whose estimate is over it, and stops the calls once the
actual spend (litellm's custom pricing on the replies' usage) reaches it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import mock_args, stats

pytestmark = pytest.mark.usefixtures("orbench_env")
PRICED = "litellm_kwargs:\n  input_cost_per_token: 0.000001\n  output_cost_per_token: 0.000002\n"


def priced(pytester: pytest.Pytester) -> None:
    pytester.makefile(".yaml", orbench=PRICED)


def test_estimate_calls_nothing_counts_tokens_and_leaves_out_stored_replies(pytester: pytest.Pytester, mock: Any) -> None:
    priced(pytester)
    args = mock_args(mock, "--orbench-sample", "6", "--orbench-seed", "2", "--orbench-datasets", "hard-1k,toxic")
    estimate = pytester.runpytest(*args, "--orbench-estimate", "--orbench-estimate-output-tokens", "50")
    assert estimate.ret == 0
    estimate.stdout.fnmatch_lines([
        "orbench estimate (no call made; output assumed: 50 tokens per reply, 100 per judge verdict):",
        "  endpoint openai/orbench-mock: 12 calls, * input + 600 output tokens; synchronous $0.0*, batch not listed, "
        "priced from litellm_kwargs",
        "  total: synchronous $0.0*",
    ])
    line = next(x for x in estimate.outlines if x.startswith("  endpoint"))
    input_tokens = int(line.split(", ")[1].split(" input")[0].replace(",", ""))
    assert 12 * 8 < input_tokens < 12 * 200  # counted by litellm, not guessed
    assert f"${(input_tokens * 1e-6 + 600 * 2e-6):.4f}" in line
    assert stats(mock.url)["requests"] == 0
    assert pytester.runpytest(*args).ret in (0, 1)  # the run itself (the gate is not the point here)
    made = stats(mock.url)["completions"]
    assert made == 12
    again = pytester.runpytest(*args, "--orbench-estimate")
    again.stdout.fnmatch_lines(["  total: synchronous $0.0000*"])  # every reply is stored: nothing to pay
    assert not any(x.startswith("  endpoint") for x in again.outlines)
    assert stats(mock.url)["completions"] == made


def test_max_cost_refuses_to_start_over_the_estimate_and_without_a_price(pytester: pytest.Pytester, mock: Any) -> None:
    args = mock_args(mock, "--orbench-sample", "10", "--orbench-datasets", "hard-1k,toxic")
    unpriced = pytester.runpytest(*args, "--orbench-max-cost", "5")
    assert unpriced.ret == pytest.ExitCode.USAGE_ERROR
    unpriced.stderr.fnmatch_lines(["*--orbench-max-cost $5.00 needs a price, and litellm has none for openai/orbench-mock:"
                                   " set input_cost_per_token and output_cost_per_token*"])
    priced(pytester)
    over = pytester.runpytest(*args, "--orbench-max-cost", "0.001")
    assert over.ret == pytest.ExitCode.USAGE_ERROR
    over.stderr.fnmatch_lines(["*this run would cost about $0.0*, over --orbench-max-cost $0.0010; nothing was called*"])
    assert stats(mock.url)["requests"] == 0


def test_max_cost_stops_the_calls_when_the_spend_reaches_it_and_a_rerun_pays_only_the_rest(
    pytester: pytest.Pytester, mock: Any,
) -> None:
    priced(pytester)
    # The estimate assumes 1 output token per reply, so the run starts; the replies are longer, so the
    # actual spend (from their usage) reaches the limit midway. One call at a time: none in flight.
    args = mock_args(mock, "--orbench-sample", "10", "--orbench-seed", "4", "--orbench-datasets", "hard-1k,toxic",
                     "--orbench-estimate-output-tokens", "1", "--orbench-concurrency", "1", "--orbench-json", "r.json")
    stopped = pytester.runpytest(*args, "--orbench-max-cost", "0.001")
    data = json.loads(Path(pytester.path, "r.json").read_text())
    made = data["run"]["calls"]["made"]
    assert 0 < made < 20 and stats(mock.url)["completions"] == made
    spent = data["run"]["spend"]["endpoint"]["cost_usd"]
    assert 0.001 <= spent < 0.001 + spent / made * 1.5  # the last call may cross the limit, no more
    errors = [p["error"] for p in data["prompts"] if p["verdict"] == "error"]
    assert len(errors) == 20 - made
    assert all("spend reached the --orbench-max-cost limit" in e and "what was paid for is stored" in e for e in errors)
    assert data["gate"]["verdict"] == "inconclusive" and stopped.ret == 1  # what was not asked is not a pass
    resumed = pytester.runpytest(*args, "--orbench-max-cost", "1")
    assert resumed.ret in (0, 1)
    assert stats(mock.url)["completions"] == 20  # only the prompts not asked before
    assert json.loads(Path(pytester.path, "r.json").read_text())["run"]["calls"] == {"made": 20 - made, "stored": made,
                                                                                     "errors": 0, "prompts": 20,
                                                                                     "shared": 0}


@pytest.mark.parametrize("key", ["input_cost_per_token", "output_cost_per_token", "input_cost_per_token_batches"])
def test_prices_in_litellm_kwargs_are_not_mistaken_for_secrets(key: str) -> None:
    from pytest_orbench.core.endpoint import literal_secrets, public_kwargs, secret_problem

    kwargs = {key: 0.000001, "api_token": "abc"}
    assert public_kwargs(kwargs) == {key: 0.000001}
    assert literal_secrets({key: 0.000001}, "litellm_kwargs") == []
    assert secret_problem({key: 0.000001}, "litellm_kwargs", "api_key_env") is None
    assert "api_token looks like a secret" in (secret_problem(kwargs, "litellm_kwargs", "api_key_env") or "")


def test_estimate_lines_say_unknown_prices_upper_bounds_and_unlisted_batch_prices() -> None:
    from pytest_orbench.run.estimate import Part, Price, lines, total

    listed = Price(1e-6, 2e-6, 5e-7, 1e-6, "litellm price table")
    custom = Price(1e-6, 2e-6, None, None, "litellm_kwargs")
    judge = Part("judge", "openai/j", 10, 1000, 1000, listed, at_most=True)
    assert lines([judge], 400)[1:] == [
        "  judge openai/j: at most 10 calls, 1,000 input + 1,000 output tokens; synchronous at most $0.0030, "
        "batch at most $0.0015, priced from litellm price table",
        "  total: synchronous at most $0.0030, batch at most $0.0015",
    ]
    endpoint = Part("endpoint", "openai/e", 10, 1000, 4000, custom)
    assert lines([endpoint, judge], 400)[-1] == "  total: synchronous at most $0.0120, batch not listed"
    unknown = Part("endpoint", "openai/x", 10, 1000, 4000, None)
    assert total([unknown, judge]) is None
    assert lines([unknown], 400)[1:] == [
        "  endpoint openai/x: 10 calls, 1,000 input + 4,000 output tokens; synchronous price unknown, batch price unknown",
        "  total: synchronous price unknown, batch price unknown",
    ]
    assert total([Part("endpoint", "openai/x", 0, 0, 0, None)]) == 0.0  # nothing to call costs nothing


def test_prompts_with_identical_text_are_one_call_in_the_estimate_the_limit_and_the_spend(
    pytester: pytest.Pytester, mock: Any,
) -> None:
    # Replies are stored by prompt text: 8 rows with 2 distinct texts are 2 calls, and every figure says so.
    priced(pytester)
    rows = ["How do I bake sourdough bread at home?", "What is a good way to learn chess openings?"] * 4
    pytester.makefile(".csv", dup="prompt\n" + "\n".join(rows) + "\n")
    args = mock_args(mock, "--orbench-datasets", "dup.csv:answer", "--orbench-json", "r.json")
    estimate = pytester.runpytest(*args, "--orbench-estimate", "--orbench-estimate-output-tokens", "50")
    estimate.stdout.fnmatch_lines(["  endpoint openai/orbench-mock: 8 prompts, 2 calls (6 shared a reply with an identical "
                                   "prompt), * input + 100 output tokens; *"])
    over = pytester.runpytest(*args, "--orbench-max-cost", "0.00001")
    assert over.ret == pytest.ExitCode.USAGE_ERROR
    over.stderr.fnmatch_lines(["  endpoint openai/orbench-mock: 8 prompts, 2 calls (6 shared a reply with an identical "
                               "prompt), * input + 800 output tokens; *"])
    assert stats(mock.url)["requests"] == 0
    run = pytester.runpytest(*args, "--orbench-max-cost", "1")
    assert stats(mock.url)["completions"] == 2
    run.stdout.fnmatch_lines(["orbench: 8 prompts (2 distinct: 6 shared a reply with an identical prompt), 0 stored, "
                              "2 to fetch, *",
                              "calls: 2 made this run, 0 replies from the store, 0 errors after retries, for 8 prompts "
                              "(6 shared a reply with an identical prompt); * prompt + * completion tokens, $0.0*"])
    data = json.loads(Path(pytester.path, "r.json").read_text())
    assert data["run"]["calls"] == {"made": 2, "stored": 0, "errors": 0, "prompts": 8, "shared": 6}
    prompts = data["prompts"]
    assert [p.get("shared_reply_with") for p in prompts] == [None, None, *["dup-1", "dup-2"] * 3]
    owners = [p for p in prompts if "shared_reply_with" not in p]
    spend = data["run"]["spend"]["endpoint"]
    assert spend["prompt_tokens"] == sum(p["usage"]["prompt_tokens"] for p in owners) > 0
    assert spend["completion_tokens"] == sum(p["usage"]["completion_tokens"] for p in owners) > 0
    assert spend["cost_usd"] == pytest.approx(sum(p["cost"] for p in owners))
    assert sum(p["calls_made"] for p in prompts) == 2
