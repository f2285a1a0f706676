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


def test_sign_flip_test_is_exact_mcnemar_with_one_trial() -> None:
    from pytest_orbench.stats import sign_flip_p

    for regressed, improved in ((0, 0), (3, 0), (5, 2), (20, 12), (1, 9), (40, 25)):
        diffs = [(1, 1, 0, 1)] * regressed + [(0, 1, 1, 1)] * improved + [(1, 1, 1, 1), (0, 1, 0, 1)] * 5
        p, error = sign_flip_p(diffs)
        assert error is None and p == pytest.approx(mcnemar_p(regressed, improved), rel=1e-9)


def test_sign_flip_test_matches_enumeration_with_shares() -> None:
    import itertools
    import random
    from fractions import Fraction

    from pytest_orbench.stats import sign_flip_p

    rng = random.Random(7)
    for k, m in ((3, 3), (3, 2), (5, 4)):
        diffs = [(rng.randint(0, k), k, rng.randint(0, m), m) for _ in range(14)]
        values = [Fraction(a, k_) - Fraction(b, m_) for a, k_, b, m_ in diffs if Fraction(a, k_) != Fraction(b, m_)]
        observed = sum(values)
        hits = sum(sum(s * abs(v) for s, v in zip(signs, values)) >= observed
                   for signs in itertools.product((1, -1), repeat=len(values)))
        assert sign_flip_p(diffs) == (pytest.approx(hits / 2 ** len(values), abs=1e-12), None)


def test_sign_flip_test_falls_back_to_monte_carlo_and_reports_its_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_orbench import stats

    diffs = [(2, 3, 0, 3)] * 30 + [(0, 3, 1, 3)] * 20 + [(3, 3, 1, 3)] * 5
    exact, none = stats.sign_flip_p(diffs)
    monkeypatch.setattr(stats, "EXACT_SUPPORT", 10)
    estimate, error = stats.sign_flip_p(diffs)
    assert none is None and error is not None and 0 < error < 0.002
    assert estimate == pytest.approx(exact, abs=4 * error + 1e-5)
