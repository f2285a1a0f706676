"""Each setting's value picked by precedence: CLI > orbench.yaml > [tool.pytest.ini_options] > defaults."""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_orbench.core.prompt_file import PromptFileError, extract, split
from pytest_orbench.run.options import BY_KEY, OPTIONS, Option


def fail(message: str) -> pytest.UsageError:
    """The usage error every settings check raises, naming the plugin."""
    return pytest.UsageError(f"pytest-orbench: {message}")


@dataclass(frozen=True)
class Sources:
    """The merged values, the folder each one's relative paths are resolved against, and where they came from."""

    values: dict[str, Any]
    bases: dict[str, Path]
    config_file: Path | None
    folders: list[Path]  # the rootdir and orbench.yaml's folder: a `target:` or custom judge beside them imports
    yaml_keys: frozenset[str]  # the keys orbench.yaml sets
    cli_keys: frozenset[str]  # the keys given on the command line

    def path(self, key: str) -> Path | None:
        return (self.bases[key] / self.values[key]).resolve() if self.values[key] else None


def read_sources(config: pytest.Config) -> Sources:
    """Find and read orbench.yaml (or --orbench-config), then merge it with the flags, the ini and the defaults."""
    config_opt = config.getoption("orbench_config", None)
    if config_opt:
        config_file: Path | None = Path(config.invocation_params.dir, config_opt)
        assert config_file is not None
        if not config_file.exists():
            raise fail(f"--orbench-config {config_opt}: no such file")
        if not config_file.is_file():
            raise fail(f"--orbench-config {config_opt} is not a regular file (a device such as /dev/null, a folder): "
                       "give the orbench.yaml to read, or leave the option out")
    else:
        config_file = config.rootpath / "orbench.yaml"
        if not config_file.is_file():
            config_file = None
    yaml_data = load_yaml(config_file) if config_file else {}
    values, bases, cli_keys = _merged(config, yaml_data, config_file.parent if config_file else config.rootpath)
    folders = [config.rootpath, *([config_file.parent] if config_file else [])]
    return Sources(values, bases, config_file, folders, frozenset(yaml_data), frozenset(cli_keys))


def coerce(option: Option, value: Any, origin: str) -> Any:
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
            raise fail(f"{where} must be {kind}, got {value!r}") from None
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
        raise fail(f"{where} must be {article}, got {value!r}")
    return _finite(float(value), where, value) if kind == "float" else value


def _finite(number: float, where: str, value: Any) -> float:
    """No setting means anything with nan or infinity: a nan compares false with every bound (a max_cost
    of nan never stopped a call) and an infinite timeout would wait forever (litellm failed every call
    on it as "cannot connect")."""
    if not math.isfinite(number):
        raise fail(f"{where} must be a finite number, got {value!r}")
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
        raise fail(str(exc)) from None
    unknown = [k for k in data if k not in BY_KEY]
    if unknown:
        key = str(unknown[0])
        close = difflib.get_close_matches(key, list(BY_KEY), n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(BY_KEY)}"
        raise fail(f"unknown key {key!r} in {path}: {hint}")
    if data.get("update_baseline"):
        # A committed setting would rewrite the baseline on every run, and an updating run compares with
        # nothing: the gate would be ungated for good. The baseline changes only on request.
        raise fail(f"update_baseline in {path}: the baseline is rewritten only on request; pass "
                   "--orbench-update-baseline on the command line for the run that should write it, and drop the key")
    return data


def _merged(config: pytest.Config, yaml_data: dict[str, Any],
            yaml_base: Path) -> tuple[dict[str, Any], dict[str, Path], list[str]]:
    """Pick each value by precedence; also return the folder relative paths are resolved against, and the
    keys the command line gave."""
    values: dict[str, Any] = {}
    bases: dict[str, Path] = {}
    cli_keys: list[str] = []
    invocation = Path(config.invocation_params.dir)
    for option in OPTIONS:
        cli = config.getoption(option.dest, None) if option.flag else None
        if cli is not None:
            if option.kind in ("int", "float"):
                cli = coerce(option, cli, "cli")  # argparse gives strings
            values[option.key], bases[option.key] = cli, invocation
            cli_keys.append(option.key)
        elif option.key in yaml_data:
            values[option.key] = coerce(option, yaml_data[option.key], "orbench.yaml")
            bases[option.key] = yaml_base
        elif option.ini and (raw := config.getini(option.dest)) not in ("", None, []):
            if option.kind == "list":  # a TOML list or an ini value's lines, each of which may list several
                raw = [part.strip() for line in raw for part in str(line).split(",") if part.strip()]
            values[option.key] = coerce(option, raw, "ini")
            bases[option.key] = config.rootpath
        else:
            values[option.key], bases[option.key] = option.default, config.rootpath
    return values, bases, cli_keys


def read_prompt(file: Path, label: str, shown: str, hint: str = "") -> str:
    """A system prompt file's text, or the string under its `#key` (prompt_file.py); a usage error naming
    `label` when it cannot be read. `shown`: the file as the user wrote it, for the messages."""
    name, key = split(str(file))
    try:
        text = Path(name).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise fail(f"{label}: cannot read it ({reason}){hint}") from None
    try:
        prompt = extract(text, split(shown)[0], key)
    except PromptFileError as exc:
        raise fail(f"{label}: {exc}{hint}") from None
    if not prompt.strip():
        # An empty file would be sent as an empty system message: the model under test is not the one deployed.
        raise fail(f"{label}: it is empty, and would be sent as an empty system message; write the system prompt in "
                   "it, or for no system prompt at all leave the setting out (system_prompt: '' sends an empty one "
                   f"on purpose){hint}")
    return prompt
