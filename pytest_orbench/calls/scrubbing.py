"""Keeping the run's secrets (keys, values read from the environment) out of every text it stores or reports."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from pytest_orbench.core.endpoint import ModelSpec, env_refs

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
