"""The small-n paired tests: the sign-flip p, the t interval and Holm against values worked out by
hand, the Monte Carlo branch against an independent enumeration, and mutants of each rule shown
to fail the same checks."""

from __future__ import annotations

import numpy as np
import pytest

from specjax.eval import paired

# Student t 0.975 quantiles from a printed table (not from scipy): df = 5 and df = 2.
T975_DF5 = 2.5706
T975_DF2 = 4.3027


def check_exact_sign_flip_values():
    # [1, 2, 3]: the 8 signed sums are +-6, +-4, +-2, 0, 0; |sum| >= 6 for 2 of them.
    assert paired.sign_flip_p([1, 2, 3]) == 2 / 8
    # Six agreeing prompts: only all-plus and all-minus reach |sum| = 6.
    assert paired.sign_flip_p([1, 1, 1, 1, 1, 1]) == 2 / 64
    # The observed sum 0 is reached by every pattern.
    assert paired.sign_flip_p([1, -1]) == 1.0
    # [3, -1, 2, 0.5]: observed 4.5. Sums by sign of (-1, 2, 0.5) with 3 fixed at +3, and the
    # mirrors: 3 - 1 + 2 + .5 = 4.5, 3 + 1 + 2 + .5 = 6.5, 3 - 1 - 2 + .5 = .5,
    # 3 - 1 + 2 - .5 = 3.5, 3 + 1 - 2 + .5 = 2.5, 3 + 1 + 2 - .5 = 5.5, 3 - 1 - 2 - .5 = -.5,
    # 3 + 1 - 2 - .5 = 1.5. |sum| >= 4.5: 4.5, 6.5, 5.5 and their mirrors: 6 of 16.
    assert paired.sign_flip_p([3, -1, 2, 0.5]) == 6 / 16
    # Zeros flip to themselves: two zeros double the count and the patterns alike.
    assert paired.sign_flip_p([1, 2, 3, 0, 0]) == 8 / 32
    # A tie reached only up to float rounding still counts: [0.1, 0.2, -0.3, 0.9], observed
    # 0.9. Flipping a subset S moves the sum by -2 sum(S); over the 8 subsets of the first three
    # the sums are 0.9, 0.7, 0.5, 1.5, 0.3, 1.3, 1.1 and 0.9 again (S = all three, sum(S) = 0,
    # which binary floats land an ulp away), so 5 reach 0.9, with mirrors 10 of 16.
    assert paired.sign_flip_p([0.1, 0.2, -0.3, 0.9]) == 10 / 16


def check_t_interval():
    d = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]  # mean 3.5, s^2 = 17.5 / 5 = 3.5
    half = T975_DF5 * np.sqrt(3.5) / np.sqrt(6)
    assert paired.t_interval(d) == pytest.approx((3.5 - half, 3.5 + half), abs=1e-3)
    d = [2.0, 4.0, 9.0]  # mean 5, s^2 = (9 + 1 + 16) / 2 = 13
    half = T975_DF2 * np.sqrt(13) / np.sqrt(3)
    assert paired.t_interval(d) == pytest.approx((5 - half, 5 + half), abs=1e-3)


def check_holm():
    # sorted 0.01, 0.03, 0.04 times 3, 2, 1 = 0.03, 0.06, 0.04 -> running max 0.03, 0.06, 0.06
    adjusted, reject = paired.holm([0.01, 0.04, 0.03], alpha=0.05)
    assert adjusted == pytest.approx([0.03, 0.06, 0.06], abs=1e-12)
    assert reject.tolist() == [True, False, False]
    adjusted, reject = paired.holm([0.5, 0.9], alpha=0.05)  # 2 * 0.5 = 1, 0.9 -> max 1
    assert adjusted == pytest.approx([1.0, 1.0]) and not reject.any()


def test_exact_sign_flip_values():
    check_exact_sign_flip_values()


def test_t_interval_matches_the_textbook_formula():
    check_t_interval()
    assert all(np.isnan(paired.t_interval([1.0])))


def test_holm_step_down():
    check_holm()
    adjusted, reject = paired.holm([0.01, float("nan"), 0.03])
    assert adjusted[0] == pytest.approx(0.03) and adjusted[2] == pytest.approx(0.06)
    assert np.isnan(adjusted[1]) and reject.tolist() == [True, False, False]


def _all_sums(d: np.ndarray) -> np.ndarray:
    """Every signed sum, built prompt by prompt (not the module's bit enumeration)."""
    sums = np.zeros(1)
    for x in d:
        sums = np.concatenate([sums + x, sums - x])
    return sums


def test_monte_carlo_branch_agrees_with_exact_enumeration_at_n21():
    d = np.random.default_rng(0).normal(0.5, 1.0, size=21)
    obs = abs(d.sum())
    exact = np.mean(np.abs(_all_sums(d)) >= obs - 1e-9)
    assert 0.01 < exact < 0.5  # a p where the comparison means something
    assert paired.sign_flip_p(d, exact_max_n=21) == pytest.approx(exact, abs=1e-12)
    mc = paired.sign_flip_p(d, n_mc=200_000, seed=1)  # n = 21 > 20: Monte Carlo
    sigma = np.sqrt(exact * (1 - exact) / 200_000)
    assert abs(mc - exact) < 3 * sigma + 1 / 200_001
    assert paired.sign_flip_p(d, seed=1) == mc  # seeded


def test_one_sided_mutant_fails_the_hand_values(monkeypatch):
    monkeypatch.setattr(paired, "_as_extreme", lambda s, o, tol: s >= o - tol)
    assert paired.sign_flip_p([1, 2, 3]) == 1 / 8
    with pytest.raises(AssertionError):
        check_exact_sign_flip_values()


def test_dropping_the_identity_fails_the_hand_values(monkeypatch):
    whole = paired._all_sign_vectors

    def without_identity(n):
        for i, block in enumerate(whole(n)):
            yield block[1:] if i == 0 else block

    monkeypatch.setattr(paired, "_all_sign_vectors", without_identity)
    assert paired.sign_flip_p([1, 1, 1, 1, 1, 1]) == 1 / 64
    with pytest.raises(AssertionError):
        check_exact_sign_flip_values()


def check_rounded_ties_count():
    """A pattern whose |sum| lands an ulp below the observed one is a tie that rounding split
    (whether a given BLAS splits [0.1, 0.2, -0.3, 0.9] depends on its summation order, so the
    tie is built here directly); a pattern 0.1 below is not a tie."""
    below = np.nextafter(0.9, 0.0)
    tol = paired.TIE_RTOL * 2.0  # as sign_flip_p scales it: by sum |d|, 2.0 here
    counted = paired._as_extreme(np.array([0.9, below, -below, 0.8]), 0.9, tol)
    assert counted.tolist() == [True, True, True, False]


def test_exact_float_comparison_mutant_misses_the_rounded_tie(monkeypatch):
    check_rounded_ties_count()
    monkeypatch.setattr(paired, "TIE_RTOL", 0.0)
    with pytest.raises(AssertionError):
        check_rounded_ties_count()


def test_normal_quantile_mutant_fails_the_t_interval(monkeypatch):
    monkeypatch.setattr(paired, "t_quantile", lambda level, df: 1.959964)
    with pytest.raises(AssertionError):
        check_t_interval()


def test_holm_without_the_running_maximum_fails(monkeypatch):
    def no_max(pvalues, alpha=0.05):
        p = np.asarray(pvalues, float)
        order = np.argsort(p)
        adjusted = np.empty(p.size)
        adjusted[order] = np.minimum(1.0, (p.size - np.arange(p.size)) * p[order])
        return adjusted, adjusted <= alpha

    monkeypatch.setattr(paired, "holm", no_max)
    with pytest.raises(AssertionError):
        check_holm()


def _test(diffs, boot):
    return paired.paired_test(diffs, boot)


def test_resolved_needs_every_view_and_holm():
    agree = [1.0, 2.0, 1.5, 3.0, 2.5, 1.0]
    t = _test(agree, (1.8, 1.1, 2.6))
    assert t.p == 2 / 64 and t.t[0] > 0 and t.resolved
    # the same prompts in a family of two: Holm doubles 2/64 past 0.05
    a, b = paired.adjust([t, _test(agree, (1.8, 1.1, 2.6))])
    assert a.p_holm == b.p_holm == 4 / 64 and not a.resolved
    # one prompt of the other sign: the bootstrap and t intervals may exclude 0, p = 4/64 may not
    one_off = [1.0, 2.0, 1.5, 3.0, 2.5, -0.2]
    t = _test(one_off, (1.6, 0.8, 2.4))
    assert t.p == 4 / 64 and t.t[0] > 0 and not t.resolved
    # the intervals on opposite sides, or one containing 0: not resolved whatever p is
    assert not _test(agree, (-1.0, -2.0, -0.5)).resolved
    assert not _test(agree, (1.0, -0.1, 2.0)).resolved
    # negative differences resolve on the negative side
    assert _test([-x for x in agree], (-1.8, -2.6, -1.1)).resolved


def test_scale_maps_the_t_interval_and_keeps_the_sign():
    d = np.log([1.1, 1.2, 1.05, 1.15, 1.3, 1.1])
    t = paired.paired_test(d, (13.0, 8.0, 18.0), scale=lambda x: 100 * np.expm1(x))
    lo, hi = paired.t_interval(d)
    assert t.t == pytest.approx((100 * np.expm1(lo), 100 * np.expm1(hi)))
    assert t.mean == pytest.approx(100 * (np.exp(np.mean(d)) - 1)) and t.resolved
    assert t.as_dict()["resolved"] is True and t.as_dict()["p"] == 2 / 64
