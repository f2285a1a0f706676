"""What a provider's error says about the request rather than the endpoint: its content filter refused the prompt
(filtered_request), or the model rejects the request as configured, a parameter it does not take (rejected_setting)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_orbench.calls.errors import EndpointError, Hide, _chain, _message, _sent_status, _unchanged, _where

# An error body's `code` when a content filter refused the request (Azure OpenAI, OpenAI-compatible gateways), and the
# `innererror.code` Azure adds.
FILTER_CODES = ("content_filter", "content_policy_violation")
FILTER_INNER_CODES = ("ResponsibleAIPolicyViolation",)


# The words by which litellm (1.106) raises ContentPolicyViolationError for OpenAI, Anthropic, Vertex and Azure errors.
_LITELLMS_WORDS = re.compile(r"content_policy_violation|responsibleaipolicyviolation|violating our usage policy|"
                             r"as a result of (?:our|the) safety system|content filtering policy|the response was blocked|"
                             r"content management policy|content_filter_policy|the model produced invalid content",
                             re.IGNORECASE)


def _bodies(chain: list[BaseException]) -> list[dict[str, Any]]:
    """The error objects of a provider's JSON error body, as the exceptions of the HTTP clients carry them (the
    OpenAI SDK keeps the body's "error" object; some keep the whole body)."""
    found = []
    for exc in chain:
        if type(exc).__module__.split(".")[0] == "litellm":
            continue  # litellm's own exceptions carry a body it made up (its ContentPolicyViolationError's code)
        body = getattr(exc, "body", None)
        if isinstance(body, dict):
            inner = body.get("error")
            found.append(inner if isinstance(inner, dict) else body)
    return found


# Characters a quote must share with the request's text to be taken for one (a gateway's quote cut short, or the
# provider's words cut at their length in the middle of a quote).
_QUOTE_MIN = 16


def unquoted(text: str, echoes: Sequence[str]) -> str:
    """`text` without the request's own texts (`echoes`: its messages), which many providers and gateways quote back
    in a 400 (a validation error's `input`, "could not tokenize '...'"): as written, as JSON and as a Python repr
    escape them, whitespace folded, whole or from their start for at least _QUOTE_MIN characters."""
    text = " ".join(text.split())
    forms = {" ".join(form.split()) for echo in echoes if echo.strip() for form in (
        echo, repr(echo)[1:-1], json.dumps(echo)[1:-1], json.dumps(echo, ensure_ascii=False)[1:-1])}
    ordered = sorted(forms, key=len, reverse=True)
    for form in ordered:  # whole quotes first: a quote's start is that of every form of it
        text = text.replace(form, " ")
    quotes = [form for form in ordered if len(form) >= _QUOTE_MIN]
    for head in sorted({form[:_QUOTE_MIN] for form in quotes}):
        kept, end = [], 0
        at = text.find(head)
        while at >= 0:  # the longest run of any form that starts here
            stop = max(_run(text, at, form) for form in quotes if form.startswith(head))
            kept.append(text[end:at])
            end = stop
            at = text.find(head, stop)
        text = " ".join([*kept, text[end:]]) if kept else text
    return text


def _run(text: str, at: int, form: str) -> int:
    """Where `form`, quoted in `text` from `at`, stops matching it."""
    stop = at
    while stop < len(text) and stop - at < len(form) and text[stop] == form[stop - at]:
        stop += 1
    return stop


def _said(chain: list[BaseException], echoes: Sequence[str]) -> str:
    """The words of an error chain without the request's own texts (unquoted): what the request said is never read
    as what the provider said."""
    return unquoted(" ".join(str(e) for e in chain), echoes)


def _echoed(words: str, echoes: Sequence[str]) -> bool:
    """Whether the request's own texts hold these words: an echo cut short (a gateway quotes a prompt's first
    characters) is not taken out by _said, so words the request holds are not the provider's evidence."""
    return any(words.lower() in " ".join(echo.split()).lower() for echo in echoes)


def filtered_request(exc: BaseException, recognised: Callable[[str], bool] | None = None,
                     echoes: Sequence[str] = ()) -> bool:
    """Whether the provider's content filter refused the request: litellm's ContentPolicyViolationError, or an
    HTTP 400 whose body says so (`code: content_filter`, `innererror.code: ResponsibleAIPolicyViolation`, or
    words litellm's own checker `recognised` knows, but not in the request's own texts `echoes`). Through an
    `openai/` model string an Azure filter arrives as a plain BadRequestError: a refusal of the provider, not a
    failure of the endpoint."""
    chain = _chain(exc)
    text = _said(chain, echoes)
    if any(type(e).__name__ == "ContentPolicyViolationError" for e in chain):
        # litellm reads its class from the error's whole text, quotes of the request included: its reading stands
        # unless the request itself holds a filter's words, and then only on the provider's own words or codes.
        if not any(_LITELLMS_WORDS.search(echo) or (recognised is not None and recognised(echo)) for echo in echoes):
            return True
        if any(not _echoed(words.group(0), echoes) for words in _LITELLMS_WORDS.finditer(text)):
            return True
    elif _sent_status(chain) != 400:
        return False
    for error in _bodies(chain):
        inner = error.get("innererror")
        if error.get("code") in FILTER_CODES or (isinstance(inner, dict) and inner.get("code") in FILTER_INNER_CODES):
            return True
    # A non-filter 400 that quotes a prompt about content filters must stay an error: read as a refusal on the
    # compared side, it would hide the change's own refusal of that prompt.
    code = re.search(r"""["']code["']:\s*["'](content_filter|content_policy_violation)["']""", text)
    if code and not _echoed(code.group(1), echoes):
        return True
    return bool(recognised is not None and recognised(text) and not any(recognised(echo) for echo in echoes))


# Words of a 400 that rejects a parameter as such, whatever the prompt (OpenAI's reasoning models, Anthropic, vLLM).
_REJECTS = re.compile(r"unsupported (?:value|parameter)|not supported|does not support|unknown parameter|"
                      r"unrecognized request argument|extra inputs are not permitted|may only be set to|"
                      r"is not allowed|not permitted|cannot both be specified", re.IGNORECASE)
# What is never about the settings: a prompt too long for the model is that prompt's.
_PER_PROMPT = ("ContextWindowExceededError",)


# What the call sends besides the request's parameters: never named, and a key's value never shown.
_NOT_PARAMETERS = frozenset(("api_key", "api_base", "base_url", "timeout", "extra_headers", "headers"))


def _shown(name: str, value: Any) -> str:
    """`name=value` for a number or a switch; the name alone for anything else (a string may be a secret)."""
    return f"{name}={value!r}" if isinstance(value, (int, float, bool)) else name


def _named(chain: list[BaseException], text: str, params: Mapping[str, Any]) -> str | None:
    """The parameter the error names, among those the request sent."""
    for error in _bodies(chain):
        if isinstance(error.get("param"), str) and error["param"] in params:
            return str(error["param"])
    listed = re.search(r"""(?:argument|parameter)s?(?: supplied)?:\s*[`'"]?([A-Za-z_]\w*)""", text)  # "supplied: seed"
    if listed and listed.group(1) in params:
        return listed.group(1)
    for name in sorted(params, key=len, reverse=True):  # max_completion_tokens before max_tokens
        quoted = rf"""[`'"]{re.escape(name)}[`'"]|(?<![A-Za-z_]){re.escape(name)}\s*="""
        word = rf"(?<![A-Za-z_]){re.escape(name)}(?![A-Za-z_])"  # only a long name: "n" or "stop" are words too
        if re.search(quoted, text) or (len(name) > 4 and re.search(word, text)):
            return name
    return None


@dataclass(frozen=True)
class Knobs:
    """Where a caller's settings are written, for the fix its rejected parameter's message names: the run's own, the
    live base's, the LLM judge's (whose temperature is fixed at 0), or a model of `orbench generate`."""

    temperature: str | None  # the setting with the value {v}
    max_tokens: str | None
    kwargs: str


RUN = Knobs("--orbench-temperature {v}", "--orbench-max-tokens", "litellm_kwargs")
BASE = Knobs("--orbench-base-temperature {v}", "--orbench-base-max-tokens", "base.litellm_kwargs")
JUDGE = Knobs(None, "--orbench-judge-max-tokens", "judge_litellm_kwargs")
GENERATE = Knobs("`temperature: {v}` in the model's entry", "`max_tokens:` in the model's entry", "litellm_kwargs")


def _fix(name: str, text: str, litellm_knows: bool, knobs: Knobs) -> str:
    """How to change the settings so that the model takes the request, shortest first: the gate's summary quotes
    the first 200 characters of the most common error."""
    fixes = []
    if name == "temperature":
        # "Only the default (1) value is supported" (OpenAI), "Only temperature=1" (litellm), "may only be set to 1"
        accepted = re.search(r"only (?:be set to |the default \()?(?:temperature ?= ?)?(\d+(?:\.\d+)?)", text,
                             re.IGNORECASE)
        value = accepted.group(1) if accepted else "<one it accepts>"
        fixes.append(f"{knobs.temperature.format(v=value)} (what it accepts)" if knobs.temperature else
                     f"`{knobs.kwargs}: {{temperature: {value}}}` (what it accepts)")
    elif name == "max_tokens" and "max_completion_tokens" in text:
        fixes.append(f"the limit under the name it takes: `{knobs.kwargs}: {{max_tokens: null, max_completion_tokens: "
                     "1000}`")
    elif name == "max_tokens" and knobs.max_tokens:
        fixes.append(f"a limit it accepts ({knobs.max_tokens})")
    fixes.append(f"leave it out: `{knobs.kwargs}: {{{name}: null}}`")
    if litellm_knows:
        fixes.insert(0, f"`{knobs.kwargs}: {{drop_params: true}}` (litellm leaves out what the model does not take)")
    return ", or ".join(fixes)


def rejected_setting(exc: BaseException, params: Mapping[str, Any], api_base: str | None, knobs: Knobs = RUN,
                     echoes: Sequence[str] = (), hide: Hide = _unchanged) -> EndpointError | None:
    """The model rejects the request as configured: litellm's UnsupportedParamsError (raised before anything is
    sent), an HTTP 400 saying a parameter the request sent is not supported (OpenAI's reasoning models on
    `temperature`), or one saying the model does not exist (`code: model_not_found`). Every prompt would fail alike:
    a fatal error, naming the parameter and the fix. None for anything else (a 400 of one prompt, a context window
    exceeded, or a 400 whose rejecting words are those of the request's own texts `echoes`, quoted back). `hide`
    takes the run's secrets out of the provider's words before they are cut to a length."""
    chain = _chain(exc)
    names = {type(e).__name__ for e in chain}
    sent = {k: v for k, v in params.items() if v is not None and k not in _NOT_PARAMETERS}
    text = _said(chain, echoes)
    if "UnsupportedParamsError" in names:
        name = _named(chain, text, sent)
        if name is None:
            return EndpointError(f"litellm will not send the request as configured to this model; fix: `{knobs.kwargs}: "
                                 "{drop_params: true}` (litellm leaves out what the model does not take). litellm "
                                 f"said: {_message(exc, hide)[:240]}", retryable=False, fatal=True, sent=False)
        return EndpointError(f"litellm will not send {_shown(name, sent[name])} to this model; fix: "
                             f"{_fix(name, text, True, knobs)}. litellm said: {_message(exc, hide)[:240]}", retryable=False,
                             fatal=True, sent=False)
    if names & set(_PER_PROMPT) or _sent_status(chain) != 400:
        return None
    if any(error.get("code") == "model_not_found" for error in _bodies(chain)):  # a gateway's 400 for a 404
        return EndpointError(f"HTTP 400 from {_where(chain, api_base)} (no such model: check the model string): "
                             f"{_message(exc, hide)[:240]}", retryable=False, fatal=True, status=400)
    if not any(not _echoed(words.group(0), echoes) for words in _REJECTS.finditer(text)):
        return None
    name = _named(chain, text, sent)
    if name is None:
        return None
    return EndpointError(f"the model rejects {_shown(name, sent[name])} (HTTP 400); fix: {_fix(name, text, False, knobs)}"
                         f". {_where(chain, api_base)} said: {_message(exc, hide)[:240]}", retryable=False, fatal=True,
                         status=400)
