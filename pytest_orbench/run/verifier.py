"""The LLM judge's second opinions for --orbench-verify-flips: asked concurrently through the store, never on a text
that carries the judge's own markup, and within what is left of --orbench-max-cost."""

from __future__ import annotations

import asyncio
import gc
import re
import unicodedata
import warnings
from typing import Any

from pytest_orbench.core.endpoint import ModelSpec
from pytest_orbench.core.records import NOT_REQUESTED
from pytest_orbench.core.store import Store
from pytest_orbench.judging.judges import CLASSES, Judgement
from pytest_orbench.judging.llm_judge import BRACKETED, REPLY_QUOTE, REQUEST_QUOTE, LLMJudge

_MARKERS = tuple(m.strip().lower() for m in (*REQUEST_QUOTE, *REPLY_QUOTE))
_LOOSE_CLASS = re.compile(r"\[\s*\[\s*(" + "|".join(sorted(v.value.replace("_", "[ _-]?") for v in CLASSES)) + r")\s*\]\s*\]",
                          re.IGNORECASE)


def _as_read(text: str) -> str:
    """The text as a model reads it: compatibility forms folded (full-width brackets, letters), and the characters
    that show nothing (zero-width spaces and joiners, bidi marks, soft hyphens) dropped."""
    folded = unicodedata.normalize("NFKC", text)
    return "".join(ch for ch in folded if unicodedata.category(ch) != "Cf")


def judge_markup(text: str, what: str = "reply") -> str | None:
    """Why an LLM verdict on this reply (or prompt: both are quoted into the judge's request) could be the text's own
    (None: it could not): it carries the judge's markup, a [[class]] or the markers that quote it in the judge's
    request, with which it can close its quote and tell the judge what to answer; look-alikes too (full-width
    brackets, zero-width characters between them). Such a flip is left unverified: its offline verdict stands, and
    the gate's worst case counts it against the change."""
    read = _as_read(text)
    found = next((m.group(1) for m in BRACKETED.finditer(read)
                  if m.group(1).strip().lower().replace(" ", "_").replace("-", "_") in {v.value for v in CLASSES}), None)
    loose = _LOOSE_CLASS.search(read) if found is None else None
    if found is not None or loose is not None:
        shown = (found or (loose.group(1) if loose else "")).strip()[:30]
        return (f"not asked: the {what} carries the judge's own markup ([[{shown}]]), so an LLM verdict on it could be "
                f"the {what}'s, not the judge's")
    lowered = read.lower()
    marker = next((m for m in _MARKERS if m in lowered), None)
    if marker is not None:
        return (f"not asked: the {what} carries the judge request's quoting marker {marker.upper()}, so an LLM verdict "
                f"on it could be the {what}'s, not the judge's")
    return None


class Verifier:
    """Asks the LLM judge about replies, concurrently, through the store (llm_calls.JudgeStage), within what is
    left of --orbench-max-cost (`budget`, USD; None: no limit)."""

    def __init__(self, spec: ModelSpec, store: Store, retries: int, concurrency: int, budget: float | None = None,
                 limit: str = "") -> None:
        from pytest_orbench.judging.llm_calls import JudgeStage

        self.judge = LLMJudge(spec)
        assert self.judge.llm is not None
        self.llm = self.judge.llm
        self.stage = JudgeStage(self.llm, store, retries)
        self.store = store
        self.concurrency = max(1, concurrency)
        self.calls = 0
        self.cost: float | None = 0.0
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0}
        self.budget = budget
        self.limit = limit  # the limit and what the run spent before, as the message of a call not made says them
        self.not_requested = 0  # judge calls not made: the spend limit was reached
        self._rate: float | None = None  # the dearest price per character of a question paid so far
        self._price: Any = None  # the judge model's price per token, when a limit is to be kept (calls.prices.Price)
        self._max_tokens = spec.params.get("max_tokens")
        self._model = spec.model
        if budget is not None:
            from pytest_orbench.calls.prices import price_of

            self._price = price_of(spec.model, spec.call_kwargs or spec.params)
        self._reserved = 0.0  # what the calls in flight are expected to cost
        self._in_flight = 0
        self._budget_changed: asyncio.Condition | None = None

    def reply(self, key: str | None) -> dict[str, Any] | None:
        return self.store.get(key) if key else None

    def _most(self, prompt: str, text: str) -> float:
        """The most one judge call on this question can cost: its request's tokens (counted, with a tenth more for
        the counter's error) and max_tokens of output, reasoning included (what a provider bills at most), at the
        judge model's price. 0 when the price or max_tokens is unknown."""
        if self._price is None or not isinstance(self._max_tokens, int):
            return 0.0
        from pytest_orbench.run.estimate import count_tokens

        tokens = count_tokens(self._model, self.llm.messages(prompt, text))
        return float(self._price.cost(int(tokens * 1.1) + 8, self._max_tokens))

    async def _reserve(self, size: int, most: float) -> float | str:
        """Room for one more paid judge call of `size` characters within the budget (what it is expected to cost),
        or why it is not made. A call is expected to cost the most it can (`most`: its tokens and max_tokens at the
        judge's price), and at least the dearest price per character paid so far (a judge that bills more for a
        longer reply: the mean of cheaper calls would let it pass the limit); until one is paid, one call at a
        time."""
        assert self.budget is not None
        if self._budget_changed is None:
            self._budget_changed = asyncio.Condition()
        async with self._budget_changed:
            while True:
                if self.cost is None:  # a price litellm does not know: the limit cannot be kept (estimate refuses it)
                    self._in_flight += 1
                    return 0.0
                if self._rate is None and self._in_flight:
                    await self._budget_changed.wait()
                    continue
                expected = max(most, (self._rate or 0.0) * size)
                if self.cost >= self.budget or self.cost + self._reserved + expected > self.budget:
                    if self._in_flight:
                        await self._budget_changed.wait()
                        continue
                    self.not_requested += 1
                    return (f"{NOT_REQUESTED}the run's spend reached the --orbench-max-cost limit ({self.limit}; "
                            f"${self.cost:.4f} spent on flip verification): this judge call was not made")
                self._in_flight += 1
                self._reserved += expected
                return expected

    async def _release(self, expected: float, size: int, cost: float | None) -> None:
        assert self._budget_changed is not None
        async with self._budget_changed:
            self._in_flight -= 1
            self._reserved -= expected
            if cost is not None and size:
                self._rate = max(self._rate or 0.0, cost / size)
            self._budget_changed.notify_all()

    async def _one(self, prompt: str, record: dict[str, Any], gate: asyncio.Semaphore) -> Judgement | str:
        text = str(record.get("text") or "")
        decided = self.judge.decide(prompt, text, record.get("finish_reason"))  # filtered, empty: not a reading
        if decided is not None:
            return decided
        tampered = judge_markup(text) or judge_markup(prompt, "prompt")
        if tampered is not None:
            return tampered
        key = self.llm.key(prompt, text)
        size = len(prompt) + len(text)
        async with gate:
            reserved: float | None = None
            if self.budget is not None and self.store.get(key) is None:
                outcome = await self._reserve(size, self._most(prompt, text))
                if isinstance(outcome, str):
                    return outcome
                reserved = outcome
            cost = None
            try:
                judged, paid = await self.stage.judge(key, prompt, text)
                if paid:
                    self.calls += 1
                    cost = judged.get("cost")
                    self.cost = None if cost is None or self.cost is None else self.cost + float(cost)
                    for name in self.usage:
                        self.usage[name] += int((judged.get("usage") or {}).get(name) or 0)
            except Exception as exc:  # noqa: BLE001 - EndpointError and anything the call raised: counted, never a verdict
                return str(exc)
            finally:
                if reserved is not None:
                    await self._release(reserved, size, None if cost is None else float(cost))
        judgement = self.llm.parse(str(judged.get("text") or ""), judged.get("finish_reason"))
        if judgement.verdict.refused is None:
            return f"the judge gave no class: {judgement.reason}"
        return judgement

    def judge_all(self, questions: list[tuple[str, dict[str, Any]]]) -> list[Judgement | str]:
        async def run() -> list[Judgement | str]:
            gate = asyncio.Semaphore(self.concurrency)
            try:
                return list(await asyncio.gather(*(self._one(p, r, gate) for p, r in questions)))
            finally:
                await self.stage.aclose()

        if not questions:
            return []
        # litellm's calls run on this process's loop (the fetch's run in its own process): a call cut off by the
        # timeout can leave a coroutine of litellm's never awaited, whose RuntimeWarning at garbage collection a
        # `filterwarnings = error` would raise inside pytest's session. It is litellm's, not the run's.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                return asyncio.run(run())
            finally:
                gc.collect()
