"""The lookahead that maximises Leviathan's walltime improvement, in closed form.

Leviathan et al. (arXiv 2211.17192) §3.5 choose γ numerically. docs/theory.md derives the
continuous optimum of f(γ) = (1 − α^(γ+1)) / ((1 − α)(cγ + 1)) [DERIVED]: with L = −ln α the
stationarity condition L α^(γ+1) (cγ + 1) = c (1 − α^(γ+1)) becomes w e^w = −α^(1/c−1)/e with
w < −1, so

    γ* = (1 + W₋₁(−α^(1/c−1)/e)) / ln α − 1/c        (lower Lambert-W branch; W₀ is spurious).

Numerically we solve v − ln v = m, m = 1 + L(1/c − 1), v = −W₋₁(−e^(−m)), and return
γ* = ln(v)/L − 1, which avoids the cancellation of the first form. scipy's ``lambertw`` (default
tol 1e-8, NaN with tighter tol) only seeds Newton's method on t = v − 1,
t − log1p(t) = m − 1, which then converges to float64 precision (docs/theory.md).

f is quasi-concave on γ >= 0, so the best integer lookahead is among {0, ⌊γ*⌋, ⌈γ*⌉}.
"""

from __future__ import annotations

import numpy as np
from scipy.special import lambertw

from specjax.theory._arguments import check_alpha, check_int, check_positive, scalar_or_array
from specjax.theory.leviathan import speedup

_NEWTON_MAX_STEPS = 60


def _solve_v_minus_log_v(s: np.ndarray) -> np.ndarray:
    """Root t > 0 of t − log1p(t) = s (> 0), i.e. v = 1 + t = −W₋₁(−e^(−1−s)).

    Seeded by scipy's W₋₁ (or v ≈ m + ln m when e^(−m) underflows); the seed is raised to the
    lower bound sqrt(2s) (since t − log1p(t) <= t²/2), from where Newton's method on this convex,
    increasing function converges monotonically after at most one overshoot.
    """
    m = 1.0 + s
    with np.errstate(all="ignore"):
        seed = -lambertw(-np.exp(-m), k=-1).real - 1.0
    fallback = s + np.log(m)
    t = np.where(np.isfinite(seed), seed, fallback)
    t = np.maximum(t, np.sqrt(2.0 * s))
    for _ in range(_NEWTON_MAX_STEPS):
        step = (t - np.log1p(t) - s) * (1.0 + t) / t
        t = t - step
        if (np.abs(step) <= 4 * np.finfo(np.float64).eps * t).all():
            break
    return t


def continuous_optimum(alpha, c):
    """(γ*, f(γ*)): the real lookahead maximising f, and the speedup there [DERIVED].

    Speculation pays (an interior optimum exists) iff −α ln α > c(1 − α); otherwise γ* = 0 and
    f = 1. That never holds for c >= 1 or α = 0. At α = 1 with c < 1, f increases forever:
    γ* = inf and f(γ*) = 1/c (the limit of (γ+1)/(γc+1)).
    """
    a, c = np.broadcast_arrays(check_alpha(alpha), check_positive(c, "c"))
    gamma = np.zeros(a.shape)
    best = np.ones(a.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        L = -np.log(a)
        interior = (a > 0) & (a < 1) & (c < 1) & (a * L > c * (1 - a))
    if interior.any():
        Li, ci, ai = L[interior], c[interior], a[interior]
        t = _solve_v_minus_log_v(Li * (1.0 / ci - 1.0))
        gamma[interior] = np.maximum(np.log1p(t) / Li - 1.0, 0.0)
        best[interior] = Li / (ci * (1.0 - ai) * (1.0 + t))  # f(γ*) = −ln α / (c(1 − α) v)
    unbounded = (a == 1) & (c < 1)
    gamma[unbounded] = np.inf
    best[unbounded] = 1.0 / c[unbounded]
    return scalar_or_array(gamma), scalar_or_array(best)


def optimal_k(alpha, c, k_max: int = 64):
    """(k*, γ*): best integer lookahead in [0, k_max] and the continuous optimum.

    k* = 0 means "do not speculate" (f(0) = 1 beats every k >= 1). Ties go to the smaller k
    (less draft work for the same speedup). γ* is not capped (inf at α = 1, c < 1); k* is: when
    γ* > k_max, f increases on [0, k_max] and k* = k_max. A positive γ* does not imply k* > 0
    (α = 0.3, c = 0.5: γ* = 0.026 but f(1) < 1). Vectorised over broadcastable α and c.
    """
    k_max = check_int(k_max, "k_max", 0)
    a, c = np.broadcast_arrays(check_alpha(alpha), check_positive(c, "c"))
    gamma, _ = continuous_optimum(a, c)
    gamma = np.asarray(gamma, dtype=np.float64)
    capped = np.minimum(gamma, k_max)
    candidates = np.stack([np.zeros(a.shape), np.floor(capped), np.ceil(capped)])
    values = np.asarray(speedup(a, candidates, c))
    k = np.take_along_axis(candidates, np.argmax(values, axis=0)[None], axis=0)[0]
    k = k.astype(np.int64)
    return (int(k) if k.ndim == 0 else k), scalar_or_array(gamma)
