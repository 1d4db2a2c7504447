"""Exact one-iteration law of HSD as released (arXiv 2601.05724; see algorithms/verifiers/hsd.py).

Written from the step-back description with joint prefix probabilities computed directly
(P_t = joint(P, ctx, x[:t])), not from the JAX kernel's log-space cumsums. The backward search's
coins are replaced by P(tau = t | draft) = h_t prod_{j>t} (1 - h_j), reusing BV's tau law (the
same "largest t whose coin passes" structure), and the extra token by its exact law.
"""

from __future__ import annotations

import numpy as np

from algorithms.exact.block import clipped_weights, tau_law
from algorithms.exact.checker import accumulate, enumerate_blocks, joint
from algorithms.exact.token import add_extra


def hsd_weights(P, Q, ctx, x, variant: str) -> list[float]:
    """[w_0..w_L]: min(1, P_t/Q_t) (released) or BV's clipped running weight (simulation)."""
    if variant == "simulation":
        return clipped_weights(P, Q, ctx, x)
    if variant != "released":
        raise ValueError(f"hsd_law: unknown variant {variant!r}")
    out = []
    for t in range(len(x) + 1):
        p_t, q_t = joint(P, ctx, x[:t]), joint(Q, ctx, x[:t])
        out.append(1.0 if p_t >= q_t else p_t / q_t)
    return out


def hsd_stop_probs(P, Q, ctx, x, w, variant: str) -> list[float]:
    """[h_0..h_L]: h_0 = 1 (unused), h_t = excess/deficit at branch t, h_L = min(1, P_L/Q_L)."""
    L = len(x)
    h = [1.0]
    for t in range(1, L):
        z = ctx + x[:t]
        excess = float(np.maximum(w[t] * P(z) - Q(z), 0.0).sum())
        deficit = float(np.maximum(Q(z) - w[t] * P(z), 0.0).sum())
        ht = 1.0 if deficit <= 0 else min(1.0, excess / deficit)
        if variant == "released" and joint(P, ctx, x[:t + 1]) >= joint(Q, ctx, x[:t + 1]):
            ht = 1.0
        h.append(ht)
    p_L, q_L = joint(P, ctx, x), joint(Q, ctx, x)
    h.append(1.0 if p_L >= q_L else p_L / q_L)
    return h


def hsd_law(P, Q, ctx, state=(), *, L, K=1, variant: str = "released"):
    """{(emitted, ()): prob} for one HSD iteration after ctx (single draft, stateless)."""
    if K != 1:
        raise ValueError(f"hsd_law: K must be 1 (HSD takes one draft), got {K}")
    out: dict = {}
    for x, q_block in enumerate_blocks(Q, ctx, L):
        w = hsd_weights(P, Q, ctx, x, variant)
        h = hsd_stop_probs(P, Q, ctx, x, w, variant)
        for tau, pr in enumerate(tau_law(h)):
            if pr <= 0:
                continue
            z = ctx + x[:tau]
            if tau == L:
                add_extra(out, x, q_block * pr, P(z))
                continue
            r = np.maximum(w[tau] * P(z) - Q(z), 0.0)
            if r.sum() <= 0:  # the released code then emits x_<=tau+1 with no extra token
                accumulate(out, x[:tau + 1], q_block * pr)
            else:
                add_extra(out, x[:tau], q_block * pr, r / r.sum())
    return {(e, ()): pr for e, pr in out.items()}
