"""ModelSpec: one litellm model and how to call it (the endpoint under test, a judge, a pipeline stage)."""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pytest_orbench.store import response_key

SECRET_WORDS = re.compile(r"key|token|secret|password|authorization|credential", re.IGNORECASE)
HEADER_KEYS = ("headers", "extra_headers", "default_headers")


def redact_url(url: str | None) -> str | None:
    """Drop credentials and query strings from an endpoint URL before it is stored or shown."""
    if not url:
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


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
    """litellm kwargs as they may be stored, keyed and shown: headers by name only, `{env: VAR}` by name."""
    def public(key: str, value: Any) -> Any:
        if key in HEADER_KEYS and isinstance(value, dict):
            return sorted(str(k) for k in value)
        if is_env_ref(value):
            return {"env": value["env"]}
        if isinstance(value, dict):
            return {str(k): public(str(k), v) for k, v in sorted(value.items())}
        return value

    return {str(k): public(str(k), v) for k, v in sorted(kwargs.items()) if not SECRET_WORDS.search(str(k))}


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

    def request_kwargs(self) -> dict[str, Any]:
        """What litellm gets besides model and messages: params, with the written kwargs resolved."""
        return {**self.params, **resolve_env(self.call_kwargs)}

    def key(self, **request: Any) -> str:
        """Store key of one request to this model: everything that determines the reply, no secrets."""
        return response_key({"model": self.model, "api_base": redact_url(self.api_base), "params": self.params, **request})


def import_object(module_name: str, attr: str) -> Any:
    """`module:attr.sub` resolved as Python would (a user's target or judge function); ImportError,
    AttributeError and whatever the module raises while importing propagate to the caller."""
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj
