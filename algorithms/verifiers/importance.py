"""Importance-sampling multi-draft selection, then single-draft speculative sampling, per node.

Khisti, Ebrahimi, Dbouk, Behboodi, Memisevic, Louizos, "Multi-Draft Speculative Sampling:
Canonical Decomposition and Theoretical Limits", ICLR 2025 (arXiv 2410.18234): every token-level
multi-draft scheme can be written as (1) an importance-sampling (IS) step that picks one of the k
draft tokens, whose output Y' then has some law s, and (2) single-draft speculative sampling of
Y' against the target p: accept with min(1, p(Y')/s(Y')), else draw from norm(max(p - s, 0)).
Any IS step gives an exact scheme; the choice of IS weights sets the acceptance sum_y min(p, s).

The paper's optimal weights come from an LP; we implement the member of the class that has a
closed form in O(V log V) (our choice, stated as such): pick the draft whose token has the largest
ratio p/q (ties to the larger token id). With tokens ordered by that key and F(y) the q-mass of
tokens ranked at or below y, F^-(y) the mass strictly below,

    s(y) = F(y)^k - F^-(y)^k          (k i.i.d. draws; at k = 2: q(y)^2 + 2 q(y) F^-(y)).

On the ALGORITHMS.md example at k = 2, (1)+(2) accepts sum_y min(p, s) = 8/9, the optimum
(Khisti et al.'s K = 2 value, = alpha* of Hu et al.); as k grows it over-feeds high-ratio tokens
(0.864 at k = 4 against alpha* = 1). A residual draw that lands on another survivor's token
recovers part of that (below), but E[tau] is still not monotone in K (L = 1: 0.99805 at K = 3,
0.99791 at K = 4 on the example).

Sequences (as SpecTr's walk, ALGORITHMS.md §3.2): at depth t the survivors are the drafts whose
first t tokens equal the emitted prefix; the node runs (1)+(2) with k = #survivors; if the output
Y (accepted, or a residual draw) is a survivor's token, Y is appended and those drafts survive,
otherwise Y is the correction. Continuing is exact because the survivors' continuations are still
i.i.d. q given the prefix; the IS step looks at depth-t tokens only. k = 1 is token-wise SD.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Bool, Float, Int

from algorithms.verifiers.base import Verdict, emit, safe_ratio, sample, validate_inputs


def selection_law(p: Float[Array, " V"], q: Float[Array, " V"], k
                  ) -> tuple[Float[Array, " V"], Int[Array, " V"]]:
    """(s, key): s(y) = F(y)^k - F^-(y)^k, the law of the max-ratio token among k i.i.d. draws
    from q, and each token's sort key (the ratio p/q as an order-preserving integer; among equal
    keys the larger id is preferred). One stable ascending sort: ties keep id order, so among
    equal ratios the larger id ranks higher; F is an ascending cumsum, accurate where it is small
    (low-ratio tokens)."""
    ratio = jnp.where(q > 0, p / jnp.where(q > 0, q, 1.0), jnp.inf)
    # A ratio is >= 0 (or +inf), and the bits of a non-negative IEEE float order like the float,
    # so an integer key gives argsort's order; the integer sort of (key, id) is ~2x faster than
    # the float comparator at the Qwen vocabulary (verify_cost). -0.0 is mapped to +0.0 first.
    ratio = jnp.where(ratio == 0, jnp.zeros_like(ratio), ratio)
    key = lax.bitcast_convert_type(ratio, {4: jnp.int32, 8: jnp.int64}[ratio.dtype.itemsize])
    _, order = lax.sort((key, jnp.arange(p.shape[0], dtype=jnp.int32)), num_keys=1,
                        is_stable=True)
    q_sorted = q[order]
    F = jnp.cumsum(q_sorted)
    F_below = F - q_sorted
    k = jnp.asarray(k, p.dtype)
    s_sorted = jnp.where(q_sorted > 0, jnp.maximum(F ** k - F_below ** k, 0.0), 0.0)
    return jnp.zeros_like(q).at[order].set(s_sorted), key


def preferred_token(key: Int[Array, " V"], tokens: Int[Array, " K"], live: Bool[Array, " K"]
                    ) -> Int[Array, ""]:
    """The live draft token that ranks highest in ``selection_law``'s sort: the largest key,
    ties to the larger id (no rank table: only the drafted tokens are compared)."""
    kt = key[tokens]
    best = live & (kt == jnp.max(jnp.where(live, kt, jnp.iinfo(kt.dtype).min)))
    return jnp.max(jnp.where(best, tokens, -1)).astype(jnp.int32)


@dataclass(frozen=True, kw_only=True)
class ImportanceSamplingVerifier:
    lossless: ClassVar[bool] = True
    max_drafts: ClassVar[int | None] = None
    draft_structures: ClassVar[frozenset[str]] = frozenset({"iid"})  # base.IID

    def init_state(self, L: int, V: int):
        return ()

    def node(self, key, p, q, tokens: Int[Array, " K"], live: Bool[Array, " K"]
             ) -> Int[Array, ""]:
        """(1) select the live draft with the max-ratio token, (2) SD against its law s."""
        k_coin, k_res = jax.random.split(key)
        k = live.sum()

        def select():
            s, key = selection_law(p, q, k)
            return s, preferred_token(key, tokens, live)

        # One survivor (the common case below the root): s = q, no sort.
        s, y = lax.cond(k > 1, select,
                        lambda: (q, tokens[jnp.argmax(live)].astype(jnp.int32)))
        accept = jax.random.uniform(k_coin) < safe_ratio(p[y], s[y])  # strict: u can be 0
        res = jnp.maximum(p - s, 0.0)
        res = jnp.where(res.sum() > 0, res, p)  # no mass: only on a probability-0 branch
        return lax.cond(accept, lambda: y, lambda: sample(k_res, res))

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
        extra = jnp.where(stopped, extra, sample(k_bonus, p[lead, L]))
        return emit(drafts[lead], tau.astype(jnp.int32), extra, lead), state
