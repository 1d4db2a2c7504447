"""Greedy multi-path block verification: select one of K drafts, then BV against its true law.

Thomas & Pal, "Greedy Multi-Path Block Verification for Faster Decoding in Speculative
Sampling", arXiv 2602.16961, as reconstructed in ALGORITHMS.md §6 (the paper's exact ordering rule
was not available):

1. Every node z orders its tokens totally. ``order="ratio"``: ascending p(x|z)/q(x|z) (q = 0 is
   +inf), ties by token id, so drafts the target favours rank high. ``order="target"``: ascending
   p(x|z), ties by token id. Both need only on-path probabilities.
2. The node orders induce a lexicographic order on blocks; select the largest of the K drafts.
3. The selected block is not q-distributed. With G(z) the draft mass of blocks whose |z|-prefix is
   <= z, its law is the law of the maximum of K i.i.d. draws (§6 step 3):
       q^Γ(x | z) = [G(z,x)^K - (G(z,x) - q(z,x))^K] / [G(z)^K - (G(z) - q(z))^K],
   evaluated as (a - b) sum_i a^(K-1-i) b^i so nothing cancels (§6 step 4); q(z) cancels.
4. Run block verification (Sun et al., ICLR 2025, Eqs. 4-5; ``block.py``) on the selected path
   with q^Γ as the draft law. BV is lossless for the law its draft really has (its Thm 1), so the
   scheme is lossless in one iteration. K = 1 gives q^Γ = q, i.e. plain BV.
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
    residual,
    sample,
    validate_inputs,
)
from algorithms.verifiers.block import block_acceptance, block_weights

ORDERS = ("ratio", "target")


def order_key(p: Float[Array, "... V"], q: Float[Array, "... V"], order: str
              ) -> Float[Array, "... V"]:
    """The quantity each node sorts its tokens by (ties are broken by token id)."""
    if order == "ratio":
        return jnp.where(q > 0, p / jnp.where(q > 0, q, 1.0), jnp.inf)
    return p


def token_rank(key: Float[Array, " V"], x: Int[Array, ""]) -> Int[Array, ""]:
    """Position of token x in the node's ascending (key, id) order; O(V), no sort."""
    ids = jnp.arange(key.shape[0])
    return ((key < key[x]) | ((key == key[x]) & (ids < x))).sum()


def select_largest(ranks: Int[Array, "K L"]) -> Int[Array, ""]:
    """Index of the lexicographically largest draft (first of equal ones).

    Drafts that tie up to position i share their prefix, so their position-i ranks come from the
    same node order and are comparable.
    """
    alive = jnp.ones(ranks.shape[0], bool)
    for i in range(ranks.shape[1]):
        best = jnp.max(jnp.where(alive, ranks[:, i], -1))
        alive = alive & (ranks[:, i] == best)
    return jnp.argmax(alive)


def skewed_draft_law(x: Int[Array, " L"], q: Float[Array, "L V"], key: Float[Array, "L V"],
                     K: int) -> Float[Array, "L V"]:
    """q^Γ(. | X_<i) for i = 1..L along the selected block x (§6 step 3)."""

    def pow_diff(a, b):  # (a^K - b^K) / (a - b)
        return sum(a ** (K - 1 - j) * b**j for j in range(K))

    def step(carry, inputs):
        below, q_z = carry  # G(z) - q(z) and q(z) for the prefix z = x_<i
        q_row, key_row, x_i = inputs
        ids = jnp.arange(q_row.shape[0])
        perm = jnp.lexsort((ids, key_row))
        f_sorted = jnp.cumsum(q_row[perm]) - q_row[perm]
        f_below = jnp.zeros_like(q_row).at[perm].set(f_sorted)  # F_<(x) in the node order
        b = below + q_z * f_below
        a = b + q_z * q_row
        den = pow_diff(below + q_z, below)
        law = jnp.where(den > 0, q_row * pow_diff(a, b) / jnp.where(den > 0, den, 1.0), q_row)
        return (b[x_i], q_z * q_row[x_i]), law

    one = jnp.ones((), q.dtype)
    _, laws = jax.lax.scan(step, (0.0 * one, one), (q, key, x))
    return laws


@dataclass(frozen=True, kw_only=True)
class MultiPathBlockVerifier:
    order: str = "ratio"
    lossless: ClassVar[bool] = True
    max_drafts: ClassVar[int | None] = None
    draft_structures: ClassVar[frozenset[str]] = frozenset({IID, DETERMINISTIC})

    def __post_init__(self):
        if self.order not in ORDERS:
            raise ValueError(f"MultiPathBlockVerifier: order must be one of {ORDERS}, "
                             f"got {self.order!r}")

    def init_state(self, L: int, V: int):
        return ()

    def selected_law(self, x, q_k, keys_k, K: int) -> Float[Array, "L V"]:
        """The law the selected block really has (q^Γ, §6 step 3): what BV must be told."""
        return skewed_draft_law(x, q_k, keys_k, K)

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
        keys = order_key(p[:, :L], q, self.order)
        ranks = jax.vmap(jax.vmap(token_rank))(keys, drafts)
        k = select_largest(ranks)
        x, q_k, p_k = drafts[k], q[k], p[k]
        q_sel = self.selected_law(x, q_k, keys[k], K)
        # Block verification (Sun et al. Eqs. 4-5) of the selected block against q^Γ.
        pos = jnp.arange(L)
        w = block_weights(p_k[pos, x], q_sel[pos, x])
        h = block_acceptance(w, q_sel, p_k)
        eta = jax.random.uniform(k_coin, (L,))
        # eta < h, not <=: uniforms lie on a grid in [0, 1) and include 0, so h = 0 must never pass.
        tau = jnp.max(jnp.where(eta < h, pos + 1, 0)).astype(jnp.int32)
        i = jnp.minimum(tau, L - 1)
        w_tau = jnp.where(tau == 0, 1.0, w[jnp.maximum(tau - 1, 0)])
        correction = residual(w_tau * p_k[i], q_sel[i], fallback=p_k[i])
        extra = sample(k_extra, jnp.where(tau == L, p_k[L], correction))
        return emit(x, tau, extra, jnp.where(tau > 0, k, 0)), state
