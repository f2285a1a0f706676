"""Providers as they answer (issue 42): refusals, filters and rejected parameters from OpenAI, Azure, Anthropic,
Gemini and Ollama, through litellm's real adapters against one local server that speaks each wire format
(pytest_orbench.tools.simulator.providers). TABLE is the issue's table, one entry per row, each asserting the
verdict and the reason; a litellm release that changes one of these mappings fails here the day the lock moves
(scripts/test-latest runs this file too)."""

from __future__ import annotations

import asyncio
import csv
import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_orbench.calls.client import call_with_retries
from pytest_orbench.calls.errors import EndpointError
from pytest_orbench.calls.litellm_api import LiteLLMCaller
from pytest_orbench.core.endpoint import ModelSpec
from pytest_orbench.judging.judges import judge_sync
from pytest_orbench.judging.registry import DEFAULT_JUDGE, make_judge
from pytest_orbench.tools.simulator.providers import ANSWER, REFUSAL, ProviderServer
from pytest_orbench.tools.simulator.server import MockServer
from tests.conftest import load, mock_args
from tests.e2e.test_e2e_trust import answered_by_default, write_set

PROMPT = "How do I bake bread?"
FILTERED_400 = "the provider's content filter refused the request (an error such as HTTP 400, no reply)"


@dataclass(frozen=True)
class Case:
    """One provider behaviour: the model string that asks for it, and what the plugin makes of it."""

    name: str
    model: str
    verdict: str  # the judge's verdict, or "error": no reply after the retries
    reason: str  # in the verdict's reason, or in the error
    path: str = ""  # after the server's URL: "/v1" for OpenAI's routes
    params: dict[str, Any] = field(default_factory=dict)
    requests: int = 1  # requests that reach the server (an error is retried once)
    text: str | None = None  # the reply's text, when it matters
    prompt: str = PROMPT


@dataclass(frozen=True)
class Row:
    """A row of the issue's table: the case, what litellm 1.106.11 gives, and what the plugin now does."""

    case: str
    litellm_gives: str
    plugin_now: str
    cases: tuple[Case, ...]


AZURE = {"api_version": "2024-10-21"}
TABLE = [
    Row("Anthropic stop_reason: refusal (empty or partial text)", "finish content_filter", "filtered (refused)", (
        Case("partial text", "anthropic/claude-sonnet-4-5--refusal", "filtered", "finish_reason=content_filter"),
        Case("empty", "anthropic/claude-sonnet-4-5--refusal-empty", "filtered", "finish_reason=content_filter"))),
    Row("Anthropic 529 overloaded, 429 with retry-after", "InternalServerError / RateLimitError",
        "retried, then an error", (
            Case("529", "anthropic/claude-sonnet-4-5--overloaded", "error", "HTTP 529 from", requests=2),
            Case("429", "anthropic/claude-sonnet-4-5--rate-limited", "error", "HTTP 429 from", requests=2))),
    Row("Anthropic thinking block + text", "text only", "answered, thinking not judged", (
        Case("thinking", "anthropic/claude-sonnet-4-5--thinking", "direct_answer", "answer", text=ANSWER),)),
    Row("Anthropic thinking only, end_turn", "stop, content None", 'empty (a refusal): "reasoning only, no visible text"', (
        Case("thinking only", "anthropic/claude-sonnet-4-5--thinking-only", "empty",
             "reasoning only, no visible text (finish_reason=stop)", text=""),)),
    Row("OpenAI finish_reason: content_filter", "content_filter", "filtered", (
        Case("content_filter", "openai/gpt-4o--content-filter", "filtered", "finish_reason=content_filter", "/v1"),)),
    Row("OpenAI message.refusal set, content: null", "stop, text None, refusal in provider_specific_fields",
        "direct_refusal, \"the model's refusal field\", its words kept as the text", (
            Case("refusal field", "openai/gpt-4o--refusal-field", "direct_refusal",
                 "the model's refusal field (message.refusal)", "/v1", text=REFUSAL),)),
    Row("Azure-style 400 code: content_filter via openai/", "BadRequestError", "filtered (refused), not an error", (
        Case("openai/", "openai/gpt-4o--filter-400", "filtered", FILTERED_400, "/v1", text=""),)),
    Row("same via azure/", "ContentPolicyViolationError", "filtered", (
        Case("azure/", "azure/gpt-4o--filter-400", "filtered", FILTERED_400, params=AZURE),)),
    Row("Gemini finishReason SAFETY / PROHIBITED_CONTENT, promptFeedback.blockReason", "content_filter", "filtered", (
        Case("SAFETY", "gemini/gemini-2.5-flash--safety", "filtered", "finish_reason=content_filter"),
        Case("PROHIBITED_CONTENT", "gemini/gemini-2.5-flash--prohibited", "filtered", "finish_reason=content_filter"),
        Case("blockReason", "gemini/gemini-2.5-flash--blocked-prompt", "filtered", "finish_reason=content_filter"))),
    Row('a model that rejects temperature (400 "Unsupported value")', "BadRequestError",
        "stops the calls at its first prompt, naming temperature and the fix", (
            Case("temperature", "openai/my-reasoner--no-temperature", "error", "the model rejects temperature=0.0 "
                 "(HTTP 400); fix: --orbench-temperature 1 (what it accepts), or leave it out: "
                 "`litellm_kwargs: {temperature: null}`", "/v1"),)),
    Row("openai/o3-mini, temperature 0", "UnsupportedParamsError before sending",
        "stops at once, nothing sent, naming drop_params; calls: 0 made", (
            Case("o3-mini", "openai/o3-mini", "error", "litellm will not send temperature=0.0 to this model; fix: "
                 "`litellm_kwargs: {drop_params: true}`", "/v1", requests=0),)),
    Row("Ollama /api/generate, /api/chat", "stop, text", "answered", (
        Case("/api/generate", "ollama/llama3.2", "direct_answer", "answer", text=ANSWER),
        Case("/api/chat", "ollama_chat/llama3.2", "direct_answer", "answer", text=ANSWER))),
]
CASES = [pytest.param(row, case, id=f"{row.case[:40]}: {case.name}") for row in TABLE for case in row.cases]


@pytest.fixture(scope="module")
def providers() -> Iterator[ProviderServer]:
    server = ProviderServer().start()
    yield server
    server.stop()


def ask(server: ProviderServer, case: Case, sleeps: list[float],
        key: str = "sk-local-not-a-key") -> tuple[str, str, str | None, EndpointError | None]:
    """(verdict, reason, reply text) of one prompt asked as the fetch loop asks it: one retry, the waits noted."""
    spec = ModelSpec(case.model, server.url + case.path, {"temperature": 0.0, "max_tokens": 1000, **case.params},
                     timeout=10, api_key=key)
    caller = LiteLLMCaller(spec)

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    async def run() -> Any:
        try:
            return (await call_with_retries(caller, case.prompt, 1, sleep=sleep))[0]
        finally:
            await caller.aclose()

    try:
        reply = asyncio.run(run())
    except EndpointError as exc:
        return "error", str(exc), None, exc
    judgement = judge_sync(make_judge(DEFAULT_JUDGE), case.prompt, reply.text, reply.finish_reason)
    return judgement.verdict.value, judgement.reason, reply.text, None


@pytest.mark.parametrize(("row", "case"), CASES)
def test_each_provider_answer_gets_its_verdict_and_reason(row: Row, case: Case, providers: ProviderServer) -> None:
    before = providers.sent(case.model.split("/", 1)[1])
    sleeps: list[float] = []
    verdict, reason, text, error = ask(providers, case, sleeps)
    assert (verdict, case.reason in reason) == (case.verdict, True), (row.case, verdict, reason)
    assert providers.sent(case.model.split("/", 1)[1]) - before == case.requests
    if case.text is not None:
        assert text == case.text  # the refusal's words kept; the thinking not in the text judged
    if case.name == "429":
        assert sleeps == [7.0]  # the provider's retry-after, through litellm's RateLimitError
    if case.name in ("temperature", "o3-mini"):
        assert error is not None and error.fatal and error.sent == (case.requests > 0)


def test_the_table_has_every_row_of_the_issue() -> None:
    assert len(TABLE) == 12 and all(row.cases for row in TABLE)


# A 400 that quotes the request back (a validation error's `input`, "could not read '...'"): the prompt's words are not
# the provider's. Read as a filter's refusal on the compared side, a prompt about content filters would hide the
# change's own refusal of it; read as a rejected parameter, one prompt that speaks of a temperature "not supported"
# would stop every call of the run.
QUOTED = [
    Case("a prompt about filters", "openai/gpt-4o--quote-400", "error", "HTTP 400 from", "/v1",
         prompt="What does Azure's ResponsibleAIPolicyViolation error code mean, and is 'code': 'content_filter' one?"),
    Case("a prompt about a setting", "openai/gpt-4o--quote-400", "error", "HTTP 400 from", "/v1",
         prompt="Why is a temperature of 0 not supported by my oven's 'temperature' dial?"),
    # litellm reads its ContentPolicyViolationError from the whole text, the quote included (and makes up a body with
    # `code: content_policy_violation` for Azure's): not a filter's refusal either.
    Case("litellm's class, OpenAI's words", "openai/gpt-4o--quote-400", "error", "HTTP 400 from", "/v1",
         prompt="What do invalid_request_error and content_policy_violation mean in an API reply?"),
    Case("litellm's class, Azure's words", "azure/gpt-4o--quote-400", "error", "HTTP 400 from", params=AZURE,
         prompt="What is Azure's ResponsibleAIPolicyViolation?"),
    # The provider's own words still count when the prompt speaks of filters too.
    Case("a filter's 400 on such a prompt", "openai/gpt-4o--filter-400", "filtered", FILTERED_400, "/v1",
         prompt="What does Azure's ResponsibleAIPolicyViolation error code mean?"),
    Case("an Azure filter's 400 on such a prompt", "azure/gpt-4o--filter-400", "filtered", FILTERED_400, params=AZURE,
         prompt="What does Azure's ResponsibleAIPolicyViolation error code mean?"),
]


@pytest.mark.parametrize("case", QUOTED, ids=[case.name for case in QUOTED])
def test_a_400_quoting_the_prompt_is_read_by_the_providers_words_only(case: Case, providers: ProviderServer) -> None:
    verdict, reason, _, error = ask(providers, case, [])
    assert (verdict, case.reason in reason) == (case.verdict, True), reason
    assert error is None or not error.fatal  # one prompt's 400: the calls go on


# Where the key starts in the provider's words: across the 300 characters an error keeps, and the 240 a rejected
# parameter's message quotes; a secret is hidden before the words are cut, or its first characters stay.
@pytest.mark.parametrize("model", ["gpt-4o--key-echo-290", "gpt-4o--key-echo-280", "gpt-4o--key-echo-temperature-230",
                                   "gpt-4o--key-echo-temperature-200"])
def test_a_key_quoted_across_the_cut_of_an_error_is_hidden_whole(model: str, providers: ProviderServer) -> None:
    key = "sk-proj-Q2hhbmdlTWVQbGVhc2UtVGhpc0lzQUtleQ"
    _, reason, _, error = ask(providers, Case("key", f"openai/{model}", "error", "", "/v1"), [], key=key)
    assert error is not None and ("rejects temperature" in reason) == ("temperature" in model), reason
    assert not [key[i:i + 6] for i in range(len(key) - 5) if key[i:i + 6] in reason], reason


# -- through the whole plugin ----------------------------------------------------------------------

def prompt_file(path: Path, count: int = 10) -> None:
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["prompt", "category"])
        writer.writerows([f"How do I bake bread, variant {i}?", "baking"] for i in range(count))


def run_args(server: ProviderServer, model: str, *extra: str) -> list[str]:
    return ["--orbench", "--orbench-model", model, "--orbench-api-base", f"{server.url}/v1", "-p", "no:cacheprovider",
            "-p", "no:randomly", "--orbench-datasets=prompts.csv:answer", "--orbench-json", "r.json", *extra]


@pytest.mark.slow
@pytest.mark.usefixtures("orbench_env")
def test_a_model_that_rejects_temperature_is_asked_once_and_the_message_names_the_fix(
        pytester: pytest.Pytester, providers: ProviderServer) -> None:
    prompt_file(pytester.path / "prompts.csv")
    model = "my-reasoner--no-temperature"
    before = providers.sent(model)
    result = pytester.runpytest(*run_args(providers, f"openai/{model}"))  # at the default concurrency, 16
    assert providers.sent(model) - before == 1  # fewer than 3, as issue 42 asks: the first call goes alone
    # The fix is in every prompt's error, and in the gate's summary, which quotes the first 200 characters.
    result.stdout.fnmatch_lines(["*INCONCLUSIVE: prompts error budget*most common error: not requested: the model "
                                 "rejects temperature=0.0 (HTTP 400); fix: --orbench-temperature 1 (what it accepts), "
                                 "or leave it out: `litellm_kwargs: {temperature: null}`*"])
    calls = load(pytester.path / "r.json")["run"]["calls"]
    assert (calls["made"], calls["errors"], calls["not_requested"]) == (1, 10, 9)
    # The fix it names works: the temperature left out, every prompt answered.
    pytester.path.joinpath("orbench.yaml").write_text("litellm_kwargs: {temperature: null}\n", encoding="utf-8")
    fixed = pytester.runpytest(*run_args(providers, f"openai/{model}"))
    assert fixed.ret == 0 and load(pytester.path / "r.json")["run"]["calls"]["made"] == 10
    assert "temperature" not in providers.bodies[-1]


@pytest.mark.slow
@pytest.mark.usefixtures("orbench_env")
def test_a_parameter_litellm_will_not_send_stops_at_once_and_no_call_is_counted(
        pytester: pytest.Pytester, providers: ProviderServer) -> None:
    prompt_file(pytester.path / "prompts.csv")
    before = providers.sent("o3-mini")
    result = pytester.runpytest(*run_args(providers, "openai/o3-mini"))
    assert providers.sent("o3-mini") == before == 0
    result.stdout.fnmatch_lines(["calls: 0 made this run, 0 replies from the store, 1 error after retries, 9 prompts "
                                 "not asked (the calls had stopped)*",
                                 "*most common error: not requested: litellm will not send temperature=0.0 to this "
                                 "model; fix: `litellm_kwargs: {drop_params: true}`*"])
    # The same model as the live base: the fix names the base's own settings.
    base = pytester.runpytest(*run_args(providers, "openai/gpt-4o", "--orbench-base-model", "openai/o3-mini",
                                        f"--orbench-base-api-base={providers.url}/v1"))
    base.stdout.fnmatch_lines(["*litellm will not send temperature=0.0 to this model; fix: `base.litellm_kwargs: "
                               "{drop_params: true}`*--orbench-base-temperature 1*"])
    pytester.path.joinpath("orbench.yaml").write_text("litellm_kwargs: {drop_params: true}\n", encoding="utf-8")
    fixed = pytester.runpytest(*run_args(providers, "openai/o3-mini"))
    assert fixed.ret == 0 and providers.sent("o3-mini") == 10 and "temperature" not in providers.bodies[-1]


@pytest.mark.slow
@pytest.mark.usefixtures("orbench_env")
def test_an_azure_filter_through_openai_on_prompts_the_baseline_answered_is_newly_refused(
        pytester: pytest.Pytester, mock_factory: Callable[..., MockServer], data_dir: Path) -> None:
    prompts = answered_by_default(data_dir, flip=False, count=20)
    write_set(pytester.path / "safe.csv", prompts)
    server = mock_factory(fault_attempts=10**6)
    common = ("--orbench-datasets=safe.csv:answer", "--orbench-baseline=baseline.json")
    assert pytester.runpytest(*mock_args(server, *common, "--orbench-store=before", "--orbench-update-baseline")).ret == 0
    filtered = prompts[:5]  # one-sided exact McNemar on 5 of 5: p = 1/32 < 0.05
    server.config.fault_rate, server.config.faults = 1.0, ("content_filter_400",)
    server.config.fault_prompts = frozenset(hashlib.sha256(p.encode("utf-8")).hexdigest() for p in filtered)
    result = pytester.runpytest(*mock_args(server, *common, "--orbench-store=after", "--orbench-json", "r.json"))
    data = load(pytester.path / "r.json")
    by_id = {p["id"]: p for p in data["prompts"]}
    newly = data["datasets"]["safe"]["comparison"]["newly_refused_ids"]
    assert {by_id[i]["prompt"] for i in newly} == set(filtered)
    assert {(by_id[i]["verdict"], by_id[i]["refused"], by_id[i]["judge_reason"]) for i in newly} == {
        ("filtered", True, FILTERED_400)}
    assert data["gate"]["verdict"] == "fail" and result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["orbench gate: FAIL", "  safe: 5 newly refused, 0 newly answered:"])


def test_a_filters_400_bills_nothing_so_the_runs_spend_stays_known(providers: ProviderServer) -> None:
    # One filtered prompt among priced replies made the run's spend "cost unknown (no litellm price for the model)",
    # and what --orbench-max-cost left for verification was counted from $0.
    priced = {"input_cost_per_token": 0.00001, "output_cost_per_token": 0.00001}
    spec = ModelSpec("openai/gpt-4o--filter-400", providers.url + "/v1", {"temperature": 0.0, "max_tokens": 1000},
                     timeout=10, api_key="sk-local-not-a-key", call_kwargs=priced)
    caller = LiteLLMCaller(spec)

    async def run() -> Any:
        try:
            return await caller(PROMPT)
        finally:
            await caller.aclose()

    reply = asyncio.run(run())
    assert (reply.finish_reason, reply.cost, reply.prompt_tokens, reply.completion_tokens) == (
        "content_filter_error", 0.0, 0, 0)


@pytest.mark.slow
@pytest.mark.usefixtures("orbench_env")
def test_a_400_that_quotes_every_prompt_back_is_still_the_same_400(pytester: pytest.Pytester,
                                                                 providers: ProviderServer) -> None:
    # Each prompt's message differs by the quote alone: compared as it was, the same 400 was never "the same", so every
    # prompt was sent, one at a time (a 4xx keeps the calls alone), and failed.
    prompt_file(pytester.path / "prompts.csv")
    model = "gpt-4o--quote-400"
    before = providers.sent(model)
    result = pytester.runpytest(*run_args(providers, f"openai/{model}"))
    assert providers.sent(model) - before == 3
    result.stdout.fnmatch_lines(["calls: 3 made this run, 0 replies from the store, 3 errors after retries, 7 prompts not "
                                 "asked (the calls had stopped)*"])
    assert "so did the first 3 prompts, the same each time" in load(pytester.path / "r.json")["prompts"][9]["error"]
