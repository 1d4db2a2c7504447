"""Exact one-iteration law of SpecTr with K-SEQ at every node (docs/verifiers/spectr.md; Sun et al.,
NeurIPS 2023), computed as a recursion over the draft tree.

Independent of the JAX verifier: rho* is found with Brent's method in float64 (the JAX code runs
a bracketed Newton search), so a bug in one search cannot hide in the other. Tree
recursion as in ``algorithms.exact.specinfer``: the law below a node depends only on (prefix,
number of survivors m), because the survivors' continuations are i.i.d. q given the prefix.
"""

from __future__ import annotations

import itertools

import numpy as np
from scipy.optimize import brentq

from algorithms.exact.checker import accumulate


def kseq_beta(p: np.ndarray, q: np.ndarray, rho: float) -> float:
    """beta(rho) = sum_x min(q(x), p(x)/rho), the single-trial acceptance mass."""
    return float(np.minimum(q, p / rho).sum())


def kseq_gap(p: np.ndarray, q: np.ndarray, k: int, rho: float) -> float:
    """f(rho) = P_acc(rho) - rho beta(rho); K-SEQ is valid exactly where f <= 0."""
    beta = kseq_beta(p, q, rho)
    return 1.0 - (1.0 - beta) ** k - rho * beta


def kseq_rho(p: np.ndarray, q: np.ndarray, k: int) -> float:
    """rho*: the smallest valid rho in [1, k], by Brent's method (f is non-increasing)."""
    if kseq_gap(p, q, k, 1.0) <= 0:
        return 1.0
    if kseq_gap(p, q, k, float(k)) >= 0:  # only by rounding (Bernoulli: f(k) <= 0)
        return float(k)
    rho = brentq(lambda r: kseq_gap(p, q, k, r), 1.0, float(k), xtol=1e-15, rtol=1e-15)
    while kseq_gap(p, q, k, rho) > 0:  # land on the valid side of the root
        rho = np.nextafter(rho, np.inf)
    return float(rho)


def kseq_acceptance(p: np.ndarray, q: np.ndarray, k: int) -> float:
    """Acceptance probability of K-SEQ at rho*: 1 - (1 - beta(rho*))^k."""
    return 1.0 - (1.0 - kseq_beta(p, q, kseq_rho(p, q, k))) ** k


def spectr_law(P, Q, ctx, state=(), *, L, K=1, bisection_steps=40):
    """{(emitted, ()): prob} of one SpecTr iteration with K i.i.d. drafts of length L.

    ``bisection_steps`` is accepted so that the JAX verifier's options pass through; the exact
    law always uses the exact root rho*.
    """
    if not isinstance(bisection_steps, int) or bisection_steps < 1:
        raise ValueError(
            f"spectr_law: bisection_steps must be an integer >= 1, got {bisection_steps!r}"
        )
    memo: dict[tuple, dict] = {}

    def node(z: tuple[int, ...], m: int) -> dict[tuple[int, ...], float]:
        if (z, m) in memo:
            return memo[(z, m)]
        out: dict = {}
        p = P(ctx + z)

        def emit(y: int, prob: float, survivors: int) -> None:
            if survivors == 0 or len(z) == L:  # correction (or bonus) ends the iteration
                accumulate(out, (y,), prob)
                return
            for s, pr in node(z + (y,), survivors).items():
                accumulate(out, (y,) + s, prob * pr)

        if len(z) == L:
            for y in np.flatnonzero(p > 0):
                emit(int(y), float(p[y]), 0)
            memo[(z, m)] = out
            return out
        q = Q(ctx + z)
        rho = kseq_rho(p, q, m)
        beta = kseq_beta(p, q, rho)
        p_acc = 1.0 - (1.0 - beta) ** m
        accept = np.where(p >= rho * q, 1.0, p / np.where(q > 0, rho * q, 1.0))
        res = np.maximum(p - np.minimum(q, p / rho) * (p_acc / beta if beta > 0 else 0.0), 0.0)
        res = res / res.sum() if res.sum() > 0 else p
        support = [int(x) for x in np.flatnonzero(q > 0)]
        for tokens in itertools.product(support, repeat=m):
            reach = float(np.prod([q[x] for x in tokens]))
            for x in tokens:  # first accepted draft in draft-index order
                emit(x, reach * accept[x], tokens.count(x))
                reach *= 1.0 - accept[x]
            for y in np.flatnonzero(res > 0):  # all rejected: Y from the residual
                emit(int(y), reach * res[y], tokens.count(int(y)))
        memo[(z, m)] = out
        return out

    return {(e, ()): pr for e, pr in node((), K).items()}
