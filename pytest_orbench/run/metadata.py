"""The run's metadata: what was asked (endpoint, judge, sample, datasets), fixed when the session starts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytest_orbench.core.datasets.prompts import Dataset
from pytest_orbench.core.durations import format_age
from pytest_orbench.core.endpoint import calls_go_to, kwargs_endpoint, redact_url
from pytest_orbench.core.records import BaselineDocument, PromptRecord, RunMeta
from pytest_orbench.judging.judges import Judge
from pytest_orbench.judging.labels import Label
from pytest_orbench.run.settings import Settings


@dataclass(frozen=True, slots=True)
class RunFacts:
    """What a session runs, settled at its start: settings, judge, sample seed, datasets, the baseline it compares
    with and your labelled replies (judge_labels)."""

    settings: Settings
    judge: Judge
    seed: int
    datasets: list[Dataset]
    baseline: BaselineDocument | None
    labels: list[Label]
    started: float

    def run_meta(self, config: int = 0) -> RunMeta:
        """The run's metadata (`config` 1: the live base's)."""
        s = self.settings if config == 0 else self.settings.base
        assert s is not None
        return {
            **endpoint_meta(s),
            "judge": self.judge.meta(),
            "revision": s.revision,
            "store_max_age": format_age(s.store_max_age),
            "seed": self.seed,
            "sample": s.sample,
            "trials": s.trials,
            **({"base": self._base_meta()} if config == 0 and s.base is not None else {}),
            "datasets": {
                d.name: {**d.source, "total": d.total, "selected": len(d.prompts), "expected": d.expected}
                for d in self.datasets
            },
        }

    def _base_meta(self) -> dict[str, Any]:
        """The live base in the run's metadata: what it is, and what differs from the configuration tested."""
        assert self.settings.base is not None
        head, base = endpoint_meta(self.settings), endpoint_meta(self.settings.base)
        # (where the calls go follows from the model, api_base and target, which are listed themselves)
        differs = [k for k in head if k not in ("system_prompt_source", "calls_to") and head.get(k) != base.get(k)]
        return {**base, "differs": differs}

    def judge_audit(self, records: list[PromptRecord]) -> dict[str, Any] | None:
        """How far this run's judge agrees with your labels (None without judge_labels)."""
        if self.settings.judge_labels is None:
            return None
        from pytest_orbench.judging.audit import audit_judge

        s = self.settings
        return audit_judge(self.judge, self.labels, records, labels_file=str(s.judge_labels),
                           min_agreement=s.judge_min_agreement, run_model=s.model or s.target)


def endpoint_meta(s: Settings) -> RunMeta:
    """What a configuration asks: endpoint, parameters, system prompt (by hash; never a secret)."""
    return {"endpoint": s.endpoint, "model": s.model, "target": s.target, "api_base": redact_url(s.api_base),
            "params": s.params, "system_prompt_sha256": s.system_prompt_sha256,
            "system_prompt_source": s.system_prompt_source,
            "calls_to": calls_go_to(s.model, s.api_base or kwargs_endpoint(s.litellm_kwargs), s.target)}
