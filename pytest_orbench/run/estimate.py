"""Cost before spending: the calls a run would make (store hits excluded), their tokens and their price.

Input tokens are counted with litellm's token counter on the messages that would be sent; output
tokens are an assumption, stated in every estimate (`--orbench-estimate-output-tokens` per reply; 100
per LLM judge verdict). Prices come from `input_cost_per_token` / `output_cost_per_token` in
`litellm_kwargs` (litellm's custom pricing) or else litellm's price table; a model with neither is
"price unknown", never $0. Batch prices are the table's `*_batches` prices where it lists them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pytest_orbench.calls.prices import Price, price_of
from pytest_orbench.judging.registry import unsure_only

if TYPE_CHECKING:
    from pytest_orbench.core.records import BaselineDocument
    from pytest_orbench.fetch.plan import Plan
    from pytest_orbench.judging.judges import Judge
    from pytest_orbench.run.keys import PromptKeys
    from pytest_orbench.run.settings import Settings

JUDGE_OUTPUT_TOKENS = 100  # the judge explains in two or three sentences, then gives the class


@dataclass(frozen=True)
class Part:
    """The calls of one model in a run."""

    what: str  # "endpoint" | "live base" | "judge"
    model: str
    calls: int
    input_tokens: int
    output_tokens: int  # assumed
    price: Price | None
    at_most: bool = False  # hybrid judge: only the replies it cannot decide go to the LLM
    shared: int = 0  # prompts (trials) answered by another's call: an identical prompt's reply
    unit: str = "prompts"  # what `shared` counts ("prompt trials" with --orbench-trials)
    note: str = ""  # how an expected number of calls was estimated (flip verification)

    @property
    def cost(self) -> float | None:
        return self.charge()

    def charge(self, batch: bool = False) -> float | None:
        """USD for these calls (`Price.cost`: with `batch`, the synchronous price where no batch price is
        listed); None without a price."""
        if self.price is None:
            return None if self.calls else 0.0
        return self.price.cost(self.input_tokens, self.output_tokens, batch)

    @property
    def batch_cost(self) -> float | None:
        """USD at the batch prices only; None (with calls) when either is not listed."""
        p = self.price
        if p is None or p.batch_input is None or p.batch_output is None:
            return None if self.calls else 0.0
        return self.charge(batch=True)


def count_tokens(model: str, messages: list[dict[str, str]]) -> int:
    from pytest_orbench.calls.litellm_api import _import_litellm

    return int(_import_litellm().token_counter(model=model, messages=messages))


def endpoint_part(what: str, model: str, system_prompt: str | None, prompts: list[str], output_tokens: int,
                  litellm_kwargs: Mapping[str, Any]) -> Part:
    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    tokens = sum(count_tokens(model, [*system, {"role": "user", "content": text}]) for text in prompts)
    return Part(what, model, len(prompts), tokens, output_tokens * len(prompts), price_of(model, litellm_kwargs))


def judge_part(model: str, questions: list[tuple[str, str | None]], reply_tokens: int, at_most: bool,
               litellm_kwargs: Mapping[str, Any]) -> Part:
    """LLM judge calls: (prompt, stored reply or None for a reply not fetched yet, counted as `reply_tokens`)."""
    from pytest_orbench.judging.llm_judge import LLM_PROMPT

    tokens = 0
    for prompt, reply in questions:
        text = LLM_PROMPT.format(prompt=prompt, reply=reply or "")
        tokens += count_tokens(model, [{"role": "user", "content": text}]) + (0 if reply is not None else reply_tokens)
    return Part("judge", model, len(questions), tokens, JUDGE_OUTPUT_TOKENS * len(questions),
                price_of(model, litellm_kwargs), at_most)


def total(parts: list[Part], batch: bool = False) -> float | None:
    """USD for every part; None when a part with calls has no known price."""
    return _sum([p.batch_cost if batch else p.cost for p in parts])


def run_cost(parts: list[Part], batch: bool) -> float | None:
    """What the run would be charged: with --orbench-batch, the endpoint's batch price (its synchronous
    price where no batch price is listed: an upper bound) and the judge's synchronous one (judge calls
    are not batched); None when a part with calls has no known price."""
    return _sum([p.charge(batch and p.what != "judge") for p in parts])


def _sum(costs: list[float | None]) -> float | None:
    return None if any(c is None for c in costs) else sum(c for c in costs if c is not None)


def usd(value: float | None) -> str:
    return "price unknown" if value is None else f"${value:,.4f}" if value < 1 else f"${value:,.2f}"


def lines(parts: list[Part], output_tokens: int) -> list[str]:
    """The estimate as the terminal shows it."""
    out = [f"orbench estimate (no call made; output assumed: {output_tokens} tokens per reply, "
           f"{JUDGE_OUTPUT_TOKENS} per judge verdict):"]
    for p in parts:
        bound = "at most " if p.at_most else ""
        where = f", priced from {p.price.source}" if p.price else ""
        shared = (f"{p.calls + p.shared:,} {p.unit}, " if p.shared else "") + f"{bound}{p.calls:,} calls" + (
            f" ({p.shared:,} shared a reply with an identical prompt)" if p.shared else "")
        out.append(f"  {p.what} {p.model}: {shared}, {p.input_tokens:,} input + {p.output_tokens:,} "
                   f"output tokens; synchronous {_amount(p.cost, bound, False)}, "
                   f"batch {_amount(p.batch_cost, bound, p.price is not None)}{where}" + (f" ({p.note})" if p.note else ""))
    sync, batch = total(parts), total(parts, batch=True)
    bound = "at most " if any(p.at_most for p in parts) else ""
    out.append(f"  total: synchronous {_amount(sync, bound, False)}, batch {_amount(batch, bound, sync is not None)}")
    return out


def _amount(value: float | None, bound: str, priced: bool) -> str:
    """A cost as shown; a missing one is "not listed" where the model has a price (batch), else unknown."""
    if value is not None:
        return bound + usd(value)
    return "not listed" if priced else usd(None)


def plan_parts(settings: Settings, judge: Judge, plan: Plan) -> list[Part]:
    """The parts of a run's plan: the endpoint's and the live base's calls, and the LLM judge's."""
    from pytest_orbench.judging.llm_calls import reply_text

    s = settings
    parts = []
    for config, what in ((0, "endpoint"), (1, "live base")):
        c = s if config == 0 else s.base
        texts = [r.text for r in plan.misses if r.config == config]  # one per store key: a call each
        if c is None or not texts:
            continue
        if c.target is not None:
            part = Part(what, f"target:{c.target}", len(texts), 0, 0, None)
        else:
            assert c.model is not None
            part = endpoint_part(what, c.model, c.system_prompt, texts, s.estimate_output_tokens, c.litellm_kwargs)
        parts.append(replace(part, shared=plan.shared.get(config, 0), unit="prompts" if s.trials == 1 else "prompt trials"))
    if judge.llm is not None and s.judge_spec is not None:
        questions: list[tuple[str, str | None]] = [(r.text, None) for r in plan.misses]
        questions += [(r.text, reply_text(plan.stored[r.key])) for r in plan.unjudged]
        if questions:
            parts.append(judge_part(s.judge_spec.model, questions, s.estimate_output_tokens, unsure_only(judge.id),
                                    s.judge_spec.call_kwargs))
    return parts


# Without stored replies to measure it on: the share of prompts assumed to flip (Hard-1K's demo example: 114 of
# 1,319 = 8.6% under one cautious sentence; a round, higher figure keeps --orbench-max-cost on the safe side).
DEFAULT_FLIP_SHARE = 0.10
MIN_MEASURED = 20  # stored replies needed to use the measured flip share instead


def run_parts(settings: Settings, judge: Judge, plan: Plan, keys: PromptKeys,
              baseline: BaselineDocument | None, baseline_refused: Mapping[str, bool | None]) -> list[Part]:
    """What the run would cost: the plan's calls, and with --orbench-verify-flips the judge calls expected
    after it (the flip share measured on the stored replies, judged now, against the compared side)."""
    from pytest_orbench.judging.llm_calls import final_judgement

    parts = plan_parts(settings, judge, plan)
    if not settings.verify_flips:
        return parts
    flipped = compared = 0
    prompts = []
    live = settings.base is not None
    for nodeid, requests in keys.requests.items():
        prompt_id, head = keys.prompt_ids[nodeid], requests.head[0]
        prompts.append(head.text)
        mine = plan.stored.get(head.key)
        theirs = (plan.stored.get(requests.base[0].key) if live and requests.base
                  else baseline_refused.get(prompt_id))
        if mine is None or theirs is None or judge.llm is not None:
            continue
        refused = final_judgement(judge, head.text, mine, None).verdict.refused
        other = (final_judgement(judge, head.text, theirs, None).verdict.refused if isinstance(theirs, dict)
                 else theirs)
        if refused is not None and other is not None:
            compared += 1
            flipped += refused != other
    both = live or any(p.get("reply_key") for p in (baseline["prompts"] if baseline else []))
    part = verification_part(settings, prompts, flipped, compared, 2 if both else 1)
    return parts + ([part] if part is not None else [])


def verification_part(settings: Settings, prompts: list[str], flipped: int, compared: int, sides: int) -> Part | None:
    """--orbench-verify-flips: the LLM judge calls expected after the run. The flip share is measured where it
    can be (the stored replies of this configuration judged now, against the compared side's verdicts), else
    assumed (DEFAULT_FLIP_SHARE); each flip is asked once per side whose reply is stored."""
    s = settings
    if not s.verify_flips or s.judge_spec is None or not prompts:
        return None
    from pytest_orbench.judging.llm_judge import LLM_PROMPT

    if compared >= MIN_MEASURED:
        share = flipped / compared
        how = (f"{100 * share:.1f}% of the prompts expected to flip: {flipped} of the {compared} stored replies judged "
               "now differ from the compared side")
    else:
        share = DEFAULT_FLIP_SHARE
        how = (f"{100 * share:.0f}% of the prompts assumed to flip (fewer than {MIN_MEASURED} stored replies to measure "
               "it on)")
    # Rounded up: a cost cap must not pass on "0 calls" when 10% of 5 prompts (0.5) can flip.
    flips = math.ceil(share * len(prompts))
    calls = flips * sides * s.trials
    if not calls:
        return Part("flip verification", s.judge_spec.model, 0, 0, 0, price_of(s.judge_spec.model, s.judge_spec.call_kwargs),
                    note=how)
    prompt_tokens = [count_tokens(s.judge_spec.model, [{"role": "user", "content": LLM_PROMPT.format(prompt=p, reply="")}])
                     for p in prompts[:50]]
    per_call = sum(prompt_tokens) / len(prompt_tokens) + s.estimate_output_tokens  # the reply read: as assumed
    return Part("flip verification", s.judge_spec.model, calls, round(per_call * calls), JUDGE_OUTPUT_TOKENS * calls,
                price_of(s.judge_spec.model, s.judge_spec.call_kwargs),
                note=f"{how}; {'both sides' if sides == 2 else 'this run'} judged, each trial")


def over_limit(settings: Settings, parts: list[Part]) -> str | None:
    """Why a run may not start under --orbench-max-cost (None: it may), with the estimate."""
    assert settings.max_cost is not None
    batch = settings.batch is not None
    cost = run_cost(parts, batch)
    detail = "\n".join(lines(parts, settings.estimate_output_tokens))
    if cost is None:
        unpriced = ", ".join(sorted({p.model for p in parts if p.cost is None}))
        return (f"--orbench-max-cost {usd(settings.max_cost)} needs a price, and litellm has none for {unpriced}: set "
                f"input_cost_per_token and output_cost_per_token (USD) in litellm_kwargs, or drop the limit\n{detail}")
    if cost > settings.max_cost:
        prices = " (batch prices)" if batch else ""
        return (f"this run would cost about {usd(cost)}{prices}, over --orbench-max-cost {usd(settings.max_cost)}; "
                f"nothing was called. Sample (--orbench-sample), select fewer prompts, or raise the limit\n{detail}")
    return None
