"""The keyword judge adapted to a team's own labels: the shipped logistic model refitted on the labelled
replies, pulled towards its shipped weights (no training data of ours is needed, or shipped), and its
out-of-sample predictions on those labels for the audit.

Why: each model words its refusals its own way. The shipped weights, fitted on other models' replies,
agree 79-94% with people per model; refitting on 100 labelled replies of the model under test gained
~5 pp on the rest of its replies (issue 32; the measurement and the choice of STRENGTH: docs/judges.md).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_orbench.judging.keyword_weights import RefusalModel
from pytest_orbench.judging.labels import Label, labelled, labels_digest

# The pull towards the shipped weights: an L2 penalty (STRENGTH / 2) * |theta - theta_shipped|^2 beside the
# labels' log-loss. Chosen on the dev data (scripts/adaptation_study.py): the strength whose adapted judge
# gained most on the held-out replies of a source, over k = 25..200 labels and every source.
STRENGTH = 0.5
CV_FOLDS = 10
NEWTON_STEPS = 25


@dataclass(frozen=True)
class Example:
    features: frozenset[str]
    refused: bool


def examples_of(labels: Sequence[Label]) -> list[Example]:
    from pytest_orbench.judging.keyword_features import features  # its ~150 patterns: only when labels are read

    return [Example(frozenset(features(label.prompt, label.response)), label.refused) for label in labelled(list(labels))]


def fit(base: RefusalModel, examples: Sequence[Example], strength: float = STRENGTH) -> tuple[float, dict[str, float]]:
    """The intercept and weights that minimise the labels' log-loss plus the pull towards `base`.

    Only the weights of features present in the labels move (the rest stay as shipped); a feature the
    shipped model never weighed starts at 0. Newton's method on a strictly convex objective: deterministic,
    a few ms for a few hundred labels. Each step solves in the space of the labels (the push-through identity
    (s I + S'S)^-1 = (I - S'(s I + SS')^-1 S) / s), not of the features, which are more."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # tiny systems: BLAS threads would only spin
    import numpy as np

    vocabulary = sorted({f for example in examples for f in example.features})
    index = {f: j + 1 for j, f in enumerate(vocabulary)}  # column 0: the intercept
    x = np.zeros((len(examples), len(vocabulary) + 1))
    x[:, 0] = 1.0
    for i, example in enumerate(examples):
        x[i, [index[f] for f in example.features]] = 1.0
    y = np.array([float(e.refused) for e in examples])
    prior = np.array([base.intercept] + [base.weights.get(f, 0.0) for f in vocabulary])
    theta = prior.copy()
    s = float(strength)

    def objective(t: Any) -> float:
        z = x @ t
        return float(np.sum(np.logaddexp(0.0, z) - y * z) + 0.5 * s * np.sum((t - prior) ** 2))

    current = objective(theta)
    for _ in range(NEWTON_STEPS):
        z = x @ theta
        p = 1.0 / (1.0 + np.exp(-np.clip(z, -700, 700)))
        gradient = x.T @ (p - y) + s * (theta - prior)
        d = np.sqrt(np.maximum(p * (1 - p), 1e-12))
        scaled = x * d[:, None]  # S = D^(1/2) X
        inner = s * np.eye(len(examples)) + scaled @ scaled.T
        step = (gradient - scaled.T @ np.linalg.solve(inner, scaled @ gradient)) / s
        # Newton's step can overshoot on a logistic loss far from its minimum: halve it until the objective falls.
        scale = 1.0
        while scale > 1e-4:
            candidate = theta - scale * step
            value = objective(candidate)
            if value <= current:
                break
            scale /= 2
        theta, moved, current = candidate, scale * float(np.max(np.abs(step))), value
        if moved < 1e-9:
            break
    weights = dict(base.weights)
    weights.update({f: float(theta[index[f]]) for f in vocabulary})
    return float(theta[0]), weights


def adapted_model(base: RefusalModel, examples: Sequence[Example], digest: str,
                  strength: float = STRENGTH) -> RefusalModel:
    """`base` refitted on `examples`; its version names the labels (`<base>+labels.<digest>`), so that verdicts
    and baselines made with other labels (or none) are never taken for this judge's."""
    intercept, weights = fit(base, examples, strength)
    meta = {**base.meta, "adapted": {"labels_digest": digest, "labels": len(examples), "strength": strength,
                                     "base_version": base.version}}
    return RefusalModel(f"{base.version}+labels.{digest}", intercept, weights, base.threshold, base.band, meta)


def fold_of(label: Label, folds: int) -> int:
    return int(label.key[:8], 16) % folds


def cross_validated(base: RefusalModel, labels: Sequence[Label], strength: float = STRENGTH,
                    folds: int = CV_FOLDS) -> list[float]:
    """P(refusal) of each labelled row by a judge adapted to the other folds only: what the audit scores.
    A judge scored on its own training labels proves nothing. Folds by the reply's digest: deterministic."""
    rows = labelled(list(labels))
    examples = examples_of(rows)
    folds = max(2, min(folds, len(rows)))
    scores = [0.0] * len(rows)
    for fold in range(folds):
        train = [e for e, label in zip(examples, rows) if fold_of(label, folds) != fold]
        test = [i for i, label in enumerate(rows) if fold_of(label, folds) == fold]
        if not test:
            continue
        model = RefusalModel("cv", *fit(base, train, strength), base.threshold, base.band, {}) if train else base
        for i in test:
            scores[i] = model.score(set(examples[i].features))
    return scores


def adapt(base: RefusalModel, labels: Sequence[Label], strength: float = STRENGTH) -> RefusalModel:
    """The judge's model adapted to the labelled rows of `labels` (the cross-validated audit is apart:
    `cross_validated`, on the process that writes the results only)."""
    rows = labelled(list(labels))
    return adapted_model(base, examples_of(rows), labels_digest(rows), strength)
