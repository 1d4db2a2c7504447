"""Greedy multi-path block verification: select one of K drafts, then BV against its true law.

Thomas & Pal, "Greedy Multi-Path Block Verification for Faster Decoding in Speculative
Sampling", arXiv 2602.16961, as reconstructed in docs/verifiers/multipath_block.md (the paper's
exact ordering rule was not available):

1. Every node z orders its tokens totally, from on-path probabilities only. ``order="band"``
   (default): tokens the target favours (p(x|z) >= q(x|z), q = 0 included) above the others,
   ties by token id. ``order="ratio"``: ascending p/q exactly (q = 0 is +inf), ties by id.
   ``order="target"``: ascending p(x|z), ties by id. Any fixed total order keeps the scheme
   lossless (step 3 is exact for it); the order only decides which draft is selected. "band" is
   the one that costs O(V) per node: step 3 needs each token's q-mass below it in the node
   order, which for two bands is two prefix sums, where an exact ratio order needs a sort of the
   vocabulary (0.4-0.9 s per call at V = 151,936). The order is part of the algorithm: "band"
   and "ratio" rank tokens alike at V = 2 and on one-hot q, but elsewhere they select other
   drafts, so the one-step law of (tau, tokens) differs (TV up to 0.57 at V = 3, K = 3, L = 2)
   although both are lossless. A check of this kernel against the reconstruction's example rule
   (ascending p/q) must pass ``order="ratio"`` to the kernel and to the exact law alike.
2. The node orders induce a lexicographic order on blocks; select the largest of the K drafts.
3. The selected block is not q-distributed. With G(z) the draft mass of blocks whose |z|-prefix is
   <= z, its law is the law of the maximum of K i.i.d. draws:
       q^Γ(x | z) = [G(z,x)^K - (G(z,x) - q(z,x))^K] / [G(z)^K - (G(z) - q(z))^K],
   evaluated as (a - b) sum_i a^(K-1-i) b^i so nothing cancels; q(z) cancels.
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
from algorithms.verifiers.registry import register

ORDERS = ("band", "ratio", "target")
BANDS = (1.0,)  # band edges of p/q (p >= c q); more bands cost one prefix sum each
BLOCK = 64  # prefix sums as [V/BLOCK, BLOCK] @ triangular + block offsets (cheaper than cumsum)


def order_key(p: Float[Array, "... V"], q: Float[Array, "... V"], order: str
              ) -> Float[Array, "... V"]:
    """The quantity each node sorts its tokens by (ties are broken by token id)."""
    if order == "band":
        return sum((p >= c * q).astype(p.dtype) for c in BANDS)  # q = 0: the top band
    if order == "ratio":
        return jnp.where(q > 0, p / jnp.where(q > 0, q, 1.0), jnp.inf)
    return p


def draft_ranks(p: Float[Array, "K L V"], q: Float[Array, "K L V"], drafts: Int[Array, "K L"],
                order: str) -> Int[Array, "K L"]:
    """Numbers that order the drafts' tokens at each node like the node order. "band" needs
    only each draft's own p(x), q(x): (band, id) as band * V + id, O(1) per token; the exact
    orders need the position in the ascending (key, id) order, O(V) per token."""
    V = p.shape[-1]
    if order == "band":
        p_x = jnp.take_along_axis(p, drafts[..., None], -1)[..., 0]
        q_x = jnp.take_along_axis(q, drafts[..., None], -1)[..., 0]
        return order_key(p_x, q_x, order).astype(jnp.int32) * V + drafts
    ids = jnp.arange(V)

    def rank(key, x):
        return ((key < key[x]) | ((key == key[x]) & (ids < x))).sum()

    return jax.vmap(jax.vmap(rank))(order_key(p, q, order), drafts)


def exclusive_cumsum(a: Float[Array, "... V"]) -> Float[Array, "... V"]:
    """sum_{y < x} a[y] along the last axis, as block matmuls (XLA:CPU's cumsum is slow)."""
    V = a.shape[-1]
    pad = -V % BLOCK
    blocks = jnp.pad(a, [(0, 0)] * (a.ndim - 1) + [(0, pad)]).reshape(*a.shape[:-1], -1, BLOCK)
    strict = jnp.triu(jnp.ones((BLOCK, BLOCK), a.dtype), 1)  # [y, x]: y < x within a block
    inner = blocks @ strict
    totals = blocks.sum(-1)
    offsets = jnp.cumsum(totals, -1) - totals
    return (inner + offsets[..., None]).reshape(*a.shape[:-1], -1)[..., :V]


def mass_below(q_row: Float[Array, " V"], key_row: Float[Array, " V"], order: str
               ) -> Float[Array, " V"]:
    """F_<(x): the q-mass of the tokens before x in the node order."""
    if order == "band":
        # Band b's tokens sit above every token of the bands below it: F_< is the q-mass of
        # the lower bands plus the prefix of b's own mass. Band 0's prefix sums are the total's
        # minus the other bands' (B prefix sums in all); selects, not gathers or concatenates
        # of [B, V] tables, which XLA:CPU runs as separate slow passes over the vocabulary.
        masked = [jnp.where(key_row == b, q_row, 0.0) for b in range(1, len(BANDS) + 1)]
        sums = [exclusive_cumsum(m) for m in masked]
        masses = [m.sum() for m in masked]
        out = exclusive_cumsum(q_row) - sum(sums)
        below = q_row.sum() - sum(masses)  # band 0's mass
        for b, (within, mass) in enumerate(zip(sums, masses, strict=True), start=1):
            out = jnp.where(key_row == b, within + below, out)
            below = below + mass
        return out
    ids = jnp.arange(q_row.shape[0])
    perm = jnp.lexsort((ids, key_row))
    f_sorted = jnp.cumsum(q_row[perm]) - q_row[perm]
    return jnp.zeros_like(q_row).at[perm].set(f_sorted)


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
                     K: int, order: str = "band") -> Float[Array, "L V"]:
    """q^Γ(. | X_<i) for i = 1..L along the selected block x (step 3 above)."""

    def pow_diff(a, b):  # (a^K - b^K) / (a - b)
        return sum(a ** (K - 1 - j) * b**j for j in range(K))

    f_below = jax.vmap(lambda qr, kr: mass_below(qr, kr, order))(q, key)  # all L rows at once
    q_x = jnp.take_along_axis(q, x[:, None], -1)[:, 0]
    f_x = jnp.take_along_axis(f_below, x[:, None], -1)[:, 0]
    # Scalars along the path: q(z) and G(z) - q(z) for z = X_<i (a product / running sum).
    q_z = jnp.concatenate([jnp.ones((1,), q.dtype), jnp.cumprod(q_x)[:-1]])

    def step(below, inputs):
        qz, fx, qx = inputs
        return below + qz * fx, below

    _, below = jax.lax.scan(step, jnp.zeros((), q.dtype), (q_z, f_x, q_x))
    b = below[:, None] + q_z[:, None] * f_below
    a = b + q_z[:, None] * q
    den = pow_diff(below + q_z, below)[:, None]
    return jnp.where(den > 0, q * pow_diff(a, b) / jnp.where(den > 0, den, 1.0), q)


@register("multipath_block", exact_law="algorithms.exact.multipath_block:multipath_block_law")
@dataclass(frozen=True, kw_only=True)
class MultiPathBlockVerifier:
    order: str = "band"
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
        """The law the selected block really has (q^Γ, step 3 above): what BV must be told."""
        return skewed_draft_law(x, q_k, keys_k, K, self.order)

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
        k = select_largest(draft_ranks(p[:, :L], q, drafts, self.order))
        x, q_k, p_k = drafts[k], q[k], p[k]
        q_sel = self.selected_law(x, q_k, order_key(p_k[:L], q_k, self.order), K)
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
