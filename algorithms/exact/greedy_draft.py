"""Exact one-iteration law of greedy multi-drafting + its verifier (Hu et al., arXiv 2502.18779).

The pair's law, not the verifier's alone: the drafts are enumerated as the greedy drafter makes
them (``drafting="greedy"``: K-1 fixed top-q tokens at the root, one token from q restricted to
the rest, then every draft continues by sampling q) or as K i.i.d. blocks (``drafting="iid"``,
the default, as for every registered law).
The root's recursive rejection is run exactly per root-token tuple (trial order: the sampled draft
first). What follows an accepted root token x depends only on how many drafts carry x: one (always,
under greedy drafting) continues as an independent q-block verified by BV, whose exact law is
``block_law`` after the context grows by x; several are i.i.d. blocks walked by SpecInfer
(``specinfer_law`` from the same context).
"""

from __future__ import annotations

import itertools

import numpy as np

from algorithms.exact.block import block_law
from algorithms.exact.checker import accumulate, iteration_law
from algorithms.exact.specinfer import specinfer_law
from algorithms.exact.token import add_extra


def top_tokens(q: np.ndarray, n: int) -> list[int]:
    """The n most likely tokens of q, ties to the lower id (the drafter's order); past V the
    order repeats, so K - 1 >= V fixed drafts cover the vocabulary (and the sampled draft then
    falls back to q itself)."""
    order = np.lexsort((np.arange(len(q)), -q))
    return [int(order[i % len(q)]) for i in range(n)]


def greedy_root_law(q: np.ndarray, K: int) -> tuple[list[int], np.ndarray]:
    """(fixed top tokens, law of the sampled draft's root token): q restricted to the rest."""
    fixed = top_tokens(q, K - 1)
    rest = q.copy()
    rest[fixed] = 0.0
    return fixed, (rest / rest.sum() if rest.sum() > 0 else q)


def root_tuples(q: np.ndarray, K: int, drafting: str):
    """(root tokens in draft order, the law each was drawn from, probability of the tuple)."""
    if drafting == "greedy":
        fixed, rest = greedy_root_law(q, K)
        one_hot = [np.eye(len(q))[x] for x in fixed]
        for y in np.flatnonzero(rest > 0):
            yield fixed + [int(y)], one_hot + [rest], float(rest[y])
    elif drafting == "iid":
        support = [int(x) for x in np.flatnonzero(q > 0)]
        for tokens in itertools.product(support, repeat=K):
            yield list(tokens), [q] * K, float(np.prod(q[list(tokens)]))
    else:
        raise ValueError(f"greedy_draft_law: drafting must be 'greedy' or 'iid', got {drafting!r}")


def greedy_draft_law(P, Q, ctx, state=(), *, L, K=1, drafting: str = "iid"):
    """{(emitted, ()): prob} for one iteration of the drafter + verifier pair after ctx.

    ``drafting="iid"`` by default, as every registered exact law (the shared tests sample K
    i.i.d. drafts); ``drafting="greedy"`` is the pair the method is built for."""
    p0 = P(ctx)
    chains: dict[tuple[int, int], dict] = {}

    def chain(x: int, m: int) -> dict:
        """Law of what follows an accepted root token x carried by m drafts: the bonus (L = 1),
        BV on the lone survivor's L - 1 tokens, or SpecInfer on m i.i.d. (L - 1)-blocks."""
        if (x, m) not in chains:
            z = ctx + (x,)
            if L == 1:
                chains[x, m] = {(int(y),): float(P(z)[y]) for y in np.flatnonzero(P(z) > 0)}
            elif m == 1:
                chains[x, m] = iteration_law(block_law, P, Q, L=L - 1, ctx=z)
            else:
                chains[x, m] = iteration_law(specinfer_law, P, Q, L=L - 1, K=m, ctx=z)
        return chains[x, m]

    out: dict = {}
    for tokens, laws, prob in root_tuples(Q(ctx), K, drafting):
        r, reach = p0, prob
        for k in [K - 1] + list(range(K - 1)):
            x, law = tokens[k], laws[k]
            a = 1.0 if r[x] >= law[x] else r[x] / law[x]
            for e, pr in chain(x, tokens.count(x)).items():
                accumulate(out, (x,) + e, reach * a * pr)
            reach *= 1.0 - a
            res = np.maximum(r - law, 0.0)
            r = res / res.sum() if res.sum() > 0 else r
        add_extra(out, (), reach, r)
    return {(e, ()): pr for e, pr in out.items()}
