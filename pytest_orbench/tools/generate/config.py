"""The settings of `orbench generate` (the `generate:` section of orbench.yaml, or --config), checked
before any call: models per role, credentials, counts and output paths; and the seeds file.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_orbench.core.endpoint import ModelSpec
from pytest_orbench.judging.registry import calls_llm
from pytest_orbench.tools.generate.text import CATEGORIES


class GenerateError(Exception):
    """Bad settings or input files: the message names the problem and the fix."""


@dataclass(frozen=True)
class Seed:
    id: str
    text: str
    category: str


@dataclass
class GenerateConfig:
    out: Path
    rewriter: ModelSpec
    moderators: tuple[ModelSpec, ...]
    categories: dict[str, str] = field(default_factory=lambda: dict(CATEGORIES))
    seeds_file: Path | None = None
    # The seeds file as read by the check (once: the pipeline uses these), and a description for each
    # category it brings that `categories` lacks.
    seeds: tuple[Seed, ...] = ()
    seed_categories: dict[str, str] = field(default_factory=dict)
    seed_model: ModelSpec | None = None
    seeds_per_category: int = 20
    rewrites: int = 5
    panel: tuple[ModelSpec, ...] = ()
    panel_min: int = 3
    panel_judge: str = "keyword"
    judge_model: ModelSpec | None = None
    toxic_out: Path | None = None
    summary: Path | None = None
    dedupe: float = 0.85
    concurrency: int = 16
    retries: int = 4


def read_seeds(path: Path, categories: Mapping[str, str]) -> tuple[list[Seed], dict[str, str]]:
    """The seeds of a seeds file, and a description for each category it uses that `categories` lacks."""
    from pytest_orbench.core.datasets.custom import read_rows
    from pytest_orbench.core.datasets.prompts import DatasetError

    try:
        rows = read_rows(path)
    except DatasetError as exc:
        raise GenerateError(str(exc)) from None
    if not rows:
        raise GenerateError(f"seeds file {path} has no rows")
    column = next((c for c in ("prompt", "seed", "text") if c in rows[0]), None)
    if column is None:
        raise GenerateError(f"seeds file {path} needs a prompt (or seed) column; found {', '.join(rows[0])}")
    seeds, extra = [], {}
    for n, row in enumerate(rows, 1):
        text = (row.get(column) or "").strip()
        if not text:
            continue
        category = (row.get("category") or "uncategorized").strip()
        if category not in categories:
            extra[category] = f"requests like the seeds labelled {category}"
        seeds.append(Seed((row.get("id") or "").strip() or f"s{n:04d}", text, category))
    return seeds, extra


# -- settings ------------------------------------------------------------------------------------------

KEYS = {
    "seeds", "categories", "seeds_per_category", "seed_model", "rewriter", "rewrites_per_seed", "moderators",
    "panel", "panel_min_refusals", "panel_judge", "judge_model", "out", "toxic_out", "summary",
    "dedupe_threshold", "concurrency", "retries", "store", "api_base", "api_key_env", "timeout",
}
MODEL_KEYS = {"model", "api_base", "api_key_env", "temperature", "max_tokens", "litellm_kwargs"}
# (temperature, max_tokens) per role; the paper rewrote at temperature 0.7.
ROLE_DEFAULTS = {"seed_model": (0.7, 2000), "rewriter": (0.7, 1000), "moderators": (0.0, 300),
                 "panel": (0.0, 1000), "judge_model": (0.0, 512)}


def _model(entry: Any, role: str, shared: dict[str, Any]) -> ModelSpec:
    """A model entry (a litellm model string, or a mapping with its own api_base etc.) as a ModelSpec."""
    from pytest_orbench.calls.litellm_api import api_key_for
    from pytest_orbench.core.endpoint import api_base_problem, public_kwargs, secret_problem

    if isinstance(entry, str):
        entry = {"model": entry}
    if not isinstance(entry, dict) or not isinstance(entry.get("model"), str) or not entry["model"]:
        raise GenerateError(f"generate.{role}: each model is a litellm model string or a mapping with model:, got {entry!r}")
    unknown = sorted(set(entry) - MODEL_KEYS)
    if unknown:
        raise GenerateError(f"generate.{role}: unknown key(s) {unknown}; allowed: {sorted(MODEL_KEYS)}")
    kwargs = entry.get("litellm_kwargs") or {}
    problem = secret_problem(kwargs, f"generate.{role}.litellm_kwargs", "api_key_env")
    if problem is not None:
        raise GenerateError(problem)
    temperature, max_tokens = ROLE_DEFAULTS[role]
    api_base = entry.get("api_base", shared.get("api_base"))
    problem = api_base_problem(api_base) if isinstance(api_base, str) else None
    if problem:
        raise GenerateError(f"{f'generate.{role}.api_base' if 'api_base' in entry else 'generate.api_base'} {problem}")
    key_env = entry.get("api_key_env", shared.get("api_key_env"))
    try:
        key = api_key_for(entry["model"], api_base, key_env, what=f"{role} model", key_flag="api_key_env (generate:)")
    except ValueError as exc:
        raise GenerateError(str(exc)) from None
    params = {"temperature": float(entry.get("temperature", temperature)),
              "max_tokens": int(entry.get("max_tokens", max_tokens)), **public_kwargs(kwargs)}
    return ModelSpec(entry["model"], api_base, params, float(shared.get("timeout", 120.0)), key, key_env, dict(kwargs))


def _positive(values: dict[str, Any], key: str, low: float, kind: type) -> Any:
    value = values[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not isinstance(value, int)):
        raise GenerateError(f"generate.{key} must be {'an integer' if kind is int else 'a number'}, got {value!r}")
    if not math.isfinite(value) or value < low:
        raise GenerateError(f"generate.{key} must be at least {low} (and finite), got {value}")
    high = _HIGHEST.get(key)
    if high is not None and value > high:
        raise GenerateError(f"generate.{key} must be between {low} and {high:g}, got {value}")
    return kind(value)


# As the plugin's settings of the same names (options.RANGES): past these a run never ends against a dead endpoint.
_HIGHEST = {"concurrency": 1024, "retries": 20}


def build_config(values: dict[str, Any], base: Path) -> GenerateConfig:
    """Validate the merged `generate:` settings (YAML under CLI flags) before any call."""
    unknown = sorted(set(values) - KEYS)
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(KEYS), n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(sorted(KEYS))}"
        raise GenerateError(f"unknown generate key {unknown[0]!r}: {hint}")
    values = {"seeds_per_category": 20, "rewrites_per_seed": 5, "panel_min_refusals": 3, "panel_judge": "keyword",
              "dedupe_threshold": 0.85, "concurrency": 16, "retries": 4, **values}
    if not values.get("out"):
        raise GenerateError("no output file: pass --out my-set.csv (or out: under generate: in orbench.yaml)")
    if not values.get("rewriter"):
        raise GenerateError("no rewriter model: pass --rewriter MODEL (or rewriter: under generate:)")
    moderators = values.get("moderators") or []
    if not isinstance(moderators, list) or not moderators:
        raise GenerateError("no moderators: pass --moderator MODEL once per ensemble member (the paper used 3), "
                            "or moderators: [...] under generate:")
    if not values.get("seeds") and not values.get("seed_model"):
        raise GenerateError("no seeds: pass --seeds FILE (CSV/JSONL with prompt,category) or --seed-model MODEL to generate them")
    categories: dict[str, str] = {}
    raw = values.get("categories")
    if raw is None:
        categories = dict(CATEGORIES)
    elif isinstance(raw, dict):
        categories = {str(k): str(v) for k, v in raw.items()}
    else:
        names = raw.split(",") if isinstance(raw, str) else list(raw)
        for name in (str(n).strip() for n in names):
            if not name:
                continue
            if name not in CATEGORIES and not values.get("seeds"):
                raise GenerateError(f"category {name!r} has no description: use one of {', '.join(CATEGORIES)}, or "
                                    "give categories as a mapping name: description under generate:")
            categories[name] = CATEGORIES.get(name, f"requests like the seeds labelled {name}")
    if not categories:
        raise GenerateError("generate.categories is empty")
    shared = {k: values[k] for k in ("api_base", "api_key_env", "timeout") if values.get(k) is not None}
    panel = values.get("panel") or []
    if not isinstance(panel, list):
        raise GenerateError("generate.panel must be a list of models")
    panel_min = _positive(values, "panel_min_refusals", 1, int)
    if panel and panel_min > len(panel):
        raise GenerateError(f"panel_min_refusals is {panel_min} but the panel has {len(panel)} models")
    dedupe = _positive(values, "dedupe_threshold", 0.0, float)
    if dedupe > 1:
        raise GenerateError(f"generate.dedupe_threshold is a similarity in [0, 1], got {dedupe}")
    judge_model = None
    if panel and calls_llm(values["panel_judge"]):
        if not values.get("judge_model"):
            raise GenerateError(f"panel_judge {values['panel_judge']} needs judge_model (--judge-model MODEL)")
        judge_model = _model(values["judge_model"], "judge_model", shared)
    if panel:
        from pytest_orbench.judging.judges import JudgeError
        from pytest_orbench.judging.registry import make_judge

        try:
            make_judge(values["panel_judge"], judge_model)
        except JudgeError as exc:
            raise GenerateError(f"panel_judge: {exc}") from None
    seeds_file = (base / str(values["seeds"])).resolve() if values.get("seeds") else None
    seeds: list[Seed] = []
    seed_categories: dict[str, str] = {}
    if seeds_file is not None:
        if seeds_file.is_dir():
            raise GenerateError(f"seeds file {seeds_file} is a folder: give a CSV or JSONL file with prompt,category")
        if not seeds_file.is_file():
            raise GenerateError(f"seeds file {seeds_file} does not exist")
        # Read here, once: its problems (columns, quoting, encoding) before any call, its seeds for the pipeline.
        seeds, seed_categories = read_seeds(seeds_file, categories)
    timeout = values.get("timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 3600):
        raise GenerateError(f"generate.timeout must be a number of seconds between 0 and 3600, got {timeout!r}")

    def path(key: str) -> Path | None:
        return (base / str(values[key])).resolve() if values.get(key) else None

    out, toxic_out, summary = path("out"), path("toxic_out"), path("summary")
    assert out is not None
    for p in (out, toxic_out):
        if p is not None and p.suffix.lower() not in (".csv", ".jsonl"):
            raise GenerateError(f"{p.name}: output files are .csv or .jsonl")
    from pytest_orbench.core.jsonfile import output_problem

    problem = output_problem({"--out": out, "--toxic-out": toxic_out, "--summary": summary},
                             {"--seeds": seeds_file})
    if problem:
        raise GenerateError(problem)
    return GenerateConfig(
        out=out,
        rewriter=_model(values["rewriter"], "rewriter", shared),
        moderators=tuple(_model(m, "moderators", shared) for m in moderators),
        categories=categories,
        seeds_file=seeds_file,
        seeds=tuple(seeds),
        seed_categories=seed_categories,
        seed_model=_model(values["seed_model"], "seed_model", shared) if values.get("seed_model") and not seeds_file else None,
        seeds_per_category=_positive(values, "seeds_per_category", 1, int),
        rewrites=_positive(values, "rewrites_per_seed", 1, int),
        panel=tuple(_model(m, "panel", shared) for m in panel),
        panel_min=panel_min,
        panel_judge=str(values["panel_judge"]),
        judge_model=judge_model,
        toxic_out=toxic_out,
        summary=summary,
        dedupe=dedupe,
        concurrency=_positive(values, "concurrency", 1, int),
        retries=_positive(values, "retries", 0, int),
    )
