"""What a run's prompts need (Plan): the replies and judgements stored, the calls and judge calls to make."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pytest_orbench.calls.reply import no_visible_text
from pytest_orbench.core.store import Store
from pytest_orbench.judging.judges import Judge
from pytest_orbench.judging.llm_calls import judge_key


@dataclass(frozen=True, slots=True)
class Request:
    """One prompt test's reply: its store key and the prompt text."""

    key: str
    text: str
    config: int = 0  # 0: the configuration under test; 1: the live base (--orbench-base-*)


@dataclass
class Plan:
    stored: dict[str, dict[str, Any]] = field(default_factory=dict)  # key -> stored reply
    judged: dict[str, dict[str, Any]] = field(default_factory=dict)  # key -> stored LLM judgement
    misses: list[Request] = field(default_factory=list)  # no fresh reply: a call
    unjudged: list[Request] = field(default_factory=list)  # a fresh reply, no LLM judgement yet: a judge call
    stale: int = 0  # stored, but older than store_max_age: asked again
    # Stored records of these requests (replies, LLM judgements) that cannot be read: key -> why. Each is
    # missing (asked again, or an error offline), never judged.
    damaged: dict[str, str] = field(default_factory=dict)
    # Per configuration: requests without a fresh reply that need no call of their own, since an identical
    # prompt's request (same text, so the same store key) makes it.
    shared: dict[int, int] = field(default_factory=dict)


def make_plan(store: Store, judge: Judge, requests: list[Request], fresh_after: float | None,
              offline: bool = False) -> Plan:
    """`fresh_after`: a time.time() before which a stored reply or judgement is too old (asked again);
    None: any age will do."""
    plan = Plan()
    keys = list(dict.fromkeys(r.key for r in requests))
    # A stored reply cut at max_tokens before any text (kept by a version that judged it "empty") is asked
    # again, so that it becomes the error it is, not a refusal.
    plan.stored = {k: r for k, r in store.get_many(keys, fresh_after).items()
                   if no_visible_text(r.get("text"), r.get("finish_reason"), None) is None}
    plan.damaged = {k: store.damaged_records[k] for k in keys if k in store.damaged_records}
    if fresh_after is not None:
        plan.stale = store.count_stored([k for k in keys if k not in plan.stored and k not in plan.damaged],
                                        before=fresh_after)
    seen: set[str] = set()
    judge_keys: dict[str, str] = {}
    unique: list[Request] = []
    for request in requests:
        if request.key in seen:
            if request.key not in plan.stored:
                plan.shared[request.config] = plan.shared.get(request.config, 0) + 1
            continue
        seen.add(request.key)
        unique.append(request)
        record = plan.stored.get(request.key)
        if record is None:
            plan.misses.append(request)
        elif judge.llm is not None:
            key = judge_key(judge, request.text, record)
            if key is not None:
                judge_keys[request.key] = key
    if judge_keys:
        found = store.get_many(judge_keys.values(), fresh_after)
        plan.judged = {k: found[v] for k, v in judge_keys.items() if v in found}
        plan.damaged.update({v: store.damaged_records[v] for v in judge_keys.values() if v in store.damaged_records})
        plan.unjudged = [r for r in unique if r.key in judge_keys and r.key not in plan.judged]
    return plan if offline else fetching(plan)


def fetching(plan: Plan) -> Plan:
    """A plan as a run that calls sees it: a stored reply still waiting for its judge call gets its
    outcome from the fetcher, not from `stored`."""
    for request in plan.unjudged:
        plan.stored.pop(request.key, None)
    return plan
