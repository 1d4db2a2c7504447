"""Expected tokens, walltime speedup and operation count of single-draft speculative decoding.

Leviathan, Kalman, Matias, "Fast Inference from Transformers via Speculative Decoding", ICML 2023
(arXiv 2211.17192), §3. All formulas here are [SRC] (read in the paper) unless tagged otherwise.

Assumption behind every formula (the paper's own simplification): the per-token acceptance
probabilities β are i.i.d. with mean α, so an iteration's emitted count n is geometric capped at
k + 1. Real acceptances are correlated along a sequence; treat the numbers as a model.

Numerics: ``1 - α^(k+1)`` and ``1 - α`` are formed as ``-expm1((k+1) ln α)`` and ``-expm1(ln α)``
so α close to 1 and large k keep full float64 precision; α = 1 is the limit k + 1.
"""

from __future__ import annotations

import numpy as np
from jaxtyping import Float
from scipy import optimize

from specjax.theory._arguments import (
    as_float_array,
    check_alpha,
    check_k,
    check_positive,
    scalar_or_array,
)


def expected_tokens(alpha, k):
    """E[n] = (1 − α^(k+1)) / (1 − α): mean tokens one iteration emits (Leviathan eq. 1).

    n counts the accepted draft prefix plus the one correction or bonus token, so k = 0 (no
    speculation) gives 1 and α = 1 gives k + 1. Vectorised over broadcastable ``alpha``, ``k``.
    """
    a, k = check_alpha(alpha), check_k(k)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_a = np.log(a)  # -inf at α = 0, where the ratio below is exactly 1
        ratio = np.expm1((k + 1) * log_a) / np.expm1(log_a)
    return scalar_or_array(np.where(a == 1, k + 1, ratio))


def speedup(alpha, k, c):
    """f(k) = (1 − α^(k+1)) / ((1 − α)(k c + 1)): walltime improvement (Leviathan Thm 3.8).

    ``c`` is the time of one draft forward over one target forward. Assumes the k + 1 target
    positions are scored in one pass at the cost of one forward (batch 1, memory bound); see
    ``specjax.theory.batch`` for what happens when that stops holding.
    """
    a, k, c = check_alpha(alpha), check_k(k), check_positive(c, "c")
    return scalar_or_array(np.asarray(expected_tokens(a, k)) / (k * c + 1))


def operations_factor(alpha, k, c_hat):
    """Growth of total arithmetic, (k ĉ + k + 1)(1 − α)/(1 − α^(k+1)) (Leviathan Thm 3.11).

    ``c_hat`` is the draft-to-target ratio of operations per token; ĉ = 0 (negligible draft) is
    allowed here because Leviathan's Table 1 uses it.
    """
    a, k = check_alpha(alpha), check_k(k)
    c_hat = as_float_array(c_hat, "c_hat")
    if not (np.isfinite(c_hat) & (c_hat >= 0)).all():
        raise ValueError(f"c_hat must be finite and >= 0, got {c_hat}")
    return scalar_or_array((k * c_hat + k + 1) / np.asarray(expected_tokens(a, k)))


def token_acceptance_rate(alpha, k):
    """TAR = E[τ]/k with E[τ] = E[n] − 1 = α(1 − α^k)/(1 − α) [DERIVED from eq. 1].

    The fraction of drafted tokens accepted, which is what engines such as DeepSpeed report.
    """
    k = check_k(k)
    if (k < 1).any():
        raise ValueError(f"k must be >= 1 for a token acceptance rate, got {k.min()}")
    return scalar_or_array((np.asarray(expected_tokens(alpha, k)) - 1) / k)


def alpha_from_tar(tar: float, k: int) -> float:
    """Invert ``token_acceptance_rate`` by bracketing (it increases from 0 to 1 in α).

    SDSL [2ND] obtains α this way from TARs measured at several lookaheads.
    """
    tar = float(check_alpha(tar, "tar"))
    if tar in (0.0, 1.0):
        return tar
    return optimize.brentq(lambda a: token_acceptance_rate(a, k) - tar, 0.0, 1.0, xtol=1e-15)


def acceptance_rate(p: Float[np.ndarray, "*B V"], q: Float[np.ndarray, "*B V"]) -> float:
    """α = E[Σ_x min(p(x), q(x))] = 1 − E[TV(p, q)] over a batch of law pairs (Cor. 3.6).

    ``p`` (target) and ``q`` (draft) are laws on the last axis; the mean runs over every leading
    axis, i.e. over the contexts the batch samples.
    """
    p, q = as_float_array(p, "p"), as_float_array(q, "q")
    if p.shape != q.shape or p.ndim < 1:
        raise ValueError(f"p and q must be laws of the same shape [..., V], got {p.shape}, "
                         f"{q.shape}")
    for name, law in (("p", p), ("q", q)):
        if (law < 0).any() or not np.allclose(law.sum(-1), 1.0, atol=1e-6):
            raise ValueError(f"{name} must be non-negative with rows summing to 1")
    return float(np.minimum(p, q).sum(-1).mean())
