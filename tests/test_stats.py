"""Statistics against published or independently computed values."""

from __future__ import annotations

import math

import pytest

from pytest_orbench.stats import detectable_increase, mcnemar_p, paired_diff_ci, spearman, wilson


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
    with pytest.raises(ValueError):
        spearman([1, 2], [1, 2])
