"""specjax's own ordered (order-statistic) RRS tree verifier: recursive rejection sampling whose
candidates are the surviving drafts in a fixed vocabulary order, each tested against its exact
order-statistic law.

This is not UniVer (arXiv 2605.04543), although it was first filed here under that name. The
stored descriptions of that paper give UniVer two phases, a top-down allocation of mass over the
tree and then a post-order (leaf-to-root) decision; this verifier is a single top-down pass with
no post-order phase. Their reported result, +4.2-8.5 % acceptance length over RRS without
replacement (Vicuna-7B, EAGLE drafter, binary tree of depth 5, T = 1: 3.29 against 3.06, none
reported near T = 0), is a measurement of that algorithm and says nothing about this one. UniVer
itself is not implemented: the descriptions do not give its closed form (docs/verifiers/
ordered_rrs.md).

What the rule aims at. At each level of the tree, at the accepted node z with c surviving
drafts, couple the drafts' next tokens with Y ~ p(.|z) so that P(Y is one of them) comes close
to the OT optimum alpha* = min_S p(S) + 1 - q(S)^c (Hu et al., ICLR 2025; ``exact/bounds.py``):

1. Order the vocabulary totally by a key of (p(.|z), q(.|z)) alone: ``order="band"`` (default)
   ranks tokens by the band of p/q among the edges ``EDGES``, ties by id (O(V): a few prefix
   sums); ``order="ratio"`` sorts by p/q exactly (a sort of V per level). Ascending p/q puts the
   minimising set S* of Hu et al.'s formula at the bottom, so the first candidate is the drafted
   token q under-weights most relative to p.
2. Candidates are the survivors in descending (token rank, draft index) order: trial j tests the
   j-th largest. Given the earlier candidates, the rest are independent draws truncated below
   the last one (draft k < k_prev may repeat its token, k > k_prev must lie strictly below), so
   candidate j's token has the law of the maximum of the truncated draws; with G = F + q the
   q-CDF in the order, a the untried drafts with index < k_prev, b the others, n = a + b:
       Q_j(y) = [G(y)^n - F(y)^n] / [G(v)^a F(v)^b]   for y below v,
       Q_j(v) = 1 - (F(v) / G(v))^a,                   0 above v,
   and Q_1 = G^c - F^c, the law of the largest draft. Differences of powers are evaluated as
   G^n (-expm1(n log(F/G))) so float32 does not cancel them at q ~ 1e-8.
3. Recursive rejection sampling with those laws: accept with min(1, r(x) / Q_j(x)); on rejection
   r <- norm(max(r - Q_j, 0)) and try the next; when every survivor fails, draw the correction
   from r and stop. On acceptance the survivors are the drafts whose token is x; descend.

Why it is lossless. The event "the first j candidates are (v_1, k_1) .. (v_j, k_j)" is a product
event over the drafts (drafts k_i have tokens v_i, every other draft lies below (v_j, k_j)), so
given it the untried drafts stay independent with truncated laws, and Q_j above is candidate j's
exact law given everything the node has looked at. RRS emits r exactly whenever each candidate
is tested against its law given the earlier ones (by induction from the last trial; SpecInfer's
argument, ``specinfer.py``), so each level emits p(.|z); the survivors' continuations are fresh
draws given the accepted token, so each level below does the same. The order only decides which
candidate goes first, never the law.

Draft structures. The kernel reads q only at the lead survivor: i.i.d. drafts share their
prefix's law (IID), and a one-hot lead row means deterministic drafts (or i.i.d. copies of a
point mass), whose candidates are known, Q_j = delta(candidate). Lookup drafts thus emit the law
of RRS on the distinct tokens whatever the order (the same one-step law as ``specinfer``).

Measured (exact laws, docs/verifiers/ordered_rrs.md): the first level reaches 98-99 % of alpha* on
average over random V = 3, 4 pairs (SpecInfer RRS 90-93 %); E[tau] on the running example
p = (1/3, 2/3), q = (2/3, 1/3) is 1.580247 / 1.825215 at K = 2 / 3, L = 2 (SpecInfer 1.333333 /
1.491084), and +3.6 to +7.1 % over SpecInfer on average over random V = 3 pairs, though below it
on some pairs. Testing only the largest draft per level (stop on its rejection) is lossless
too, but reaches 94.6 % of alpha* and, on lookup drafts, only p(x_max).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Bool, Float, Int

from algorithms.verifiers.base import (
    DETERMINISTIC,
    IID,
    Verdict,
    emit,
    residual,
    safe_ratio,
    sample,
    validate_inputs,
)
from algorithms.verifiers.multipath_block import exclusive_cumsum
from algorithms.verifiers.registry import register
from algorithms.verifiers.specinfer import survivor_scan

ORDERS = ("band", "ratio")
EDGES = (0.5, 1.0, 2.0)  # band edges of p/q; each edge costs one prefix sum per level


class NodeOrder(NamedTuple):
    """One level's order and the q-CDF along it, computed once per level."""

    pos: Int[Array, " V"]  # increases along the order
    F: Float[Array, " V"]  # q-mass of the tokens before x
    log_g: Float[Array, " V"]  # log G(x), G = F + q
    log_f_over_g: Float[Array, " V"]  # log(F(x) / G(x)), as log1p(-q / G): no cancellation


def node_order(p: Float[Array, " V"], q: Float[Array, " V"], order: str) -> NodeOrder:
    V = p.shape[0]
    ids = jnp.arange(V, dtype=jnp.int32)
    if order == "band":
        key = sum((p >= e * q).astype(jnp.int32) for e in EDGES)  # q = 0: the top band
        bands = jnp.arange(len(EDGES) + 1, dtype=jnp.int32)[:, None]
        masked = jnp.where(key[None] == bands, q[None], 0.0)  # [B+1, V]: one batched pass
        below = jnp.cumsum(masked.sum(-1)) - masked.sum(-1)  # q-mass of the lower bands
        F = jnp.take_along_axis(exclusive_cumsum(masked) + below[:, None], key[None], 0)[0]
        pos = key * V + ids
    else:
        ratio = jnp.where(q > 0, p / jnp.where(q > 0, q, 1.0), jnp.inf)
        perm = jnp.lexsort((ids, ratio))
        pos = jnp.zeros(V, jnp.int32).at[perm].set(ids)
        F = (jnp.cumsum(q[perm]) - q[perm])[pos]
    has = q > 0
    G = jnp.where(has, F + q, 1.0)
    return NodeOrder(pos, F, jnp.log(G), jnp.log1p(-jnp.where(has, q / G, 0.0)))


@register("ordered_rrs", exact_law="algorithms.exact.ordered_rrs:ordered_rrs_law")
@dataclass(frozen=True, kw_only=True)
class OrderedRRSVerifier:
    order: str = "band"
    lossless: ClassVar[bool] = True
    max_drafts: ClassVar[int | None] = None
    draft_structures: ClassVar[frozenset[str]] = frozenset({IID, DETERMINISTIC})

    def __post_init__(self):
        if self.order not in ORDERS:
            raise ValueError(
                f"OrderedRRSVerifier: order must be one of {ORDERS}, got {self.order!r}")

    def init_state(self, L: int, V: int):
        return ()

    def candidate_law(self, q_row: Float[Array, " V"], node: NodeOrder, point_mass, x, v, n, a,
                      b) -> Float[Array, " V"]:
        """Q_j (step 2): the law of the candidate x given the earlier ones, the last of which is
        v (v < 0: none yet), with a (b) untried drafts allowed (not allowed) to repeat v."""
        ids = jnp.arange(q_row.shape[0])
        first = v < 0
        v = jnp.maximum(v, 0)
        F_v = node.F[v]
        scale = jnp.where(first, n * jnp.log(q_row.sum()), a * node.log_g[v] + jnp.where(
            b > 0, b * jnp.log(jnp.where(F_v > 0, F_v, 1.0)), 0.0))
        below = (first | (node.pos < node.pos[v])) & (q_row > 0)
        law = jnp.where(below, jnp.exp(n * node.log_g - scale) * -jnp.expm1(
            n * node.log_f_over_g), 0.0)
        at_v = jnp.where(a > 0, -jnp.expm1(a * node.log_f_over_g[v]), 0.0)
        law = jnp.where(~first & (ids == v), at_v, law)
        return jnp.where(point_mass, (ids == x).astype(q_row.dtype), law)

    def node(
        self,
        p_row: Float[Array, " V"],
        q_row: Float[Array, " V"],
        tokens: Int[Array, " K"],
        live: Bool[Array, " K"],
        u: Float[Array, " K"],
    ) -> tuple[Int[Array, ""], Float[Array, " V"]]:
        """One level at the accepted node: (index of the accepted draft or -1, final residual).
        ``q_row`` is the lead survivor's row (module doc: draft structures)."""
        K = tokens.shape[0]
        # The scan below carries the last candidate's token next to int32 indices; ids come as
        # int64 from an x64 caller, and a carry must keep one dtype, so fix it here (ids < V fit).
        tokens = tokens.astype(jnp.int32)
        index = jnp.arange(K, dtype=jnp.int32)
        order = node_order(p_row, q_row, self.order)
        point_mass = q_row[tokens[jnp.argmax(live)]] >= 1.0
        label = order.pos[tokens] * K + index  # descending label = trial order; ties by draft index

        def trial(carry, j):
            r, winner, untried, v, k_prev = carry
            k = jnp.argmax(jnp.where(untried, label, -1)).astype(jnp.int32)
            x = tokens[k]
            trying = untried[k] & (winner < 0)
            rest = untried & (index != k)  # the drafts still below candidate k after it
            above = (untried & (index < k_prev)).sum()
            n = untried.sum()

            def test():
                law = self.candidate_law(q_row, order, point_mass, x, v, n, above, n - above)
                accept = u[j] < safe_ratio(r[x], law[x])  # strict: u can be exactly 0
                # cond: unbatched, an accepted node skips the residual.
                new_r = lax.cond(accept, lambda: r, lambda: residual(r, law, fallback=r))
                return jnp.where(accept, k, -1).astype(jnp.int32), new_r

            # cond, not where: unbatched, trials after the winner (and dead drafts) cost nothing.
            won, r = lax.cond(trying, test, lambda: (jnp.int32(-1), r))
            winner = jnp.where(won >= 0, won, winner)
            untried = jnp.where(trying, rest, untried)
            return (r, winner, untried, jnp.where(trying, x, v), jnp.where(trying, k, k_prev)), None

        init = (p_row, jnp.int32(-1), live, jnp.int32(-1), jnp.int32(K))
        (r, winner, *_), _ = lax.scan(trial, init, jnp.arange(K))
        return winner, r

    def __call__(
        self,
        key: Array,
        drafts: Int[Array, "K L"],
        q: Float[Array, "K L V"],
        p: Float[Array, "K L+1 V"],
        state=(),
    ) -> tuple[Verdict, tuple]:
        K, L, _ = validate_inputs(self, drafts, q, p)
        k_coin, k_extra = jax.random.split(key)
        u = jax.random.uniform(k_coin, (L, K))
        tau, lead, law = survivor_scan(
            drafts, p, lambda t, lead, alive: self.node(p[lead, t], q[lead, t], drafts[:, t],
                                                        alive, u[t]))
        extra = sample(k_extra, law)
        return emit(drafts[lead], tau, extra, lead), state
