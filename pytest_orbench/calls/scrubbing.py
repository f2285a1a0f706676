"""Keeping the run's secrets (keys, values read from the environment, values in endpoint URLs) out of every text
it stores or reports."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from functools import lru_cache

from pytest_orbench.core.endpoint import ModelSpec, env_base_urls, env_refs, kwargs_urls
from pytest_orbench.core.urls import url_secrets

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


# Every value this process knows to be a secret of the run (its keys, whatever variable they were read from, the
# `{env: VAR}` values it sends, the values in its endpoints' URLs): scrubbed from every text, by value, whoever
# raised it (a custom judge, a target). Filled by settings.build_settings and the fetch child (remember_secrets).
_KNOWN_SECRETS: set[str] = set()


def remember_secrets(*values: str | None) -> None:
    _KNOWN_SECRETS.update(v for v in values if v and len(v) >= 4)


def spec_secrets(spec: ModelSpec, env: Mapping[str, str] | None = None) -> list[str]:
    """An endpoint's own secrets: its key, the `{env: VAR}` values its calls send, and the values in the URLs it
    calls (query values, user:password): its api_base, those its kwargs set, the provider's base URL variables."""
    env = os.environ if env is None else env
    key = spec.api_key or (env.get(spec.api_key_env) if spec.api_key_env else None)
    urls = [spec.api_base, *(url for _, url in kwargs_urls(spec.call_kwargs, "", env)),
            *(url for _, url in env_base_urls(spec.model, env))]
    found = [key, *(env.get(name) for name in env_refs(spec.call_kwargs)), *(s for url in urls for s in url_secrets(url))]
    return [s for s in found if s and len(s) >= 4]


def secrets_of(spec: ModelSpec | None, env: Mapping[str, str] | None = None) -> list[str]:
    """What `scrub` hides, longest first."""
    env = os.environ if env is None else env
    secrets: list[str] = list(_KNOWN_SECRETS)
    if spec is not None:
        secrets += spec_secrets(spec, env)
    secrets += [v for name, v in env.items() if len(v) >= 8 and _SECRET_NAME.search(name)]
    return sorted(set(secrets), key=len, reverse=True)


# A secret this long is matched whatever its case and with whitespace (or zero-width characters, or a JSON
# escape's backslash) between its characters: an echo that upper-cases a key or wraps it across lines still
# gives it away. Shorter ones (a local server's "EMPTY") only as written: "empty" in a reply is no key.
_LOOSE_MIN = 8
_GAP = "[\\s\\\\\u200b-\u200d\u2060\ufeff]*"


@lru_cache(maxsize=32)
def _pattern(secrets: tuple[str, ...]) -> re.Pattern[str] | None:
    """One pattern for all the secrets, longest first (a secret inside a longer one never leaves the rest)."""
    parts = []
    for secret in sorted(secrets, key=len, reverse=True):
        compact = re.sub(r"\s+", "", secret)
        if len(compact) >= _LOOSE_MIN:
            parts.append("(?i:" + _GAP.join(re.escape(ch) for ch in compact) + ")")
        elif secret:
            parts.append(re.escape(secret))
    return re.compile("|".join(parts)) if parts else None


def hide(text: str, secrets: list[str]) -> str:
    """`text` with each of `secrets` replaced by ***, also upper- or lower-cased and split by whitespace."""
    pattern = _pattern(tuple(secrets))
    return text if pattern is None or not text else pattern.sub("***", text)


def holds_secret(text: str, secret: str) -> bool:
    """Whether `text` holds `secret` as `hide` would find it."""
    return hide(text, [secret]) != text
