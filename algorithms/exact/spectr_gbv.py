"""Exact one-iteration law of SpecTr-GBV Algorithm 1 as released (docs/verifiers/spectr_gbv.md).

Lin, Sheng, Cai, Zhou, "SpecTr-GBV: Multi-Draft Block Verification Accelerating Speculative
Decoding", arXiv 2604.25925, Algorithm 1 with Eq. 2 (sub-block acceptance h) and Eq. 4
(residual), in the form of the official code: drafts are scanned in order, a rejected sub-block
joins the set H and is never tested again, an accepted sub-block may come from any draft (h is
evaluated on the draft's own joints), the full-block test ignores H and ends the draft loop, and
no cross-iteration fix-up is applied. The port exists to reproduce the paper's numbers and to
measure its bias; the checker, not the paper, decides ``lossless``.

The K drafts are i.i.d. and the scan of draft k only reads the state left by drafts < k, so the
law is a forward recursion over drafts on the distribution of (tau, accepted block, H, done),
each step summing over the V^L blocks of one draft and the coins of its tests.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from algorithms.exact.checker import accumulate, enumerate_blocks, joint

RESIDUALS = ("released", "deficit")


def check_residual(residual: str) -> None:
    if residual not in RESIDUALS:
        raise ValueError(f"spectr_gbv: residual must be one of {RESIDUALS}, got {residual!r}")


def spectr_gbv_law(P, Q, ctx, state=(), *, L, K=1, residual="released"):
    check_residual(residual)
    V = P.V

    def r_ratio(pz: float, qz: float) -> float:
        """r(z) = min(1, q(z)/p(z)), 1 where p(z) = 0 (and q(z) >= p(z))."""
        return 1.0 if qz >= pz else qz / pz

    @cache
    def accepted_mass(z: tuple) -> float:
        """A(z) = p(z) [1 - (1 - r(z))^K], the paper's accepted mass of prefix z."""
        pz, qz = joint(P, ctx, z), joint(Q, ctx, z)
        return pz * (1.0 - (1.0 - r_ratio(pz, qz)) ** K)

    @cache
    def h(y: tuple) -> float:
        """Eq. 2 in code form; clipping is implicit in the caller's ``U < h`` test."""
        q_y = joint(Q, ctx, y)  # C(y) = 1 - (1 - q(y))^K, evaluated without underflow
        cover = 1.0 if q_y >= 1.0 else -np.expm1(K * np.log1p(-q_y))
        if len(y) == L:
            return accepted_mass(y) / cover
        children = sum(accepted_mass(y + (x,)) for x in range(V))
        num, den = accepted_mass(y) - children, cover - children
        return 1.0 if den == 0 else num / den

    def coin(hv: float) -> float:
        """P(U < h) for U ~ U(0, 1)."""
        return min(1.0, max(0.0, hv))

    blocks = list(enumerate_blocks(Q, ctx, L))

    def scan(x, t, tau, acc, H, prob, new: dict):
        """Scan sub-blocks t..L-1 of draft x, then its full-block test."""
        if t == L:
            a = coin(h(x))
            accumulate(new, (L, x, H, True), prob * a)
            accumulate(new, (tau, acc, H, False), prob * (1 - a))
            return
        y = x[:t]
        if y in H:
            scan(x, t + 1, tau, acc, H, prob, new)
            return
        a = coin(h(y))
        if a > 0:
            scan(x, t + 1, t, y, H, prob * a, new)
        if a < 1:
            scan(x, t + 1, tau, acc, H | {y}, prob * (1 - a), new)

    states = {(0, (), frozenset(), False): 1.0}
    for _ in range(K):
        new: dict = {}
        for (tau, acc, H, done), prob in states.items():
            if done:
                accumulate(new, (tau, acc, H, done), prob)
                continue
            for x, qx in blocks:
                scan(x, tau + 1, tau, acc, H, prob * qx, new)
        states = new

    out: dict = {}
    for (_tau, acc, _, done), prob in states.items():
        extra = P(ctx + acc) if done else correction(P, Q, ctx, acc, K, residual)
        for y in np.flatnonzero(extra > 0):
            accumulate(out, (acc + (int(y),), ()), prob * extra[y])
    return out


def correction(P, Q, ctx, y: tuple, K: int, residual: str) -> np.ndarray:
    """Eq. 4 at the accepted block y with joint r(y,x) = min(1, q(y,x)/p(y,x)).

    "released": p(y,x) [1 - r(y,x)^K] (the power on the min, as coded);
    "deficit":  p(y,x) [1 - r(y,x)]^K = p(y,x) - A(y,x).
    Falls back to p(.|y) when the residual has no mass.
    """
    p_y, q_y = joint(P, ctx, y), joint(Q, ctx, y)
    p_yx, q_yx = p_y * P(ctx + y), q_y * Q(ctx + y)
    r = np.where(q_yx >= p_yx, 1.0, q_yx / np.where(p_yx > 0, p_yx, 1.0))
    res = p_yx * (1.0 - r**K) if residual == "released" else p_yx * (1.0 - r) ** K
    s = res.sum()
    return res / s if s > 0 else P(ctx + y)


def first_token_law(law_dict: dict, V: int) -> np.ndarray:
    """Marginal law of the first emitted token of one iteration."""
    out = np.zeros(V)
    for (emitted, _), pr in law_dict.items():
        out[emitted[0]] += pr
    return out
