"""Exact one-iteration law of max-ratio importance-sampling selection + speculative sampling per
node (Khisti et al., ICLR 2025, arXiv 2410.18234; see algorithms/verifiers/importance.py).

Independent of the JAX kernel: the selection law s is computed by enumerating every k-tuple of
draws and crediting its top-ranked token (the kernel's ranking key, re-derived here), not from
the F^k - F^-k closed form. Tree recursion as
in ``algorithms.exact.spectr``: the law below a node depends only on (prefix, #survivors).
"""

from __future__ import annotations

import itertools

import numpy as np

from algorithms.exact.checker import accumulate


def ratio_key(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The kernel's ranking key (``algorithms.verifiers.importance.ratio_key``), in NumPy, per
    token: p/q as a float32 (inf where q = 0), -0.0 and subnormals to 0, the float's low 17
    bits dropped."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(q > 0, p / np.where(q > 0, q, 1), np.inf).astype(np.float32)
    ratio[~(ratio >= np.finfo(np.float32).tiny)] = 0.0
    return ratio.view(np.uint32) >> 17


def selected(p: np.ndarray, q: np.ndarray, tokens: tuple[int, ...]) -> int:
    """The top-ranked token of the tuple: the largest ratio key, ties to the larger id."""
    key = ratio_key(p, q)
    return max(tokens, key=lambda x: (int(key[x]), x))


def selection_law_by_enumeration(p: np.ndarray, q: np.ndarray, k: int) -> np.ndarray:
    s = np.zeros_like(q)
    support = [int(x) for x in np.flatnonzero(q > 0)]
    for tokens in itertools.product(support, repeat=k):
        s[selected(p, q, tokens)] += float(np.prod(q[list(tokens)]))
    return s


def importance_law(P, Q, ctx, state=(), *, L, K=1):
    """{(emitted, ()): prob} of one iteration with K i.i.d. drafts of length L."""
    memo: dict[tuple, dict] = {}

    def node(z: tuple[int, ...], m: int) -> dict:
        if (z, m) in memo:
            return memo[(z, m)]
        out: dict = {}
        p = P(ctx + z)

        def emit(y: int, prob: float, survivors: int) -> None:
            if survivors == 0 or len(z) == L:
                accumulate(out, (y,), prob)
                return
            for e, pr in node(z + (y,), survivors).items():
                accumulate(out, (y,) + e, prob * pr)

        if len(z) == L:  # bonus
            for y in np.flatnonzero(p > 0):
                emit(int(y), float(p[y]), 0)
            memo[(z, m)] = out
            return out
        q = Q(ctx + z)
        s = selection_law_by_enumeration(p, q, m)
        res = np.maximum(p - s, 0.0)
        res = res / res.sum() if res.sum() > 0 else p
        support = [int(x) for x in np.flatnonzero(q > 0)]
        for tokens in itertools.product(support, repeat=m):
            reach = float(np.prod(q[list(tokens)]))
            y = selected(p, q, tokens)
            a = 1.0 if p[y] >= s[y] else p[y] / s[y]
            emit(y, reach * a, tokens.count(y))
            for r in np.flatnonzero(res > 0):
                emit(int(r), reach * (1.0 - a) * res[r], tokens.count(int(r)))
        memo[(z, m)] = out
        return out

    return {(e, ()): pr for e, pr in node((), K).items()}
