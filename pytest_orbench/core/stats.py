"""Pure statistics: Wilson interval (also for refusal shares), exact McNemar, Newcombe paired interval, detectable effect,
Spearman."""

from __future__ import annotations

import math
from typing import Any

Z95 = 1.9599639845400536  # statistics.NormalDist().inv_cdf(0.975) (statistics imports fractions and decimal)


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for k successes in n trials (Wilson 1927); (0, 1) when n == 0."""
    if n == 0:
        return (0.0, 1.0)
    return _wilson_at(k / n, n, z)


def _wilson_at(p: float, n: float, z: float = Z95) -> tuple[float, float]:
    """Wilson score limits for an observed proportion p from n (possibly effective, non-integer) trials.
    At p = 0 or 1 the near limit is exactly 0 or 1 (rounding would leave it at 1e-17, printed in the JSON)."""
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (0.0 if p <= 0 else max(0.0, centre - half), 1.0 if p >= 1 else min(1.0, centre + half))


def mcnemar_p(regressed: int, improved: int) -> float:
    """Exact one-sided McNemar p-value: P(X >= regressed), X ~ Binomial(regressed + improved, 1/2)."""
    if regressed + improved == 0:
        return 1.0
    from scipy.stats import binomtest  # scipy costs ~0.3 s to import: only when comparing

    return float(binomtest(regressed, regressed + improved, 0.5, alternative="greater").pvalue)


def share_interval(shares: list[float], trials: int, z: float = Z95) -> tuple[float, float]:
    """95% interval of a mean refusal share over prompts (each prompt's refused / scored trials).

    Wilson's score interval at the effective sample size (Kish's design effect; Korn & Graubard 1998):
    n_eff = p (1 - p) / var(mean), the number of independent trials that would give the observed
    variance of the mean over prompts, at most the `trials` actually scored (all prompts agreeing,
    or one prompt, leaves no variance to estimate: the trials are then taken as independent). With
    shares of 0 or 1 only it is Wilson(refused, n), the one-trial interval. Unlike a normal interval
    over prompts it is never of zero width and keeps its coverage near 0 and 1 and for few prompts."""
    n = len(shares)
    if n == 0:
        return (0.0, 1.0)
    if all(x in (0.0, 1.0) for x in shares):
        return wilson(sum(1 for x in shares if x == 1.0), n, z)
    mean = sum(shares) / n
    variance = sum((x - mean) ** 2 for x in shares) / (n - 1) if n > 1 else 0.0
    effective = float(trials) if variance == 0 else min(float(trials), mean * (1 - mean) * n / variance)
    return _wilson_at(mean, max(1.0, effective), z)


def paired_share_diff_ci(before: list[float], after: list[float], trials_before: int, trials_after: int,
                         z: float = Z95) -> tuple[float, float]:
    """95% interval for mean(after) - mean(before) on paired refusal shares (repeated trials).

    Newcombe's (1998) method 10 in its general form (MOVER, Zou & Donner 2008): each margin's
    `share_interval`, combined with the Pearson correlation of the paired shares, continuity-corrected
    as in `paired_diff_ci`. With one trial per prompt this is exactly `paired_diff_ci`."""
    n = len(before)
    if n == 0 or n != len(after):
        return (-1.0, 1.0)
    p1, p2 = sum(after) / n, sum(before) / n
    sxx = sum((y - p1) ** 2 for y in after)
    syy = sum((x - p2) ** 2 for x in before)
    sxy = sum((y - p1) * (x - p2) for x, y in zip(before, after))
    # sxy is (ad - bc) / n on binary shares: Newcombe's correction of n/2 is 1/2 here, for one trial per
    # prompt. A share of K trials moves in steps of 1/K, and the correction shrinks with the step.
    steps = max(1.0, max(trials_before, trials_after) / n)
    r = _corrected(sxy, 0.5 / steps) / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else 0.0
    return _mover(p1, share_interval(after, trials_after, z), p2, share_interval(before, trials_before, z), r)


def paired_diff_ci(both: int, only_current: int, only_baseline: int, neither: int, z: float = Z95) -> tuple[float, float]:
    """95% interval for current rate - baseline rate on paired binary outcomes.

    Newcombe (1998), "Improved confidence intervals for the difference between binomial
    proportions based on paired data", method 10: Wilson limits of each margin combined with
    the phi correlation of the 2x2 table, corrected as `_corrected` says. Good coverage near 0
    and 1, unlike Wald.
    """
    n = both + only_current + only_baseline + neither
    if n == 0:
        return (-1.0, 1.0)
    p1 = (both + only_current) / n
    p2 = (both + only_baseline) / n
    margins = (both + only_current) * (only_baseline + neither) * (both + only_baseline) * (only_current + neither)
    phi = _corrected(both * neither - only_current * only_baseline, n / 2) / math.sqrt(margins) if margins else 0.0
    return _mover(p1, wilson(both + only_current, n, z), p2, wilson(both + only_baseline, n, z), phi)


def _corrected(product: float, half_n: float) -> float:
    """The numerator ad - bc of phi, continuity-corrected as Newcombe gives it in Altman et al. (2000),
    Statistics with Confidence, 2nd ed., p. 52: less n/2 when above n/2, 0 up to n/2, as is below 0.
    Uncorrected, no flip among prompts refused half the time made phi 1 and the interval [0, 0]: 20
    unchanged prompts claimed the rate could not have moved at all."""
    return product - half_n if product > half_n else 0.0 if product >= 0 else product


def _mover(p1: float, ci1: tuple[float, float], p2: float, ci2: tuple[float, float], r: float) -> tuple[float, float]:
    """Interval for p1 - p2 from each one's interval and their correlation r (MOVER, Zou & Donner 2008;
    Newcombe 1998 method 10), clipped to [-1, 1]."""
    (l1, u1), (l2, u2) = ci1, ci2
    delta = p1 - p2
    dl = math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * r * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    du = math.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * r * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    return (max(-1.0, delta - dl), min(1.0, delta + du))


def detectable_increase(n: int, alpha: float = 0.05, power: float = 0.8, noise: float = 0.0) -> float:
    """Smallest rate increase a paired (McNemar) comparison of n prompts detects with `power`.

    Connor (1987) sample size for McNemar's test, n = (z_a sqrt(psi) + z_b sqrt(psi - d^2))^2 / d^2,
    solved for d with discordance psi = noise + d: `noise` is the share of prompts that flip
    either way between two runs of the same configuration (0 for a deterministic endpoint).
    """
    if n <= 0:
        return 1.0
    from statistics import NormalDist

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
    return min(1.0, max(hi, math.ceil(math.log2(1 / alpha)) / n))


EXACT_SPEARMAN_MAX = 8  # up to 8! = 40,320 orderings of one sample: enumerated (~0.1 s), not approximated


def spearman(x: list[float], y: list[float]) -> tuple[float, float]:
    """Spearman rank correlation and its two-sided p-value: exact for a few points, where scipy's t approximation
    says p = 0 for three points in a line; the approximation above `EXACT_SPEARMAN_MAX` points.

    The exact p is the share of the n! orderings of x against y whose correlation is at least as far from 0 as the
    observed one. Only one sample is permuted: permuting both (scipy's `permutation_test` given both samples)
    walks (n!)^2 pairings, each of which only repeats one of the n! orderings, and took 569 s for 6 points (issue
    43). Ties take average ranks, as in `scipy.stats.spearmanr`. ValueError when a sample is constant: the
    correlation is then undefined."""
    n = len(x)
    if n != len(y) or n < 3:
        raise ValueError("Spearman correlation needs at least 3 paired points")
    import numpy as np

    # Average ranks doubled and centred are integers, so that the statistic of every ordering compares exactly.
    a = np.array(_centred_ranks(x), dtype=np.int64)
    b = np.array(_centred_ranks(y), dtype=np.int64)
    if not a.any() or not b.any():
        raise ValueError(f"Spearman correlation is undefined: every point has the same {'first' if not a.any() else 'second'} value")
    observed = int(a @ b)
    rho = observed / math.sqrt(float(a @ a) * float(b @ b))
    if n > EXACT_SPEARMAN_MAX:
        from scipy.stats import spearmanr  # ~0.5 s to import: only where it is used

        return rho, float(spearmanr(x, y).pvalue)
    import itertools

    orderings = np.fromiter(itertools.chain.from_iterable(itertools.permutations(a.tolist())), dtype=np.int64)
    products = orderings.reshape(-1, n) @ b
    return rho, float(np.count_nonzero(np.abs(products) >= abs(observed)) / len(products))


def _centred_ranks(values: list[float]) -> list[int]:
    """2 * average rank - (n + 1) of each value (ranks from 1; tied values share their ranks' mean)."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    doubled = [0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for i in order[start:end + 1]:
            doubled[i] = start + end + 2 - (len(values) + 1)  # twice the mean of ranks start+1 .. end+1, centred
        start = end + 1
    return doubled


def cohen_kappa(a: list[str], b: list[str]) -> float | None:
    """Cohen's kappa of two raters' labels on the same items (1 = perfect, 0 = chance agreement).

    None when both raters gave every item one and the same label: chance then explains all the agreement
    and kappa is 0/0, undefined (it was reported as a perfect 1.0)."""
    n = len(a)
    if n == 0 or n != len(b):
        raise ValueError("kappa needs two equally long, non-empty label lists")
    observed = sum(1 for x, y in zip(a, b) if x == y) / n
    expected = sum((a.count(c) / n) * (b.count(c) / n) for c in set(a) | set(b))
    if expected >= 1 - 1e-12:
        return None
    return (observed - expected) / (1 - expected)


def bootstrap_kappa_ci(a: list[str], b: list[str], resamples: int = 2000, seed: int = 0) -> tuple[float, float] | None:
    """Percentile bootstrap 95% interval of Cohen's kappa (items resampled with replacement; seeded).

    Resampling items only changes how often each (a, b) label pair occurs, so each resample is one
    multinomial draw over the pairs' cells and kappa follows from the cell counts: the same distribution
    as drawing item by item, in milliseconds rather than the seconds a few thousand items took that way.
    Resamples where kappa is undefined (one label throughout, see `cohen_kappa`) are left out; None when
    every resample is such (they counted as 1.0, so a few items gave a perfect [1, 1])."""
    import numpy as np

    n = len(a)
    if n == 0 or n != len(b):
        raise ValueError("kappa needs two equally long, non-empty label lists")
    index = {label: i for i, label in enumerate(sorted(set(a) | set(b)))}
    k = len(index)
    cells = np.zeros(k * k)
    for x, y in zip(a, b):
        cells[index[x] * k + index[y]] += 1
    shares = np.random.default_rng(seed).multinomial(n, cells / n, size=resamples).reshape(resamples, k, k) / n
    observed = np.trace(shares, axis1=1, axis2=2)
    expected = (shares.sum(axis=2) * shares.sum(axis=1)).sum(axis=1)
    defined = expected < 1 - 1e-12  # not one label for every item (as cohen_kappa has it)
    kappas = np.sort((observed[defined] - expected[defined]) / (1 - expected[defined]))
    m = len(kappas)
    if m == 0:
        return None
    return float(kappas[int(0.025 * m)]), float(kappas[min(m - 1, int(0.975 * m))])


EXACT_SUPPORT = 4_000_000  # largest support of the exact sign-flip distribution; beyond it, Monte Carlo
MC_DRAWS = 100_000


def sign_flip_p(differences: list[tuple[int, int, int, int]], seed: int = 0) -> tuple[float, float | None]:
    """One-sided paired sign-flip permutation p-value for per-prompt share differences, and its Monte
    Carlo standard error (None when exact).

    Each difference is given as refused/scored trials of the current and the reference run, (a, k, b, m):
    d = a/k - b/m. Under "no change" each prompt's difference is as likely positive as negative, so
    the null distribution of T = sum(d) flips every sign independently; p = P(T* >= T observed). With a
    common denominator the differences are integers, and the distribution is the convolution of one
    ±|d| coin per prompt, computed exactly. With one trial per prompt every d is -1, 0 or +1 and this
    is exactly the one-sided exact McNemar test: P(Binomial(regressed + improved, 1/2) >= regressed).
    """
    import numpy as np

    nonzero = [(a, k, b, m) for a, k, b, m in differences if a * m != b * k]
    if not nonzero:
        return 1.0, None
    denominator = 1
    for _, k, _, m in nonzero:
        denominator = denominator * k // math.gcd(denominator, k)
        denominator = denominator * m // math.gcd(denominator, m)
    values = [(a * (denominator // k)) - (b * (denominator // m)) for a, k, b, m in nonzero]
    observed = sum(values)
    magnitudes: dict[int, int] = {}
    for v in values:
        magnitudes[abs(v)] = magnitudes.get(abs(v), 0) + 1
    support = 2 * sum(abs(v) for v in values) + 1
    if support <= EXACT_SUPPORT:
        # c coins of size v: v * (2 * Binomial(c, 1/2) - c), i.e. Binomial(c, 1/2) on a grid of step 2v.
        from scipy.stats import binom

        dist = np.ones(1)
        offset = 0  # index of T = 0 is `offset`
        for v, count in sorted(magnitudes.items()):
            step = np.zeros(2 * v * count + 1)
            step[:: 2 * v] = binom.pmf(np.arange(count + 1), count, 0.5)
            dist = np.convolve(dist, step) if dist.size * step.size < 5e7 else _fft_convolve(dist, step)
            offset += v * count
        p = float(np.clip(dist[offset + observed:].sum(), 0.0, 1.0))
        return min(1.0, p), None
    rng = np.random.default_rng(seed)
    array = np.asarray(values, dtype=np.float64)
    hits = 0
    for start in range(0, MC_DRAWS, 10_000):
        signs = rng.integers(0, 2, size=(min(10_000, MC_DRAWS - start), array.size), dtype=np.int8) * 2 - 1
        hits += int(((signs @ array) >= observed).sum())
    p = (hits + 1) / (MC_DRAWS + 1)
    return p, math.sqrt(p * (1 - p) / MC_DRAWS)


def _fft_convolve(a: Any, b: Any) -> Any:
    import numpy as np
    from scipy.signal import fftconvolve

    return np.clip(fftconvolve(a, b), 0.0, None)
