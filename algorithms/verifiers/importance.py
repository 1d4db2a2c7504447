"""Importance-sampling multi-draft selection, then single-draft speculative sampling, per node.

Khisti, Ebrahimi, Dbouk, Behboodi, Memisevic, Louizos, "Multi-Draft Speculative Sampling:
Canonical Decomposition and Theoretical Limits", ICLR 2025 (arXiv 2410.18234): every token-level
multi-draft scheme can be written as (1) an importance-sampling (IS) step that picks one of the k
draft tokens, whose output Y' then has some law s, and (2) single-draft speculative sampling of
Y' against the target p: accept with min(1, p(Y')/s(Y')), else draw from norm(max(p - s, 0)).
Any IS step gives an exact scheme; the choice of IS weights sets the acceptance sum_y min(p, s).

The paper's optimal weights come from an LP; we implement the member of the class that has a
closed form in O(V log V) (our choice, stated as such): pick the draft whose token has the largest
ratio p/q, read at 7 significant bits (``ratio_key``: ratios within ~1/64 of each other tie; ties
go to the larger token id). Any fixed ranking keeps the scheme exact (step (2) corrects for
whatever law step (1) has); the coarse key only lets the vocabulary sort as one packed uint32
operand, which XLA:CPU sorts ~6x faster than a (key, index) pair (5.6 vs 32 ms at V = 151,936).
With tokens ordered by that key and F(y) the q-mass of tokens ranked at or below y, F^-(y) the
mass strictly below,

    s(y) = F(y)^k - F^-(y)^k          (k i.i.d. draws; at k = 2: q(y)^2 + 2 q(y) F^-(y)).

On the running example at k = 2, (1)+(2) accepts sum_y min(p, s) = 8/9, the optimum
(Khisti et al.'s K = 2 value, = alpha* of Hu et al.); as k grows it over-feeds high-ratio tokens
(0.864 at k = 4 against alpha* = 1). A residual draw that lands on another survivor's token
recovers part of that (below), but E[tau] is still not monotone in K (L = 1: 0.99805 at K = 3,
0.99791 at K = 4 on the example).

Sequences (as SpecTr's walk, docs/verifiers/spectr.md): at depth t the survivors are the drafts
whose first t tokens equal the emitted prefix; the node runs (1)+(2) with k = #survivors; if the
output Y (accepted, or a residual draw) is a survivor's token, Y is appended and those drafts
survive, otherwise Y is the correction. Continuing is exact because the survivors' continuations are
still i.i.d. q given the prefix; the IS step looks at depth-t tokens only. k = 1 is token-wise SD.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Bool, Float, Int, UInt32

from algorithms.verifiers.base import Verdict, emit, safe_ratio, sample, validate_inputs
from algorithms.verifiers.registry import register

#: Low bits of the packed sort operand that hold the token id: vocabularies up to 2^18 = 262,144
#: (Qwen2's 151,936) sort as one uint32; larger ones sort a (key, id) pair, same order.
INDEX_BITS = 18
#: Bits of the ranking key: a non-negative float32's 8 exponent and top 6 mantissa bits.
KEY_BITS = 32 - INDEX_BITS


def ratio_key(p: Float[Array, " V"], q: Float[Array, " V"]) -> UInt32[Array, " V"]:
    """The selection's ranking key: p/q (+inf where q = 0) as a float32 with its low mantissa
    bits dropped. The bits of a non-negative IEEE float order like the float, so truncating them
    is a monotone map (ratios within ~1/64 tie). -0.0 and subnormals map to 0, as XLA:CPU's
    flush-to-zero would treat them anyway, so the key is the same on every backend."""
    ratio = jnp.where(q > 0, p / jnp.where(q > 0, q, 1.0), jnp.inf).astype(jnp.float32)
    ratio = jnp.where(ratio >= jnp.finfo(jnp.float32).tiny, ratio, 0.0)
    return lax.bitcast_convert_type(ratio, jnp.uint32) >> (32 - 1 - KEY_BITS)


def selection_law(p: Float[Array, " V"], q: Float[Array, " V"], k
                  ) -> tuple[Float[Array, " V"], UInt32[Array, " V"]]:
    """(s, key): s(y) = F(y)^k - F^-(y)^k, the law of the top-ranked token among k i.i.d. draws
    from q, and each token's ``ratio_key``. One ascending sort by (key, id): among equal keys the
    larger id ranks higher; F is an ascending cumsum, accurate where it is small (low-ratio
    tokens)."""
    V = p.shape[0]
    key = ratio_key(p, q)
    if V <= 1 << INDEX_BITS:  # one operand: (key, id) packed into a uint32
        packed = (key << INDEX_BITS) | jnp.arange(V, dtype=jnp.uint32)
        order = (lax.sort(packed) & ((1 << INDEX_BITS) - 1)).astype(jnp.int32)
    else:
        _, order = lax.sort((key, jnp.arange(V, dtype=jnp.int32)), num_keys=1, is_stable=True)
    q_sorted = q[order]
    F = jnp.cumsum(q_sorted)
    F_below = F - q_sorted
    k = jnp.asarray(k, p.dtype)
    s_sorted = jnp.where(q_sorted > 0, jnp.maximum(F ** k - F_below ** k, 0.0), 0.0)
    return jnp.zeros_like(q).at[order].set(s_sorted), key


def selected_mass(q: Float[Array, " V"], key: UInt32[Array, " V"], y: Int[Array, ""], k
                  ) -> Float[Array, ""]:
    """s(y) of ``selection_law`` without the sort: F(y) is the q-mass ranked at or below y in
    the same order (key, then id), one masked pass over V. Why: below the root, real drafts
    agree, so k > 1 at every depth; the coin needs only s(y), and the full s (a sort of the
    vocabulary, ~6 ms at V = 151,936) is needed only for the residual, at most once a call."""
    ids = jnp.arange(q.shape[0])
    ky = key[y]
    F = jnp.sum(jnp.where((key < ky) | ((key == ky) & (ids <= y)), q, 0.0))
    k = jnp.asarray(k, q.dtype)
    return jnp.where(q[y] > 0, jnp.maximum(F ** k - (F - q[y]) ** k, 0.0), 0.0)


def preferred_token(key: UInt32[Array, " V"], tokens: Int[Array, " K"],
                    live: Bool[Array, " K"]) -> Int[Array, ""]:
    """The live draft token that ranks highest in ``selection_law``'s sort: the largest key,
    ties to the larger id (no rank table: only the drafted tokens are compared)."""
    kt = key[tokens]
    best = live & (kt == jnp.max(jnp.where(live, kt, 0)))
    return jnp.max(jnp.where(best, tokens, -1)).astype(jnp.int32)


@register("importance", exact_law="algorithms.exact.importance:importance_law")
@dataclass(frozen=True, kw_only=True)
class ImportanceSamplingVerifier:
    lossless: ClassVar[bool] = True
    max_drafts: ClassVar[int | None] = None
    draft_structures: ClassVar[frozenset[str]] = frozenset({"iid"})  # base.IID

    def init_state(self, L: int, V: int):
        return ()

    def node(self, key, p, q, tokens: Int[Array, " K"], live: Bool[Array, " K"]
             ) -> Int[Array, ""]:
        """(1) select the live draft with the top-ranked token (``ratio_key``), (2) SD against its
        law s."""
        k_coin, k_res = jax.random.split(key)
        k = live.sum()

        def select():
            rank = ratio_key(p, q)
            y = preferred_token(rank, tokens, live)
            return y, selected_mass(q, rank, y, k)

        # One survivor: s = q. Several: s(y) by one masked pass; the sort only on rejection.
        only = tokens[jnp.argmax(live)].astype(jnp.int32)
        y, s_y = lax.cond(k > 1, select, lambda: (only, q[only]))
        accept = jax.random.uniform(k_coin) < safe_ratio(p[y], s_y)  # strict: u can be 0

        def residual():
            s = lax.cond(k > 1, lambda: selection_law(p, q, k)[0], lambda: q)
            res = jnp.maximum(p - s, 0.0)
            res = jnp.where(res.sum() > 0, res, p)  # no mass: only on a probability-0 branch
            return sample(k_res, res)

        return lax.cond(accept, lambda: y, residual)

    def __call__(
        self,
        key: Array,
        drafts: Int[Array, "K L"],
        q: Float[Array, "K L V"],
        p: Float[Array, "K L+1 V"],
        state=(),
    ) -> tuple[Verdict, tuple]:
        K, L, _ = validate_inputs(self, drafts, q, p)
        k_nodes, k_bonus = jax.random.split(key)
        keys = jax.random.split(k_nodes, L)

        def depth(carry, t):
            alive, stopped, tau, lead, extra = carry
            x = drafts[:, t]
            y = lax.cond(stopped, lambda: jnp.int32(0),
                         lambda: self.node(keys[t], p[lead, t], q[lead, t], x, alive))
            matches = alive & (x == y)
            go_on = ~stopped & matches.any()
            alive = jnp.where(go_on, matches, alive)
            lead = jnp.where(go_on, jnp.argmax(matches), lead).astype(jnp.int32)
            stop_here = ~stopped & ~go_on
            extra = jnp.where(stop_here, y, extra)
            return (alive, stopped | stop_here, tau + go_on, lead, extra), None

        init = (jnp.ones(K, bool), jnp.bool_(False), jnp.int32(0), jnp.int32(0), jnp.int32(0))
        (_, stopped, tau, lead, extra), _ = lax.scan(depth, init, jnp.arange(L))
        # cond, not where: the bonus draw over the vocabulary runs only after a full block.
        extra = lax.cond(stopped, lambda: extra, lambda: sample(k_bonus, p[lead, L]))
        return emit(drafts[lead], tau.astype(jnp.int32), extra, lead), state
