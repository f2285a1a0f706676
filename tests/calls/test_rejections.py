"""What a provider's error or message says outside the reply's text: a content filter's 400 (filtered_request), a
parameter the model rejects (rejected_setting), the refusal field and reasoning without text (read_message).
Exceptions built as the OpenAI SDK and httpx raise them; tests/e2e/test_providers.py goes through litellm."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from pytest_orbench.calls.rejections import BASE, JUDGE, filtered_request, rejected_setting, unquoted
from pytest_orbench.calls.reply import REASONING_ONLY, REFUSAL_FIELD, read_message

AZURE_FILTER_WORDS = ("The response was filtered due to the prompt triggering Azure OpenAI's content management policy. "
                      "Please modify your prompt and retry.")
PARAMS = {"temperature": 0.0, "max_tokens": 1000, "seed": 7, "stop": None, "reasoning_effort": "minimal",
          "api_key": "sk-secret-not-shown", "api_base": "http://127.0.0.1:9/v1"}


def sdk_error(status: int, error: dict[str, Any]) -> Exception:
    """The OpenAI SDK's error for a JSON error body, wrapped as litellm wraps it (its own class, the SDK's as cause)."""
    body = {"error": error}
    response = httpx.Response(status, json=body, request=httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions"))
    cls = openai.BadRequestError if status == 400 else openai.APIStatusError
    cause = cls(f"Error code: {status} - {body}", response=response, body=error)
    wrapped = RuntimeError(f"litellm.BadRequestError: OpenAIException - {error.get('message')}")
    wrapped.__cause__ = cause
    return wrapped


def httpx_error(status: int, text: str) -> Exception:
    """An httpx status error, as litellm's own handlers (Anthropic, Gemini) chain it."""
    request = httpx.Request("POST", "http://127.0.0.1:9/v1/messages")
    cause = httpx.HTTPStatusError(text, request=request, response=httpx.Response(status, text=text, request=request))
    wrapped = RuntimeError(f"litellm.BadRequestError: AnthropicException - {text}")
    wrapped.__cause__ = cause
    return wrapped


class ContentPolicyViolationError(Exception):
    """Named as litellm's (what the check goes by)."""


class UnsupportedParamsError(Exception):
    """Named as litellm's."""


@pytest.mark.parametrize(("exc", "checker", "filtered"), [
    (sdk_error(400, {"message": AZURE_FILTER_WORDS, "code": "content_filter", "param": "prompt"}), None, True),
    (sdk_error(400, {"message": "blocked", "code": None, "innererror": {"code": "ResponsibleAIPolicyViolation"}}), None,
     True),
    (sdk_error(400, {"message": "blocked", "code": "content_policy_violation"}), None, True),
    # The words alone: litellm's own checker knows them; without it, no guess.
    (sdk_error(400, {"message": AZURE_FILTER_WORDS, "code": None}), lambda text: "azure openai's content" in text.lower(),
     True),
    (sdk_error(400, {"message": AZURE_FILTER_WORDS, "code": None}), None, False),
    (httpx_error(400, '{"error": {"code": "content_filter", "message": "filtered"}}'), None, True),
    (ContentPolicyViolationError("litellm.ContentPolicyViolationError: ..."), None, True),
    # Not a filter's refusal: a server fault that mentions one, a parameter, a rate limit.
    (sdk_error(500, {"message": "content_filter service down", "code": "content_filter"}), None, False),
    (sdk_error(400, {"message": "Unsupported value: 'temperature'", "param": "temperature"}), None, False),
    (httpx_error(429, "rate limited"), None, False),
], ids=["code", "innererror", "content_policy_violation", "litellm's words", "words, no checker", "httpx body",
        "litellm's class", "500", "a parameter", "429"])
def test_a_content_filters_400_is_a_refusal_and_nothing_else_is(exc: Exception, checker: Any, filtered: bool) -> None:
    assert filtered_request(exc, checker) is filtered


@pytest.mark.parametrize(("exc", "says"), [
    (sdk_error(400, {"message": "Unsupported value: 'temperature' does not support 0 with this model. Only the default "
                                "(1) value is supported.", "param": "temperature", "code": "unsupported_value"}),
     "the model rejects temperature=0.0 (HTTP 400); fix: --orbench-temperature 1 (what it accepts), or leave it out: "
     "`litellm_kwargs: {temperature: null}`. 127.0.0.1:9 said: Unsupported value:"),
    (sdk_error(400, {"message": "Unsupported parameter: 'max_tokens' is not supported with this model. Use "
                                "'max_completion_tokens' instead.", "param": "max_tokens"}),
     "the model rejects max_tokens=1000 (HTTP 400); fix: the limit under the name it takes: "
     "`litellm_kwargs: {max_tokens: null, max_completion_tokens: 1000}`, or leave it out: `litellm_kwargs: {max_tokens: null}`"),
    (httpx_error(400, '{"type": "error", "error": {"type": "invalid_request_error", "message": "`temperature` may only '
                      'be set to 1 when thinking is enabled."}}'),
     "the model rejects temperature=0.0 (HTTP 400); fix: --orbench-temperature 1 (what it accepts)"),
    (sdk_error(400, {"message": "Unrecognized request argument supplied: seed", "param": None}),
     "the model rejects seed=7 (HTTP 400); fix: leave it out: `litellm_kwargs: {seed: null}`"),
    # A string's value is not shown (it may be a secret): the name is enough.
    (sdk_error(400, {"message": "Unsupported value: 'reasoning_effort' does not support 'minimal' with this model.",
                     "param": "reasoning_effort"}),
     "the model rejects reasoning_effort (HTTP 400); fix: leave it out: `litellm_kwargs: {reasoning_effort: null}`"),
    (UnsupportedParamsError("litellm.UnsupportedParamsError: O-series models don't support temperature=0.0. Only "
                            "temperature=1 is supported. To drop unsupported openai params from the call, set "
                            "`litellm.drop_params = True`"),
     "litellm will not send temperature=0.0 to this model; fix: `litellm_kwargs: {drop_params: true}` (litellm leaves "
     "out what the model does not take), or --orbench-temperature 1 (what it accepts)"),
], ids=["OpenAI temperature", "max_tokens", "Anthropic thinking", "an argument of litellm_kwargs", "a string",
        "litellm"])
def test_a_parameter_the_model_rejects_stops_the_calls_naming_it_and_the_fix(exc: Exception, says: str) -> None:
    error = rejected_setting(exc, PARAMS, "http://127.0.0.1:9/v1")
    assert error is not None and error.fatal and not error.retryable and says in str(error)
    assert error.sent is (type(exc).__name__ != "UnsupportedParamsError")


@pytest.mark.parametrize("exc", [
    # One prompt's, not the settings': too long for the model, or a message it cannot take.
    sdk_error(400, {"message": "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens "
                               "(4000 in the messages, 1000 in the completion).", "param": "messages",
                    "code": "context_length_exceeded"}),
    sdk_error(400, {"message": "Invalid 'messages[0].content': string too long.", "param": "messages[0].content"}),
    # A parameter the run did not send, a short name read as a word, a rate limit that names a parameter.
    sdk_error(400, {"message": "Unsupported parameter: 'top_k' is not supported with this model.", "param": "top_k"}),
    sdk_error(400, {"message": "Stop: the tool choice is not supported here.", "param": None}),
    httpx_error(429, "temperature is not supported while you are rate limited"),
    # The key and the endpoint go with the call but are no parameters of it: never named, never shown.
    sdk_error(400, {"message": "Unsupported parameter: 'api_key' is not supported here.", "param": "api_key"}),
], ids=["context window", "message too long", "not sent", "a short name as a word", "429", "the key"])
def test_anything_else_is_left_to_the_rules_for_errors(exc: Exception) -> None:
    assert rejected_setting(exc, PARAMS, None) is None


@pytest.mark.parametrize(("message", "read"), [
    (("An answer.", None, None, "stop"), ("An answer.", "stop")),
    ((None, "I can't help with that.", None, "stop"), ("I can't help with that.", REFUSAL_FIELD)),
    (("Here is", "I can't go on.", None, "stop"), ("Here is\n\nI can't go on.", "stop")),  # both: the judge reads them
    ((None, None, "Thinking it over.", "stop"), ("", REASONING_ONLY)),
    ((None, None, [{"type": "thinking"}], "stop"), ("", REASONING_ONLY)),
    ((None, None, "Thinking it over.", "length"), ("", "length")),  # cut at max_tokens: an error (no_visible_text)
    (("", None, None, "stop"), ("", "stop")),  # an empty reply, as before
    (("An answer.", "", "Thinking.", "stop"), ("An answer.", "stop")),
], ids=["text", "refusal", "text and refusal", "reasoning only", "thinking blocks", "cut", "empty", "all"])
def test_a_message_is_read_with_what_it_says_outside_the_text(message: tuple[Any, ...], read: tuple[str, str]) -> None:
    assert read_message(*message) == read


O_SERIES = ("litellm.UnsupportedParamsError: O-series models don't support temperature=0.0. Only temperature=1 is "
            "supported. To drop unsupported openai params from the call, set `litellm.drop_params = True`")


def test_the_fix_names_the_settings_of_whoever_made_the_call() -> None:
    # The live base and the LLM judge have settings of their own: --orbench-temperature would change the run's model.
    base = rejected_setting(UnsupportedParamsError(O_SERIES), PARAMS, None, BASE)
    assert base is not None and ("fix: `base.litellm_kwargs: {drop_params: true}` (litellm leaves out what the model "
                                 "does not take), or --orbench-base-temperature 1 (what it accepts), or leave it out: "
                                 "`base.litellm_kwargs: {temperature: null}`") in str(base)
    judge = rejected_setting(UnsupportedParamsError(O_SERIES), PARAMS, None, JUDGE)
    assert judge is not None and ("fix: `judge_litellm_kwargs: {drop_params: true}` (litellm leaves out what the model "
                                  "does not take), or `judge_litellm_kwargs: {temperature: 1}` (what it accepts)") in \
        str(judge) and "--orbench" not in str(judge)


def test_the_llm_judges_calls_name_the_judges_settings(tmp_path: Path) -> None:
    from pytest_orbench.core.endpoint import ModelSpec
    from pytest_orbench.core.store import Store
    from pytest_orbench.judging.llm_calls import JudgeStage
    from pytest_orbench.judging.llm_judge import LLMJudge

    judge = LLMJudge(ModelSpec("openai/o3-mini", "http://127.0.0.1:9/v1", {"temperature": 0.0}))
    assert judge.llm is not None
    assert JudgeStage(judge.llm, Store(tmp_path), 0)._litellm().knobs is JUDGE


def test_a_400_saying_the_model_does_not_exist_stops_the_calls() -> None:
    error = rejected_setting(sdk_error(400, {"message": "The model `gpt-4o-mini-typo` does not exist or you do not have "
                                                        "access to it.", "code": "model_not_found"}), PARAMS, None)
    assert error is not None and error.fatal and str(error).startswith(
        "HTTP 400 from the endpoint (no such model: check the model string): The model `gpt-4o-mini-typo` does not exist")


ABOUT_FILTERS = ("Explain Azure's ResponsibleAIPolicyViolation code and what makes a gateway say content_policy_violation, "
                 "in detail, with examples of prompts that trigger it.")
ABOUT_SETTINGS = "Why is a temperature of 0 not supported by my oven, and is a 'temperature' under 50 C not permitted?"


def _litellms_checker(text: str) -> bool:
    from pytest_orbench.calls.litellm_api import _litellm_recognises_filter

    return bool(_litellm_recognises_filter()(text))


@pytest.mark.parametrize("message", [
    f"could not read the request: input {ABOUT_FILTERS!r}",
    f"input too long for this gateway: '{ABOUT_FILTERS[:60]}...'",  # cut short: not taken out, but the request's words
], ids=["quoted whole", "quoted cut short"])
def test_a_400_quoting_a_prompt_about_filters_is_no_filter(message: str) -> None:
    exc = sdk_error(400, {"message": message, "code": None})
    assert filtered_request(exc, _litellms_checker, [ABOUT_FILTERS]) is False
    # A filter's 400 on the same prompt is still read by its code; by words alone it is not told from a quote of the
    # prompt's (an error, which the gate's worst case counts, never a refusal the compared side may hide a change by).
    code = sdk_error(400, {"message": AZURE_FILTER_WORDS + " " + message, "code": "content_filter"})
    assert filtered_request(code, _litellms_checker, [ABOUT_FILTERS]) is True
    words = sdk_error(400, {"message": AZURE_FILTER_WORDS + " " + message, "code": None})
    assert filtered_request(words, _litellms_checker, [ABOUT_FILTERS]) is False
    assert filtered_request(words, _litellms_checker, ["How do I bake bread?"]) is True


@pytest.mark.parametrize("message", [
    f"could not read the request: input {ABOUT_SETTINGS!r}",
    f"input too long for this gateway: '{ABOUT_SETTINGS[:70]}...'",
], ids=["quoted whole", "quoted cut short"])
def test_a_400_quoting_a_prompt_about_a_setting_is_no_rejected_setting(message: str) -> None:
    assert rejected_setting(sdk_error(400, {"message": message}), PARAMS, None, echoes=[ABOUT_SETTINGS]) is None
    # The model's own rejection is still read, whatever the prompt says.
    own = sdk_error(400, {"message": "Unsupported value: 'temperature' does not support 0 with this model. " + message,
                          "param": "temperature"})
    error = rejected_setting(own, PARAMS, None, echoes=[ABOUT_SETTINGS])
    assert error is not None and error.fatal and "the model rejects temperature=0.0" in str(error)


def test_a_key_is_hidden_before_the_providers_words_are_cut() -> None:
    from pytest_orbench.calls.errors import describe_failure
    from pytest_orbench.calls.scrubbing import hide

    key = "sk-proj-Q2hhbmdlTWVQbGVhc2UtVGhpc0lzQUtleQ"
    for pad in range(200, 300, 7):
        exc = sdk_error(400, {"message": "Unsupported value: 'temperature' " + "x" * pad + " Bearer " + key,
                              "param": "temperature"})
        for error in (describe_failure(exc, None, 10, lambda text: hide(text, [key])),
                      rejected_setting(exc, PARAMS, None, hide=lambda text: hide(text, [key]))):
            shown = hide(str(error), [key])  # what the caller's scrub leaves: no part of the key either
            assert not [key[i:i + 6] for i in range(len(key) - 5) if key[i:i + 6] in shown], (pad, shown)


QUOTED = 'Write a "short" story about\nmy grandmother\'s bakery in Zürich.'


@pytest.mark.parametrize("said", [
    f"HTTP 400 from host: could not read input {QUOTED}",
    f"HTTP 400 from host: could not read input {QUOTED!r}",
    f"HTTP 400 from host: could not read input {json.dumps(QUOTED)}",
    f"HTTP 400 from host: could not read input {json.dumps(QUOTED, ensure_ascii=False)}",
    f"HTTP 400 from host: could not read input {QUOTED[:30]}... (cut by the gateway)",
    f"HTTP 400 from host: could not read input {QUOTED[:20]}",  # the provider's words cut in the quote
], ids=["as written", "repr", "JSON", "JSON, UTF-8", "cut short", "cut at the end"])
def test_the_requests_own_words_are_taken_out_of_an_error_however_quoted(said: str) -> None:
    assert "bakery" not in unquoted(said, [QUOTED]) and "grandmother" not in unquoted(said, [QUOTED])
    assert unquoted(said, [QUOTED]).startswith("HTTP 400 from host: could not read input")
    assert unquoted("HTTP 400 from host: a short quote 'Hi there'", ["Hi there"]) == "HTTP 400 from host: a short quote ' '"
