"""Pure statistics: Wilson interval, exact McNemar, Newcombe paired interval, detectable effect, Spearman."""

from __future__ import annotations

import math
from statistics import NormalDist

Z95 = NormalDist().inv_cdf(0.975)


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for k successes in n trials (Wilson 1927); (0, 1) when n == 0."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def mcnemar_p(regressed: int, improved: int) -> float:
    """Exact one-sided McNemar p-value: P(X >= regressed), X ~ Binomial(regressed + improved, 1/2)."""
    if regressed + improved == 0:
        return 1.0
    from scipy.stats import binomtest  # scipy costs ~0.3 s to import: only when comparing

    return float(binomtest(regressed, regressed + improved, 0.5, alternative="greater").pvalue)


def paired_diff_ci(both: int, only_current: int, only_baseline: int, neither: int, z: float = Z95) -> tuple[float, float]:
    """95% interval for current rate - baseline rate on paired binary outcomes.

    Newcombe (1998), "Improved confidence intervals for the difference between binomial
    proportions based on paired data", method 10: Wilson limits of each margin combined with
    the phi correlation of the 2x2 table. Good coverage near 0 and 1, unlike Wald.
    """
    n = both + only_current + only_baseline + neither
    if n == 0:
        return (-1.0, 1.0)
    p1 = (both + only_current) / n
    p2 = (both + only_baseline) / n
    l1, u1 = wilson(both + only_current, n, z)
    l2, u2 = wilson(both + only_baseline, n, z)
    margins = (both + only_current) * (only_baseline + neither) * (both + only_baseline) * (only_current + neither)
    phi = (both * neither - only_current * only_baseline) / math.sqrt(margins) if margins else 0.0
    delta = p1 - p2
    dl = math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    du = math.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    return (max(-1.0, delta - dl), min(1.0, delta + du))


def detectable_increase(n: int, alpha: float = 0.05, power: float = 0.8, noise: float = 0.0) -> float:
    """Smallest rate increase a paired (McNemar) comparison of n prompts detects with `power`.

    Connor (1987) sample size for McNemar's test, n = (z_a sqrt(psi) + z_b sqrt(psi - d^2))^2 / d^2,
    solved for d with discordance psi = noise + d: `noise` is the share of prompts that flip
    either way between two runs of the same configuration (0 for a deterministic endpoint).
    """
    if n <= 0:
        return 1.0
    z_a = NormalDist().inv_cdf(1 - alpha)
    z_b = NormalDist().inv_cdf(power)

    def needed(d: float) -> float:
        psi = min(1.0, noise + d)
        return (z_a * math.sqrt(psi) + z_b * math.sqrt(max(0.0, psi - d * d))) ** 2 / (d * d)

    lo, hi = 1e-12, 1.0
    if needed(hi) > n:
        return 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if needed(mid) > n:
            lo = mid
        else:
            hi = mid
    # An exact one-sided binomial test needs at least ceil(log2(1/alpha)) discordant pairs.
    return max(hi, math.ceil(math.log2(1 / alpha)) / n)


def spearman(x: list[float], y: list[float]) -> tuple[float, float]:
    """Spearman rank correlation and its two-sided p-value."""
    if len(x) != len(y) or len(x) < 3:
        raise ValueError("Spearman correlation needs at least 3 paired points")
    from scipy.stats import spearmanr

    result = spearmanr(x, y)
    return float(result.statistic), float(result.pvalue)


def cohen_kappa(a: list[str], b: list[str]) -> float:
    """Cohen's kappa of two raters' labels on the same items (1 = perfect, 0 = chance agreement)."""
    n = len(a)
    if n == 0 or n != len(b):
        raise ValueError("kappa needs two equally long, non-empty label lists")
    observed = sum(1 for x, y in zip(a, b) if x == y) / n
    expected = sum((a.count(c) / n) * (b.count(c) / n) for c in set(a) | set(b))
    if expected == 1:
        return 1.0 if observed == 1 else 0.0
    return (observed - expected) / (1 - expected)


def bootstrap_kappa_ci(a: list[str], b: list[str], resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap 95% interval of Cohen's kappa (items resampled; seeded, so reproducible)."""
    import random

    rng = random.Random(seed)
    n = len(a)
    values = []
    for _ in range(resamples):
        picks = [rng.randrange(n) for _ in range(n)]
        values.append(cohen_kappa([a[i] for i in picks], [b[i] for i in picks]))
    values.sort()
    return values[int(0.025 * resamples)], values[min(resamples - 1, int(0.975 * resamples))]
