"""Exact one-iteration law of block verification (Sun et al., ICLR 2025, arXiv 2403.10444).

Written from the paper's sequential definition (Algorithm 2), not from the vectorised JAX kernel:
the weight is the clipped product w_i = min(w_{i-1} p_i(X_i) / q_i(X_i), 1) updated in a loop,
and h_i uses the paper's own denominator S_i + 1 - w_i (Eq. 5). The internal coins are replaced
by their exact probabilities, P(tau = i | draft) = h_i prod_{j>i} (1 - h_j)
(docs/verifiers/block.md), and the extra token by its exact law: the residual of Eq. 4 or the bonus
p(. | X_<=L).
"""

from __future__ import annotations

import numpy as np

from algorithms.exact.checker import enumerate_blocks, stateless
from algorithms.exact.token import add_extra, residual


def clipped_weights(P, Q, ctx, x: tuple[int, ...]) -> list[float]:
    """[w_0, w_1, ..., w_L] along the draft block x."""
    w = [1.0]
    for i, token in enumerate(x):
        p_x, q_x = P(ctx + x[:i])[token], Q(ctx + x[:i])[token]
        w.append(1.0 if w[-1] * p_x >= q_x else w[-1] * p_x / q_x)
    return w


def acceptance(P, Q, ctx, x: tuple[int, ...], w: list[float]) -> list[float]:
    """[h_1, ..., h_L] (index 0 unused, set to 0) of Eq. 5 with the 0-denominator convention."""
    L = len(x)
    h = [0.0]
    for i in range(1, L):
        s = float(np.maximum(w[i] * P(ctx + x[:i]) - Q(ctx + x[:i]), 0.0).sum())
        den = s + 1.0 - w[i]
        h.append(1.0 if den <= 0 else s / den)
    h.append(w[L])
    return h


def tau_law(h: list[float]) -> list[float]:
    """P(tau = i | draft) for i = 0..L when tau = max{i : eta_i <= h_i}."""
    L = len(h) - 1
    out = []
    for i in range(L + 1):
        prob = h[i] if i > 0 else 1.0
        for j in range(i + 1, L + 1):
            prob *= 1.0 - h[j]
        out.append(prob)
    return out


@stateless
def block_law(P, Q, ctx, *, L, K=1):
    """{emitted: prob} for one BV iteration after ctx (single draft only)."""
    if K != 1:
        raise ValueError(f"block_law: K must be 1 (block verification takes one draft), got {K}")
    out: dict = {}
    for x, q_block in enumerate_blocks(Q, ctx, L):
        w = clipped_weights(P, Q, ctx, x)
        h = acceptance(P, Q, ctx, x, w)
        for tau, pr in enumerate(tau_law(h)):
            if pr <= 0:
                continue
            z = ctx + x[:tau]
            law = P(z) if tau == L else residual(w[tau] * P(z), Q(z))
            if law.sum() <= 0:  # zero residual mass: a probability-0 branch, any law will do
                law = P(z)
            add_extra(out, x[:tau], q_block * pr, law)
    return out
