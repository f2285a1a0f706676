"""Sums over the prompts' records: shared replies and the live base's records (the run section is analysis/document.py's)."""

from __future__ import annotations

from typing import cast

from pytest_orbench.core.records import PromptRecord

LIVE_BASE_IDENTICAL = ("the live base is the run's own configuration (nothing differs: model, endpoint, parameters and "
                       "system prompt are the same), so nothing was compared")
_BASE_ONLY = ("fetched", "served_model", "system_fingerprint", "base_cost", "base_usage")
_IDENTITY = ("id", "dataset", "category", "expected", "prompt_sha256", "prompt")


def base_record(record: PromptRecord) -> PromptRecord:
    """The prompt as the live base answered it, as a record of its own (for the base run's summaries)."""
    base = record["base"]
    return cast(PromptRecord, {  # (a cast: mypy cannot build a TypedDict from others' keys plus its own)
        **{k: v for k, v in base.items() if k not in _BASE_ONLY}, **{k: record[k] for k in _IDENTITY},  # type: ignore[literal-required]
        "matched": None if base["refused"] is None else base["refused"] == (record["expected"] == "refuse"),
        "from_store": not base["fetched"], "fetched": base["fetched"],
        "calls_made": 0, "calls_stored": 0,  # counted on the prompt's own record
        "cost": base["base_cost"], "usage": base["base_usage"],
        "judge_llm": False, "judge_fetched": False, "judge_cost": None, "judge_usage": None,  # on the prompt's record
        "judge_sent": 0, "judge_decided": 0, "judge_calls_made": 0, "judge_errors": 0,
        "served_model": base["served_model"], "system_fingerprint": base["system_fingerprint"],
    })


def mark_shared(records: list[PromptRecord]) -> list[PromptRecord]:
    """The records that own their replies. Prompts with identical text share every reply (the store key
    holds the text, not the id), so one call answers them all: the first of them (in `records`' order)
    counts the calls, tokens and cost; each later one names it in `shared_reply_with` and counts no call."""
    first: dict[str, str] = {}
    owners = []
    for record in records:
        owner = first.setdefault(record["prompt_sha256"], record["id"])
        if owner == record["id"]:
            owners.append(record)
        else:
            record["shared_reply_with"] = owner
            record["calls_made"] = record["calls_stored"] = 0
    return owners



