"""The merged values checked before any call: kinds of endpoint, numbers and ranges, prompts, datasets, gate, files."""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_orbench.analysis.gate import GateConfig, GateConfigError, parse_gate
from pytest_orbench.core.datasets.prompts import DatasetError
from pytest_orbench.core.datasets.registry import BUILTINS
from pytest_orbench.core.datasets.specs import DatasetSpec, parse_spec, spec_from_mapping
from pytest_orbench.core.durations import parse_age
from pytest_orbench.core.endpoint import api_base_problem, env_base_urls, kwargs_endpoint
from pytest_orbench.core.prompt_file import split
from pytest_orbench.run.options import BY_KEY, MAX_TRIALS, MIN_MARKDOWN_CHARS, RANGES
from pytest_orbench.run.setting_sources import Sources, fail, read_prompt

if TYPE_CHECKING:
    from pytest_orbench.fetch.batch.runner import BatchSettings


def check_endpoint(values: dict[str, Any]) -> None:
    """Exactly one thing under test: a model, or a target that names a function in a module."""
    if bool(values["model"]) == bool(values["target"]):
        raise fail(
            "set exactly one endpoint: --orbench-model MODEL (a litellm model string) "
            "or target: 'module:function' in orbench.yaml" if not values["model"] else
            "both a model and a target are set; keep one (--orbench-model or target:)"
        )
    if values["target"] and ":" not in values["target"]:
        raise fail(f"target {values['target']!r} must look like 'package.module:function'")
    # The name is printed as it is (the header, `orbench label`): no escape sequence may reach a terminal.
    for what, name in (("--orbench-model", values["model"]), ("target", values["target"])):
        if name and any(unicodedata.category(ch)[0] in ("C", "Z") and ch != " " for ch in str(name)):
            from pytest_orbench.render.markdown_escape import visible

            raise fail(f"{what} {visible(str(name))!r} holds control or invisible characters, which no model name "
                       "has; write the name alone (openai/gpt-4o-mini)")


def check_bounds(values: dict[str, Any]) -> None:
    """Each number's own lower bound (and the few upper ones with a reason of their own), with its message."""
    for key, low in (("concurrency", 1), ("max_tokens", 1), ("retries", 0), ("sample", 1), ("markdown_max_chars", MIN_MARKDOWN_CHARS),
                     ("trials", 1)):
        if values[key] is not None and values[key] < low:
            raise fail(f"{key} must be at least {low}, got {values[key]}")
    if values["trials"] > MAX_TRIALS:
        raise fail(f"trials must be at most {MAX_TRIALS} (each prompt is asked that many times), got {values['trials']}")
    if values["max_cost"] is not None and values["max_cost"] <= 0:
        raise fail(f"max_cost must be a positive number of US dollars, got {values['max_cost']}")
    if values["estimate_output_tokens"] < 1:
        raise fail(f"estimate_output_tokens must be at least 1, got {values['estimate_output_tokens']}")
    if values["progress_every"] < 0:
        raise fail(f"progress_every must be 0 (no progress lines) or a number of seconds, got {values['progress_every']}")
    if values["timeout"] <= 0:
        raise fail(f"timeout must be positive, got {values['timeout']}")
    if not 0 <= values["temperature"] <= 2:
        raise fail(f"temperature must be between 0 and 2, got {values['temperature']}")
    if values["offline"] and values["refresh"]:
        raise fail("--orbench-offline and --orbench-refresh contradict each other; pick one")


def check_ranges(values: dict[str, Any]) -> None:
    """Every number within RANGES (after the settings' own lower-bound messages)."""
    for key, (lowest, highest) in RANGES.items():
        value = values.get(key)
        if value is None or lowest <= value <= highest:
            continue
        flag, got = BY_KEY[key].flag or key, (str(value) if isinstance(value, int) else f"{value:g}")
        if value > highest:
            raise fail(f"{key} ({flag}) must be between {lowest:g} and {highest:g}, got {got}: a run with more would not "
                       "end in any useful time against an endpoint that stopped answering")
        raise fail(f"{key} ({flag}) must be between {lowest:g} and {highest:g}, got {got}")


def batch_settings(values: dict[str, Any]) -> BatchSettings | None:
    """--orbench-batch and its settings, checked before any call; None without it."""
    if not values["batch"]:
        return None
    if values["offline"]:
        raise fail("--orbench-offline makes no calls and --orbench-batch submits them; pick one")
    if values["target"]:
        raise fail("--orbench-batch asks a model through its provider's batch API, and a target: callable has none; "
                   "drop --orbench-batch, or test a model (--orbench-model)")
    if values["batch_poll"] <= 0:
        raise fail(f"batch_poll must be a positive number of seconds, got {values['batch_poll']}")
    if values["batch_max_requests"] < 1:
        raise fail(f"batch_max_requests must be at least 1, got {values['batch_max_requests']}")
    try:
        wait = parse_age(values["batch_wait"], "--orbench-batch-wait")
    except ValueError:
        wait = 0.0  # parse_age's words are the store max age's ("0 to always ask again", "never"): not a wait's
    if wait is None or wait <= 0:
        raise fail(f"--orbench-batch-wait {values['batch_wait']!r}: give how long to wait, a number above 0 with a "
                   "unit (24h, 2h, 30m, 90s); a run that stops waiting is resumed by the next one")
    check_batch_model(values["model"], "model")
    from pytest_orbench.fetch.batch.runner import BatchSettings

    return BatchSettings(poll=float(values["batch_poll"]), wait=wait, max_requests=int(values["batch_max_requests"]))


def check_batch_model(model: str, what: str) -> None:
    """The model's provider has a batch API."""
    from pytest_orbench.fetch.batch.provider import batch_problem

    problem = batch_problem(model)
    if problem is not None:
        raise fail(f"{what}: {problem}")


def system_prompt_of(src: Sources) -> tuple[str | None, str | None, Path | None]:
    """The system prompt, where it came from (as shown), and the file it was read from (None: inline or none)."""
    values = src.values
    if values["system_prompt"] is not None and values["system_prompt_file"]:
        raise fail("both system_prompt and system_prompt_file are set; keep one")
    prompt, source = values["system_prompt"], ("inline" if values["system_prompt"] is not None else None)
    prompt_file = src.path("system_prompt_file")
    if prompt_file is not None:
        prompt = read_prompt(prompt_file, f"--orbench-system-prompt-file {values['system_prompt_file']}",
                             str(values["system_prompt_file"]))
        source = str(values["system_prompt_file"])
        prompt_file = Path(split(str(prompt_file))[0])  # the file itself, without a `#key`
    return prompt, source, prompt_file


def data_folder(src: Sources) -> Path | None:
    """The data folder (--orbench-data-dir, else ORBENCH_DATA_DIR), which must exist."""
    folder = src.path("data_dir")
    if folder is None and os.environ.get("ORBENCH_DATA_DIR"):
        folder = Path(os.environ["ORBENCH_DATA_DIR"]).resolve()
    if folder is not None and not folder.is_dir():
        raise fail(f"data folder {folder} does not exist (--orbench-data-dir / ORBENCH_DATA_DIR)")
    return folder


def dataset_specs(value: Any, base: Path) -> tuple[DatasetSpec, ...]:
    """The datasets to run, parsed: built-in names, files, mappings; each name once and printable."""
    entries = value.split(",") if isinstance(value, str) else list(value)
    specs: list[DatasetSpec] = []
    try:
        for entry in entries:
            if isinstance(entry, dict):
                specs.append(spec_from_mapping(entry, base))
            elif isinstance(entry, str) and entry.strip():
                specs.append(parse_spec(entry, base))
            elif not isinstance(entry, str):
                raise DatasetError(f"datasets entries must be names, paths or mappings, got {entry!r}")
    except DatasetError as exc:
        raise fail(f"--orbench-datasets: {exc}") from None
    names = [s.name for s in specs]
    if not specs:
        raise fail("--orbench-datasets is empty: name at least one of " + ", ".join(BUILTINS))
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate:
        paths = [s.path for s in specs if s.name == duplicate]
        fix = ("the same file is listed twice: list it once" if paths[0] is not None and len(set(paths)) == 1 else
               "two datasets would share this name: give one its own in orbench.yaml, "
               "datasets: [{path: FILE, name: OTHER}]" if paths[0] is not None else "list it once")
        raise fail(f"--orbench-datasets names {duplicate!r} twice; {fix}")
    for spec in specs:
        check_dataset_name(spec.name)
    return tuple(specs)


def check_dataset_name(name: str) -> None:
    """The name is a node id pytest prints as it is (progress lines, summaries): no control, bidi or invisible
    character may reach the terminal through it."""
    if any(unicodedata.category(ch)[0] in ("C", "Z") and ch != " " for ch in name):
        from pytest_orbench.render.markdown_escape import visible

        raise fail(f"dataset name {visible(name)!r} holds control or invisible characters; rename it (its "
                   "file, or the name given in datasets:)")


def gate_config(src: Sources, datasets: tuple[DatasetSpec, ...]) -> GateConfig:
    """The gate's limits, each dataset it names one of the run's."""
    values = src.values
    try:
        # orbench.yaml's gate: beats [tool.pytest.ini_options] (orbench_alpha, ...), as every yaml key beats
        # the ini; a flag, or the same key at the top of orbench.yaml, beats gate:.
        section = values["gate"] or {}
        overrides = {k: None if k in section and k not in src.cli_keys and k not in src.yaml_keys
                     else values[k] for k in ("error_budget", "alpha", "tolerance_pp")}
        config = parse_gate(values["gate"], overrides)
    except GateConfigError as exc:
        raise fail(str(exc)) from None
    unknown_sets = sorted(set(config.datasets) - {d.name for d in datasets})
    if unknown_sets:
        raise fail(f"gate names dataset(s) {unknown_sets} that this run does not include; "
                   f"datasets: {', '.join(d.name for d in datasets)}")
    return config


def max_age_of(values: dict[str, Any]) -> float | None:
    """How old a stored reply may be, in seconds (None: any age)."""
    try:
        return parse_age(values["store_max_age"])
    except ValueError as exc:
        raise fail(str(exc)) from None


def revision_of(values: dict[str, Any]) -> str | None:
    """The version of the application under test, if given."""
    given = values["revision"]
    if given is not None and not str(given).strip():
        raise fail("--orbench-revision is empty: give a version of your application (e.g. a git SHA) or leave it out")
    return str(given).strip() if given is not None else None


def check_api_bases(values: dict[str, Any]) -> None:
    """The model's and the judge's endpoint URLs, and the base URL variable litellm reads for each when neither
    api_base nor litellm_kwargs sets one (the URLs in litellm_kwargs are check_secrets')."""
    for key, flag in (("api_base", "--orbench-api-base"), ("judge_api_base", "--orbench-judge-api-base")):
        problem = api_base_problem(values[key])
        if problem:
            raise fail(f"{flag} ({key}: in orbench.yaml) {problem}")
    check_env_bases(values["model"], values["api_base"], values["litellm_kwargs"], values["offline"], "the model")
    if values["judge_model"]:
        check_env_bases(values["judge_model"], values["judge_api_base"], values["judge_litellm_kwargs"],
                        values["offline"], "the judge model")


def check_env_bases(model: str | None, api_base: str | None, kwargs: dict[str, Any] | None, offline: bool,
                    what: str) -> None:
    """The base URL variables litellm reads for a model without an api_base (OPENAI_BASE_URL, ...) pass the api_base
    check: a key in their query string would be echoed into the run's reports as any other would."""
    if offline or not model or api_base or kwargs_endpoint(kwargs):
        return
    for variable, url in env_base_urls(model):
        problem = api_base_problem(url)
        if problem:
            raise fail(f"${variable}, which litellm reads as the endpoint of {what} {model} (no api_base is set), "
                       f"{problem}")


def outputs(src: Sources, update: Path | None) -> dict[str, Path | None]:
    """The files the run writes, by the flag that names each; `update`: the baseline when it is rewritten."""
    from pytest_orbench.render.outputs import FORMATS

    return {**{output.flag: src.path(output.key) for output in FORMATS},
            "--orbench-baseline (--orbench-update-baseline)": update}


def check_files(src: Sources, prompt_file: Path | None, labels: Path | None, datasets: tuple[DatasetSpec, ...]) -> None:
    """The files the run will write, checked before any call: a folder or an unwritable place there would
    otherwise surface only after every call was paid for, and two of them on one path, or one on a file the
    run reads (the baseline, a dataset, the system prompt), would silently replace the other."""
    from pytest_orbench.analysis.baseline import replace_problem
    from pytest_orbench.core.jsonfile import output_problem
    from pytest_orbench.core.store_database import store_problem

    store = src.path("store")
    assert store is not None
    problem = store_problem(store, "--orbench-store", offline=bool(src.values["offline"]))
    update = src.path("baseline") if src.values["update_baseline"] else None
    written = outputs(src, update)
    inputs = {"--orbench-baseline": None if update else src.path("baseline"), "--orbench-config": src.config_file,
              "--orbench-system-prompt-file": prompt_file, "--orbench-judge-labels": labels,
              **{f"--orbench-datasets {d.name}": d.path for d in datasets if d.path is not None}}
    problem = problem or output_problem(written, inputs) or (replace_problem(update) if update else None)
    if problem:
        raise fail(problem)
