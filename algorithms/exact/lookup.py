"""Exact laws for deterministic (lookup) drafts: K fixed blocks per context, one-hot q.

Prompt lookup (``specjax.drafters.NgramDrafter``) proposes K distinct blocks, or duplicates, that
are fixed functions of the context. They are not K i.i.d. draws from one law, so the i.i.d. exact
laws (which enumerate draws from a shared Q) do not apply. Here the draft set is given, every
draft's q is one-hot at its own token, and the only randomness is the verifier's coins; each law
below follows the verifier's stated rule for that input, in float64, written from the papers'
pseudocode (docs/verifiers/: specinfer, spectr, multipath_block, traversal pages; ordered_rrs,
specjax's own rule, from its page), not from the JAX kernels.

A fixed-draft law is ``law(P, drafts, ctx) -> {emitted: prob}`` for one iteration;
``lookup_multi_iteration_law`` composes iterations with ``drafts = lookup(ctx)`` the way the
engine does, and ``lookup_lossless_tv`` compares the result with the target law over V^N.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from algorithms.exact.block import block_law
from algorithms.exact.checker import accumulate, target_law, total_variation
from algorithms.exact.models import Context, ToyModel, _ctx_rng
from algorithms.exact.multipath_block import node_order
from algorithms.exact.ordered_rrs import ordered_rrs_fixed
from algorithms.exact.spectr import kseq_beta, kseq_rho
from algorithms.exact.token import residual
from algorithms.exact.traversal import parent_update

Drafts = tuple[tuple[int, ...], ...]
FixedLaw = Callable[..., dict[tuple[int, ...], float]]


class LookupDrafts:
    """K deterministic blocks of length L per context, seeded by md5(seed:ctx) like the models.

    ``duplicates=0``: K distinct blocks (they may share prefixes). ``duplicates=d``: the last d
    drafts repeat draft 0, as the n-gram drafter does when it finds fewer than K matches.
    """

    def __init__(self, V: int, K: int, L: int, seed: int = 0, duplicates: int = 0):
        if not 0 <= duplicates < K or K > V**L:
            raise ValueError(f"LookupDrafts: need 0 <= duplicates < K <= V^L, got K={K}, "
                             f"duplicates={duplicates}, V={V}, L={L}")
        self.V, self.K, self.L, self.seed, self.duplicates = V, K, L, seed, duplicates
        self._memo: dict[Context, Drafts] = {}

    def __call__(self, ctx: Context) -> Drafts:
        ctx = tuple(ctx)
        if ctx not in self._memo:
            rng = _ctx_rng(f"lookup{self.seed}", ctx)
            blocks: list[tuple[int, ...]] = []
            while len(blocks) < self.K - self.duplicates:
                b = tuple(int(x) for x in rng.integers(0, self.V, self.L))
                if b not in blocks:
                    blocks.append(b)
            self._memo[ctx] = tuple(blocks + [blocks[0]] * self.duplicates)
        return self._memo[ctx]

    def first_draft_model(self) -> ToyModel:
        """Draft 0 as a one-hot ToyModel: K = 1 lookup drafting for the i.i.d. laws (one draw
        from a one-hot law is both i.i.d. and deterministic)."""
        lookup = self

        class FirstDraft(ToyModel):
            def law(self, ctx):
                # ctx = context + z; find the split whose draft 0 extends to z (longest prefix).
                for cut in range(len(ctx), max(len(ctx) - lookup.L, -1), -1):
                    base, z = ctx[:cut], ctx[cut:]
                    block = lookup(base)[0]
                    if block[:len(z)] == z and len(z) < lookup.L:
                        return np.eye(lookup.V)[block[len(z)]]
                return np.full(lookup.V, 1.0 / lookup.V)  # off the draft: never reached

        return FirstDraft(self.V)


def one_hot(V: int, x: int) -> np.ndarray:
    return np.eye(V)[x]


def survivors_at(drafts: Drafts, z: tuple[int, ...]) -> list[int]:
    return [k for k, d in enumerate(drafts) if d[:len(z)] == z]


def specinfer_fixed(P, drafts: Drafts, ctx: Context = ()) -> dict:
    """RRS with per-draft one-hot laws; the walk stops when every trial fails."""
    L, V = len(drafts[0]), P.V
    out: dict = {}

    def node(z, prob):
        p = P(ctx + z)
        if len(z) == L:
            for y in np.flatnonzero(p > 0):
                accumulate(out, z + (int(y),), prob * p[y])
            return
        r, reach = p, prob
        for k in survivors_at(drafts, z):
            x = drafts[k][len(z)]
            a = min(1.0, r[x])  # min(1, r(x) / q_k(x)) with q_k(x) = 1
            if a > 0:
                node(z + (x,), reach * a)
            reach *= 1.0 - a
            r = residual(r, one_hot(V, x))
        for y in np.flatnonzero(r > 0):
            accumulate(out, z + (int(y),), reach * r[y])

    node((), 1.0)
    return out


def spectr_fixed(P, drafts: Drafts, ctx: Context = ()) -> dict:
    """SpecTr's walk: K-SEQ at a node whose survivors all carry the same one-hot
    q (they agree on the next token), per-draft RRS otherwise; continue while Y matches one."""
    L, V = len(drafts[0]), P.V
    out: dict = {}

    def node(z, prob):
        p = P(ctx + z)
        if len(z) == L:
            for y in np.flatnonzero(p > 0):
                accumulate(out, z + (int(y),), prob * p[y])
            return
        alive = survivors_at(drafts, z)
        tokens = [drafts[k][len(z)] for k in alive]
        law_y = np.zeros(V)  # the node's output law of Y
        if len(set(tokens)) == 1:  # K-SEQ with q = delta_x and m i.i.d. copies of x
            x, m = tokens[0], len(tokens)
            q = one_hot(V, x)
            rho = kseq_rho(p, q, m)
            beta = kseq_beta(p, q, rho)
            p_acc = 1.0 - (1.0 - beta) ** m
            law_y[x] += p_acc  # some copy accepted: each passes w.p. beta = min(1, p(x)/rho)
            res = np.maximum(p - np.minimum(q, p / rho) * (p_acc / beta if beta > 0 else 0.0), 0)
            res = res / res.sum() if res.sum() > 0 else p
            law_y += (1.0 - p_acc) * res
        else:  # RRS with each survivor's own one-hot law
            r, reach = p, 1.0
            for x in tokens:
                a = min(1.0, r[x])
                law_y[x] += reach * a
                reach *= 1.0 - a
                r = residual(r, one_hot(V, x))
            law_y += reach * r
        for y in np.flatnonzero(law_y > 0):
            if int(y) in tokens:
                node(z + (int(y),), prob * law_y[y])
            else:
                accumulate(out, z + (int(y),), prob * law_y[y])

    node((), 1.0)
    return out


def traversal_fixed(P, drafts: Drafts, ctx: Context = ()) -> dict:
    """Traversal verification: post-order over the merged tree, every draft through u one
    trial at u in draft-index order with its own s = one-hot, duplicates update the parent."""
    L, V = len(drafts[0]), P.V

    def visit(u, w):
        """({suffix after u: prob}, P(u rejected)) for node u entered with weight w."""
        r = P(ctx + u)
        out: dict = {}
        reach = 1.0
        if len(u) < L:
            seen: set[int] = set()
            for k in survivors_at(drafts, u):
                x = drafts[k][len(u)]
                s = one_hot(V, x)
                if x not in seen:
                    seen.add(x)
                    wx = min(1.0, w * r[x])  # w r(x) / s(x), s(x) = 1
                    ox, rej = visit(u + (x,), wx)
                    for e, pr in ox.items():
                        accumulate(out, (x,) + e, reach * pr)
                    reach *= rej
                w, r = parent_update(w, r, s)
        for y in np.flatnonzero(r > 0):
            accumulate(out, (int(y),), reach * w * r[y])
        return out, reach * (1.0 - w)

    out, rejected = visit((), 1.0)
    assert rejected < 1e-12, "the root is always accepted"
    return out


def multipath_fixed(P, drafts: Drafts, ctx: Context = (), *, order: str = "band") -> dict:
    """Multi-path BV on lookup drafts: the selection is a function of the context (each
    node's order ranks a draft's token with that draft's own one-hot q), so the selected block is
    deterministic and block verification runs against its one-hot law. Any deterministic
    selection is lossless here; the ranks follow the verifier's so the Monte Carlo can compare."""
    V = P.V

    def rank(p, q, x):
        """A draft's token ranked in the node order built from that draft's own q row. For
        "band" it is (band, id), which is how the verifier compares tokens of different rows;
        for the exact orders, the token's position in its own row's order."""
        if order == "band":
            return (int(p[x] >= q[x]), x)
        return (int(node_order(p, q, order)[x]),)

    def rank_key(block):
        return tuple(rank(P(ctx + block[:i]), one_hot(V, block[i]), block[i])
                     for i in range(len(block)))

    # max keeps the first of equal keys, as the verifier does (ties: lowest draft index).
    best = max(drafts, key=rank_key)

    class Selected(ToyModel):
        def law(self, c):
            z = c[len(ctx):]
            return one_hot(V, best[len(z)])

    law = block_law(P, Selected(V), ctx, L=len(best))
    return {e: pr for (e, _), pr in law.items()}


FIXED_LAWS: dict[str, FixedLaw] = {
    "specinfer": specinfer_fixed,
    "spectr": spectr_fixed,
    "traversal": traversal_fixed,
    "multipath_block": multipath_fixed,
    "ordered_rrs": ordered_rrs_fixed,
}


def lookup_multi_iteration_law(law: FixedLaw, P, lookup: LookupDrafts, N: int) -> dict:
    """Exact law of the first N tokens when every iteration drafts ``lookup(context)``."""
    out: dict = {}

    def rec(ctx, prob):
        for emitted, pr in law(P, lookup(ctx), ctx).items():
            seq = ctx + emitted
            if len(seq) >= N:
                accumulate(out, seq[:N], prob * pr)
            else:
                rec(seq, prob * pr)

    rec((), 1.0)
    return out


def lookup_lossless_tv(law: FixedLaw, P, lookup: LookupDrafts, N: int | None = None) -> float:
    """TV between the verifier's law of N tokens on lookup drafts and the target's (N = L + 2)."""
    N = lookup.L + 2 if N is None else N
    return total_variation(lookup_multi_iteration_law(law, P, lookup, N), target_law(P, N))


__all__ = ["FIXED_LAWS", "LookupDrafts", "lookup_lossless_tv", "lookup_multi_iteration_law",
           "multipath_fixed", "specinfer_fixed", "spectr_fixed", "traversal_fixed"]
