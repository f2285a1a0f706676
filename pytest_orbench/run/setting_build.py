"""build_settings: every orbench setting read and checked, in one order, before any call, into one Settings."""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest

from pytest_orbench.render.outputs import FORMATS
from pytest_orbench.run.live_base import live_base
from pytest_orbench.run.setting_checks import (
    batch_settings,
    check_api_bases,
    check_batch_model,
    check_bounds,
    check_endpoint,
    check_files,
    check_ranges,
    data_folder,
    dataset_specs,
    gate_config,
    max_age_of,
    revision_of,
    system_prompt_of,
)
from pytest_orbench.run.setting_judge import check_judge, judge_labels
from pytest_orbench.run.setting_secrets import (
    api_key,
    calls_nothing,
    check_secrets,
    remember_secrets,
    secrets_in_system_prompts,
)
from pytest_orbench.run.setting_sources import fail, read_sources
from pytest_orbench.run.setting_target import check_target
from pytest_orbench.run.settings import Settings


def build_settings(config: pytest.Config) -> Settings:
    """Read and validate every orbench setting; raise pytest.UsageError naming the problem and fix."""
    src = read_sources(config)
    values, path = src.values, src.path
    check_endpoint(values)
    if values["target"]:
        check_target(values["target"], src.folders)
    check_bounds(values)
    batch = batch_settings(values)
    check_ranges(values)
    kwargs = values["litellm_kwargs"] or {}
    check_secrets(kwargs, "litellm_kwargs", "api_key_env", calls_nothing(values))
    system_prompt, source, prompt_file = system_prompt_of(src)
    data_dir = data_folder(src)
    if values["update_baseline"] and not values["baseline"]:
        raise fail("--orbench-update-baseline needs --orbench-baseline PATH (or baseline: in orbench.yaml) to write to")
    datasets = dataset_specs(values["datasets"], src.bases["datasets"])
    gate = gate_config(src, datasets)
    max_age = max_age_of(values)
    revision = revision_of(values)
    check_api_bases(values)
    key = api_key(values)
    judge_spec = check_judge(values, src.folders)
    labels = judge_labels(path("judge_labels"), values["judge_min_agreement"], values["judge"])
    store = path("store")
    assert store is not None
    check_files(src, prompt_file, labels, datasets)
    settings = Settings(
        model=values["model"],
        target=values["target"],
        api_base=values["api_base"],
        api_key_env=values["api_key_env"],
        temperature=values["temperature"],
        max_tokens=values["max_tokens"],
        timeout=values["timeout"],
        retries=values["retries"],
        litellm_kwargs=dict(kwargs),
        system_prompt=system_prompt,
        system_prompt_source=source,
        datasets=datasets,
        sample=values["sample"],
        seed=values["seed"],
        concurrency=values["concurrency"],
        store=store,
        refresh=bool(values["refresh"]),
        offline=bool(values["offline"]),
        data_dir=data_dir,
        judge=values["judge"],
        judge_spec=judge_spec,
        config_file=src.config_file,
        baseline=path("baseline"),
        update_baseline=bool(values["update_baseline"]),
        strict=bool(values["strict"]),
        outputs={output.key: path(output.key) for output in FORMATS},
        gate=gate,
        api_key=key,
        store_max_age=0.0 if values["refresh"] else max_age,
        markdown_max_chars=values["markdown_max_chars"],
        revision=revision,
        progress_every=values["progress_every"],
        trials=values["trials"],
        estimate=bool(values["estimate"]),
        estimate_output_tokens=values["estimate_output_tokens"],
        max_cost=values["max_cost"],
        batch=batch,
        judge_labels=labels,
        judge_min_agreement=values["judge_min_agreement"],
        verify_flips=bool(values["verify_flips"]),
    )
    base = live_base(values, src.bases, settings)
    remember_secrets(settings, base)
    if not hasattr(config, "workerinput"):  # said once, by the controller, before any call
        for warning in secrets_in_system_prompts(settings, base):
            sys.stderr.write(f"orbench: {warning}\n")
    if settings.verify_flips and base is None and (settings.baseline is None or settings.update_baseline):
        raise fail("--orbench-verify-flips checks the prompts whose verdict flipped against the compared side, and this "
                   "run compares with nothing: set --orbench-baseline FILE (without --orbench-update-baseline) or a live "
                   "base (--orbench-base-*)")
    if batch is not None and base is not None and base.model is not None:
        check_batch_model(base.model, "base model")
    return replace(settings, base=base) if base is not None else settings
