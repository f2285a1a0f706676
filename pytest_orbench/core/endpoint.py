"""Endpoint facts, without pytest or yaml: `ModelSpec` (one litellm model and how to call it: the
endpoint under test, a judge, a pipeline stage), providers and their key variables, credentials in
settings (secret names and values, `{env: VAR}` references, the URLs kwargs set); the URLs themselves are
urls.py's. The fetch process, `orbench generate` and the run's settings all check endpoints with these."""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from pytest_orbench.core.store import response_key
from pytest_orbench.core.urls import LOOPBACK as LOOPBACK
from pytest_orbench.core.urls import SECRET_VALUES as SECRET_VALUES
from pytest_orbench.core.urls import api_base_problem as api_base_problem
from pytest_orbench.core.urls import is_loopback as is_loopback
from pytest_orbench.core.urls import redact_text, text_urls
from pytest_orbench.core.urls import redact_url as redact_url

SECRET_WORDS = re.compile(r"key|token|secret|password|authorization|credential", re.IGNORECASE)


def secret_name(key: str) -> bool:
    """A litellm kwarg whose value is a credential; prices (`input_cost_per_token`, litellm's custom
    pricing) are not, though they say "token"."""
    return bool(SECRET_WORDS.search(key)) and "cost" not in key.lower()
HEADER_KEYS = ("headers", "extra_headers", "default_headers")


def is_env_ref(value: Any) -> bool:
    """`{env: VAR}`: a value read from the environment at call time, never written anywhere."""
    return isinstance(value, dict) and set(value) == {"env"} and isinstance(value["env"], str) and bool(value["env"])


def env_refs(value: Any) -> list[str]:
    """Every variable named by an `{env: VAR}` value, in order."""
    if is_env_ref(value):
        return [value["env"]]
    if isinstance(value, dict):
        return [name for item in value.values() for name in env_refs(item)]
    if isinstance(value, list):
        return [name for item in value for name in env_refs(item)]
    return []


def public_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """litellm kwargs as they may be stored, keyed and shown: headers by name only, `{env: VAR}` by name, every URL
    in them (at any depth, in lists, under any name, among words) without credentials, query or fragment."""
    return {redact_text(str(k)): _public(str(k), v) for k, v in sorted(kwargs.items()) if not secret_name(str(k))}


def _public(key: str, value: Any) -> Any:
    if key in HEADER_KEYS and isinstance(value, dict):
        return sorted(str(k) for k in value)
    if is_env_ref(value):
        return {"env": value["env"]}
    if key in ENDPOINT_KWARGS and isinstance(value, str):
        return redact_url(value)  # as the api_base setting is: no credentials, no query (a token there)
    if isinstance(value, dict):
        return {redact_text(str(k)): _public(str(k), v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [_public(key, item) for item in value]
    if isinstance(value, str):
        return redact_text(value)  # a callback URL, a fallback's endpoint: a signed URL's query is its key
    return value


def shown_params(params: Any) -> Any:
    """Recorded params as public_kwargs makes them today: every URL in them without credentials or query, header
    values by name (a baseline written before they were redacted may hold them; they are never shown from it)."""
    if not isinstance(params, dict):
        return params
    return {k: _public(str(k), v) for k, v in params.items()}


def resolve_env(value: Any, environ: Mapping[str, str] | None = None) -> Any:
    """The kwargs to send: `{env: VAR}` replaced by the variable's value (at call time only)."""
    environ = os.environ if environ is None else environ
    if is_env_ref(value):
        return environ.get(value["env"], "")
    if isinstance(value, dict):
        return {k: resolve_env(v, environ) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve_env(v, environ) for v in value]
    return value


@dataclass(frozen=True)
class ModelSpec:
    model: str
    api_base: str | None = None
    params: dict[str, Any] = field(default_factory=dict)  # temperature, max_tokens, litellm kwargs (no secrets)
    timeout: float = 60.0
    api_key: str | None = field(default=None, repr=False)
    api_key_env: str | None = None  # named only to scrub its value from error messages
    # The kwargs as written (`{env: VAR}` values unresolved): resolved only when the call is made, so
    # header values and secrets never reach a key, the store or a report. `params` holds their public form.
    call_kwargs: dict[str, Any] = field(default_factory=dict, repr=False)

    def __repr__(self) -> str:
        # No URL credentials or query (a token there) in any traceback, log or --full-trace's locals.
        return (f"ModelSpec(model={self.model!r}, api_base={redact_url(self.api_base)!r}, params={self.params!r}, "
                f"timeout={self.timeout!r}, api_key_env={self.api_key_env!r})")

    def request_kwargs(self) -> dict[str, Any]:
        """What litellm gets besides model and messages: params, with the written kwargs resolved."""
        return {**self.params, **resolve_env(self.call_kwargs)}

    def key(self, **request: Any) -> str:
        """Store key of one request to this model: everything that determines the reply, no secrets."""
        fields = {"model": self.model, "api_base": redact_url(self.api_base), "params": self.params, **request}
        return response_key({**fields, **unshown_key_fields(self.api_base, self.call_kwargs)})


def unshown_key_fields(api_base: str | None, kwargs: dict[str, Any]) -> dict[str, Any]:
    """What decides a reply but is never stored or shown, for store keys only (hashed): header values written in
    the settings, the query string of an endpoint URL (a deployment, an API version; a key there is refused), an
    endpoint URL read with `{env: VAR}`, and the same deeper in the kwargs (a fallback's endpoint, a callback URL's
    query, a header set in a list). Without any of them nothing is added: the keys of such settings stay as they were. Without these, two deployments behind one public form shared their replies: the live base's were
    taken for the configuration tested."""
    fields: dict[str, Any] = {}
    written = literal_header_values(kwargs)
    if written:
        fields["header_values"] = written
    urls = {"api_base": api_base, **{name: resolve_env(kwargs.get(name)) for name in ENDPOINT_KWARGS if name in kwargs}}
    unshown = {name: url for name, url in urls.items() if isinstance(url, str) and url
               and (urlsplit(url).query or is_env_ref(kwargs.get(name)))}
    if unshown:
        fields["endpoint_urls"] = unshown
    nested = _unshown("", {k: v for k, v in kwargs.items() if k not in (*ENDPOINT_KWARGS, *HEADER_KEYS)}, "")
    if nested:
        fields["kwargs_values"] = nested
    return fields


def _unshown(key: str, value: Any, path: str) -> dict[str, Any]:
    """What public_kwargs leaves out of `value` under `key` (at `path`): a URL's query, credentials or fragment
    (the whole string, as written), a header's written value, an endpoint read with `{env: VAR}` (its value)."""
    found: dict[str, Any] = {}
    if key in HEADER_KEYS and isinstance(value, dict):
        written = {str(k): str(v) for k, v in sorted(value.items()) if v is not None and not is_env_ref(v)}
        return {path: written} if written else {}
    if is_env_ref(value):
        url = os.environ.get(value["env"]) if key in ENDPOINT_KWARGS else None
        return {path: url} if url else {}
    if isinstance(value, str):
        shown = redact_url(value) if key in ENDPOINT_KWARGS else redact_text(value)
        return {path: value} if shown != value else {}
    if isinstance(value, dict):
        for k, item in value.items():
            if redact_text(str(k)) != str(k):
                found[f"{path}.{k} (name)"] = str(k)
            found.update(_unshown(str(k), item, f"{path}.{k}"))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found.update(_unshown(key, item, f"{path}[{i}]"))
    return found


def literal_header_values(kwargs: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Header values written into the settings themselves, by header set. They can decide the reply (a
    routing header such as `X-Model-Version: v2`), so they are hashed into the store key; they are never
    secrets (a literal credential is refused). Values read with `{env: VAR}` are not: a rotated gateway
    token must not ask every prompt again."""
    found: dict[str, dict[str, str]] = {}
    for name in HEADER_KEYS:
        headers = kwargs.get(name)
        if isinstance(headers, dict):
            written = {str(k): str(v) for k, v in sorted(headers.items()) if v is not None and not is_env_ref(v)}
            if written:
                found[name] = written
    return found


def import_object(module_name: str, attr: str) -> Any:
    """`module:attr.sub` resolved as Python would (a user's target or judge function); ImportError,
    AttributeError and whatever the module raises while importing propagate to the caller."""
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


class LoadError(ValueError):
    """A user's function that cannot be used; `imported` tells a wrong object or signature from a failed import."""

    def __init__(self, message: str, imported: bool) -> None:
        super().__init__(message)
        self.imported = imported


TARGET_PARAMETERS = ("prompt", "system_prompt")  # what a `target:` function is called with


def load_callable(spec: str, what: str, parameters: tuple[str, ...]) -> Any:
    """The function 'package.module:function' names (a `target:`, a custom judge), imported and checked to
    take `parameters` positionally: one usage error before any call instead of an error per prompt."""
    module_name, _, attr = spec.partition(":")
    if module_name.endswith(".py") or "/" in module_name or "\\" in module_name:
        dotted = module_name.replace("\\", "/").removesuffix(".py").strip("/").replace("/", ".")
        raise LoadError(f"cannot load {what} {spec!r}: {module_name!r} is a file path; name the module, as an import "
                        f"would: '{dotted}:{attr}'", imported=True)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise LoadError(f"cannot load {what} {spec!r}: {exc}", imported=False) from None
    except Exception as exc:  # the user's module raised while importing (an AttributeError too)
        raise LoadError(f"cannot load {what} {spec!r}: importing {module_name} raised {type(exc).__name__}: {exc}",
                        imported=False) from None
    try:
        obj = import_object(module_name, attr)
    except AttributeError as exc:
        # The module imported: saying it must be importable (sys.path) would send the user the wrong way.
        names = [n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n, None))]
        close = difflib.get_close_matches(attr.split(".")[0], names, n=1)
        raise LoadError(f"cannot load {what} {spec!r}: {exc} (the module was imported from "
                        f"{getattr(module, '__file__', None) or module_name})"
                        + (f"; did you mean '{module_name}:{close[0]}'?" if close else ""), imported=True) from None
    if not callable(obj):
        raise LoadError(f"{what} {spec!r} is not callable (it is a {type(obj).__name__})", imported=True)
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):  # builtins without a signature: trust them
        return obj
    try:
        signature.bind(*parameters)
    except TypeError:
        raise LoadError(f"{what} {spec!r} must accept ({', '.join(parameters)}); its signature is "
                        f"{module_name}.{attr}{signature}", imported=True) from None
    return obj


# Providers whose key variable we know without importing litellm (a warm run must not import it).
PROVIDER_KEYS: dict[str, str | None] = {
    "openai": "OPENAI_API_KEY", "text-completion-openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY", "azure": "AZURE_API_KEY", "gemini": "GEMINI_API_KEY",
    "mistral": "MISTRAL_API_KEY", "groq": "GROQ_API_KEY", "deepseek": "DEEPSEEK_API_KEY",
    "together_ai": "TOGETHERAI_API_KEY", "openrouter": "OPENROUTER_API_KEY", "xai": "XAI_API_KEY",
    "cohere": "COHERE_API_KEY", "fireworks_ai": "FIREWORKS_AI_API_KEY", "perplexity": "PERPLEXITYAI_API_KEY",
    # Local servers that take no key.
    "ollama": None, "ollama_chat": None, "hosted_vllm": None, "lm_studio": None, "llamafile": None,
}


def provider_of(model: str) -> str:
    if "/" in model:
        return model.split("/", 1)[0]
    if model.startswith(("gpt-", "o1", "o3", "o4", "chatgpt")):
        return "openai"
    if model.startswith("claude"):
        return "anthropic"
    return ""


ENDPOINT_KWARGS = ("api_base", "base_url")  # litellm.acompletion's names for the endpoint, among litellm_kwargs


def kwargs_endpoint(kwargs: Mapping[str, Any] | None, env: Mapping[str, str] | None = None) -> str | None:
    """The endpoint litellm_kwargs set (`api_base` or `base_url`, written or `{env: VAR}`); None when they set none.
    The client's `api_base=` overrides it (client.LiteLLMCaller.complete)."""
    env = os.environ if env is None else env
    for name in ENDPOINT_KWARGS:
        value: Any = (kwargs or {}).get(name)
        if is_env_ref(value):
            value = env.get(value["env"])
        if isinstance(value, str) and value:
            return value
    return None


def kwargs_urls(kwargs: Any, where: str, env: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """Every URL litellm kwargs hold, with where it is set: `api_base` / `base_url` (written, or read with
    `{env: VAR}` when VAR is set), and any URL anywhere in them (at any depth, in a list, among words)."""
    env = os.environ if env is None else env
    found: list[tuple[str, str]] = []
    if isinstance(kwargs, dict) and not is_env_ref(kwargs):
        for key, value in kwargs.items():
            path = f"{where}.{key}"
            if key in ENDPOINT_KWARGS and is_env_ref(value) and env.get(value["env"]):
                found.append((f"{path} (${value['env']})", env[value["env"]]))
            elif key in ENDPOINT_KWARGS and isinstance(value, str) and value:
                found.append((path, value))
            else:
                found += [(f"{path} (the name)", url) for url in text_urls(str(key))]
                found += kwargs_urls(value, path, env)
    elif isinstance(kwargs, list):
        for i, item in enumerate(kwargs):
            found += kwargs_urls(item, f"{where}[{i}]", env)
    elif isinstance(kwargs, str):
        found += [(where, url) for url in text_urls(kwargs)]
    return found


def env_base_urls(model: str | None, env: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """The base URL variables litellm reads for the model's provider when no api_base is given
    (`OPENAI_BASE_URL`, `OPENAI_API_BASE`), as (variable, value), those that are set."""
    env = os.environ if env is None else env
    provider = provider_of(model or "").upper()
    names = (f"{provider}_BASE_URL", f"{provider}_API_BASE") if provider else ()
    return [(name, env[name]) for name in names if env.get(name)]


def calls_go_to(model: str | None, api_base: str | None, target: str | None = None,
                env: Mapping[str, str] | None = None) -> str:
    """Where a configuration's calls go, for people: the host (and port) of its api_base; without one,
    of the base URL variable litellm reads for the provider (`OPENAI_BASE_URL`, `OPENAI_API_BASE`), or
    else the provider's own API. Never a path, a query or a credential."""
    if target:
        return f"target:{target} (in this process)"

    def host(url: str) -> str:
        parts = urlsplit(url if "//" in url else f"//{url}")
        name = parts.hostname or "?"
        try:
            return f"{name}:{parts.port}" if parts.port else name
        except ValueError:  # a port that is no number: litellm will say so; the host is what is shown here
            return name

    if api_base:
        return host(api_base)
    provider = provider_of(model or "")
    for var, url in env_base_urls(model, env)[:1]:
        return f"{host(url)} (from {var})"
    return f"{provider}'s own API" if provider else "litellm's default endpoint for the model"


# Credentials written into settings: header names that carry them, and values that look like them.
SECRET_NAMES = re.compile(r"authori[sz]ation|api[-_]?key|token|secret|password|passwd|credential|cookie|^key$|-key$|"
                          r"_key$|^auth$|[-_]auth$|^auth[-_]", re.IGNORECASE)


def literal_secrets(value: Any, where: str) -> list[str]:
    """Paths of literal credentials in nested settings: secret-named keys with literal values, and
    values that look like keys wherever they are."""
    found: list[str] = []
    if isinstance(value, dict):
        if is_env_ref(value):
            return []
        for key, item in value.items():
            path = f"{where}.{key}"
            if (SECRET_NAMES.search(str(key)) and "cost" not in str(key).lower() and not is_env_ref(item)
                    and item not in (None, "")):
                if not isinstance(item, (dict, list)):
                    found.append(path)
                    continue
            found += literal_secrets(item, path)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += literal_secrets(item, f"{where}[{i}]")
    elif isinstance(value, str) and SECRET_VALUES.search(value):
        found.append(where)
    return found


def secret_problem(kwargs: dict[str, Any], where: str, key_setting: str, check_env: bool = True) -> str | None:
    """What is wrong with the credentials in litellm kwargs, with the fix (None: nothing). Every URL in them
    passes the api_base check (no user:password@, no key in the query string); literal credentials anywhere
    in nested kwargs are refused, showing the `{env: VAR}` form; `{env: VAR}` values need VAR set. Shared by
    the run's settings and `orbench generate`."""
    top = next((k for k in kwargs if secret_name(str(k)) and not is_env_ref(kwargs[k])), None)
    if top is not None:
        return (f"{where}.{top} looks like a secret; secrets never go in orbench.yaml. Put the key in an "
                f"environment variable and set {key_setting} to its name")
    for path, url in kwargs_urls(kwargs, where):
        endpoint = re.sub(r" \(.*\)$", "", path).rsplit(".", 1)[-1] in ENDPOINT_KWARGS
        problem = api_base_problem(url, anywhere=not endpoint)
        if problem:
            return f"{path} {problem}"
    found = literal_secrets(kwargs, where)
    if found:
        path = found[0]
        name = path.rsplit(".", 1)[-1].split("[")[0]
        variable = re.sub(r"\W+", "_", name).strip("_").upper() or "SECRET"
        return (f"{path} holds a literal credential; secrets never go in orbench.yaml. Write it as "
                f"{{{name}: {{env: {variable}}}}} and export {variable}=... in the environment that runs pytest "
                "(header values are sent, never stored or shown)")
    missing = [name for name in env_refs(kwargs) if not os.environ.get(name)]
    if missing and check_env:
        return (f"{where} reads ${missing[0]} ({{env: {missing[0]}}}), which is not set: export {missing[0]}=... "
                "before running")
    return None
