"""Exact one-iteration law of traversal verification, rule B (docs/verifiers/traversal.md).

Weng et al., "Traversal Verification for Speculative Tree Decoding", NeurIPS 2025
(arXiv 2505.12398), Algorithm 3, applied to K i.i.d. drafts merged by shared prefixes with
rule B: every draft through a node u is one trial at u in draft-index order, s_u = q(.|u) is
never renormalised, and a repeated (already deleted) token is a weight-0 trial that still applies
the parent update S = sum (w r - s)_+, r <- (w r - s)_+ / S, w <- S / (S + 1 - w).

Rather than enumerating the V^(K L) draft sets, the law recurses over the draft tree: given that
m drafts pass through u, their next tokens are m i.i.d. draws from q(.|u) and the continuations of
the drafts through each child are again i.i.d. q. The traversal of a child's subtree only feeds
back (its output law, its rejection probability), and the parent's later trials do not depend on
the child's continuations, so the child can be averaged over its continuations on its own.
"""

from __future__ import annotations

import itertools

import numpy as np

from algorithms.exact.checker import accumulate, stateless

# S + 1 - w below this counts as zero (then w <- 1, the block-verification convention).
DEN_EPS = 1e-14


def parent_update(w: float, r: np.ndarray, s: np.ndarray) -> tuple[float, np.ndarray]:
    """Weight and target law of a node after one of its trials was rejected (step 3 of the rule)."""
    res = np.maximum(w * r - s, 0.0)
    S = res.sum()
    den = S + 1.0 - w
    w2 = 1.0 if den <= DEN_EPS else min(1.0, S / den)
    return w2, (res / S if S > 0 else r)


def child_weight(w: float, r: np.ndarray, s: np.ndarray, x: int) -> float:
    return 1.0 if w * r[x] >= s[x] else w * r[x] / s[x]


def traversal_node_law(P, Q, ctx, u, w, m, L, *, update_duplicates=True):
    """({suffix emitted after u: prob}, P(u rejected)), averaged over the m drafts through u.

    ``update_duplicates=False`` is the biased variant docs/verifiers/traversal.md warns about (kept
    for tests).
    """
    if m == 0 or len(u) == L:  # a leaf: its own test, bonus/correction from r_u = p(.|u)
        r = P(ctx + u)
        return {(int(y),): w * r[y] for y in np.flatnonzero(r > 0)}, 1.0 - w
    q_u, p_u = Q(ctx + u), P(ctx + u)
    support = [int(x) for x in np.flatnonzero(q_u > 0)]
    out: dict = {}
    rejected = 0.0
    for seq in itertools.product(support, repeat=m):
        prob = float(np.prod([q_u[x] for x in seq]))
        counts = {x: seq.count(x) for x in seq}
        o, rej = visit_trials(P, Q, ctx, u, w, p_u, q_u, seq, counts, L, update_duplicates)
        for k, v in o.items():
            accumulate(out, k, prob * v)
        rejected += prob * rej
    return out, rejected


def visit_trials(P, Q, ctx, u, w, r, s, seq, counts, L, update_duplicates):
    """The ``visit`` recursion of node u for one realisation of the next tokens of its drafts."""
    out: dict = {}
    reach = 1.0  # probability that every trial so far was rejected
    seen: set[int] = set()
    for x in seq:
        if x not in seen:
            seen.add(x)
            wx = child_weight(w, r, s, x)
            ox, rej_x = traversal_node_law(P, Q, ctx, u + (x,), wx, counts[x], L,
                                           update_duplicates=update_duplicates)
            for k, v in ox.items():
                accumulate(out, (x,) + k, reach * v)
            reach *= rej_x
        elif not update_duplicates:
            continue
        w, r = parent_update(w, r, s)
    # Every child is deleted: u is a leaf now, tested with its final weight and residual.
    for y in np.flatnonzero(r > 0):
        accumulate(out, (int(y),), reach * w * r[y])
    return out, reach * (1.0 - w)


@stateless
def traversal_law(P, Q, ctx, *, L, K=1):
    """Exact law of one traversal-verification iteration over K i.i.d. drafts of length L."""
    out, rejected = traversal_node_law(P, Q, ctx, (), 1.0, K, L)
    assert rejected < 1e-12, "the root is always accepted"
    return out


def traversal_law_skipping_duplicates(P, Q, ctx, state=(), *, L, K=1):
    """The biased variant with no parent update on duplicate trials (a mutant for tests)."""
    out, _ = traversal_node_law(P, Q, ctx, (), 1.0, K, L, update_duplicates=False)
    return {(e, ()): pr for e, pr in out.items()}
