"""The live base: the run's own settings with what `base:` and --orbench-base-* change, checked before any call."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from pytest_orbench.core.endpoint import (
    ENDPOINT_KWARGS,
    LOOPBACK,
    api_base_problem,
    calls_go_to,
    kwargs_endpoint,
    provider_of,
    redact_url,
)
from pytest_orbench.run.options import BY_KEY
from pytest_orbench.run.setting_checks import check_env_bases
from pytest_orbench.run.setting_secrets import api_key_for, check_secrets
from pytest_orbench.run.setting_sources import coerce, fail, read_prompt
from pytest_orbench.run.settings import Settings

BASE_KEYS = ("model", "api_base", "api_key_env", "system_prompt", "system_prompt_file", "temperature", "max_tokens",
             "litellm_kwargs")


# The loopback interface by any of its names, before an optional port: one machine, one server.
_LOOPBACK = re.compile(rf"^(?:{LOOPBACK})(?=:\d+$|$)", re.IGNORECASE)


def _same_place(one: str, other: str) -> bool:
    """Two `calls_go_to` hosts that are one server (`localhost:8000` and `127.0.0.1:8000`)."""
    return _LOOPBACK.sub("localhost", one) == _LOOPBACK.sub("localhost", other)


def live_base(values: dict[str, Any], bases: dict[str, Path], head: Settings) -> Settings | None:
    """The live base: the run's own configuration with what `base:` and --orbench-base-* change."""
    block = values["base"]
    cli = {k: values[f"base_{k}"] for k in ("model", "system_prompt_file", "api_base", "temperature", "max_tokens")
           if values[f"base_{k}"] is not None}
    if block is None and not cli:
        return None
    block = dict(block or {})
    unknown = sorted(set(map(str, block)) - set(BASE_KEYS))
    if unknown:
        raise fail(f"base: unknown key(s) {unknown}; allowed: {', '.join(BASE_KEYS)}")
    # Each key has the type of the run's own setting of that name (the same check as orbench.yaml's).
    block = {k: v if v is None or k == "system_prompt" else coerce(BY_KEY[k], v, "base:") for k, v in block.items()}
    folders = {k: bases["base"] for k in block}
    for key, value in cli.items():
        block[key] = value
        folders[key] = bases[f"base_{key}"]
        if key == "system_prompt_file":
            block.pop("system_prompt", None)
    where = {k: f"--orbench-base-{k.replace('_', '-')}" if k in cli else f"base.{k}" for k in block}
    if "system_prompt" in block and "system_prompt_file" in block:
        raise fail("base: both system_prompt and system_prompt_file are set; keep one")
    system_prompt, source = head.system_prompt, head.system_prompt_source
    if "system_prompt" in block:
        system_prompt = block["system_prompt"]
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise fail(f"base.system_prompt must be a string (or null: no system prompt), got {system_prompt!r}")
        source = "base: inline" if system_prompt is not None else None
    elif "system_prompt_file" in block:
        name = block["system_prompt_file"]
        if not name:  # '' : the base has no system prompt (a file absent on the base branch)
            system_prompt, source = None, None
        else:
            system_prompt = read_prompt((folders["system_prompt_file"] / name).resolve(),
                                        f"{where['system_prompt_file']} {name}", str(name),
                                        "; give '' for a base without a system prompt")
            source = str(name)
    model = block.get("model") or head.model
    if model is None:  # a target under test: the base calls the same function (with its own system prompt)
        if any(block.get(k) is not None for k in ("api_base", "api_key_env", "temperature", "max_tokens", "litellm_kwargs")):
            raise fail("base: with a target (no model), only the system prompt can differ; set base.model to compare "
                        "with a model")
        return replace(head, system_prompt=system_prompt, system_prompt_source=source, base=None)
    same_model = model == head.model
    # The base's own litellm_kwargs may name its endpoint (api_base= / base_url=): that is an api_base of its own.
    own_kwargs = block.get("litellm_kwargs") or {}
    base_to, head_to = calls_go_to(model, kwargs_endpoint(own_kwargs)), calls_go_to(head.model, head.api_base)
    if (not same_model and head.api_base and "api_base" not in block and head.model is not None
            and not any(name in own_kwargs for name in ENDPOINT_KWARGS)
            and provider_of(model) == provider_of(head.model) and not _same_place(base_to.split(" (from ")[0], head_to)):
        # The run is asked at its api_base (a local server, a gateway), the base would be asked elsewhere:
        # a base served beside the head then fails (or is paid for at the provider) for a reason no gate
        # shows. Going to the provider on purpose is said with an empty value.
        provider = provider_of(model) or "the provider"
        raise fail(
            f"the live base {model} has no api_base of its own, so its calls would go to {base_to} while the "
            f"run's go to {head_to} (api_base): "
            f"set --orbench-base-api-base=URL (base.api_base in orbench.yaml) to where {model} is served, e.g. "
            f"--orbench-base-api-base={redact_url(head.api_base)}, or --orbench-base-api-base= (base: "
            f"{{api_base: null}}) to send the base's calls to {provider}'s default endpoint on purpose")
    problem = api_base_problem(block.get("api_base"))
    if problem:
        raise fail(f"{where.get('api_base', 'base.api_base')} {problem}")
    api_base = block.get("api_base") or (head.api_base if same_model else None)
    api_key_env = block.get("api_key_env") or (head.api_key_env if same_model else None)
    kwargs = block["litellm_kwargs"] if "litellm_kwargs" in block else (head.litellm_kwargs if same_model else {})
    kwargs = dict(kwargs or {})
    check_secrets(kwargs, "base.litellm_kwargs", "base.api_key_env", head.offline or head.estimate)
    check_env_bases(model, api_base, kwargs, head.offline, "the live base")
    temperature = float(block.get("temperature", head.temperature))
    if not 0 <= temperature <= 2:
        raise fail(f"{where.get('temperature', 'base.temperature')} must be between 0 and 2, got {temperature}")
    max_tokens = int(block.get("max_tokens", head.max_tokens))
    if max_tokens < 1:
        raise fail(f"{where.get('max_tokens', 'base.max_tokens')} must be at least 1, got {max_tokens}")
    same_key = same_model and head.target is None and api_key_env == head.api_key_env
    api_key = head.api_key if same_key else None
    if not head.offline and not same_key:
        try:
            api_key = api_key_for(model, api_base, api_key_env, what="base model", key_flag="base.api_key_env",
                                  required=not head.estimate)
        except ValueError as exc:
            raise fail(str(exc)) from None
    return replace(head, model=model, target=None, api_base=api_base, api_key_env=api_key_env, api_key=api_key,
                   temperature=temperature, max_tokens=max_tokens, litellm_kwargs=kwargs, system_prompt=system_prompt,
                   system_prompt_source=source, base=None)
