"""Traversal verification of K i.i.d. drafts merged into a token tree (rule B).

Weng, Hu, Chen, Liu, Mei, Qiu, Tian, Shi, "Traversal Verification for Speculative Tree
Decoding", NeurIPS 2025 (arXiv 2505.12398), Algorithm 3, as specified in
docs/verifiers/traversal.md.
Token-level tree verification (SpecInfer) decides each node from its own ratio; traversal
verification tests whole root-to-leaf paths, leaves first (post-order), with the sequence-level
weight of block verification:

    w_child = min(1, w_u r_u(x) / s_u(x))                        (weights)
    on rejection of a trial x at u:  S = sum_y (w_u r_u(y) - s_u(y))_+,
        r_u <- (w_u r_u - s_u)_+ / S,   w_u <- S / (S + 1 - w_u)   (step 3; BV's h, Eq. 5)

and a node is tested (accepted with probability w, then an extra token from r) once all its
children are deleted. The root keeps w = 1, so the iteration always emits.

Rule B (for i.i.d. drafts): every draft through u is one trial at u in draft-index order
and s_u = q(.|u) stays fixed; the first draft carrying token x enters x's merged subtree, and a
later draft repeating an already deleted x is a weight-0 trial that still applies the update
(SpecInfer's duplicate rule). K = 1 is block verification, L = 1 is SpecInfer RRS.

Every (draft, depth) pair is exactly one trial, so the K*L trials are sorted once into post-order
(a precomputed schedule) and run by a ``lax.while_loop`` with presampled uniforms. A node's weight
is set lazily when the traversal first enters its subtree, from its parent's state at that time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from algorithms.verifiers.base import (
    DETERMINISTIC,
    IID,
    Verdict,
    emit,
    safe_ratio,
    sample,
    validate_inputs,
)
from algorithms.verifiers.registry import register


def merge_prefixes(drafts: Int[Array, "K L"]) -> Int[Array, "K L+1"]:
    """canon[k, d]: the first draft whose first d tokens equal draft k's (its merged tree node)."""
    eq = drafts[:, None, :] == drafts[None, :, :]  # [j, k, i]
    same = jnp.concatenate([jnp.ones(eq.shape[:2] + (1,), bool),
                            jnp.cumprod(eq, axis=-1).astype(bool)], axis=-1)  # [j, k, d]
    return jnp.argmax(same, axis=0).astype(jnp.int32)


def post_order(canon: Int[Array, "K L+1"]) -> Int[Array, " KL"]:
    """Trials (k, d) as flat ids k*L + d-1, sorted into the traversal's post-order.

    Trial (k, d) sorts by (canon[k,1], .., canon[k,d-1], k, K, .., K): the ancestors' node ids,
    then its own draft index; the pad K puts every node after its whole subtree (post-order) and
    siblings in draft-index order.
    """
    K, L = canon.shape[0], canon.shape[1] - 1
    d = jnp.arange(1, L + 1)[None, :, None]  # trial depth
    i = jnp.arange(1, L + 1)[None, None, :]  # key position
    k = jnp.arange(K)[:, None, None]
    key = jnp.where(i < d, canon[:, None, 1:], jnp.where(i == d, k, K))  # [K, L(d), L(i)]
    key = key.reshape(K * L, L)
    return jnp.lexsort(tuple(key[:, j] for j in reversed(range(L)))).astype(jnp.int32)


@register("traversal", exact_law="algorithms.exact.traversal:traversal_law")
@dataclass(frozen=True, kw_only=True)
class TraversalVerifier:
    lossless: ClassVar[bool] = True
    max_drafts: ClassVar[int | None] = None
    draft_structures: ClassVar[frozenset[str]] = frozenset({IID, DETERMINISTIC})

    def init_state(self, L: int, V: int):
        return ()

    @staticmethod
    def updates_parent(accepted, new):
        """Rule B: every rejected trial updates its parent, duplicates (``~new``) included."""
        return ~accepted

    def __call__(
        self,
        key: Array,
        drafts: Int[Array, "K L"],
        q: Float[Array, "K L V"],
        p: Float[Array, "K L+1 V"],
        state=(),
    ) -> tuple[Verdict, tuple]:
        K, L, V = validate_inputs(self, drafts, q, p)
        k_coin, k_extra = jax.random.split(key)
        canon = merge_prefixes(drafts)
        schedule = post_order(canon)
        eta = jax.random.uniform(k_coin, (K, L))
        # Node (c, d) = prefix drafts[c, :d] with c = canon[., d]; (0, 0) is the root.
        w0 = jnp.zeros((K, L + 1), p.dtype).at[0, 0].set(1.0)
        entered0 = jnp.zeros((K, L + 1), bool).at[0, 0].set(True)
        # Residuals live on the current root-to-trial path only, one row per depth: in post-order
        # a node's r changes only through its children's rejections, which all run while the
        # traversal is inside its subtree, and its own trial (the last reader) comes right after.
        # Row i is the depth-i node's r once a child rejection changed it (``mod[i]``); until then
        # r is that node's target row p[src[i], i], read in place. Entering a node writes two
        # scalars, and the loop carries L+1 rows instead of a [K, L+1, V] table.
        rows0 = jnp.zeros((L + 1, V), p.dtype)
        mod0 = jnp.zeros(L + 1, bool)
        src0 = jnp.zeros(L + 1, jnp.int32)

        def residual(rows, mod, src, i):
            return jnp.where(mod[i], rows[i], p[src[i], i])

        def enter_path(k, d, w, rows, mod, src, entered):
            """Enter the not yet entered nodes on draft k's path down to depth d: set their
            weights from the parent's current r, and point their rows at their target rows."""
            for i in range(1, L + 1):
                c, par = canon[k, i], canon[k, i - 1]
                x = drafts[k, i - 1]
                r_par_x = jnp.where(mod[i - 1], rows[i - 1, x], p[src[i - 1], i - 1, x])
                new_w = safe_ratio(w[par, i - 1] * r_par_x, q[k, i - 1, x])
                fresh = (i <= d) & ~entered[c, i]
                w = w.at[c, i].set(jnp.where(fresh, new_w, w[c, i]))
                entered = entered.at[c, i].set(entered[c, i] | fresh)
                mod = mod.at[i].set(mod[i] & ~fresh)
                src = src.at[i].set(jnp.where(fresh, c, src[i]))
            return w, mod, src, entered

        def body(carry):
            step, _, _, w, rows, mod, src, entered = carry
            e = schedule[step]
            k, d = e // L, e % L + 1
            w, mod, src, entered = enter_path(k, d, w, rows, mod, src, entered)
            new = canon[k, d] == k
            accepted = new & (eta[k, d - 1] < w[k, d])
            # Rejected (or a duplicate): update the parent with this trial's own draft law. For
            # i.i.d. drafts every draft through the parent has the same q(. | parent), so this is
            # rule B's fixed s_u; drafts that are not i.i.d. (prompt lookup: each draft one-hot at
            # its own token) need their own law, as SpecInfer's per-candidate q_k, or a token the
            # target gives probability 0 gets ratio 0/0 -> 1 and is accepted.
            par = canon[k, d - 1]
            w_u, r_u, s_u = w[par, d - 1], residual(rows, mod, src, d - 1), q[k, d - 1]
            excess = jnp.maximum(w_u * r_u - s_u, 0.0)
            S = excess.sum()
            den = jnp.maximum(s_u - w_u * r_u, 0.0).sum()  # = S + 1 - w_u (rows sum to 1), >= 0
            w_new = jnp.where(den > 0, jnp.minimum(S / jnp.where(den > 0, den, 1.0), 1.0), 1.0)
            r_new = jnp.where(S > 0, excess / jnp.where(S > 0, S, 1.0), r_u)
            update = self.updates_parent(accepted, new)
            w = w.at[par, d - 1].set(jnp.where(update, w_new, w_u))
            rows = rows.at[d - 1].set(jnp.where(update, r_new, r_u))
            mod = mod.at[d - 1].set(mod[d - 1] | update)
            return step + 1, accepted, e, w, rows, mod, src, entered

        def cond(carry):
            step, accepted = carry[0], carry[1]
            return (step < K * L) & ~accepted

        init = (jnp.int32(0), jnp.bool_(False), jnp.int32(0), w0, rows0, mod0, src0, entered0)
        _, accepted, e, _, rows, mod, src, _ = jax.lax.while_loop(cond, body, init)
        k = jnp.where(accepted, e // L, 0)
        tau = jnp.where(accepted, e % L + 1, 0).astype(jnp.int32)
        # The accepted node's extra token comes from its current r (its row is still on the path:
        # the loop stops at the acceptance): a bonus at depth L, else a correction; when every
        # trial failed the root is accepted with its final residual.
        extra = sample(k_extra, residual(rows, mod, src, tau))
        return emit(drafts[k], tau, extra, k), state
