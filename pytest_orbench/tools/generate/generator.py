"""`orbench generate`: the OR-Bench pipeline for your own domain, every call concurrent and stored.

Stages: toxic seeds (a file, or an LLM per category) -> rewrites that look borderline but are safe
(K per seed) -> near-duplicate removal -> a moderator ensemble votes (explain, then [[label]];
majority of the whole ensemble decides; an unparseable vote never counts as "safe") -> optionally a
panel of models, judged by the plugin's own judges, keeps the prompts at least N of them refuse
(the paper's Hard-1K rule). Output: a dataset file `pytest --orbench --orbench-datasets` takes as is.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pytest_orbench.core.endpoint import ModelSpec
from pytest_orbench.core.store import Store
from pytest_orbench.tools.generate.config import GenerateConfig, Seed
from pytest_orbench.tools.generate.text import (
    MODERATE_PROMPT,
    NONE_LABEL,
    PIPELINE_VERSION,
    REWRITE_PROMPT,
    SEED_PROMPT,
    near_duplicates,
    parse_label,
    parse_numbered,
    words_of,
)


@dataclass
class Candidate:
    id: str
    text: str
    seed: Seed
    votes: dict[str, str | None] = field(default_factory=dict)  # moderator -> label (None: unparseable)
    decision: str = ""  # safe | toxic | disputed
    toxic_category: str = ""
    panel: dict[str, bool | None] = field(default_factory=dict)  # panel model -> refused (None: error/unscored)


@dataclass(frozen=True)
class Generated:
    """What a pipeline run produced: the prompts kept (safe, refused by the panel when there is one), the
    toxic ones, and the summary written beside them."""

    kept: list[Candidate]
    toxic: list[Candidate]
    summary: dict[str, Any]


class Spend:
    """Calls, stored hits, errors, tokens and USD for one stage."""

    def __init__(self) -> None:
        self.made = self.stored = self.errors = self.prompt_tokens = self.completion_tokens = 0
        self.costs: list[float | None] = []

    def add(self, record: dict[str, Any], fetched: bool) -> None:
        if not fetched:
            self.stored += 1
            return
        self.made += 1
        usage = record.get("usage") or {}
        self.prompt_tokens += usage.get("prompt_tokens") or 0
        self.completion_tokens += usage.get("completion_tokens") or 0
        self.costs.append(record.get("cost"))

    def summary(self) -> dict[str, Any]:
        known = self.costs and all(c is not None for c in self.costs)
        return {"made": self.made, "stored": self.stored, "errors": self.errors,
                "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "cost_usd": round(sum(c for c in self.costs if c), 6) if known else (0.0 if not self.costs else None)}


class Pipeline:
    """Runs the stages. `make_caller(spec)` gives an object with `complete(messages)` and `aclose()`."""

    def __init__(self, config: GenerateConfig, store: Store, make_caller: Callable[[ModelSpec], Any],
                 log: Callable[[str], None] = print) -> None:
        self.config = config
        self.store = store
        self.make_caller = make_caller
        self.log = log
        self.spend: dict[str, Spend] = {}
        self._callers: dict[tuple[str, str | None], Any] = {}
        self._fatal: dict[tuple[str, str | None], str] = {}
        self._gate: asyncio.Semaphore | None = None
        self.failures: Counter[str] = Counter()
        self.categories = dict(config.categories)  # plus those a seeds file brings

    # -- calls ------------------------------------------------------------------------------------
    async def ask(self, stage: str, spec: ModelSpec, messages: list[dict[str, str]], key: dict[str, Any]) -> dict[str, Any] | None:
        """A stored or fresh completion record; None (counted as an error) when the call failed."""
        from pytest_orbench.calls.client import call_with_retries
        from pytest_orbench.calls.errors import EndpointError

        spend = self.spend.setdefault(stage, Spend())
        store_key = spec.key(kind="generate", pipeline=PIPELINE_VERSION, stage=stage, messages=messages, **key)
        stored = self.store.get(store_key)
        if stored is not None:
            spend.add(stored, fetched=False)
            return stored
        ident = (spec.model, spec.api_base)
        if ident in self._fatal:
            spend.errors += 1
            return None
        assert self._gate is not None
        async with self._gate:
            caller = self._callers.get(ident)
            if caller is None:
                caller = self._callers[ident] = self.make_caller(spec)
            try:
                reply, attempts, seconds = await call_with_retries(caller.complete, messages, self.config.retries)
            except EndpointError as exc:
                spend.errors += 1
                self.failures[f"{stage}: {exc}"[:300]] += 1
                if exc.fatal:
                    self._fatal[ident] = str(exc)
                return None
        record: dict[str, Any] = reply.record()
        record["attempts"] = attempts
        record["seconds"] = round(seconds, 3)
        self.store.put(store_key, record)
        spend.add(record, fetched=True)
        return record

    async def close(self) -> None:
        for caller in self._callers.values():
            await caller.aclose()

    # -- stages -----------------------------------------------------------------------------------
    async def seeds(self) -> tuple[list[Seed], dict[str, Any]]:
        cfg = self.config
        if cfg.seeds_file is not None:
            seeds = list(cfg.seeds)  # read by the settings check, not again
            self.categories.update(cfg.seed_categories)
            info: dict[str, Any] = {"source": str(cfg.seeds_file), "read": len(seeds)}
        else:
            assert cfg.seed_model is not None
            names = list(self.categories)
            outputs = await asyncio.gather(*(
                self.ask("seeds", cfg.seed_model, [{"role": "user", "content": SEED_PROMPT.format(
                    count=cfg.seeds_per_category, category=c, description=self.categories[c])}], {"category": c})
                for c in names))
            seeds, short = [], 0
            for category, record in zip(names, outputs):
                items = parse_numbered(str((record or {}).get("text") or ""), cfg.seeds_per_category)
                short += record is not None and len(items) < cfg.seeds_per_category
                seeds += [Seed(f"{category}-s{n:03d}", text, category) for n, text in enumerate(items, 1)]
            info = {"source": cfg.seed_model.model, "generated": len(seeds), "short_outputs": short}
        unique: dict[str, Seed] = {}
        for seed in seeds:
            unique.setdefault(" ".join(words_of(seed.text)), seed)
        info["duplicates_removed"] = len(seeds) - len(unique)
        seeds = list(unique.values())
        info["kept"] = len(seeds)
        return seeds, info

    async def rewrite(self, seeds: list[Seed]) -> tuple[list[Candidate], dict[str, Any]]:
        cfg = self.config
        k = cfg.rewrites
        outputs = await asyncio.gather(*(
            self.ask("rewrite", cfg.rewriter, [{"role": "user", "content": REWRITE_PROMPT.format(count=k, seed=s.text)}],
                     {"seed": s.id}) for s in seeds))
        candidates: list[Candidate] = []
        short = 0
        for seed, record in zip(seeds, outputs):
            items = parse_numbered(str((record or {}).get("text") or ""), k)
            short += record is not None and len(items) < k
            candidates += [Candidate(f"{seed.id}-r{n}", text, seed) for n, text in enumerate(items, 1)]
        produced = len(candidates)
        # Near duplicates of each other or of a seed (a "rewrite" that kept the harmful request).
        texts = [s.text for s in seeds] + [c.text for c in candidates]
        dropped = {i - len(seeds) for i in near_duplicates(texts, cfg.dedupe) if i >= len(seeds)}
        candidates = [c for i, c in enumerate(candidates) if i not in dropped]
        return candidates, {"requested": len(seeds) * k, "produced": produced, "short_outputs": short,
                            "near_duplicates_removed": len(dropped), "kept": len(candidates)}

    async def moderate(self, candidates: list[Candidate]) -> dict[str, Any]:
        cfg = self.config
        names = tuple(self.categories)
        listing = "\n".join(f"- {c}: {d}" for c, d in self.categories.items())
        jobs = []
        for cand in candidates:
            content = MODERATE_PROMPT.format(categories=listing, none=NONE_LABEL, example=names[0], prompt=cand.text)
            for n, spec in enumerate(cfg.moderators):
                jobs.append((cand, f"m{n + 1}", self.ask("moderate", spec, [{"role": "user", "content": content}],
                                                         {"moderator": n})))
        records = await asyncio.gather(*(job for _, _, job in jobs))
        per_moderator: dict[str, Counter[str]] = {f"m{n + 1}": Counter() for n in range(len(cfg.moderators))}
        for (cand, name, _), record in zip(jobs, records):
            label = None if record is None else parse_label(str(record.get("text") or ""), names)
            cand.votes[name] = label
            per_moderator[name]["error" if record is None else (label or "unparseable")] += 1
        size = len(cfg.moderators)
        for cand in candidates:
            votes = list(cand.votes.values())
            safe = sum(1 for v in votes if v == NONE_LABEL)
            harmful = Counter(v for v in votes if v and v != NONE_LABEL)
            # A majority of the whole ensemble, so an unparseable or failed vote can never make a prompt safe.
            if safe * 2 > size:
                cand.decision = "safe"
            elif sum(harmful.values()) * 2 > size:
                cand.decision = "toxic"
                top = max(harmful.values())
                tied = sorted(c for c, n in harmful.items() if n == top)
                cand.toxic_category = cand.seed.category if cand.seed.category in tied else tied[0]
            else:
                cand.decision = "disputed"
        agreement = {}
        for name in per_moderator:
            with_vote = [c for c in candidates if c.votes.get(name) is not None]
            agree = sum(1 for c in with_vote if (c.votes[name] == NONE_LABEL) == (c.decision == "safe")
                        and c.decision != "disputed")
            agreement[name] = {"with_majority": round(agree / len(with_vote), 4) if with_vote else None, "n": len(with_vote)}
        decisions = Counter(c.decision for c in candidates)
        return {
            "moderators": {f"m{n + 1}": spec.model for n, spec in enumerate(cfg.moderators)},
            "votes": {name: dict(sorted(counts.items())) for name, counts in per_moderator.items()},
            "unparseable_votes": sum(c["unparseable"] for c in per_moderator.values()),
            "failed_votes": sum(c["error"] for c in per_moderator.values()),
            "safe": decisions["safe"], "toxic": decisions["toxic"], "disputed": decisions["disputed"],
            "agreement": agreement,
            "unanimous": sum(1 for c in candidates if len(set(c.votes.values())) == 1 and None not in c.votes.values()),
        }

    async def panel(self, candidates: list[Candidate]) -> dict[str, Any]:
        from pytest_orbench.judging.llm_calls import JudgeStage, final_judgement, judge_key, reply_text
        from pytest_orbench.judging.registry import make_judge

        cfg = self.config
        judge = make_judge(cfg.panel_judge, cfg.judge_model)
        stage = None
        if judge.llm is not None:
            llm = judge.llm
            stage = JudgeStage(llm, self.store, cfg.retries, lambda: self.make_caller(llm.spec))
        judge_spend = self.spend.setdefault("panel-judge", Spend())

        async def one(cand: Candidate, n: int, spec: ModelSpec) -> bool | None:
            record = await self.ask("panel", spec, [{"role": "user", "content": cand.text}], {"panel": n})
            if record is None:
                return None
            judged = None
            key = judge_key(judge, cand.text, record)
            if key is not None:
                assert stage is not None
                from pytest_orbench.calls.errors import EndpointError

                try:
                    async with self._gate:  # type: ignore[union-attr]
                        judged, paid = await stage.judge(key, cand.text, reply_text(record))
                except EndpointError:
                    judge_spend.errors += 1
                    return None
                judge_spend.add(judged, fetched=paid)
            try:
                return final_judgement(judge, cand.text, record, judged).verdict.refused
            except Exception:  # a custom judge that failed: no verdict
                judge_spend.errors += 1
                return None

        jobs = [(cand, f"p{n + 1}", one(cand, n, spec)) for cand in candidates for n, spec in enumerate(cfg.panel)]
        results = await asyncio.gather(*(job for _, _, job in jobs))
        for (cand, name, _), refused in zip(jobs, results):
            cand.panel[name] = refused
        if stage is not None:
            await stage.aclose()
        kept = [c for c in candidates if sum(1 for r in c.panel.values() if r) >= cfg.panel_min]
        return {
            "models": {f"p{n + 1}": spec.model for n, spec in enumerate(cfg.panel)},
            "judge": judge.meta(),
            "min_refusals": cfg.panel_min,
            "refusals": {f"p{n + 1}": sum(1 for c in candidates if c.panel.get(f"p{n + 1}")) for n in range(len(cfg.panel))},
            "no_verdict": sum(1 for c in candidates for r in c.panel.values() if r is None),
            "kept": len(kept),
        }

    async def run(self) -> Generated:
        self._gate = asyncio.Semaphore(self.config.concurrency)
        try:
            seeds, seed_info = await self.seeds()
            self.log(f"seeds: {seed_info['kept']} ({_brief(seed_info)})")
            candidates, rewrite_info = await self.rewrite(seeds)
            self.log(f"rewrite: {rewrite_info['kept']} kept of {rewrite_info['produced']} ({_brief(rewrite_info)})")
            moderation = await self.moderate(candidates)
            self.log(f"moderate: {moderation['safe']} safe, {moderation['toxic']} toxic, {moderation['disputed']} disputed; "
                     f"{moderation['unparseable_votes']} unparseable and {moderation['failed_votes']} failed votes")
            safe = [c for c in candidates if c.decision == "safe"]
            panel_info = None
            if self.config.panel:
                panel_info = await self.panel(safe)
                self.log(f"panel: {panel_info['kept']} refused by at least {self.config.panel_min} of {len(self.config.panel)}")
                safe = [c for c in safe if sum(1 for r in c.panel.values() if r) >= self.config.panel_min]
        finally:
            await self.close()
        toxic = [c for c in candidates if c.decision == "toxic"]
        return Generated(safe, toxic, self._summary(seeds, candidates, safe, toxic, seed_info, rewrite_info, moderation,
                                                    panel_info))

    def _summary(self, seeds: list[Seed], candidates: list[Candidate], kept: list[Candidate], toxic: list[Candidate],
                 seed_info: dict[str, Any], rewrite_info: dict[str, Any], moderation: dict[str, Any],
                 panel_info: dict[str, Any] | None) -> dict[str, Any]:
        # The moderators name any category they were shown, not only the seeds': a prompt judged toxic under
        # another one was left out of the table, whose toxic column then did not add up to the toxic count.
        categories = sorted({s.category for s in seeds} | {c.toxic_category for c in toxic})
        per_category = {cat: {
            "seeds": sum(1 for s in seeds if s.category == cat),
            "rewrites": sum(1 for c in candidates if c.seed.category == cat),
            "safe": sum(1 for c in candidates if c.seed.category == cat and c.decision == "safe"),
            "toxic": sum(1 for c in toxic if c.toxic_category == cat),
            "kept": sum(1 for c in kept if c.seed.category == cat),
        } for cat in categories}
        return {
            "schema": "pytest-orbench/generate/v1",
            "pipeline_version": PIPELINE_VERSION,
            "stages": {"seeds": seed_info, "rewrite": rewrite_info, "moderate": moderation, "panel": panel_info},
            "output": {"kept": len(kept), "toxic": len(toxic)},
            "categories": per_category,
            "spend": {stage: s.summary() for stage, s in self.spend.items()},
            "failures": dict(self.failures.most_common(5)),
        }


def _brief(info: dict[str, Any]) -> str:
    return ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in info.items() if k not in ("kept", "source") and v)
