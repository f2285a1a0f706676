"""Statistics against published or independently computed values."""

from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction

import pytest

from pytest_orbench.core.stats import detectable_increase, mcnemar_p, paired_diff_ci, spearman, wilson


@pytest.mark.parametrize(("k", "n", "lo", "hi"), [
    # Newcombe (1998) table I, Wilson score method without continuity correction.
    (81, 263, 0.2553, 0.3662),
    (15, 148, 0.0624, 0.1605),
    (0, 20, 0.0, 0.1611),
    (1, 29, 0.0061, 0.1718),
])
def test_wilson_matches_newcombe(k: int, n: int, lo: float, hi: float) -> None:
    assert wilson(k, n) == pytest.approx((lo, hi), abs=5e-4)


def test_wilson_empty() -> None:
    assert wilson(0, 0) == (0.0, 1.0)


@pytest.mark.parametrize(("regressed", "improved", "p"), [
    (5, 0, 1 / 32),
    (0, 0, 1.0),
    (0, 5, 1.0),
    (10, 2, sum(math.comb(12, i) for i in range(10, 13)) / 2**12),
])
def test_exact_one_sided_mcnemar(regressed: int, improved: int, p: float) -> None:
    assert mcnemar_p(regressed, improved) == pytest.approx(p)


def test_paired_ci_contains_estimate_and_mirrors() -> None:
    lo, hi = paired_diff_ci(12, 9, 2, 21)
    assert lo < 7 / 44 < hi
    mlo, mhi = paired_diff_ci(12, 2, 9, 21)  # swap the discordant cells: the interval mirrors
    assert (mlo, mhi) == pytest.approx((-hi, -lo))


@pytest.mark.parametrize("trials", [1, 3])
def test_paired_ci_of_unchanged_prompts_refused_half_the_time_is_not_of_zero_width(trials: int) -> None:
    from pytest_orbench.core.stats import paired_share_diff_ci

    # 20 prompts, 10 refused and 10 answered in both runs: no flip, phi 1. Uncorrected, Newcombe's interval
    # was [0, 0] (the two margins' Wilson intervals are symmetric at 50%), as if 20 prompts proved that
    # the rate cannot have moved; 0 flips in 20 leaves up to 16% flipping (Wilson).
    for lo, hi in (paired_diff_ci(10, 0, 0, 10), paired_share_diff_ci([1.0] * 10 + [0.0] * 10, [1.0] * 10 + [0.0] * 10,
                                                                      20 * trials, 20 * trials)):
        assert lo < -0.05 and hi > 0.05
    # By hand (Altman et al. 2000, p. 52): phi = (100 - 20 / 2) / sqrt(10^4) = 0.9, both margins Wilson(10, 20).
    low, high = wilson(10, 20)
    width = math.sqrt((0.5 - low) ** 2 - 2 * 0.9 * (0.5 - low) * (high - 0.5) + (high - 0.5) ** 2)
    assert paired_diff_ci(10, 0, 0, 10) == pytest.approx((-width, width))


def test_paired_ci_contains_zero_without_flips_and_is_tighter_than_unpaired() -> None:
    lo, hi = paired_diff_ci(30, 0, 0, 70)
    assert lo <= 0 <= hi
    lo2, hi2 = paired_diff_ci(30, 10, 0, 60)
    assert lo2 > 0  # ten flips one way on 100 prompts is a real increase


def test_detectable_increase_shrinks_with_n_and_grows_with_noise() -> None:
    small, large = detectable_increase(100), detectable_increase(1000)
    assert 0 < large < small < 1
    assert detectable_increase(1000, noise=0.1) > large
    # A deterministic endpoint: psi = d, so n = (z_a + z_b sqrt(1 - d))^2 / d, about 6.18 / n.
    assert detectable_increase(10_000) == pytest.approx(6.18 / 10_000, rel=0.01)
    # Never below the 5 one-way flips an exact one-sided test needs at alpha 0.05.
    assert detectable_increase(10_000, power=0.5) == pytest.approx(5 / 10_000)


def test_spearman_on_paper_points() -> None:
    rho, p = spearman([1, 2, 3, 4, 5], [2, 1, 4, 3, 5])
    assert rho == pytest.approx(0.8)
    # Exact for few points: 16 of the 120 orderings have |rho| >= 0.8 (scipy's t approximation: 0.104).
    assert p == pytest.approx(16 / 120)
    # Three points in a line: once "p = 0"; two of the six orderings are as extreme.
    assert spearman([0.2, 0.3, 0.4], [0.6, 0.7, 0.8]) == (pytest.approx(1.0), pytest.approx(2 / 6))
    with pytest.raises(ValueError, match="at least 3"):
        spearman([1, 2], [1, 2])
    # Every run at the same rate: undefined, not "nan (p = nan)".
    with pytest.raises(ValueError, match="undefined: every point has the same second value"):
        spearman([0.1, 0.2, 0.3], [0.5, 0.5, 0.5])


def _average_ranks(values: list[Fraction]) -> list[Fraction]:
    return [Fraction(sum(1 for w in values if w < v) * 2 + sum(1 for w in values if w == v) + 1, 2) for v in values]


def _brute_force_spearman(x: list[Fraction], y: list[Fraction]) -> tuple[Fraction, Fraction]:
    """rho^2 with its sign (exact), and the share of the n! orderings of y whose |rho| is at least the observed."""
    def signed_square(ys: tuple[Fraction, ...]) -> Fraction:
        rx, ry = _average_ranks(x), _average_ranks(list(ys))
        mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
        cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
        return (1 if cov >= 0 else -1) * cov * cov / (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))

    observed = signed_square(tuple(y))
    orderings = list(itertools.permutations(y))
    return observed, Fraction(sum(1 for ys in orderings if abs(signed_square(ys)) >= abs(observed)), len(orderings))


@pytest.mark.parametrize("n", [3, 4, 5, 6])
def test_spearman_exact_p_is_the_brute_force_count_of_every_ordering(n: int) -> None:
    # Issue 43: both samples handed to scipy's permutation_test walked (n!)^2 pairings (6 points: 569 s). Each
    # draw, some with ties (average ranks), against a count over every ordering of the other sample, in fractions.
    rng = random.Random(n)
    for draw in range(6):
        x = [Fraction(rng.randrange(n if draw % 2 else 2 * n)) for _ in range(n)]
        y = [Fraction(rng.randrange(n if draw % 3 else 3 * n)) for _ in range(n)]
        if len(set(x)) == 1 or len(set(y)) == 1:
            continue
        square, p = _brute_force_spearman(x, y)
        rho, exact = spearman([float(v) for v in x], [float(v) for v in y])
        assert (rho * abs(rho), exact) == (pytest.approx(float(square)), pytest.approx(float(p))), (x, y)


def test_spearman_of_eight_points_is_exact_and_nine_approximated() -> None:
    # 8 points: 8! = 40,320 orderings, enumerated (once (8!)^2, years). Points in a line: only the line and its
    # reverse are as extreme; one pair swapped: 1 - rho = 6 * 2 / (8 * 63), and 2 * 8 orderings are as extreme
    # (the line, or it with one adjacent pair swapped: 1 + 7 each way).
    line = [float(i) for i in range(8)]
    assert spearman(line, line) == (pytest.approx(1.0), pytest.approx(2 / math.factorial(8)))
    swapped = [1.0, 0.0, *line[2:]]
    assert spearman(line, swapped) == (pytest.approx(1 - 12 / 504), pytest.approx(16 / math.factorial(8)))
    # 9 points: scipy's t approximation, which says 0 for a line.
    assert spearman([*line, 8.0], [*line, 8.0])[1] == pytest.approx(0.0, abs=1e-12)


def test_sign_flip_test_is_exact_mcnemar_with_one_trial() -> None:
    from pytest_orbench.core.stats import sign_flip_p

    for regressed, improved in ((0, 0), (3, 0), (5, 2), (20, 12), (1, 9), (40, 25)):
        diffs = [(1, 1, 0, 1)] * regressed + [(0, 1, 1, 1)] * improved + [(1, 1, 1, 1), (0, 1, 0, 1)] * 5
        p, error = sign_flip_p(diffs)
        assert error is None and p == pytest.approx(mcnemar_p(regressed, improved), rel=1e-9)


def test_sign_flip_test_matches_enumeration_with_shares() -> None:
    import itertools
    import random
    from fractions import Fraction

    from pytest_orbench.core.stats import sign_flip_p

    rng = random.Random(7)
    for k, m in ((3, 3), (3, 2), (5, 4)):
        diffs = [(rng.randint(0, k), k, rng.randint(0, m), m) for _ in range(14)]
        values = [Fraction(a, k_) - Fraction(b, m_) for a, k_, b, m_ in diffs if Fraction(a, k_) != Fraction(b, m_)]
        observed = sum(values)
        hits = sum(sum(s * abs(v) for s, v in zip(signs, values)) >= observed
                   for signs in itertools.product((1, -1), repeat=len(values)))
        assert sign_flip_p(diffs) == (pytest.approx(hits / 2 ** len(values), abs=1e-12), None)


def test_sign_flip_test_falls_back_to_monte_carlo_and_reports_its_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_orbench.core import stats
    diffs = [(2, 3, 0, 3)] * 30 + [(0, 3, 1, 3)] * 20 + [(3, 3, 1, 3)] * 5
    exact, none = stats.sign_flip_p(diffs)
    monkeypatch.setattr(stats, "EXACT_SUPPORT", 10)
    estimate, error = stats.sign_flip_p(diffs)
    assert none is None and error is not None and 0 < error < 0.002
    assert estimate == pytest.approx(exact, abs=4 * error + 1e-5)


# -- intervals at the edges and for refusal shares (repeated trials) ---------------------------------
def _wilson_roots(p: float, n: float, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson's limits as the roots of (p - q)^2 = z^2 q (1 - q) / n, solved by numpy (independent of stats.py)."""
    import numpy as np

    a, b, c = 1 + z * z / n, -(2 * p + z * z / n), p * p
    lo, hi = sorted(float(r.real) for r in np.roots([a, b, c]))
    return max(0.0, lo), min(1.0, hi)


@pytest.mark.parametrize(("k", "n"), [(0, 1), (1, 1), (0, 10), (10, 10), (0, 655), (1319, 1319)])
def test_wilson_edges_are_exact_and_match_scipy(k: int, n: int) -> None:
    from scipy.stats import binomtest

    ci = binomtest(k, n).proportion_ci(method="wilson")
    lo, hi = wilson(k, n)
    assert (lo, hi) == pytest.approx((ci.low, ci.high), abs=1e-12)
    # 0 refusals: the lower limit is 0, not a rounding residue like 2.8e-17 in the JSON; n of n: the upper is 1.
    assert (k > 0 or lo == 0.0) and (k < n or hi == 1.0)


def test_share_interval_with_one_prompt_or_equal_shares_is_the_trials_wilson() -> None:
    from scipy.stats import binomtest

    from pytest_orbench.core.stats import share_interval

    # One prompt asked 3 times, refused once: the old normal interval over prompts was [1/3, 1/3].
    ci = binomtest(1, 3).proportion_ci(method="wilson")
    assert share_interval([1 / 3], 3) == pytest.approx((ci.low, ci.high))
    # Ten prompts, each refused once in 3 trials: no variance between prompts, 10 of 30 trials.
    ci = binomtest(10, 30).proportion_ci(method="wilson")
    assert share_interval([1 / 3] * 10, 30) == pytest.approx((ci.low, ci.high))


def test_share_interval_uses_the_effective_sample_size() -> None:
    from pytest_orbench.core.stats import share_interval

    # Four prompts, shares 1, 1, 1, 2/3 (11 of 12 trials). By hand: mean 11/12, sample variance
    # (3 (1/12)^2 + (3/12)^2) / 3 = 1/36, n_eff = (11/12)(1/12) 4 / (1/36) = 11.
    lo, hi = share_interval([1, 1, 1, 2 / 3], 12)
    assert (lo, hi) == pytest.approx(_wilson_roots(11 / 12, 11), abs=1e-9)
    # The normal interval over 4 prompts said [75.3%, 100%]; 11 of 12 trials cannot rule out 70%.
    assert lo < 0.70 and hi < 1.0
    # Binary shares: the one-trial Wilson interval on prompts.
    assert share_interval([1, 0, 0, 1, 1], 15) == wilson(3, 5)


def test_paired_share_interval_is_newcombe_on_binary_shares_and_never_of_zero_width() -> None:
    from pytest_orbench.core.stats import paired_share_diff_ci

    before = [1.0] * 12 + [0.0] * 2 + [1.0] * 9 + [0.0] * 21  # (both, only current, only baseline, neither) = (12, 9, 2, 21)
    after = [1.0] * 12 + [1.0] * 2 + [0.0] * 9 + [0.0] * 21
    assert paired_share_diff_ci(before, after, 44, 44) == pytest.approx(paired_diff_ci(12, 2, 9, 21))
    # Nothing moved, shares of 3 trials: the old normal interval of the differences was [0, 0].
    shares = [0.0, 1 / 3, 2 / 3, 1.0, 1 / 3, 0.0]
    lo, hi = paired_share_diff_ci(shares, shares, 18, 18)
    assert lo < 0 < hi


def test_paired_share_interval_by_hand() -> None:
    import numpy as np

    from pytest_orbench.core.stats import paired_share_diff_ci

    before = [0.0, 1 / 3, 1 / 3, 2 / 3, 0.0, 1.0, 0.0, 1 / 3]
    after = [1 / 3, 2 / 3, 1 / 3, 1.0, 0.0, 1.0, 1 / 3, 2 / 3]

    def limits(x: list[float]) -> tuple[float, float]:
        p, n = float(np.mean(x)), len(x)
        return _wilson_roots(p, min(3 * n, p * (1 - p) * n / float(np.var(x, ddof=1))))

    p1, p2 = float(np.mean(after)), float(np.mean(before))
    (l1, u1), (l2, u2) = limits(after), limits(before)
    # The Pearson correlation with Newcombe's continuity correction, in steps of one of the 3 trials: 1/6.
    sxy = float(np.sum((np.array(after) - p1) * (np.array(before) - p2)))
    assert sxy > 1 / 6
    r = (sxy - 1 / 6) / math.sqrt(float(np.sum((np.array(after) - p1) ** 2) * np.sum((np.array(before) - p2) ** 2)))
    expected = (p1 - p2 - math.sqrt((p1 - l1) ** 2 - 2 * r * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2),
                p1 - p2 + math.sqrt((u1 - p1) ** 2 - 2 * r * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    assert paired_share_diff_ci(before, after, 24, 24) == pytest.approx(expected, abs=1e-9)


def test_detectable_increase_is_a_rate() -> None:
    # Four prompts cannot reach p < 0.05 (0.5^4 = 0.0625): "any increase" is at most 100 pp, never 125 pp.
    assert detectable_increase(4) == 1.0
    assert detectable_increase(5) == 1.0  # five prompts can only detect all five moving
