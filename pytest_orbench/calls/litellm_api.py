"""The one place that imports litellm (lazily, with its price table kept local): the import, warm-up,
provider and key checks, and LiteLLMCaller, which calls a model through litellm.acompletion."""

from __future__ import annotations

import asyncio
import importlib
import os
import re
import warnings
from typing import Any

from pytest_orbench.calls.errors import EndpointError, describe_failure
from pytest_orbench.calls.rejections import RUN, Knobs, filtered_request, rejected_setting, unquoted
from pytest_orbench.calls.reply import Reply, filtered_reply, no_visible_text, read_message
from pytest_orbench.calls.scrubbing import hide, secrets_of
from pytest_orbench.core.dependencies import refuse_compromised, shield_dependency_warnings
from pytest_orbench.core.endpoint import PROVIDER_KEYS, ModelSpec, provider_of

_litellm: Any = None


def _import_litellm() -> Any:
    """litellm, imported once (refused when it is a known-compromised release), with the warnings of it and
    its dependencies shielded from the process's filters (dependencies.shield_dependency_warnings); every
    caller asks again before it calls, so the shield is back in front after pytest has reset the filters."""
    global _litellm
    shield_dependency_warnings()
    if _litellm is None:
        refuse_compromised("litellm")
        # litellm fetches a price table over the network at import unless told not to.
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        # What the shield cannot attribute to litellm's modules (a warning raised on behalf of the code
        # that imports them), and the lazy schema builds of first use: once here, with warnings ignored.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import litellm

            litellm.ModelResponse(
                choices=[{"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": "stop"}],
                usage={"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            )
        litellm.suppress_debug_info = True  # no "Give Feedback" banners in the test output
        litellm.telemetry = False
        _litellm = litellm
    return _litellm


def quiet_litellm() -> None:
    """What a fetch process does not need from litellm: message logging and debug banners."""
    ll = _import_litellm()
    ll.turn_off_message_logging = True  # prompts and replies are not copied into logging payloads
    ll.suppress_debug_info = True


# What litellm imports on its first call to an OpenAI-compatible endpoint (~0.35 s here), imported by
# the fetch process while pytest collects instead. Best effort: a name missing in another litellm
# version is skipped.
_FIRST_CALL_MODULES = ("litellm.llms.openai.openai", "litellm.llms.openai_like.chat.handler", "litellm.proxy._types",
                       "litellm._service_logger", "litellm.llms.litellm_proxy.chat.transformation",
                       "litellm.llms.openai_like.dynamic_config", "litellm.proxy.openai_files_endpoints.common_utils")


def warm_up_litellm() -> None:
    """Import what the first call would (no call, no thread, no event loop: the process may fork next)."""

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            import openai

            openai.AsyncOpenAI(api_key="warm-up", base_url="http://127.0.0.1:9/v1").chat.completions  # noqa: B018
        except Exception:  # noqa: BLE001 - a warm-up only; the real call reports real problems
            pass
        for name in _FIRST_CALL_MODULES:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001
                pass


def provider_problem(model: str) -> str | None:
    """Why litellm could not route `model` (no provider in the string, an unknown one), or None."""
    try:
        _import_litellm().get_llm_provider(model)
    except Exception as exc:  # litellm raises BadRequestError with its own explanation
        first = " ".join(str(exc).split())
        first = re.sub(r"^(?:litellm\.\w+: )+", "", first)[:200]
        return (f"litellm cannot tell which provider serves it ({first}); write it as provider/model, e.g. "
                f"openai/{model.split('/')[-1]}")
    return None


def missing_keys(model: str) -> list[str]:
    """Environment variables litellm needs for `model` that are not set."""
    result = _import_litellm().validate_environment(model)
    return [str(k) for k in result.get("missing_keys", [])]


def api_key_for(model: str, api_base: str | None, api_key_env: str | None, *, what: str = "model",
                key_flag: str = "--orbench-api-key-env / api_key_env", required: bool = True) -> str | None:
    """The key to send, or None to let litellm read the provider's variable; ValueError if missing,
    or if the model string names no provider litellm knows (every call would fail). litellm is imported
    only for a provider outside spec.PROVIDER_KEYS. Not `required` (a run that calls nothing, such as an
    estimate): the model string is still checked, and a missing key is None."""
    provider = provider_of(model)
    if provider not in PROVIDER_KEYS:
        problem = provider_problem(model)
        if problem:
            raise ValueError(f"{what} {model!r}: {problem}")
    if not required:
        return (os.environ.get(api_key_env) or None) if api_key_env else None
    if api_key_env:
        key = os.environ.get(api_key_env)
        if not key:
            raise ValueError(f"{key_flag} names ${api_key_env}, which is not set: export {api_key_env}=... before running")
        return key
    if provider in PROVIDER_KEYS:
        needed = PROVIDER_KEYS[provider]
        missing = [needed] if needed and not os.environ.get(needed) else []
    else:
        missing = missing_keys(model)
    if missing:
        local = " (any non-empty value works for a local server that ignores keys)" if api_base else ""
        raise ValueError(
            f"no API key for {what} {model!r}: set {' and '.join(missing)}{local}, "
            f"or name another variable with {key_flag}"
        )
    return None


class LiteLLMCaller:
    """Calls a model through litellm.acompletion; maps its exceptions onto EndpointError."""

    def __init__(self, spec: ModelSpec, system_prompt: str | None = None, knobs: Knobs = RUN) -> None:
        self.spec = spec
        self.system_prompt = system_prompt
        self.knobs = knobs  # where its settings are written: a rejected parameter's message names the fix there
        _import_litellm()  # now, where it fails as this caller (a compromised release, no litellm)
        self._secrets = secrets_of(spec)

    def _scrub(self, text: str) -> str:
        return hide(text, self._secrets)

    async def aclose(self) -> None:
        """Close litellm's cached HTTP sessions inside the loop that opened them.

        litellm caches clients bound to the running event loop; left open they raise
        ResourceWarning (an error under filterwarnings=error) and break the next session run in
        the same process (pytester, notebooks).
        """
        ll = _import_litellm()
        try:
            # litellm runs a background logging task on the calling loop; stop it before the
            # loop closes, or it is destroyed pending (a warning, an error under -W error).
            from litellm.litellm_core_utils.logging_worker import GLOBAL_LOGGING_WORKER

            await asyncio.wait_for(GLOBAL_LOGGING_WORKER.flush(), timeout=5)
        except (TimeoutError, ImportError):
            pass
        finally:
            if "GLOBAL_LOGGING_WORKER" in locals():
                await GLOBAL_LOGGING_WORKER.stop()
        await ll.close_litellm_async_clients()
        ll.in_memory_llm_clients_cache.flush_cache()

    async def __call__(self, prompt: str) -> Reply:
        messages = [{"role": "user", "content": prompt}]
        if self.system_prompt is not None:
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        return await self.complete(messages)

    async def complete(self, messages: list[dict[str, str]]) -> Reply:
        spec = self.spec
        kwargs: dict[str, Any] = spec.request_kwargs()
        if spec.api_base:
            kwargs["api_base"] = spec.api_base
        if spec.api_key:
            kwargs["api_key"] = spec.api_key
        ll = _import_litellm()  # the same module, with the warning shield back in front
        try:
            # litellm's `timeout` bounds each network read, not the request: a server that sends a byte now
            # and then would hold the call (and the run) forever. The deadline is on the whole request.
            response = await asyncio.wait_for(
                ll.acompletion(model=spec.model, messages=messages, timeout=spec.timeout, num_retries=0, **kwargs),
                spec.timeout)
        except Exception as exc:  # the deadline above, a rejected key, 429, 5xx, connection errors, malformed replies
            echoes = [m["content"] for m in messages]  # what a 400 may quote back: never the provider's words
            if filtered_request(exc, _litellm_recognises_filter(), echoes):
                # The provider's content filter refused the prompt: its answer, as a filtered reply (a refusal).
                return filtered_reply()
            failure = (rejected_setting(exc, kwargs, spec.api_base, self.knobs, echoes, self._scrub)
                       or describe_failure(exc, spec.api_base, spec.timeout, self._scrub))
            message = self._scrub(str(failure))
            raise EndpointError(message, retryable=failure.retryable, retry_after=failure.retry_after,
                                unreachable=failure.unreachable, fatal=failure.fatal, timed_out=failure.timed_out,
                                sent=failure.sent, status=failure.status, gist=unquoted(message, echoes)) from None
        try:
            choice = response.choices[0]
            message = choice.message
            extra = getattr(message, "provider_specific_fields", None) or {}
            refusal = getattr(message, "refusal", None) or (extra.get("refusal") if isinstance(extra, dict) else None)
            reasoning = getattr(message, "reasoning_content", None) or getattr(message, "thinking_blocks", None)
            text, finish = read_message(message.content, refusal, reasoning, choice.finish_reason)
        except (AttributeError, IndexError, TypeError) as exc:
            raise EndpointError(f"malformed reply (no choices): {exc}", retryable=True) from None
        cut = no_visible_text(text, finish, spec.params.get("max_tokens"))
        if cut is not None:
            raise EndpointError(cut, retryable=False, unusable=True)
        usage = getattr(response, "usage", None)
        hidden = getattr(response, "_hidden_params", None) or {}
        cost = hidden.get("response_cost") if isinstance(hidden, dict) else None
        return Reply(
            self._scrub(text or ""),  # an endpoint that echoes the key in its reply: never stored or reported
            finish,
            getattr(response, "model", None),
            getattr(usage, "prompt_tokens", None),
            getattr(usage, "completion_tokens", None),
            float(cost) if isinstance(cost, (int, float)) else None,
            _text_or_none(getattr(response, "system_fingerprint", None)),
        )


def _litellm_recognises_filter() -> Any:
    """litellm's own check of an error's words for a content filter's refusal (None in a litellm without it)."""
    try:
        from litellm.litellm_core_utils.exception_mapping_utils import ExceptionCheckers
    except ImportError:
        return None
    return getattr(ExceptionCheckers, "is_azure_content_policy_violation_error", None)


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
