"""The options of an enabled run: one table (`OPTIONS`) gives every setting its YAML key, flag, ini key,
type, default and help, from which the pytest options are registered. Precedence is setting_sources.py's
job, validation that of the modules setting_build.py calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from pytest_orbench.core.datasets.registry import BUILTINS
from pytest_orbench.core.document_checks import MAX_TRIALS as MAX_TRIALS  # (a file's counts are checked against it)
from pytest_orbench.judging.registry import DEFAULT_JUDGE, llm_judge_names, names_help
from pytest_orbench.render.outputs import FORMAT

# The range of each number setting, checked before any call: past these a run against a dead or hung endpoint
# would never end (a million retries, a timeout of 30 years) while its progress said "ETA 22 s".
RANGES: dict[str, tuple[float, float]] = {
    "concurrency": (1, 1024), "retries": (0, 20), "timeout": (0.001, 3600), "max_tokens": (1, 1_000_000),
    "judge_max_tokens": (1, 1_000_000), "sample": (1, 10_000_000), "trials": (1, MAX_TRIALS),
    "progress_every": (0, 86_400), "estimate_output_tokens": (1, 1_000_000), "batch_poll": (0.001, 86_400),
    "batch_max_requests": (1, 50_000),
}
MIN_MARKDOWN_CHARS = 2000  # the smallest Markdown report limit accepted: the verdict and the table must fit


@dataclass(frozen=True)
class Option:
    """One setting: its YAML key, flag, ini key (`orbench_<key>`), type and default."""

    key: str
    kind: str  # str | int | float | bool | path | list | dict
    default: Any
    help: str
    flag: str | None = None
    ini: bool = True

    @property
    def dest(self) -> str:
        return "orbench_" + self.key


def _output(key: str) -> Option:
    """The setting of a file a run writes, as its format declares it (render/outputs.FORMATS)."""
    output = FORMAT[key]
    return Option(output.key, "path", None, output.help, output.flag)


OPTIONS: tuple[Option, ...] = (
    Option("model", "str", None, "litellm model string, e.g. openai/gpt-4o-mini", "--orbench-model"),
    Option("target", "str", None, "Python callable 'module:function' (prompt, system_prompt) -> str, instead of a model", "--orbench-target"),
    Option("api_base", "str", None, "endpoint base URL (OpenAI-compatible servers, proxies)", "--orbench-api-base"),
    Option("api_key_env", "str", None, "environment variable holding the API key (default: the provider's usual one)", "--orbench-api-key-env"),
    Option("temperature", "float", 0.0, "sampling temperature (paper protocol: 0)", "--orbench-temperature"),
    Option("max_tokens", "int", 1000, "max tokens per reply (paper protocol: 1000)", "--orbench-max-tokens"),
    Option("timeout", "float", 60.0, "seconds per request before it is retried", "--orbench-timeout"),
    Option("retries", "int", 4, "retries per prompt after a timeout, 429, 5xx or malformed reply", "--orbench-retries"),
    Option("litellm_kwargs", "dict", None, "extra keyword arguments for litellm.acompletion (YAML only)", ini=False),
    Option("system_prompt", "str", None, "system prompt text (YAML only; or system_prompt_file)", ini=False),
    Option("system_prompt_file", "path", None, "file whose text is sent as the system message (FILE#KEY: the string at that key of a "
           "YAML / JSON / TOML file or Python module)", "--orbench-system-prompt-file"),
    Option("datasets", "list", "hard-1k,toxic", f"comma-separated: {', '.join(BUILTINS)} or FILE.csv|FILE.jsonl[:answer|:refuse]", "--orbench-datasets"),
    Option("sample", "int", None, "run N prompts per dataset, stratified by category", "--orbench-sample"),
    Option("seed", "int", None, "sampling seed (default: random, printed in the header)", "--orbench-seed"),
    Option("trials", "int", 1, "ask each prompt K times (nondeterministic endpoints): a refusal share per prompt, "
           "flaky prompts listed", "--orbench-trials"),
    Option("concurrency", "int", 16, "requests in flight for the whole run, across xdist workers", "--orbench-concurrency"),
    Option("progress_every", "float", 10.0, "seconds between fetch progress lines in logs (not on a terminal, where one "
           "status is updated in place); 0 turns them off", "--orbench-progress-every"),
    Option("estimate", "bool", False, "print the calls, tokens and cost this run would make (store hits excluded), "
           "then stop without calling", "--orbench-estimate"),
    Option("estimate_output_tokens", "int", 400, "completion tokens assumed per reply in estimates (the judge's: 100)",
           "--orbench-estimate-output-tokens"),
    Option("max_cost", "float", None, "USD: refuse to start when the estimate exceeds it, and stop making calls when "
           "the run's actual spend reaches it", "--orbench-max-cost"),
    Option("batch", "bool", False, "ask the prompts that are not stored through the provider's batch API (OpenAI-format "
           "batch files: half price, results within 24 h); an interrupted run resumes its batches", "--orbench-batch"),
    Option("batch_poll", "float", 30.0, "seconds between retrievals of a batch's state", "--orbench-batch-poll"),
    Option("batch_wait", "str", "24h", "how long this session waits for its batches (24h, 2h, 30m); what is not done "
           "by then is an error, collected by the next run without submitting it again", "--orbench-batch-wait"),
    Option("batch_max_requests", "int", 50000, "request lines per batch file (OpenAI's limit: 50,000)",
           "--orbench-batch-max-requests"),
    _output("json"),
    Option("store", "path", ".orbench", "response store folder (relative to rootdir)", "--orbench-store"),
    Option("refresh", "bool", False, "ignore stored responses and call the endpoint again", "--orbench-refresh"),
    Option("store_max_age", "str", "7d", "reuse stored replies up to this age: 7d, 12h, 30m, 0 (always ask again) or never "
           "(no limit)", "--orbench-store-max-age"),
    Option("revision", "str", None, "what else determines the replies, e.g. your app's git SHA: part of the store key "
           "and the baseline", "--orbench-revision"),
    Option("offline", "bool", False, "use only stored responses; a missing one is an error", "--orbench-offline"),
    Option("data_dir", "path", None, "folder holding the dataset files under their upstream names (or ORBENCH_DATA_DIR)", "--orbench-data-dir"),
    Option("judge", "str", DEFAULT_JUDGE, f"refusal judge: {names_help()}", "--orbench-judge"),
    Option("judge_model", "str", None, f"litellm model string of the LLM judge (judge {' / '.join(llm_judge_names())})", "--orbench-judge-model"),
    Option("judge_api_base", "str", None, "base URL of the judge model's endpoint", "--orbench-judge-api-base"),
    Option("judge_api_key_env", "str", None, "environment variable holding the judge's API key", "--orbench-judge-api-key-env"),
    Option("judge_max_tokens", "int", 512, "max tokens per judge reply (explanation + class)", "--orbench-judge-max-tokens"),
    Option("judge_litellm_kwargs", "dict", None, "extra keyword arguments for the judge's litellm.acompletion (YAML only)", ini=False),
    Option("verify_flips", "bool", False, "after the run, the LLM judge (--orbench-judge-model) gives a second opinion "
           "on every prompt whose verdict flipped against the baseline or live base, both sides' replies where "
           "stored; the gate decides on the verified verdicts", "--orbench-verify-flips"),
    Option("judge_labels", "path", None, "CSV of your labels of this model's replies (`orbench label`): the keyword "
           "judge (and hybrid's) adapts to them, and every report says how far the judge agrees with them",
           "--orbench-judge-labels"),
    Option("judge_min_agreement", "float", None, "with judge_labels: unless the lower bound of the judge's agreement "
           "with your labels of this model's replies (its 95% interval) reaches this (0-1, e.g. 0.9), the run is "
           "inconclusive", "--orbench-judge-min-agreement"),
    Option("baseline", "path", None, "baseline file to compare with (commit it)", "--orbench-baseline"),
    Option("update_baseline", "bool", False, "write the baseline from this run (atomic)", "--orbench-update-baseline", ini=False),
    Option("strict", "bool", False, "each newly refused safe / newly answered toxic prompt fails its own test", "--orbench-strict"),
    _output("junit"),
    _output("markdown"),
    _output("html"),
    Option("markdown_max_chars", "int", 65536, "longest Markdown report (a GitHub comment's limit): list items "
           "are dropped to fit", "--orbench-markdown-max-chars"),
    _output("svg"),
    Option("gate", "dict", None, "gate limits: error_budget, alpha, tolerance_pp, <dataset>: {max_rejection, ...} (YAML only)", ini=False),
    Option("error_budget", "float", None, "share of prompts that may error before the gate is inconclusive (default 0.02)", "--orbench-error-budget"),
    Option("alpha", "float", None, "significance level of the regression test (default 0.05)", "--orbench-alpha"),
    Option("tolerance_pp", "float", None, "allowed regression in percentage points (default 0)", "--orbench-tolerance-pp"),
    Option("base", "dict", None, "live base configuration compared with this one prompt by prompt: model, api_base, "
           "api_key_env, system_prompt / system_prompt_file, temperature, max_tokens, litellm_kwargs (YAML only)", ini=False),
    Option("base_model", "str", None, "live base: litellm model string asked alongside (default: --orbench-model)",
           "--orbench-base-model", ini=False),
    Option("base_system_prompt_file", "str", None, "live base: its system prompt file ('' = no system prompt; default: "
           "the run's)", "--orbench-base-system-prompt-file", ini=False),
    Option("base_api_base", "str", None, "live base: endpoint base URL (default: --orbench-api-base when the model "
           "is the same)", "--orbench-base-api-base", ini=False),
    Option("base_temperature", "float", None, "live base: sampling temperature (default: the run's)",
           "--orbench-base-temperature", ini=False),
    Option("base_max_tokens", "int", None, "live base: max tokens per reply (default: the run's)",
           "--orbench-base-max-tokens", ini=False),
    Option("generate", "dict", None, "settings of `orbench generate` (YAML only; ignored by pytest)", ini=False),
)
# A format added later (render/outputs.FORMATS) and not placed above: its option comes last.
OPTIONS += tuple(_output(key) for key in FORMAT if key not in {option.key for option in OPTIONS})
BY_KEY = {o.key: o for o in OPTIONS}

def register_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("orbench", "OR-Bench over-refusal tests")
    group.addoption("--orbench", action="store_true", default=False, help="run the OR-Bench prompts as tests")
    group.addoption("--orbench-only", action="store_true", default=False,
                    help="run only the OR-Bench prompts: no test file of yours is collected or imported (implies --orbench)")
    group.addoption("--orbench-config", default=None, metavar="PATH", help="settings file (default: orbench.yaml in rootdir)")
    for option in OPTIONS:
        if option.flag is not None:
            if option.kind == "bool":
                group.addoption(option.flag, dest=option.dest, action="store_true", default=None, help=_escaped(option.help))
            else:
                metavar = {"int": "N", "float": "X", "path": "PATH", "list": "LIST"}.get(option.kind, option.key.upper())
                group.addoption(option.flag, dest=option.dest, default=None, metavar=metavar, help=_escaped(option.help))
        if option.ini:
            parser.addini(option.dest, option.help, type=_ini_type(option.kind), default="")


def _escaped(help_text: str) -> str:
    """A flag's help as argparse formats it (a "%" starts a placeholder there; the ini options' help is shown as is)."""
    return help_text.replace("%", "%%")


# pytest 9.2 takes unions: a TOML number or boolean ([tool.pytest] keeps TOML's types) then reaches
# setting_sources.py as it is, and so does a string, which it checks with a message naming the key.
_UNIONS = pytest.version_tuple >= (9, 2)


def _ini_type(kind: str) -> Any:
    if kind == "list":
        # A TOML list, or an ini value's lines. As "string", a list was deprecated in pytest 9.2 (an error
        # under filterwarnings = error) and refused outright in [tool.pytest].
        return "linelist"
    if _UNIONS and kind in ("int", "float", "bool"):
        return {"int": int | str, "float": float | str, "bool": bool | str}[kind]
    return "string"
