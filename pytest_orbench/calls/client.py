"""Endpoint calls: the only module that imports litellm (lazily); callable targets; retries with backoff."""

from __future__ import annotations

import asyncio
import contextvars
import importlib
import inspect
import json
import os
import random
import re
import socket
import ssl
import threading
import time
import warnings
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from pytest_orbench.core.dependencies import refuse_compromised, shield_dependency_warnings
from pytest_orbench.core.endpoint import (
    PROVIDER_KEYS,
    TARGET_PARAMETERS,
    LoadError,
    ModelSpec,
    env_refs,
    load_callable,
    provider_of,
)

# Statuses worth another attempt: rate limits, overload, server faults, gateway timeouts.
RETRY_STATUSES = {408, 409, 425, 429, 500, 502, 503, 504, 520, 522, 524, 529}
MAX_BACKOFF = 60.0
T = TypeVar("T")
R = TypeVar("R")


class EndpointError(Exception):
    """A failed attempt. `fatal` errors (bad key, unknown model) stop the whole run's calls;
    `unreachable` ones (connection refused, DNS, TLS) stop them when nothing has got through yet;
    `unusable` ones (a reply with no text at max_tokens: the run's settings, not the prompt) stop them
    when the first few replies all are, and none was usable."""

    def __init__(self, message: str, *, retryable: bool, retry_after: float | None = None, fatal: bool = False,
                 unreachable: bool = False, unusable: bool = False, timed_out: bool = False):
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after
        self.fatal = fatal
        self.unreachable = unreachable
        self.unusable = unusable
        self.timed_out = timed_out  # no answer within the timeout (a hung endpoint, while nothing answers)

    def worth_retrying(self, answered: int) -> bool:
        """Whether another attempt may help, `answered` calls to this endpoint having come back: after one,
        a refused connection is a blip; before any, the endpoint cannot be reached (refused, DNS, TLS)."""
        return not (self.unreachable and answered == 0)

    def ends_calls(self, answered: int) -> bool:
        """Whether no more calls are made to this endpoint: a rejected key, or an endpoint that cannot be
        reached or never answers while none of its calls has been answered."""
        return self.fatal or ((self.unreachable or self.timed_out) and answered == 0)


def _chain(exc: BaseException) -> list[BaseException]:
    found: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in found and len(found) < 12:
        found.append(current)
        current = current.__cause__ or current.__context__
    return found


def _where(chain: list[BaseException], api_base: str | None) -> str:
    for exc in chain:
        host, port = getattr(exc, "host", None), getattr(exc, "port", None)
        if host:
            return f"{host}:{port}" if port else str(host)
    if api_base:
        from urllib.parse import urlsplit

        parts = urlsplit(api_base)
        if parts.hostname:
            port = parts.port or (443 if parts.scheme == "https" else 80)
            return f"{parts.hostname}:{port}"
    return "the endpoint"


# litellm's words for a reply it could not read as a chat completion, and what they mean.
_MALFORMED = {
    "Empty or invalid response from LLM endpoint": "empty or not a chat completion",
    "Invalid response object": "not a chat completion",
    "provider returned 'choices'": "no list of choices",
}


# What the HTTP clients say when they refuse to build a request (aiohttp, httpx): a local error, never retried.
_LOCAL = ("Cannot combine AUTHORIZATION header", "Invalid header value", "Illegal header value",
          "Request URL is missing an 'http://' or 'https://' protocol", "Invalid non-printable ASCII character in URL")


def describe_failure(exc: BaseException, api_base: str | None, timeout: float) -> EndpointError:
    """What actually happened, from the whole exception chain (litellm reports a refused connection as
    "HTTP 500 InternalServerError"): connection refused, DNS, TLS, TLS answering an http:// request,
    timed out, connection closed, malformed reply (not HTTP, not JSON), or the HTTP status the server
    really sent."""
    chain = _chain(exc)
    names = {type(e).__name__ for e in chain}
    where = _where(chain, api_base)
    root = chain[-1]
    if isinstance(exc, TimeoutError):
        # Our own deadline on the whole request (asyncio.wait_for) ran out: whatever the call was doing when
        # it was cancelled (a read that failed, a connection being set up) is not what ended it.
        return EndpointError(f"timed out after {timeout:g} s", retryable=True, timed_out=True)
    if any(isinstance(e, ConnectionRefusedError) for e in chain):
        return EndpointError(f"connection refused by {where}", retryable=True, unreachable=True)
    if any(isinstance(e, socket.gaierror) for e in chain) or "ClientConnectorDNSError" in names:
        return EndpointError(f"DNS lookup failed for {where.rsplit(':', 1)[0]} ({root})", retryable=True, unreachable=True)
    if any(isinstance(e, ssl.SSLError) for e in chain) or "ClientConnectorCertificateError" in names:
        return EndpointError(f"TLS error with {where}: {root}", retryable=True, unreachable=True)
    if _tls_record(chain):
        # An http:// api_base on a TLS port: the server's first bytes (an alert, a handshake) are no HTTP
        # status line. The same for every call, as a TLS error is.
        fix = "use https:// in api_base" if api_base else "use https://"
        return EndpointError(f"the server at {where} answered in TLS, not HTTP (its first bytes are a TLS record): "
                             f"{fix}", retryable=True, unreachable=True)
    if "BadStatusLine" in names or any(re.search(r"illegal (status|request) line", str(e)) for e in chain):
        # Not a server that speaks HTTP (aiohttp quotes its first bytes; h11, litellm's httpx transport, says
        # only "illegal request line"): every call meets the same, as a refused connection does.
        return EndpointError(f"malformed reply (not HTTP) from {where}{_https_hint(api_base)}", retryable=True,
                             unreachable=True)
    if any(isinstance(e, json.JSONDecodeError) for e in chain):
        return EndpointError(f"malformed reply (not JSON) from {where}", retryable=True)
    if "Timeout" in names or "APITimeoutError" in names or any(isinstance(e, (TimeoutError, asyncio.TimeoutError))
                                                              for e in chain):
        return EndpointError(f"timed out after {timeout:g} s", retryable=True, timed_out=True)
    if names & {"ServerDisconnectedError", "ReadError", "RemoteProtocolError", "ClientOSError",
                "ClientPayloadError"} or any(isinstance(e, (ConnectionResetError, BrokenPipeError)) for e in chain):
        return EndpointError(f"connection to {where} closed before a reply{_https_hint(api_base)}", retryable=True)
    # A 200 whose body is not a chat completion: litellm raises these as "500" errors of its own.
    text = " ".join(str(exc).split())
    malformed = next((m for m in _MALFORMED if m in text), None)
    if malformed is not None:
        return EndpointError(f"malformed reply from {where} ({_MALFORMED[malformed]}): {_message(exc)[:160]}",
                             retryable=True)
    if "TooManyRedirects" in names:
        return EndpointError(f"too many redirects from {where} (a redirect loop: check api_base)", retryable=True,
                             unreachable=True)
    local = next((e for e in chain if isinstance(e, (ValueError, TypeError)) and any(words in str(e) for words in _LOCAL)),
                 None)
    if local is not None and _sent_status(chain) is None:
        # The HTTP client refused to build the request (a header it cannot send, a URL it cannot use): nothing
        # reached the endpoint, and every retry would fail the same way.
        return EndpointError(f"the request to {where} could not be sent (a local error, not the endpoint's): "
                             f"{' '.join(str(local).split())[:200]}", retryable=False, fatal=True)
    status = _sent_status(chain)
    if status is not None:
        if status in REJECTED:
            return EndpointError(f"HTTP {status} from {where} ({REJECTED[status]}): {_message(exc)}", retryable=False,
                                 fatal=True)
        retryable = status in RETRY_STATUSES or status >= 500
        return EndpointError(f"HTTP {status} from {where}: {_message(exc)}", retryable=retryable,
                             retry_after=_retry_after(exc))
    if names & {"APIConnectionError", "ConnectError", "ClientConnectorError"}:
        return EndpointError(f"cannot connect to {where}: {root}", retryable=True, unreachable=True)
    # litellm's own verdicts on a request it never sent (a key it found missing, a parameter it refuses)
    if type(exc).__name__ in ("AuthenticationError", "PermissionDeniedError", "NotFoundError"):
        return EndpointError(f"{type(exc).__name__}: {_message(exc)}", retryable=False, fatal=True)
    if type(exc).__name__ in ("BadRequestError", "UnsupportedParamsError"):
        return EndpointError(f"{type(exc).__name__}: {_message(exc)}", retryable=False)
    return EndpointError(f"{type(exc).__name__}: {_message(exc)}", retryable=True, retry_after=_retry_after(exc))


# The first bytes of a TLS record: content type (change_cipher_spec, alert, handshake, application data),
# then protocol version 3.0-3.4 (RFC 8446 section 5.1); as the HTTP client quoted them (a bytes repr) or raw.
_TLS_RECORD = re.compile(r"\\x1[4-7]\\x03\\x0[0-4]|[\x14-\x17]\x03[\x00-\x04]")


def _https_hint(api_base: str | None) -> str:
    """For an http:// api_base whose server closed or answered no HTTP: a TLS server that gets plain HTTP
    often resets or closes without a byte, which nothing tells apart from a crashed server; hence "may"."""
    return " (or the endpoint may expect https://)" if (api_base or "").lower().startswith("http://") else ""


def _tls_record(chain: list[BaseException]) -> bool:
    """Whether the HTTP client failed to parse a status line that starts like a TLS record."""
    for exc in chain:
        text = str(exc)
        if ("status line" in text.lower() or "BadStatusLine" in type(exc).__name__) and _TLS_RECORD.search(text):
            return True
    return False


# Statuses that say every call will fail the same way: the run's calls stop at the first.
REJECTED = {401: "the key was rejected", 403: "the key has no access", 404: "no such model or URL"}


def _sent_status(chain: list[BaseException]) -> int | None:
    """The HTTP status a server really sent: httpx's HTTPStatusError or the OpenAI SDK's APIStatusError.
    litellm's own exceptions subclass the SDK's and carry a status too, 500 for errors that never reached
    a server (a refused connection, a redirect loop, a TLS handshake that timed out): those are not asked."""
    for exc in chain:
        if type(exc).__module__.split(".")[0] == "litellm":
            continue
        if type(exc).__name__ == "HTTPStatusError" or any(c.__name__ == "APIStatusError" for c in type(exc).__mro__):
            status = getattr(exc, "status_code", None) or getattr(getattr(exc, "response", None), "status_code", None)
            if isinstance(status, int):
                return status
    return None


def _message(exc: BaseException) -> str:
    """The provider's words, without litellm's class-name prefixes."""
    text = " ".join(str(exc).split())
    text = re.sub(r"^(?:litellm\.\w+: )?(?:\w+: )?(?:\w+Exception - )?", "", text)
    return text[:300]


@dataclass(frozen=True)
class Reply:
    text: str
    finish_reason: str | None
    model: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost: float | None = None  # USD, when litellm knows the model's price
    system_fingerprint: str | None = None  # the provider's backend configuration, when it reports one

    def record(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "finish_reason": self.finish_reason,
            "model": self.model,  # the model the provider says served the reply (may differ from the alias)
            "system_fingerprint": self.system_fingerprint,
            "usage": {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens},
            "cost": self.cost,
        }


class Caller(Protocol):
    async def __call__(self, prompt: str) -> Reply: ...

    async def aclose(self) -> None: ...


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


def _retry_after(exc: BaseException) -> float | None:
    headers: Any = getattr(exc, "litellm_response_headers", None) or getattr(exc, "headers", None)
    response = getattr(exc, "response", None)
    if not headers and response is not None:
        headers = getattr(response, "headers", None)
    if not headers:
        return None
    value = headers.get("retry-after") or headers.get("Retry-After")
    try:
        return min(float(value), MAX_BACKOFF) if value is not None else None
    except (TypeError, ValueError):
        return None


# Environment variables whose values are secrets by their name: every provider's key variable, which
# litellm reads by itself (OPENAI_API_KEY, ... in spec.PROVIDER_KEYS), GITHUB_TOKEN, DB_PASSWORD, ...
_SECRET_NAME = re.compile(r"(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)(?:_|$)", re.IGNORECASE)


def scrub(spec: ModelSpec | None, text: str, env: Mapping[str, str] | None = None) -> str:
    """Error text without the endpoint's key, any value read from the environment for its calls (headers)
    or any environment value named like a secret: a gateway that echoes the key it was given must not
    put it in a report. With no spec (a `target:` function, a custom judge: the user's code, which may
    put its own credentials in an exception; the Action's comment), only the values named like secrets
    in `env` (default: this process's environment)."""
    return hide(text, secrets_of(spec, env))


# Every value this process knows to be a secret of the run (its keys, whatever variable they were read from, and
# the `{env: VAR}` values it sends): scrubbed from every text, by value, whoever raised it (a custom judge, a
# target). Filled by settings.build_settings (remember_secrets).
_KNOWN_SECRETS: set[str] = set()


def remember_secrets(*values: str | None) -> None:
    _KNOWN_SECRETS.update(v for v in values if v and len(v) >= 4)


def secrets_of(spec: ModelSpec | None, env: Mapping[str, str] | None = None) -> list[str]:
    """What `scrub` hides, longest first."""
    env = os.environ if env is None else env
    secrets: list[str | None] = list(_KNOWN_SECRETS)
    if spec is not None:
        key = spec.api_key or (env.get(spec.api_key_env) if spec.api_key_env else None)
        secrets += [s for s in [key, *(env.get(name) for name in env_refs(spec.call_kwargs))] if s and len(s) >= 4]
    secrets += [v for name, v in env.items() if len(v) >= 8 and _SECRET_NAME.search(name)]
    return sorted({s for s in secrets if s}, key=len, reverse=True)


def hide(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, "***")
    return text


class LiteLLMCaller:
    """Calls a model through litellm.acompletion; maps its exceptions onto EndpointError."""

    def __init__(self, spec: ModelSpec, system_prompt: str | None = None) -> None:
        self.spec = spec
        self.system_prompt = system_prompt
        self.litellm = _import_litellm()
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
        except ll.ContentPolicyViolationError:
            return Reply("", "content_filter")
        except Exception as exc:  # the deadline above, a rejected key, 429, 5xx, connection errors, malformed replies
            failure = describe_failure(exc, spec.api_base, spec.timeout)
            raise EndpointError(self._scrub(str(failure)), retryable=failure.retryable, retry_after=failure.retry_after,
                                unreachable=failure.unreachable, fatal=failure.fatal, timed_out=failure.timed_out) from None
        try:
            choice = response.choices[0]
            text = choice.message.content
            finish = choice.finish_reason
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


def no_visible_text(text: str | None, finish: str | None, max_tokens: Any) -> str | None:
    """What happened when a reply stopped at the token limit before any visible text, or None.

    A reasoning model counts its reasoning against max_tokens; at the paper's 1,000 it can spend all of
    them before writing anything, and the provider answers "" with finish_reason=length. That is neither
    a refusal (empty replies count as refusals) nor an answer: asking again gives the same, so it is an
    error of that prompt that names the fix."""
    if finish != "length" or (text and text.strip()):
        return None
    limit = f" ({max_tokens})" if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) else ""
    return (f"no reply text: the model reached max_tokens{limit} before writing any (finish_reason=length; a "
            "reasoning model spends tokens on reasoning first); raise --orbench-max-tokens")


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


class CallableCaller:
    """Calls the user's `(prompt, system_prompt) -> str` function, sync (in a thread) or async."""

    def __init__(self, target: str, system_prompt: str | None, timeout: float) -> None:
        self.system_prompt = system_prompt
        self.timeout = timeout
        self.function = load_target(target)
        self._secrets = secrets_of(None)  # environment values named like secrets, never kept from a reply

    async def aclose(self) -> None:
        pass

    async def __call__(self, prompt: str) -> Reply:
        try:
            result = await asyncio.wait_for(self._call(prompt), self.timeout)
        except TimeoutError:
            raise EndpointError(f"target timed out after {self.timeout:g}s", retryable=True, timed_out=True) from None
        except Exception as exc:
            raised = exc.raised if isinstance(exc, _TargetExit) else exc  # a SystemExit is named as itself
            raise EndpointError(scrub(None, f"target raised {type(raised).__name__}: {raised}"), retryable=True) from None
        if result is None:
            # Most often a function that forgot its `return`: read as an empty reply, every prompt was a refusal.
            raise EndpointError('target returned None, expected str (return "" for an empty reply)', retryable=False,
                                unusable=True)
        if not isinstance(result, str):
            raise EndpointError(f"target returned {type(result).__name__}, expected str", retryable=False, unusable=True)
        return Reply(hide(result, self._secrets), "stop")

    async def _call(self, prompt: str) -> Any:
        # SystemExit and KeyboardInterrupt raised by the user's code (an app that calls sys.exit on an error;
        # a signal reaches only pytest's main thread) become ordinary errors before they reach a task, which
        # would re-raise them out of the fetch loop and stop every call with a traceback. A sync function's
        # come back from its thread here too: _in_daemon_thread carries any BaseException to the await.
        try:
            if _is_async(self.function):
                return await self.function(prompt, self.system_prompt)
            result = await _in_daemon_thread(self.function, prompt, self.system_prompt)
            if inspect.isawaitable(result):  # an async function behind a sync-looking wrapper (a decorator)
                result = await result
            return result
        except (SystemExit, KeyboardInterrupt) as exc:
            raise _TargetExit(exc) from None


async def _in_daemon_thread(function: Callable[..., Any], *args: Any) -> Any:
    """`function(*args)` on a daemon thread, awaited (asyncio.to_thread, but abandoned at exit).

    A sync target that never returns (a socket read without a timeout) is given up on after --orbench-timeout,
    but the thread goes on; an executor's threads are joined when the interpreter exits, so pytest would
    print its summary and then hang until CI's job limit. A daemon thread is left behind instead."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()  # as asyncio.to_thread: the caller's context variables

    def settle(ok: bool, value: Any) -> None:
        if not future.done():  # cancelled when the call timed out
            future.set_result(value) if ok else future.set_exception(value)

    def work() -> None:
        try:
            ok, value = True, context.run(function, *args)
        except BaseException as exc:  # noqa: BLE001 - SystemExit, KeyboardInterrupt too: carried to the await
            ok, value = False, exc
        try:
            loop.call_soon_threadsafe(settle, ok, value)
        except RuntimeError:
            pass  # the fetch loop has closed: nobody waits for this reply any more

    threading.Thread(target=work, name="orbench-target", daemon=True).start()
    return await future


class _TargetExit(Exception):
    """A SystemExit or KeyboardInterrupt raised by a `target:` function, carried as an ordinary exception."""

    def __init__(self, raised: BaseException) -> None:
        super().__init__(str(raised))
        self.raised = raised


def _is_async(function: Any) -> bool:
    """A coroutine function, or an object whose `__call__` is one (`inspect` sees neither through the other)."""
    call = None if inspect.isroutine(function) else type(function).__call__
    return inspect.iscoroutinefunction(function) or (call is not None and inspect.iscoroutinefunction(call))


def load_target(spec: str) -> Callable[..., Any]:
    try:
        return load_callable(spec, "target", TARGET_PARAMETERS)  # type: ignore[no-any-return]
    except LoadError as exc:
        raise EndpointError(str(exc), retryable=False, fatal=True) from exc


def api_key_for(model: str, api_base: str | None, api_key_env: str | None, *, what: str = "model",
                key_flag: str = "--orbench-api-key-env / api_key_env") -> str | None:
    """The key to send, or None to let litellm read the provider's variable; ValueError if missing,
    or if the model string names no provider litellm knows (every call would fail). litellm is imported
    only for a provider outside spec.PROVIDER_KEYS."""
    provider = provider_of(model)
    if provider not in PROVIDER_KEYS:
        problem = provider_problem(model)
        if problem:
            raise ValueError(f"{what} {model!r}: {problem}")
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


def make_caller(system_prompt: str | None, *, spec: ModelSpec | None = None, target: str | None = None,
                timeout: float = 60.0) -> Caller:
    """The caller of one configuration: the user's function (`target`, `module:attr`) or a model through litellm."""
    if target:
        return CallableCaller(target, system_prompt, timeout)
    assert spec is not None, "a configuration has a target or a model"
    return LiteLLMCaller(spec, system_prompt)


def backoff(attempt: int, retry_after: float | None) -> float:
    """Seconds before the next attempt: the server's Retry-After when given, else exponential with jitter."""
    if retry_after is not None:
        return max(0.0, retry_after)
    return float(min(MAX_BACKOFF, 0.5 * 2**attempt) * (0.5 + random.random() / 2))


async def call_with_retries(
    call: Callable[[T], Awaitable[R]], request: T, retries: int,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    should_retry: Callable[[EndpointError], bool] | None = None,
) -> tuple[R, int, float]:
    """(result, attempts, seconds) of `call(request)`. Raises the last EndpointError once retries are
    spent, or at once when `should_retry` says the error is not worth another attempt."""
    start = time.monotonic()
    attempt = 0
    while True:
        try:
            reply = await call(request)
            return reply, attempt + 1, time.monotonic() - start
        except EndpointError as exc:
            if not exc.retryable or attempt >= retries or (should_retry is not None and not should_retry(exc)):
                raise
            await sleep(backoff(attempt, exc.retry_after))
            attempt += 1
