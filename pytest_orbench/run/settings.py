"""One frozen Settings object: everything a run needs, validated, and the model endpoint it calls.

setting_build.py builds it: setting_sources.py merges CLI > orbench.yaml > [tool.pytest.ini_options] > defaults,
and every check that can stop a run before any call has its own module with its own message naming the fix
(setting_checks, setting_secrets, setting_target, setting_judge, live_base), so that nothing else has to
re-check a setting. The option table is options.py; endpoint facts (providers, secrets) are core/endpoint.py.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_orbench.analysis.gate import GateConfig
from pytest_orbench.core.datasets.specs import DatasetSpec
from pytest_orbench.core.endpoint import ModelSpec, public_kwargs, redact_url

if TYPE_CHECKING:
    from pytest_orbench.fetch.batch.runner import BatchSettings


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
    outputs: dict[str, Path | None] = field(default_factory=dict)  # the files written, by format key (render/outputs.py)
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
        # The generated repr, with the endpoint URLs and litellm kwargs as they are shown elsewhere (no credentials,
        # no query, header values by name) and no secret (api_key is left out): --full-trace and -l print it in a
        # crash's locals.
        from dataclasses import fields

        shown = []
        for f in fields(self):
            if not f.repr:
                continue
            value = getattr(self, f.name)
            if f.name == "api_base":
                value = redact_url(value)
            elif f.name == "litellm_kwargs":
                value = public_kwargs(value)
            shown.append(f"{f.name}={value!r}")
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

