"""LLM judge calls: made on the fetch loop right after the reply they judge, retried, and stored."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from pytest_orbench.calls.client import call_with_retries
from pytest_orbench.calls.errors import EndpointError
from pytest_orbench.core.store import Store
from pytest_orbench.judging.judges import Judge, Judgement, LLMProtocol


def reply_text(record: dict[str, Any]) -> str:
    return str(record.get("text") or "")


def judge_key(judge: Judge, prompt: str, record: dict[str, Any]) -> str | None:
    """The store key of the LLM judge call this reply needs, or None when the judge decides alone."""
    if judge.llm is None or judge.decide(prompt, reply_text(record), record.get("finish_reason")) is not None:
        return None
    return judge.llm.key(prompt, reply_text(record))


def final_judgement(judge: Judge, prompt: str, record: dict[str, Any], judged: dict[str, Any] | None) -> Judgement:
    """The verdict for a reply: the judge's own, or its parse of the stored LLM judge reply."""
    judgement = judge.decide(prompt, reply_text(record), record.get("finish_reason"))
    if judgement is not None:
        return judgement
    assert judge.llm is not None and judged is not None
    return judge.llm.parse(str(judged.get("text") or ""), judged.get("finish_reason"))


class JudgeStage:
    """Runs the LLM part of a judge inside the fetch loop: store first, then the judge model."""

    def __init__(self, llm: LLMProtocol, store: Store, retries: int, make_caller: Callable[[], Any] | None = None,
                 max_age: float | None = None) -> None:
        self.llm = llm
        self.max_age = max_age  # stored judgements older than this are asked again
        self.store = store
        self.make_caller = make_caller or self._litellm
        self.retries = retries
        self._caller: Any = None
        self._fatal: str | None = None
        self._answered = 0  # judge calls that got a reply: after one, a refused connection is a blip
        # Judge calls in flight by key. The same question can be asked twice at once: K trials that got
        # the same reply, a live base that answered as the head did. It is asked once; the others wait.
        self._asking: dict[str, asyncio.Future[dict[str, Any]]] = {}

    async def judge(self, key: str, prompt: str, reply: str) -> tuple[dict[str, Any], bool]:
        """(judge record, paid for now). Raises EndpointError when the judge call failed."""
        stored = self.store.get(key, self.max_age)
        if stored is not None:
            return stored, False
        asking = self._asking.get(key)
        if asking is not None:  # the same question is being asked: its answer, paid for by that call
            return await asyncio.shield(asking), False
        task = asyncio.ensure_future(self._ask(key, prompt, reply))
        self._asking[key] = task
        task.add_done_callback(lambda done: self._asked(key, done))
        return await asyncio.shield(task), True

    def _asked(self, key: str, task: asyncio.Future[dict[str, Any]]) -> None:
        self._asking.pop(key, None)
        if not task.cancelled():
            task.exception()  # retrieved: its waiters may all have been cancelled (a stopped run)

    async def _ask(self, key: str, prompt: str, reply: str) -> dict[str, Any]:
        if self._fatal is not None:
            raise EndpointError(f"judge not asked: {self._fatal}", retryable=False)
        if self._caller is None:
            self._caller = self.make_caller()
        try:
            result, attempts, seconds = await call_with_retries(
                self._caller.complete, self.llm.messages(prompt, reply), self.retries,
                should_retry=lambda e: e.worth_retrying(self._answered))
        except EndpointError as exc:
            # As for the endpoint (fetcher.FetchLoop): a rejected key, or a judge that cannot be reached or
            # never answers while none of its calls has, is not asked again for every reply.
            if exc.fatal:
                self._fatal = str(exc)
            elif exc.ends_calls(self._answered):
                self._fatal = self._fatal or f"{exc} (no judge call was answered, so no more are made)"
            raise EndpointError(f"judge call failed: {exc}", retryable=False) from None
        self._answered += 1
        record: dict[str, Any] = result.record()
        record["seconds"] = round(seconds, 3)
        record["attempts"] = attempts
        self.store.put(key, record)
        return record

    def _litellm(self) -> Any:
        from pytest_orbench.calls.litellm_api import LiteLLMCaller
        from pytest_orbench.calls.rejections import JUDGE

        return LiteLLMCaller(self.llm.spec, knobs=JUDGE)

    async def aclose(self) -> None:
        for task in list(self._asking.values()):
            task.cancel()
        if self._caller is not None:
            await self._caller.aclose()


def judge_stage(judge: Judge, store: Store, retries: int, max_age: float | None = None) -> JudgeStage | None:
    """The stage that makes a judge's LLM calls, or None for judges that read replies themselves."""
    return JudgeStage(judge.llm, store, retries, max_age=max_age) if judge.llm is not None else None
