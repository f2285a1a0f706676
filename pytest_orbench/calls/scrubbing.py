"""Keeping the run's secrets (keys, values read from the environment, values in endpoint URLs) out of every text
it stores or reports."""

from __future__ import annotations

import os
import re
import string
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
    return sorted(set(secrets), key=lambda s: (-len(s), s))


# A secret this long is matched whatever its case (ASCII) and with whitespace (or zero-width characters, or a JSON
# escape's backslash) between its characters: an echo that upper-cases a key or wraps it across lines still
# gives it away. Shorter ones (a local server's "EMPTY") only as written: "empty" in a reply is no key.
_LOOSE_MIN = 8
_DROPPED = "\\\u200b\u200c\u200d\u2060\ufeff"  # besides whitespace
# ASCII letters lower-cased one for one (str.lower may change a text's length), the dropped characters deleted
_FOLD = {**{ord(c): ord(c.lower()) for c in string.ascii_uppercase}, **{ord(c): None for c in _DROPPED}}


def _loose(text: str) -> str:
    return "".join(text.translate(_FOLD).split())


@lru_cache(maxsize=32)
def _forms(secrets: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """The secrets matched as written, and the others as `_loose` forms; each longest first."""
    exact = [s for s in secrets if 0 < len(_loose(s)) < _LOOSE_MIN]  # (blanks alone are no secret: never hidden)
    loose = sorted({_loose(s) for s in secrets if len(_loose(s)) >= _LOOSE_MIN}, key=lambda s: (-len(s), s))
    return sorted(exact, key=lambda s: (-len(s), s)), loose


def hide(text: str, secrets: list[str]) -> str:
    """`text` with each of `secrets` replaced by ***, also upper- or lower-cased and split by whitespace."""
    exact, loose = _forms(tuple(secrets))
    for secret in exact:
        if secret and secret in text:
            text = text.replace(secret, "***")
    if not loose or not text:
        return text
    compact = _loose(text)
    found = [secret for secret in loose if secret in compact]
    if not found:  # (nearly every text: one pass over it, no positions)
        return text
    kept = [i for i, ch in enumerate(text) if not ch.isspace() and ch not in _DROPPED]  # `compact`'s, in `text`
    spans = []
    for secret in found:
        at = compact.find(secret)
        while at >= 0:
            spans.append((kept[at], kept[at + len(secret) - 1] + 1))
            at = compact.find(secret, at + 1)
    shown, end = [], 0
    for start, stop in sorted(spans):
        if start >= end:
            shown.append(text[end:start] + "***")
        end = max(end, stop)
    return "".join(shown) + text[end:]


def holds_secret(text: str, secret: str) -> bool:
    """Whether `text` holds `secret` as `hide` would find it."""
    return hide(text, [secret]) != text
