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
    a target's, an echoed error, a gateway's 404 that quotes the URL it was asked), read from whichever variable
    it came from."""
    from pytest_orbench.calls.scrubbing import remember_secrets, spec_secrets

    for s in (settings, base):
        if s is None:
            continue
        specs = [spec for spec in (s.judge_spec, s.endpoint_spec() if s.model else None) if spec is not None]
        remember_secrets(s.api_key, *(secret for spec in specs for secret in spec_secrets(spec)),
                         *(os.environ.get(name) for name in env_refs(s.litellm_kwargs)))


def secrets_in_system_prompts(settings: Settings, base: Settings | None) -> list[str]:
    """A warning for each system prompt (the run's, the live base's) holding a value the run knows as secret
    (remember_secrets' values, environment values named like secrets): it is sent with every prompt and an
    endpoint may repeat it. The warning names the variable it came from, never the value."""
    from pytest_orbench.calls.scrubbing import holds_secret, secrets_of
    from pytest_orbench.render.terminal import term_safe

    warnings = []
    for s, whose in ((settings, "the system prompt"), (base, "the live base's system prompt")):
        if s is None or not s.system_prompt or (s is base and s.system_prompt == settings.system_prompt):
            continue
        # (a key shorter than 8 characters is a local server's placeholder, such as EMPTY: no secret to warn of)
        found = [secret for secret in secrets_of(None) if len(secret) >= 8 and holds_secret(s.system_prompt, secret)]
        if not found:
            continue
        names = sorted({f"${name}" for name, value in os.environ.items() for secret in found if value == secret})
        what = f"the value of {', '.join(names)}" if names else "a key or endpoint URL value this run uses"
        warnings.append(f"warning: {whose} ({term_safe(s.system_prompt_source or 'inline', 200)}) holds {what}, a secret "
                        "of this run: it is sent to the endpoint with every prompt, and a reply may repeat it; take it "
                        "out of the system prompt (what the run stores and reports is scrubbed of it)")
    return warnings
