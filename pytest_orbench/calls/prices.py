"""Model prices per token: litellm's custom pricing in litellm_kwargs, or else litellm's price table.

A model with neither has no price ("price unknown"), never $0. Batch prices are the `*_batches` prices
(custom pricing: `input_cost_per_token_batches` / `output_cost_per_token_batches`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Price:
    """USD per token."""

    input: float
    output: float
    batch_input: float | None
    batch_output: float | None
    source: str  # "litellm_kwargs" | "litellm price table"

    def cost(self, input_tokens: int, output_tokens: int, batch: bool = False) -> float:
        """USD for these tokens; with `batch`, at the batch prices, or the synchronous ones where no
        batch price is listed (an upper bound)."""
        cost_in = self.batch_input if batch and self.batch_input is not None else self.input
        cost_out = self.batch_output if batch and self.batch_output is not None else self.output
        return input_tokens * cost_in + output_tokens * cost_out


def price_of(model: str, litellm_kwargs: Mapping[str, Any]) -> Price | None:
    """The model's price per token: custom pricing in litellm_kwargs first, then litellm's table."""
    custom_in, custom_out = litellm_kwargs.get("input_cost_per_token"), litellm_kwargs.get("output_cost_per_token")
    if isinstance(custom_in, (int, float)) and isinstance(custom_out, (int, float)):
        batch_in, batch_out = (litellm_kwargs.get(f"{k}_cost_per_token_batches") for k in ("input", "output"))
        return Price(float(custom_in), float(custom_out), _number(batch_in), _number(batch_out), "litellm_kwargs")
    from pytest_orbench.calls.litellm_api import _import_litellm

    litellm = _import_litellm()
    try:
        info = litellm.get_model_info(model)
    except Exception:  # litellm raises its own exception types for unmapped models
        return None
    cost_in, cost_out = info.get("input_cost_per_token"), info.get("output_cost_per_token")
    if cost_in is None or cost_out is None or (cost_in == 0 and cost_out == 0):
        return None  # a hosted model the table lists at $0 has no price there, not a free one
    return Price(float(cost_in), float(cost_out), info.get("input_cost_per_token_batches"),
                 info.get("output_cost_per_token_batches"), "litellm price table")


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
