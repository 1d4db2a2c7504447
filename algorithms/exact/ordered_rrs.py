"""Exact one-iteration law of specjax's ordered (order-statistic) RRS tree verifier
(``algorithms/verifiers/ordered_rrs.py`` states the rule, why it is lossless, and why it is not
the two-phase UniVer of arXiv 2605.04543; docs/verifiers/ordered_rrs.md).

Written from the rule, not from the kernel's closed form: at a node, every joint draw of the
survivors' next tokens is enumerated, the candidates are put in trial order (descending token
rank, then draft index), and the law of candidate j given the earlier ones is obtained by
summing the draws that share those earlier candidates. The kernel's Q_j formula is therefore
checked, not reused. Each survivor draws from its own row (``rows``), so the same node function
serves i.i.d. drafts (m copies of q(.|z)) and lookup drafts (one-hot rows, ``ordered_rrs_fixed``).
As in ``specinfer_law``, the suffix below a node depends only on (prefix, survivor count) for
i.i.d. drafts, so nodes are memoised on it.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from algorithms.exact.checker import accumulate
from algorithms.exact.token import accept_prob, add_extra, residual

ORDERS = ("band", "ratio")
EDGES = (0.5, 1.0, 2.0)

History = tuple[tuple[int, int], ...]  # earlier candidates as (token, survivor index)


def node_ranks(p: np.ndarray, q: np.ndarray, order: str) -> np.ndarray:
    """Rank of each token in the node's total order (0 = bottom), from p and the lead's row.

    "band": the number of edges e with p >= e q (q = 0: top band), ties by token id.
    "ratio": ascending p/q (q = 0 counts as +inf), ties by token id.
    """
    if order == "band":
        key = sum((p >= e * q).astype(int) for e in EDGES)
    elif order == "ratio":
        key = np.where(q > 0, p / np.where(q > 0, q, 1.0), np.inf)
    else:
        raise ValueError(f"ordered_rrs: order must be one of {ORDERS}, got {order!r}")
    ranks = np.empty(len(p), dtype=int)
    ranks[np.lexsort((np.arange(len(p)), key))] = np.arange(len(p))
    return ranks


def candidate_law(weights: dict[History, np.ndarray], history: History,
                  rows: Sequence[np.ndarray]) -> np.ndarray:
    """Law of the next candidate's token given ``history``: the draws that share it, summed."""
    w = weights[history]
    return w / w.sum()


def node_outcomes(p: np.ndarray, rows: Sequence[np.ndarray], order: str
                  ) -> tuple[dict[tuple[int, int], float], np.ndarray]:
    """({(accepted token, survivors carrying it): prob}, unnormalised law of the correction)."""
    V = len(p)
    ranks = node_ranks(p, rows[0], order)
    draws = []
    for tokens in itertools.product(*[np.flatnonzero(r > 0) for r in rows]):
        prob = float(np.prod([r[x] for r, x in zip(rows, tokens, strict=True)]))
        trial_order = sorted(range(len(rows)), key=lambda k: (ranks[tokens[k]], k), reverse=True)
        draws.append((tuple(int(x) for x in tokens),
                      tuple((int(tokens[k]), k) for k in trial_order), prob))
    weights: dict[History, np.ndarray] = {}
    for _, seq, prob in draws:
        for j, (x, _) in enumerate(seq):
            weights.setdefault(seq[:j], np.zeros(V))[x] += prob
    accepted: dict[tuple[int, int], float] = {}
    extra = np.zeros(V)
    for tokens, seq, prob in draws:
        r, reach = p, prob
        for j, (x, _) in enumerate(seq):
            law = candidate_law(weights, seq[:j], rows)
            a = accept_prob(r[x], law[x])
            accumulate(accepted, (x, tokens.count(x)), reach * a)
            reach *= 1.0 - a
            r = residual(r, law)
        extra += reach * r
    return accepted, extra


def ordered_rrs_law(P, Q, ctx, state=(), *, L, K=1, order="band"):
    """{(emitted, ()): prob} of one ordered-RRS iteration with K i.i.d. drafts of length L."""
    if order not in ORDERS:
        raise ValueError(f"ordered_rrs: order must be one of {ORDERS}, got {order!r}")
    memo: dict[tuple, dict] = {}

    def node(z: tuple[int, ...], m: int) -> dict[tuple[int, ...], float]:
        if (z, m) in memo:
            return memo[(z, m)]
        out: dict = {}
        p = P(ctx + z)
        if len(z) == L:
            add_extra(out, (), 1.0, p)  # bonus after a full block
        else:
            accepted, extra = node_outcomes(p, [Q(ctx + z)] * m, order)
            for (x, survivors), pr in accepted.items():
                for s, ps in node(z + (x,), survivors).items():
                    accumulate(out, (x,) + s, pr * ps)
            add_extra(out, (), 1.0, extra)  # every survivor rejected: correction from r
        memo[(z, m)] = out
        return out

    return {(e, ()): pr for e, pr in node((), K).items()}


def ordered_rrs_fixed(P, drafts, ctx=(), *, order="band") -> dict:
    """Ordered RRS on a fixed (lookup) draft set: each survivor's row is one-hot at its token."""
    if order not in ORDERS:
        raise ValueError(f"ordered_rrs: order must be one of {ORDERS}, got {order!r}")
    L, V = len(drafts[0]), P.V
    out: dict = {}

    def node(z, prob):
        p = P(ctx + z)
        if len(z) == L:
            add_extra(out, z, prob, p)
            return
        rows = [np.eye(V)[d[len(z)]] for d in drafts if d[:len(z)] == z]
        accepted, extra = node_outcomes(p, rows, order)
        for (x, _), pr in accepted.items():
            node(z + (x,), prob * pr)
        add_extra(out, z, prob, extra)

    node((), 1.0)
    return out


__all__ = ["EDGES", "ORDERS", "candidate_law", "node_outcomes", "node_ranks",
           "ordered_rrs_fixed", "ordered_rrs_law"]
