"""One frozen Settings object: CLI > orbench.yaml > [tool.pytest.ini_options] > defaults; all validation.

Longer than most modules (~460 lines) for one reason: every check that can stop a run before any call
(keys, types, datasets, API keys, literal secrets, the target, the judge, the live base) lives here
with its own message naming the fix, so that nothing else has to re-check a setting. The option table
is options.py; endpoint facts (providers, secrets) are spec.py, and the API key check is client.api_key_for.
"""

from __future__ import annotations

import difflib
import hashlib
import math
import os
import re
import unicodedata
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_orbench.analysis.gate import GateConfig, GateConfigError, parse_gate
from pytest_orbench.core.datasets import BUILTINS, DatasetError, DatasetSpec, parse_spec, spec_from_mapping
from pytest_orbench.core.durations import parse_age
from pytest_orbench.core.endpoint import (
    ENDPOINT_KWARGS,
    LOOPBACK,
    TARGET_PARAMETERS,
    LoadError,
    ModelSpec,
    api_base_problem,
    calls_go_to,
    env_refs,
    kwargs_endpoint,
    load_callable,
    provider_of,
    public_kwargs,
    redact_url,
    secret_problem,
)
from pytest_orbench.core.prompt_file import PromptFileError, extract, split
from pytest_orbench.run.options import BY_KEY, MAX_TRIALS, MIN_MARKDOWN_CHARS, OPTIONS, RANGES, Option

if TYPE_CHECKING:
    from pytest_orbench.fetch.batch import BatchSettings


@dataclass(frozen=True)
class Settings:
    """Everything a run needs, validated; secrets are kept out of repr."""

    model: str | None
    target: str | None
    api_base: str | None
    api_key_env: str | None
    temperature: float
    max_tokens: int
    timeout: float
    retries: int
    litellm_kwargs: dict[str, Any]
    system_prompt: str | None
    system_prompt_source: str | None
    datasets: tuple[DatasetSpec, ...]
    sample: int | None
    seed: int | None
    concurrency: int
    json: Path | None
    store: Path
    refresh: bool
    offline: bool
    data_dir: Path | None
    judge: str
    config_file: Path | None
    judge_spec: ModelSpec | None = None  # the LLM judge's model (judge llm / hybrid)
    baseline: Path | None = None
    update_baseline: bool = False
    strict: bool = False
    junit: Path | None = None
    markdown: Path | None = None
    html: Path | None = None
    svg: Path | None = None
    gate: GateConfig = field(default_factory=GateConfig)
    api_key: str | None = field(default=None, repr=False)
    store_max_age: float | None = 7 * 86400.0  # seconds; None = no limit
    markdown_max_chars: int = 65536
    revision: str | None = None
    progress_every: float = 10.0  # seconds between progress lines in logs; 0 = none
    estimate: bool = False  # print what the run would cost, call nothing
    estimate_output_tokens: int = 400  # completion tokens assumed per reply in estimates
    max_cost: float | None = None  # USD: refuse to start above it; stop calling when the spend reaches it
    batch: BatchSettings | None = None  # --orbench-batch: ask through the provider's batch API
    trials: int = 1  # each prompt asked this many times
    verify_flips: bool = False  # the LLM judge (judge_spec) gives a second opinion on every flipped prompt
    judge_labels: Path | None = None  # your labels of this model's replies (labels.py): the judge adapts, the audit
    judge_min_agreement: float | None = None  # below this agreement with them the gate is inconclusive
    base: Settings | None = None  # the live base configuration (--orbench-base-*, base:), compared prompt by prompt

    def __repr__(self) -> str:
        # The generated repr, with the endpoint URLs as they are shown elsewhere (no credentials, no query) and
        # no secret (api_key is left out): --full-trace and -l print it in a crash's locals.
        from dataclasses import fields

        shown = []
        for f in fields(self):
            if not f.repr:
                continue
            value = getattr(self, f.name)
            shown.append(f"{f.name}={redact_url(value) if f.name == 'api_base' else value!r}")
        return f"Settings({', '.join(shown)})"

    @property
    def system_prompt_sha256(self) -> str | None:
        if self.system_prompt is None:
            return None
        return hashlib.sha256(self.system_prompt.encode("utf-8")).hexdigest()

    @property
    def params(self) -> dict[str, Any]:
        """Request parameters that determine a reply, as stored and shown: header values and `{env: VAR}`
        values never appear (headers by name only, environment values by variable name)."""
        return {"temperature": self.temperature, "max_tokens": self.max_tokens, **public_kwargs(self.litellm_kwargs)}

    @property
    def endpoint(self) -> str:
        """A short, secret-free name of what is being tested."""
        return f"target:{self.target}" if self.target else str(self.model)

    def endpoint_spec(self) -> ModelSpec:
        """The model endpoint as the fetch process needs it (no pytest, no yaml, no settings)."""
        assert self.model is not None
        return ModelSpec(self.model, self.api_base, self.params, self.timeout, self.api_key, self.api_key_env,
                         dict(self.litellm_kwargs))


def _fail(message: str) -> pytest.UsageError:
    return pytest.UsageError(f"pytest-orbench: {message}")


def _coerce(option: Option, value: Any, origin: str) -> Any:
    """Check a YAML / ini value against the option's type; ini values arrive as strings."""
    where = {"ini": f"ini option {option.dest!r}", "cli": f"{option.flag}"}.get(origin, f"{origin} key {option.key!r}")
    kind = option.kind
    if isinstance(value, str) and origin in ("ini", "cli"):
        text = value.strip()
        try:
            if kind == "int":
                return int(text)
            if kind == "float":
                return _finite(float(text), where, value)
            if kind == "bool":
                if text.lower() in ("1", "true", "yes", "on"):
                    return True
                if text.lower() in ("0", "false", "no", "off"):
                    return False
                raise ValueError(text)
        except ValueError:
            raise _fail(f"{where} must be {kind}, got {value!r}") from None
        return text
    ok = {
        "str": isinstance(value, str),
        "path": isinstance(value, str),
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": isinstance(value, (int, float)) and not isinstance(value, bool),
        "bool": isinstance(value, bool),
        "list": isinstance(value, (str, list)),
        "dict": isinstance(value, dict),
    }[kind]
    if not ok:
        article = {"int": "an integer", "float": "a number", "bool": "true or false", "dict": "a mapping",
                   "list": "a list or a comma-separated string"}.get(kind, "a string")
        raise _fail(f"{where} must be {article}, got {value!r}")
    return _finite(float(value), where, value) if kind == "float" else value


def _finite(number: float, where: str, value: Any) -> float:
    """No setting means anything with nan or infinity: a nan compares false with every bound (a max_cost
    of nan never stopped a call) and an infinite timeout would wait forever (litellm failed every call
    on it as "cannot connect")."""
    if not math.isfinite(number):
        raise _fail(f"{where} must be a finite number, got {value!r}")
    return number


def load_yaml_file(path: Path) -> dict[str, Any]:
    """The mapping in an orbench.yaml; ValueError naming the file otherwise (no pytest needed)."""
    import yaml  # (~10 ms: a run configured by options alone never reads YAML)

    if not path.is_file() and path.exists():
        raise ValueError(f"config file {path} is not a regular file (a device, a folder): give the orbench.yaml to read")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"cannot read config file {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"config file {path} is not UTF-8 text (byte {exc.start}: {exc.object[exc.start:exc.start + 1]!r}): "
                         "save it as UTF-8 YAML") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"config file {path} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"config file {path} must be a mapping of settings, got {type(data).__name__}")
    return data


def load_yaml(path: Path) -> dict[str, Any]:
    try:
        data = load_yaml_file(path)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    unknown = [k for k in data if k not in BY_KEY]
    if unknown:
        key = str(unknown[0])
        close = difflib.get_close_matches(key, list(BY_KEY), n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(BY_KEY)}"
        raise _fail(f"unknown key {key!r} in {path}: {hint}")
    if data.get("update_baseline"):
        # A committed setting would rewrite the baseline on every run, and an updating run compares with
        # nothing: the gate would be ungated for good. The baseline changes only on request.
        raise _fail(f"update_baseline in {path}: the baseline is rewritten only on request; pass "
                    "--orbench-update-baseline on the command line for the run that should write it, and drop the key")
    return data


def _merged(config: pytest.Config, yaml_data: dict[str, Any], yaml_base: Path) -> tuple[dict[str, Any], dict[str, Path]]:
    """Pick each value by precedence; also return the folder relative paths are resolved against."""
    values: dict[str, Any] = {}
    bases: dict[str, Path] = {}
    invocation = Path(config.invocation_params.dir)
    for option in OPTIONS:
        cli = config.getoption(option.dest, None) if option.flag else None
        if cli is not None:
            if option.kind in ("int", "float"):
                cli = _coerce(option, cli, "cli")  # argparse gives strings
            values[option.key], bases[option.key] = cli, invocation
        elif option.key in yaml_data:
            values[option.key] = _coerce(option, yaml_data[option.key], "orbench.yaml")
            bases[option.key] = yaml_base
        elif option.ini and (raw := config.getini(option.dest)) not in ("", None, []):
            if option.kind == "list":  # a TOML list or an ini value's lines, each of which may list several
                raw = [part.strip() for line in raw for part in str(line).split(",") if part.strip()]
            values[option.key] = _coerce(option, raw, "ini")
            bases[option.key] = config.rootpath
        else:
            values[option.key], bases[option.key] = option.default, config.rootpath
    return values, bases


def _datasets(value: Any, base: Path) -> tuple[DatasetSpec, ...]:
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
        raise _fail(f"--orbench-datasets: {exc}") from None
    names = [s.name for s in specs]
    if not specs:
        raise _fail("--orbench-datasets is empty: name at least one of " + ", ".join(BUILTINS))
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate:
        paths = [s.path for s in specs if s.name == duplicate]
        fix = ("the same file is listed twice: list it once" if paths[0] is not None and len(set(paths)) == 1 else
               "two datasets would share this name: give one its own in orbench.yaml, "
               "datasets: [{path: FILE, name: OTHER}]" if paths[0] is not None else "list it once")
        raise _fail(f"--orbench-datasets names {duplicate!r} twice; {fix}")
    return tuple(specs)


def _api_key_for(model: str, api_base: str | None, api_key_env: str | None, **kwargs: str) -> str | None:
    """client.api_key_for, imported when a run is built: a disabled plugin never imports the client."""
    from pytest_orbench.calls.client import api_key_for

    return api_key_for(model, api_base, api_key_env, **kwargs)


def _api_key(values: dict[str, Any]) -> str | None:
    if values["target"] or values["offline"]:
        return None
    try:
        return _api_key_for(values["model"], values["api_base"], values["api_key_env"])
    except ValueError as exc:
        raise _fail(str(exc)) from None


def _check_secrets(kwargs: dict[str, Any], where: str, key_setting: str, offline: bool) -> None:
    problem = secret_problem(kwargs, where, key_setting, check_env=not offline)
    if problem is not None:
        raise _fail(problem)


def _importable(folders: list[Path]) -> str:
    """Put the rootdir and orbench.yaml's folder on sys.path, as pytest's `pythonpath` ini would, so that
    a `target:` or custom judge beside them imports; the hint that says so in an import error."""
    import sys

    for folder in reversed(folders):
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    where = " and ".join(dict.fromkeys(str(f) for f in folders))
    return (f"{where} {'is' if len(set(folders)) < 2 else 'are'} on sys.path; for code elsewhere add its folder to "
            "pytest's `pythonpath` ini option")


def _check_target(target: str, folders: list[Path]) -> None:
    """Import the target before any call (a usage error if it cannot be), with the rootdir and
    orbench.yaml's folder importable."""
    hint = _importable(folders)
    try:
        load_callable(target, "target", TARGET_PARAMETERS)
    except LoadError as exc:
        raise _fail(f"{exc}. The target's module must be importable: {hint}" if not exc.imported else str(exc)) from None


def _judge(values: dict[str, Any], folders: list[Path]) -> ModelSpec | None:
    """Validate the judge before any call: known name or importable function (a custom judge beside the
    rootdir or orbench.yaml imports, like a `target:`), its model and key."""
    from pytest_orbench.judging.judges import JudgeError, judge_model_spec, make_judge

    name = values["judge"]
    spec = None
    if values["verify_flips"] and name == "llm":
        raise _fail("--orbench-verify-flips asks the LLM judge about the prompts whose verdict flipped, and --orbench-judge "
                    "llm has judged every reply with it already; drop --orbench-verify-flips, or judge with keyword "
                    "(or hybrid) and verify the flips with the LLM")
    if name in ("llm", "hybrid") or values["verify_flips"]:
        if not values["judge_model"]:
            what = f"--orbench-judge {name}" if name in ("llm", "hybrid") else "--orbench-verify-flips"
            raise _fail(f"{what} needs a judge model: --orbench-judge-model MODEL (judge_model: in orbench.yaml)")
        kwargs = values["judge_litellm_kwargs"] or {}
        _check_secrets(kwargs, "judge_litellm_kwargs", "judge_api_key_env", values["offline"])
        if values["judge_max_tokens"] < 1:
            raise _fail(f"judge_max_tokens must be at least 1, got {values['judge_max_tokens']}")
        key = None
        if not values["offline"]:
            try:
                key = _api_key_for(values["judge_model"], values["judge_api_base"], values["judge_api_key_env"],
                                  what="judge model", key_flag="--orbench-judge-api-key-env / judge_api_key_env")
            except ValueError as exc:
                raise _fail(str(exc)) from None
        spec = judge_model_spec(values["judge_model"], values["judge_api_base"], values["judge_max_tokens"],
                                values["timeout"], key, values["judge_api_key_env"], kwargs)
    elif values["judge_model"] or values["judge_api_base"]:
        raise _fail(f"judge_model / judge_api_base are set but --orbench-judge is {name!r}; use --orbench-judge llm or "
                    "hybrid, or --orbench-verify-flips (the LLM judges only the prompts whose verdict flipped)")
    hint = _importable(folders) if ":" in name else None
    try:
        make_judge(name, spec)
    except JudgeError as exc:
        failed_import = isinstance(exc.__cause__, LoadError) and not exc.__cause__.imported
        raise _fail(f"{exc}. The judge's module must be importable: {hint}" if hint and failed_import else str(exc)) from None
    return spec


def build_settings(config: pytest.Config) -> Settings:
    """Read and validate every orbench setting; raise pytest.UsageError naming the problem and fix."""
    config_opt = config.getoption("orbench_config", None)
    if config_opt:
        config_file: Path | None = Path(config.invocation_params.dir, config_opt)
        assert config_file is not None
        if not config_file.exists():
            raise _fail(f"--orbench-config {config_opt}: no such file")
        if not config_file.is_file():
            raise _fail(f"--orbench-config {config_opt} is not a regular file (a device such as /dev/null, a folder): "
                        "give the orbench.yaml to read, or leave the option out")
    else:
        config_file = config.rootpath / "orbench.yaml"
        if not config_file.is_file():
            config_file = None
    yaml_data = load_yaml(config_file) if config_file else {}
    values, bases = _merged(config, yaml_data, config_file.parent if config_file else config.rootpath)

    def path(key: str) -> Path | None:
        return (bases[key] / values[key]).resolve() if values[key] else None

    if bool(values["model"]) == bool(values["target"]):
        raise _fail(
            "set exactly one endpoint: --orbench-model MODEL (a litellm model string) "
            "or target: 'module:function' in orbench.yaml" if not values["model"] else
            "both a model and a target are set; keep one (--orbench-model or target:)"
        )
    if values["target"] and ":" not in values["target"]:
        raise _fail(f"target {values['target']!r} must look like 'package.module:function'")
    folders = [config.rootpath, *([config_file.parent] if config_file else [])]
    if values["target"]:
        _check_target(values["target"], folders)
    for key, low in (("concurrency", 1), ("max_tokens", 1), ("retries", 0), ("sample", 1), ("markdown_max_chars", MIN_MARKDOWN_CHARS),
                     ("trials", 1)):
        if values[key] is not None and values[key] < low:
            raise _fail(f"{key} must be at least {low}, got {values[key]}")
    if values["trials"] > MAX_TRIALS:
        raise _fail(f"trials must be at most {MAX_TRIALS} (each prompt is asked that many times), got {values['trials']}")
    if values["max_cost"] is not None and values["max_cost"] <= 0:
        raise _fail(f"max_cost must be a positive number of US dollars, got {values['max_cost']}")
    if values["estimate_output_tokens"] < 1:
        raise _fail(f"estimate_output_tokens must be at least 1, got {values['estimate_output_tokens']}")
    if values["progress_every"] < 0:
        raise _fail(f"progress_every must be 0 (no progress lines) or a number of seconds, got {values['progress_every']}")
    if values["timeout"] <= 0:
        raise _fail(f"timeout must be positive, got {values['timeout']}")
    if not 0 <= values["temperature"] <= 2:
        raise _fail(f"temperature must be between 0 and 2, got {values['temperature']}")
    if values["offline"] and values["refresh"]:
        raise _fail("--orbench-offline and --orbench-refresh contradict each other; pick one")
    batch = _batch(values)
    for key, (lowest, highest) in RANGES.items():  # after the settings' own lower-bound messages
        value = values.get(key)
        if value is None or lowest <= value <= highest:
            continue
        flag, got = BY_KEY[key].flag or key, (str(value) if isinstance(value, int) else f"{value:g}")
        if value > highest:
            raise _fail(f"{key} ({flag}) must be between {lowest:g} and {highest:g}, got {got}: a run with more would not "
                        "end in any useful time against an endpoint that stopped answering")
        raise _fail(f"{key} ({flag}) must be between {lowest:g} and {highest:g}, got {got}")

    kwargs = values["litellm_kwargs"] or {}
    _check_secrets(kwargs, "litellm_kwargs", "api_key_env", values["offline"])
    if values["system_prompt"] is not None and values["system_prompt_file"]:
        raise _fail("both system_prompt and system_prompt_file are set; keep one")
    system_prompt, source = values["system_prompt"], ("inline" if values["system_prompt"] is not None else None)
    prompt_file = path("system_prompt_file")
    if prompt_file is not None:
        system_prompt = _read_prompt(prompt_file, f"--orbench-system-prompt-file {values['system_prompt_file']}",
                                     str(values["system_prompt_file"]))
        source = str(values["system_prompt_file"])
        prompt_file = Path(split(str(prompt_file))[0])  # the file itself, without a `#key`

    data_dir = path("data_dir")
    if data_dir is None and os.environ.get("ORBENCH_DATA_DIR"):
        data_dir = Path(os.environ["ORBENCH_DATA_DIR"]).resolve()
    if data_dir is not None and not data_dir.is_dir():
        raise _fail(f"data folder {data_dir} does not exist (--orbench-data-dir / ORBENCH_DATA_DIR)")

    if values["update_baseline"] and not values["baseline"]:
        raise _fail("--orbench-update-baseline needs --orbench-baseline PATH (or baseline: in orbench.yaml) to write to")
    datasets = _datasets(values["datasets"], bases["datasets"])
    for spec in datasets:
        # The name is a node id pytest prints as it is (progress lines, summaries): no control, bidi or invisible
        # character may reach the terminal through it.
        if any(unicodedata.category(ch)[0] in ("C", "Z") and ch != " " for ch in spec.name):
            from pytest_orbench.render.markdown_escape import visible

            raise _fail(f"dataset name {visible(spec.name)!r} holds control or invisible characters; rename it (its "
                        "file, or the name given in datasets:)")
    try:
        # orbench.yaml's gate: beats [tool.pytest.ini_options] (orbench_alpha, ...), as every yaml key beats
        # the ini; a flag, or the same key at the top of orbench.yaml, beats gate:.
        section = values["gate"] or {}
        overrides = {k: None if k in section and config.getoption(BY_KEY[k].dest, None) is None and k not in yaml_data
                     else values[k] for k in ("error_budget", "alpha", "tolerance_pp")}
        gate = parse_gate(values["gate"], overrides)
    except GateConfigError as exc:
        raise _fail(str(exc)) from None
    unknown_sets = sorted(set(gate.datasets) - {d.name for d in datasets})
    if unknown_sets:
        raise _fail(f"gate names dataset(s) {unknown_sets} that this run does not include; "
                    f"datasets: {', '.join(d.name for d in datasets)}")

    try:
        max_age = parse_age(values["store_max_age"])
    except ValueError as exc:
        raise _fail(str(exc)) from None
    revision = values["revision"]
    if revision is not None and not str(revision).strip():
        raise _fail("--orbench-revision is empty: give a version of your application (e.g. a git SHA) or leave it out")

    for key, flag in (("api_base", "--orbench-api-base"), ("judge_api_base", "--orbench-judge-api-base")):
        problem = api_base_problem(values[key])
        if problem:
            raise _fail(f"{flag} ({key}: in orbench.yaml) {problem}")
    api_key = _api_key(values)
    judge_spec = _judge(values, folders)
    judge_labels = _judge_labels(path("judge_labels"), values["judge_min_agreement"])
    store = path("store")
    assert store is not None
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
        json=path("json"),
        store=store,
        refresh=bool(values["refresh"]),
        offline=bool(values["offline"]),
        data_dir=data_dir,
        judge=values["judge"],
        judge_spec=judge_spec,
        config_file=config_file,
        baseline=path("baseline"),
        update_baseline=bool(values["update_baseline"]),
        strict=bool(values["strict"]),
        junit=path("junit"),
        markdown=path("markdown"),
        html=path("html"),
        svg=path("svg"),
        gate=gate,
        api_key=api_key,
        store_max_age=0.0 if values["refresh"] else max_age,
        markdown_max_chars=values["markdown_max_chars"],
        revision=str(revision).strip() if revision is not None else None,
        progress_every=values["progress_every"],
        trials=values["trials"],
        estimate=bool(values["estimate"]),
        estimate_output_tokens=values["estimate_output_tokens"],
        max_cost=values["max_cost"],
        batch=batch,
        judge_labels=judge_labels,
        judge_min_agreement=values["judge_min_agreement"],
        verify_flips=bool(values["verify_flips"]),
    )
    _check_files(settings, prompt_file)
    base = _base(values, bases, settings)
    _remember_secrets(settings, base)
    if settings.verify_flips and base is None and (settings.baseline is None or settings.update_baseline):
        raise _fail("--orbench-verify-flips checks the prompts whose verdict flipped against the compared side, and this "
                    "run compares with nothing: set --orbench-baseline FILE (without --orbench-update-baseline) or a live "
                    "base (--orbench-base-*)")
    if batch is not None and base is not None and base.model is not None:
        _check_batch_model(base.model, "base model")
    return replace(settings, base=base) if base is not None else settings


def _remember_secrets(settings: Settings, base: Settings | None) -> None:
    """Every secret value of the run, for client.scrub to hide wherever it turns up (a custom judge's exception,
    a target's, an echoed error), read from whichever variable it came from."""
    from pytest_orbench.calls.client import remember_secrets

    for s in (settings, base):
        if s is None:
            continue
        specs = [s.judge_spec] + ([s.endpoint_spec()] if s.model else [])
        remember_secrets(s.api_key, *(spec.api_key for spec in specs if spec),
                         *(os.environ.get(name) for spec in specs if spec for name in env_refs(spec.call_kwargs)),
                         *(os.environ.get(name) for name in env_refs(s.litellm_kwargs)))


def _judge_labels(labels: Path | None, min_agreement: float | None) -> Path | None:
    """The labels file read and checked before any call (a bad row is named with its fix)."""
    if min_agreement is not None and not 0 < min_agreement <= 1:
        raise _fail(f"judge_min_agreement is a share between 0 and 1 (0.9 for 90%), got {min_agreement}")
    if labels is None:
        if min_agreement is not None:
            raise _fail("judge_min_agreement needs judge_labels (--orbench-judge-labels FILE): the agreement is measured "
                        "against your labels of this model's replies (`orbench label` writes them)")
        return None
    from pytest_orbench.judging.labels import LabelsError, labelled, load_labels

    try:
        rows = load_labels(labels)
    except LabelsError as exc:
        raise _fail(str(exc)) from None
    if not labelled(rows):
        raise _fail(f"judge labels file {labels} has no labelled row yet: label some with `orbench label` (or fill its "
                    "label column), or drop judge_labels")
    return labels


def _check_files(s: Settings, prompt_file: Path | None) -> None:
    """The files the run will write, checked before any call: a folder or an unwritable place there would
    otherwise surface only after every call was paid for, and two of them on one path, or one on a file the
    run reads (the baseline, a dataset, the system prompt), would silently replace the other."""
    from pytest_orbench.analysis.baseline import replace_problem
    from pytest_orbench.core.jsonfile import output_problem
    from pytest_orbench.core.store import store_problem

    problem = store_problem(s.store, "--orbench-store", offline=s.offline)
    update = s.baseline if s.update_baseline else None
    outputs = {"--orbench-json": s.json, "--orbench-markdown": s.markdown, "--orbench-html": s.html, "--orbench-svg": s.svg,
               "--orbench-junit": s.junit, "--orbench-baseline (--orbench-update-baseline)": update}
    inputs = {"--orbench-baseline": None if update else s.baseline, "--orbench-config": s.config_file,
              "--orbench-system-prompt-file": prompt_file, "--orbench-judge-labels": s.judge_labels,
              **{f"--orbench-datasets {d.name}": d.path for d in s.datasets if d.path is not None}}
    problem = problem or output_problem(outputs, inputs) or (replace_problem(update) if update else None)
    if problem:
        raise _fail(problem)


def _batch(values: dict[str, Any]) -> BatchSettings | None:
    """--orbench-batch and its settings, checked before any call; None without it."""
    if not values["batch"]:
        return None
    if values["offline"]:
        raise _fail("--orbench-offline makes no calls and --orbench-batch submits them; pick one")
    if values["target"]:
        raise _fail("--orbench-batch asks a model through its provider's batch API, and a target: callable has none; "
                    "drop --orbench-batch, or test a model (--orbench-model)")
    if values["batch_poll"] <= 0:
        raise _fail(f"batch_poll must be a positive number of seconds, got {values['batch_poll']}")
    if values["batch_max_requests"] < 1:
        raise _fail(f"batch_max_requests must be at least 1, got {values['batch_max_requests']}")
    try:
        wait = parse_age(values["batch_wait"], "--orbench-batch-wait")
    except ValueError as exc:
        raise _fail(str(exc)) from None
    if wait is None or wait <= 0:
        raise _fail(f"--orbench-batch-wait {values['batch_wait']!r}: give how long to wait (24h, 2h, 30m); a run "
                    "that stops waiting is resumed by the next one")
    _check_batch_model(values["model"], "model")
    from pytest_orbench.fetch.batch import BatchSettings

    return BatchSettings(poll=float(values["batch_poll"]), wait=wait, max_requests=int(values["batch_max_requests"]))


def _check_batch_model(model: str, what: str) -> None:
    from pytest_orbench.fetch.batch import batch_problem

    problem = batch_problem(model)
    if problem is not None:
        raise _fail(f"{what}: {problem}")


def _read_prompt(file: Path, label: str, shown: str, hint: str = "") -> str:
    """A system prompt file's text, or the string under its `#key` (prompt_file.py); a usage error naming
    `label` when it cannot be read. `shown`: the file as the user wrote it, for the messages."""
    name, key = split(str(file))
    try:
        text = Path(name).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise _fail(f"{label}: cannot read it ({reason}){hint}") from None
    try:
        prompt = extract(text, split(shown)[0], key)
    except PromptFileError as exc:
        raise _fail(f"{label}: {exc}{hint}") from None
    if not prompt.strip():
        # An empty file would be sent as an empty system message: the model under test is not the one deployed.
        raise _fail(f"{label}: it is empty, and would be sent as an empty system message; write the system prompt in "
                    "it, or for no system prompt at all leave the setting out (system_prompt: '' sends an empty one "
                    f"on purpose){hint}")
    return prompt


BASE_KEYS = ("model", "api_base", "api_key_env", "system_prompt", "system_prompt_file", "temperature", "max_tokens",
             "litellm_kwargs")


# The loopback interface by any of its names, before an optional port: one machine, one server.
_LOOPBACK = re.compile(rf"^(?:{LOOPBACK})(?=:\d+$|$)", re.IGNORECASE)


def _same_place(one: str, other: str) -> bool:
    """Two `calls_go_to` hosts that are one server (`localhost:8000` and `127.0.0.1:8000`)."""
    return _LOOPBACK.sub("localhost", one) == _LOOPBACK.sub("localhost", other)


def _base(values: dict[str, Any], bases: dict[str, Path], head: Settings) -> Settings | None:
    """The live base: the run's own configuration with what `base:` and --orbench-base-* change."""
    block = values["base"]
    cli = {k: values[f"base_{k}"] for k in ("model", "system_prompt_file", "api_base", "temperature", "max_tokens")
           if values[f"base_{k}"] is not None}
    if block is None and not cli:
        return None
    block = dict(block or {})
    unknown = sorted(set(map(str, block)) - set(BASE_KEYS))
    if unknown:
        raise _fail(f"base: unknown key(s) {unknown}; allowed: {', '.join(BASE_KEYS)}")
    # Each key has the type of the run's own setting of that name (the same check as orbench.yaml's).
    block = {k: v if v is None or k == "system_prompt" else _coerce(BY_KEY[k], v, "base:") for k, v in block.items()}
    folders = {k: bases["base"] for k in block}
    for key, value in cli.items():
        block[key] = value
        folders[key] = bases[f"base_{key}"]
        if key == "system_prompt_file":
            block.pop("system_prompt", None)
    where = {k: f"--orbench-base-{k.replace('_', '-')}" if k in cli else f"base.{k}" for k in block}
    if "system_prompt" in block and "system_prompt_file" in block:
        raise _fail("base: both system_prompt and system_prompt_file are set; keep one")
    system_prompt, source = head.system_prompt, head.system_prompt_source
    if "system_prompt" in block:
        system_prompt = block["system_prompt"]
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise _fail(f"base.system_prompt must be a string (or null: no system prompt), got {system_prompt!r}")
        source = "base: inline" if system_prompt is not None else None
    elif "system_prompt_file" in block:
        name = block["system_prompt_file"]
        if not name:  # '' : the base has no system prompt (a file absent on the base branch)
            system_prompt, source = None, None
        else:
            system_prompt = _read_prompt((folders["system_prompt_file"] / name).resolve(),
                                         f"{where['system_prompt_file']} {name}", str(name),
                                         "; give '' for a base without a system prompt")
            source = str(name)
    model = block.get("model") or head.model
    if model is None:  # a target under test: the base calls the same function (with its own system prompt)
        if any(block.get(k) is not None for k in ("api_base", "api_key_env", "temperature", "max_tokens", "litellm_kwargs")):
            raise _fail("base: with a target (no model), only the system prompt can differ; set base.model to compare "
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
        raise _fail(
            f"the live base {model} has no api_base of its own, so its calls would go to {base_to} while the "
            f"run's go to {head_to} (api_base): "
            f"set --orbench-base-api-base=URL (base.api_base in orbench.yaml) to where {model} is served, e.g. "
            f"--orbench-base-api-base={redact_url(head.api_base)}, or --orbench-base-api-base= (base: "
            f"{{api_base: null}}) to send the base's calls to {provider}'s default endpoint on purpose")
    problem = api_base_problem(block.get("api_base"))
    if problem:
        raise _fail(f"{where.get('api_base', 'base.api_base')} {problem}")
    api_base = block.get("api_base") or (head.api_base if same_model else None)
    api_key_env = block.get("api_key_env") or (head.api_key_env if same_model else None)
    kwargs = block["litellm_kwargs"] if "litellm_kwargs" in block else (head.litellm_kwargs if same_model else {})
    kwargs = dict(kwargs or {})
    _check_secrets(kwargs, "base.litellm_kwargs", "base.api_key_env", head.offline)
    temperature = float(block.get("temperature", head.temperature))
    if not 0 <= temperature <= 2:
        raise _fail(f"{where.get('temperature', 'base.temperature')} must be between 0 and 2, got {temperature}")
    max_tokens = int(block.get("max_tokens", head.max_tokens))
    if max_tokens < 1:
        raise _fail(f"{where.get('max_tokens', 'base.max_tokens')} must be at least 1, got {max_tokens}")
    same_key = same_model and head.target is None and api_key_env == head.api_key_env
    api_key = head.api_key if same_key else None
    if not head.offline and not same_key:
        try:
            api_key = _api_key_for(model, api_base, api_key_env, what="base model",
                                  key_flag="base.api_key_env")
        except ValueError as exc:
            raise _fail(str(exc)) from None
    return replace(head, model=model, target=None, api_base=api_base, api_key_env=api_key_env, api_key=api_key,
                   temperature=temperature, max_tokens=max_tokens, litellm_kwargs=kwargs, system_prompt=system_prompt,
                   system_prompt_source=source, base=None)
