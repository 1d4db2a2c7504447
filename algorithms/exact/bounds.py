"""Upper bounds on what any lossless multi-draft verifier can accept (docs/verifiers/bounds.md).

``optimal_acceptance``: Hu et al., "Towards Optimal Multi-Draft Speculative Decoding", ICLR 2025
(arXiv 2502.18779). For K i.i.d. draft tokens x_1..x_K ~ q, the best coupling with Y ~ p
maximises P(Y in {x_1..x_K}); by max-flow/min-cut duality it equals
    alpha* = min_{T ⊆ V} [ p(T) + 1 - q(T)^K ]
(Khisti et al., ICLR 2025, arXiv 2410.18234, give the same value in closed form for K = 2). The
objective p(T) - q(T)^K is minimised over sets that are prefixes of the tokens sorted by
p(x)/q(x) ascending (tokens the target wants less than the draft go in first), so the minimum
over the V + 1 prefix sets is exact, in O(V log V).

``block_bound``: the membership optimal-transport bound for K i.i.d. blocks of length L,
sum_{t<=L} sum_{z in V^t} min(p(z), 1 - (1 - q(z))^K). A lossless verifier accepts the t-prefix
z only if z is some draft's prefix (probability 1 - (1 - q(z))^K) and only as often as the target
emits it (p(z)), and E[tau] = sum_t P(tau >= t).
"""

from __future__ import annotations

import itertools

import numpy as np

from algorithms.exact.checker import joint
from algorithms.exact.models import Context, ToyModel


def _check_law(name: str, a: np.ndarray) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    if a.ndim != 1 or (a < 0).any() or abs(a.sum() - 1.0) > 1e-9:
        raise ValueError(f"optimal_acceptance: {name} must be a probability vector over V tokens")
    return a


def optimal_acceptance(p, q, K: int) -> float:
    """alpha* = min_T [p(T) + 1 - q(T)^K] for K i.i.d. draft tokens (Hu et al. 2025, §7.1)."""
    if not isinstance(K, int | np.integer) or K < 1:
        raise ValueError(f"optimal_acceptance: K must be an integer >= 1, got {K!r}")
    p, q = _check_law("p", p), _check_law("q", q)
    if p.shape != q.shape:
        raise ValueError(f"optimal_acceptance: p and q must have the same shape, got "
                         f"{p.shape} and {q.shape}")
    # Ascending p/q with q = 0 last (ratio +inf); ties keep token order (the objective of a tie
    # group is linear in each member's inclusion, so any order within the group is optimal).
    ratio = np.where(q > 0, p / np.where(q > 0, q, 1.0), np.inf)
    order = np.argsort(ratio, kind="stable")
    p_T = np.concatenate([[0.0], np.cumsum(p[order])])
    q_T = np.minimum(np.concatenate([[0.0], np.cumsum(q[order])]), 1.0)
    return float(min(1.0, (p_T + 1.0 - q_T**K).min()))


def block_bound(P: ToyModel, Q: ToyModel, L: int, K: int, ctx: Context = ()) -> float:
    """sum_{t<=L} sum_z min(p(z), 1 - (1 - q(z))^K): no lossless verifier's E[tau] exceeds it."""
    if L < 1 or K < 1:
        raise ValueError(f"block_bound: L and K must be >= 1, got L={L}, K={K}")
    total = 0.0
    for t in range(1, L + 1):
        for z in itertools.product(range(P.V), repeat=t):
            total += min(joint(P, ctx, z), 1.0 - (1.0 - joint(Q, ctx, z)) ** K)
    return total
