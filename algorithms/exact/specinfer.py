"""Exact one-iteration law of SpecInfer RRS and RRSw (docs/verifiers/specinfer.md; Miao et al. 2024,
Jeon et al. 2024), computed as a recursion over the draft tree.

Enumerating all V^(K L) draft sets is too slow for K = 4, L = 3. It is also unnecessary: given
the accepted prefix, the verifier only ever looks at the survivors' tokens, and the survivors'
continuations are drawn afresh by the drafting scheme given that prefix. So the law of the
suffix emitted below a node depends only on (prefix, number of survivors m): at each node we
enumerate the m survivors' next tokens (at most V^m combinations), run the one-node rule on them
with exact coin probabilities, and recurse into the accepted child with its survivor count. Results
are memoised per (prefix, m).

``replacement=False`` enumerates the same candidates drawn by the without-replacement scheme of
``algorithms.verifiers.specinfer`` (in draft-index order, each draft of a group excludes the
tokens earlier drafts of its group drew; an exhausted support falls back to the plain q).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np

from algorithms.exact.checker import accumulate
from algorithms.exact.token import accept_prob, add_extra, residual

Candidates = tuple[tuple[int, ...], tuple[np.ndarray, ...], float]


def with_replacement(q: np.ndarray, m: int) -> Iterator[Candidates]:
    """m i.i.d. tokens from q: (tokens, the law of each, probability of the tuple)."""
    support = [int(x) for x in np.flatnonzero(q > 0)]
    for tokens in itertools.product(support, repeat=m):
        yield tokens, (q,) * m, float(np.prod([q[x] for x in tokens]))


def sequential_law(q: np.ndarray, drawn: tuple[int, ...]) -> np.ndarray:
    """q restricted to tokens not in ``drawn``, renormalised; q itself once that has no mass."""
    keep = q.copy()
    keep[list(drawn)] = 0.0
    mass = keep.sum()
    return keep / mass if mass > 0 else q


def without_replacement(q: np.ndarray, m: int) -> Iterator[Candidates]:
    """m tokens drawn sequentially without replacement from q (RRSw)."""
    def rec(tokens, laws, prob):
        if len(tokens) == m:
            yield tokens, laws, prob
            return
        law = sequential_law(q, tokens)
        for x in np.flatnonzero(law > 0):
            yield from rec(tokens + (int(x),), laws + (law,), prob * law[x])
    yield from rec((), (), 1.0)


def specinfer_law(P, Q, ctx, state=(), *, L, K=1, replacement=True):
    """{(emitted, ()): prob} of one RRS (or RRSw) iteration with K drafts of length L."""
    if not isinstance(replacement, bool):
        raise ValueError(f"specinfer_law: replacement must be True or False, got {replacement!r}")
    candidates = with_replacement if replacement else without_replacement
    memo: dict[tuple, dict] = {}

    def node(z: tuple[int, ...], m: int) -> dict[tuple[int, ...], float]:
        if (z, m) in memo:
            return memo[(z, m)]
        out: dict = {}
        p = P(ctx + z)
        if len(z) == L:
            add_extra(out, (), 1.0, p)  # bonus after a full block
        else:
            for tokens, laws, prob in candidates(Q(ctx + z), m):
                r, reach = p, prob
                for x, q_j in zip(tokens, laws, strict=True):
                    a = accept_prob(r[x], q_j[x])
                    if a > 0:
                        for s, pr in node(z + (x,), tokens.count(x)).items():
                            accumulate(out, (x,) + s, reach * a * pr)
                    reach *= 1.0 - a
                    r = residual(r, q_j)  # duplicates too: every rejection updates r
                add_extra(out, (), reach, r)  # every trial rejected: correction from r
        memo[(z, m)] = out
        return out

    return {(e, ()): pr for e, pr in node((), K).items()}
