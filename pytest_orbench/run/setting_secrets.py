"""The API keys a run needs and the secrets its settings must not hold, checked before any call."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from pytest_orbench.core.endpoint import env_refs, secret_problem
from pytest_orbench.run.setting_sources import fail

if TYPE_CHECKING:
    from pytest_orbench.run.settings import Settings


def api_key_for(model: str, api_base: str | None, api_key_env: str | None, *, what: str = "model",
                key_flag: str = "--orbench-api-key-env / api_key_env", required: bool = True) -> str | None:
    """client.api_key_for, imported when a run is built: a disabled plugin never imports the client."""
    from pytest_orbench.calls.litellm_api import api_key_for

    return api_key_for(model, api_base, api_key_env, what=what, key_flag=key_flag, required=required)


def calls_nothing(values: dict[str, Any]) -> bool:
    """Whether the run makes no call at all, so needs no key: offline (stored replies only) or an estimate."""
    return bool(values["offline"] or values["estimate"])


def api_key(values: dict[str, Any]) -> str | None:
    """The key of the model under test (none for a target or an offline run; an estimate checks the model
    string but needs no key)."""
    if values["target"] or values["offline"]:
        return None
    try:
        return api_key_for(values["model"], values["api_base"], values["api_key_env"], required=not values["estimate"])
    except ValueError as exc:
        raise fail(str(exc)) from None


def check_secrets(kwargs: dict[str, Any], where: str, key_setting: str, offline: bool) -> None:
    """No literal credential in litellm kwargs, and each `{env: VAR}` they name set (unless offline)."""
    problem = secret_problem(kwargs, where, key_setting, check_env=not offline)
    if problem is not None:
        raise fail(problem)


def remember_secrets(settings: Settings, base: Settings | None) -> None:
    """Every secret value of the run, for client.scrub to hide wherever it turns up (a custom judge's exception,
    a target's, an echoed error), read from whichever variable it came from."""
    from pytest_orbench.calls.scrubbing import remember_secrets

    for s in (settings, base):
        if s is None:
            continue
        specs = [s.judge_spec] + ([s.endpoint_spec()] if s.model else [])
        remember_secrets(s.api_key, *(spec.api_key for spec in specs if spec),
                         *(os.environ.get(name) for spec in specs if spec for name in env_refs(spec.call_kwargs)),
                         *(os.environ.get(name) for name in env_refs(s.litellm_kwargs)))
