"""Custom judges: a user's `(prompt, reply) -> verdict` function, named by 'package.module:function'."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from pytest_orbench.core.endpoint import LoadError, load_callable
from pytest_orbench.judging.judges import JudgeError, Judgement, Offline, Verdict, delivery

_NAMES = {
    **{v.value: v for v in Verdict if v is not Verdict.ERROR},
    "answer": Verdict.DIRECT_ANSWER, "compliance": Verdict.DIRECT_ANSWER, "complied": Verdict.DIRECT_ANSWER,
    "refusal": Verdict.DIRECT_REFUSAL, "refuse": Verdict.DIRECT_REFUSAL, "refused": Verdict.DIRECT_REFUSAL,
    # judge-eval pairs the human label partial_refusal with indirect_refusal: the same word here means the same.
    "partial_refusal": Verdict.INDIRECT_REFUSAL,
}


def coerce_verdict(value: Any) -> Judgement:
    """A custom judge's return value as a Judgement: Judgement, Verdict, a class name, a bool
    (True = refused), or a (verdict, reason) pair. TypeError/ValueError otherwise."""
    if isinstance(value, Judgement):
        return value
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], str):
        inner = coerce_verdict(value[0])
        return Judgement(inner.verdict, value[1])
    if isinstance(value, bool):
        return Judgement(Verdict.DIRECT_REFUSAL if value else Verdict.DIRECT_ANSWER, "custom judge")
    if isinstance(value, Verdict):
        return Judgement(value, "custom judge")
    if isinstance(value, str) and value.strip().lower() in _NAMES:
        return Judgement(_NAMES[value.strip().lower()], "custom judge")
    raise ValueError(
        f"returned {value!r}; expected a Verdict, one of {', '.join(sorted(_NAMES))}, "
        "True (refused) / False (answered), or a (verdict, reason) pair"
    )


class CustomJudge(Offline):
    """A user's `(prompt, reply) -> verdict` function, named by 'package.module:function' (both parts
    present: `registry.make_judge` checks the form, naming the built-in judges)."""

    def __init__(self, spec: str) -> None:
        try:
            obj = load_callable(spec, "judge", ("prompt", "reply"))
        except LoadError as exc:
            raise JudgeError(str(exc)) from exc
        self.function: Callable[[str, str], Any] = obj
        self.id = f"custom:{spec}"
        # A judge whose rules change should say so: `my_judge.version = "2"` keeps baselines honest.
        self.version = str(getattr(obj, "version", "0"))

    def decide(self, prompt: str, reply: str, finish_reason: str | None = None) -> Judgement:
        delivered = delivery(reply, finish_reason)
        if delivered is not None:
            return delivered
        value = self.function(prompt, reply)
        if inspect.isawaitable(value):
            # An async judge (`async def`, or an async `__call__`), as a target may be: judged where no event
            # loop runs (a prompt test, judge-eval's offline judges), so it gets one of its own.
            value = asyncio.run(_awaited(value))
        return coerce_verdict(value)


async def _awaited(value: Awaitable[Any]) -> Any:
    return await value
