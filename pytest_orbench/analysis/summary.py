"""Aggregates: per-dataset summaries, rate blocks, served versions, the results JSON document."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import cast

from pytest_orbench.core.document_checks import VERDICT_REFUSED, refusal_share
from pytest_orbench.core.records import (
    BaseRecord,
    DatasetSummary,
    PromptRecord,
    RateBlock,
)
from pytest_orbench.core.stats import share_interval

VERDICTS = tuple(VERDICT_REFUSED)


def _rate_block(records: list[PromptRecord]) -> RateBlock:
    """Rates over the scored prompts. With repeated trials a prompt counts with its refusal share
    (refused / scored trials), the rate is the mean share, and its interval is Wilson's at the effective
    sample size (stats.share_interval); with one trial, shares are 0 or 1 and this is the refused count
    over n with a Wilson interval."""
    verdicts = Counter(r["verdict"] for r in records)
    scored = [r for r in records if r["refused"] is not None]
    refused = sum(1 for r in scored if r["refused"])
    shares = [refusal_share(r) for r in scored]
    n = len(scored)
    rate = sum(shares) / n if n else None
    lo, hi = share_interval(shares, sum(_scored_trials(r) for r in scored))
    flaky = sorted(r["id"] for r in scored if r.get("flaky"))
    return {
        "n": n,
        "refused": refused,
        "errors": verdicts.get("error", 0),
        "unscored": verdicts.get("unscored", 0),
        "filtered": verdicts.get("filtered", 0),
        "empty": verdicts.get("empty", 0),
        "rejection_rate": rate,
        "acceptance_rate": 1 - rate if rate is not None else None,
        "ci95": [lo, hi],
        "flaky": len(flaky),
        "flaky_prompts": flaky,
        "verdicts": {v: verdicts.get(v, 0) for v in VERDICTS if verdicts.get(v, 0)},
    }


def _scored_trials(record: PromptRecord) -> int:
    return int(record.get("scored_trials") or 1)


def summarize(records: Iterable[PromptRecord], expected: dict[str, str]) -> dict[str, DatasetSummary]:
    """Per dataset: n (errors and unscored excluded), refused, rates, Wilson 95% CI, per category."""
    by_dataset: dict[str, list[PromptRecord]] = defaultdict(list)
    for record in records:
        by_dataset[record["dataset"]].append(record)
    summaries: dict[str, DatasetSummary] = {}
    for name in expected:
        rows = by_dataset.get(name, [])
        if not rows:
            continue  # every prompt deselected (-k, node ids): not part of this run
        by_category: dict[str, list[PromptRecord]] = defaultdict(list)
        for row in rows:
            by_category[row["category"]].append(row)
        # (a cast: mypy cannot build a TypedDict from another one's keys plus its own)
        summaries[name] = cast(DatasetSummary, {
            **_rate_block(rows), "expected": expected[name], "total": len(rows),
            "categories": {c: _rate_block(by_category[c]) for c in sorted(by_category)}})
    return summaries


def served_versions(records: list[PromptRecord] | list[BaseRecord]) -> dict[str, dict[str, int]]:
    """What the provider said served the replies: model versions and system fingerprints, with counts."""
    models = Counter(str(r["served_model"]) for r in records if r.get("served_model"))
    fingerprints = Counter(str(r["system_fingerprint"]) for r in records if r.get("system_fingerprint"))
    return {"models": dict(sorted(models.items())), "system_fingerprints": dict(sorted(fingerprints.items()))}

