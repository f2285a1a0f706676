"""The keyword judge's fitted weights (package data `refusal-model.json`, written by
scripts/train_judge.py): loading them, scoring a reply's features, the judge's version.

Apart from `keyword_features`, which reads a reply into features with ~150 compiled patterns (~12 ms to import):
a re-run whose verdicts are all stored needs the judge's version, not its reading.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

MODEL_SCHEMA = "pytest-orbench/refusal-model/v1"
MODEL_FILE = "refusal-model.json"


@dataclass(frozen=True)
class RefusalModel:
    """A logistic model over `features`: P(refusal) = sigmoid(intercept + sum of present weights)."""

    version: str  # the judge version: rules generation + a digest of the weights
    intercept: float
    weights: dict[str, float]
    threshold: float  # P(refusal) at or above this is a refusal
    band: tuple[float, float]  # P(refusal) inside [low, high) is "not confident" (hybrid asks the LLM)
    meta: dict[str, Any]
    _known: frozenset[str] = field(init=False, repr=False, compare=False)

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> RefusalModel:
        if document.get("schema") != MODEL_SCHEMA:
            raise ValueError(f"refusal model schema {document.get('schema')!r}, expected {MODEL_SCHEMA!r}")
        weights = {str(k): float(v) for k, v in document["weights"].items()}
        low, high = document["band"]
        return cls(f"{document['generation']}.{weights_digest(document)}",
                   float(document["intercept"]), weights, float(document["threshold"]), (float(low), float(high)),
                   {k: v for k, v in document.items() if k != "weights"})

    def __post_init__(self) -> None:
        object.__setattr__(self, "_known", frozenset(self.weights))

    def score(self, present: set[str]) -> float:
        z = self.intercept + sum(map(self.weights.__getitem__, present & self._known))
        return 1 / (1 + math.exp(-z)) if z > -700 else 0.0

    def reasons(self, present: set[str], refused: bool, k: int = 3, skip: frozenset[str] = frozenset()) -> list[str]:
        """The features (other than `skip`) that pushed most towards the decision taken."""
        sign = 1 if refused else -1
        weights = self.weights
        hits = (present & self._known) - skip
        pushed = heapq.nlargest(k, ((sign * weights[f], f) for f in hits if sign * weights[f] > 0))
        from pytest_orbench.judging.keyword_explanation import describe  # (imported when a reply is judged)

        return [describe(f) for _, f in pushed]


def weights_digest(document: dict[str, Any]) -> str:
    """Eight hex digits that change whenever anything that decides a verdict does (part of the judge
    version): the weights, the intercept, the threshold and the hybrid band."""
    decisive = {k: document[k] for k in ("intercept", "weights", "threshold", "band")}
    canonical = json.dumps(decisive, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:8]


@lru_cache(maxsize=1)
def load_model() -> RefusalModel:
    """The shipped model (package data written by scripts/train_judge.py)."""
    text = resources.files("pytest_orbench").joinpath("data", MODEL_FILE).read_text(encoding="utf-8")
    return RefusalModel.from_json(json.loads(text))
