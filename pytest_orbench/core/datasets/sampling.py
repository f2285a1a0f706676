"""Stratified seeded sampling: categories in proportion, and a smaller sample nested in every larger one."""

from __future__ import annotations

import random
from collections import defaultdict

from pytest_orbench.core.datasets.prompts import Prompt


def stratified_sample(prompts: tuple[Prompt, ...], n: int, seed: int, salt: str) -> tuple[Prompt, ...]:
    """`n` prompts, categories in proportion, seeded; original order kept.

    Samples are nested: with the same seed, a smaller sample is part of every larger one, so a run
    of 100 against a baseline sampled at 500 compares all of its 100 prompts. Each category's prompts
    are shuffled by a generator of its own; the sample takes them in that order, one at a time, to the
    category the quota method (Balinski and Young 1975) picks next, which keeps every category's count
    within one of its proportional share at every size."""
    if n >= len(prompts):
        return prompts
    by_category: dict[str, list[int]] = defaultdict(list)
    for index, prompt in enumerate(prompts):
        by_category[prompt.category].append(index)
    for category, indices in by_category.items():
        random.Random(f"{seed}:{salt}:{category}").shuffle(indices)
    counts = _quota_counts({c: len(ix) for c, ix in by_category.items()}, n)
    chosen = [i for c, ix in by_category.items() for i in ix[:counts[c]]]
    return tuple(prompts[i] for i in sorted(chosen))


def _quota_counts(sizes: dict[str, int], n: int) -> dict[str, int]:
    """How many of each category a sample of `n` takes: seats handed out one at a time, each to the
    category with the most members per seat (m / (a + 1)) among those still under their upper quota
    at that size; ties go to the larger category, then to the name. House-monotone and within quota."""
    total = sum(sizes.values())
    counts = dict.fromkeys(sizes, 0)
    for size in range(1, n + 1):
        eligible = [c for c, m in sizes.items() if counts[c] < -(-size * m // total)]
        pick = max(eligible, key=lambda c: (sizes[c] / (counts[c] + 1), sizes[c], c))
        counts[pick] += 1
    return counts
