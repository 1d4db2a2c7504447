"""Exact one-iteration law of token-wise speculative sampling (Leviathan et al. 2023, §2.3)."""

from __future__ import annotations

import numpy as np

from algorithms.exact.checker import accumulate, enumerate_blocks, stateless


def residual(target: np.ndarray, draft: np.ndarray) -> np.ndarray:
    """norm(max(target - draft, 0)); the target itself where that has no mass (a 0-prob branch)."""
    r = np.maximum(target - draft, 0.0)
    s = r.sum()
    return r / s if s > 0 else target


def accept_prob(p: float, q: float) -> float:
    return 1.0 if p >= q else p / q


def add_extra(out: dict, prefix: tuple, prob: float, law: np.ndarray) -> None:
    """Emit ``prefix`` followed by each token y with probability prob * law[y]."""
    for y in np.flatnonzero(law > 0):
        accumulate(out, prefix + (int(y),), prob * law[y])


@stateless
def token_law(P, Q, ctx, *, L, K=1):
    out: dict = {}
    for x, q_block in enumerate_blocks(Q, ctx, L):
        reach = q_block  # probability of this draft and of accepting x[:i]
        for i in range(L):
            p_i, q_i = P(ctx + x[:i]), Q(ctx + x[:i])
            a = accept_prob(p_i[x[i]], q_i[x[i]])
            add_extra(out, x[:i], reach * (1 - a), residual(p_i, q_i))
            reach *= a
        add_extra(out, x, reach, P(ctx + x))
    return out
