"""Block verification (BV): accept the longest sub-block a single coupling can justify.

Sun, Mendlovic, Leviathan, Aharoni, Ro, Beirami, Suresh, "Block Verification Accelerates
Speculative Decoding", ICLR 2025 (arXiv 2403.10444), Algorithm 2; docs/verifiers/block.md.

Token verification (Leviathan et al.) decides every draft token on its own and stops at the first
rejection. BV instead keeps a *clipped* running likelihood ratio along the block,

    w_0 = 1,   w_i = min(w_{i-1} p(X_i | X_<i) / q(X_i | X_<i), 1)          (paper's p_i)

so a token the target under-weights can be compensated by later tokens it over-weights. Each
sub-block X_<=i is then accepted with probability (paper Eq. 5)

    h_i = S_i / (S_i + 1 - w_i),   S_i = sum_x max(w_i p(x | X_<=i) - q(x | X_<=i), 0),   i < L
    h_L = w_L

(0/0 -> 1), and tau = max{i : eta_i <= h_i} over *all* i with independent uniforms: there is no
early exit, a later sub-block may be accepted after an earlier one was not. The extra token is a
correction from max(w_tau p(. | X_<=tau) - q(. | X_<=tau), 0) (paper Eq. 4; with w_0 = 1 this is
the token-wise residual at tau = 0) or, after the whole block, a bonus from p(. | X_<=L).
Thm 1 of the paper: lossless in one iteration, so no state crosses iterations.
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
from algorithms.verifiers.registry import register

# A finite stand-in for log(0) and log(inf) in the running log ratio: exp(-_BIG) == 0 in float32
# and float64, and +_BIG lifts S_i above every earlier maximum, i.e. w_i = 1 (min(w * inf, 1)).
_BIG = 1e4


def block_weights(p_x: Float[Array, " L"], q_x: Float[Array, " L"]) -> Float[Array, " L"]:
    """w_1..w_L, the clipped cumulative ratio, without a sequential scan.

    With S_i = sum_{j<=i} log(p_j / q_j) and S_0 = 0, induction on i gives
    log w_i = S_i - max_{0<=j<=i} S_j: clipping at 1 is the same as restarting the product at the
    last running maximum. A plain cumprod would be wrong.
    """
    log_ratio = jnp.where(
        (p_x > 0) & (q_x > 0),
        jnp.log(jnp.where(p_x > 0, p_x, 1.0)) - jnp.log(jnp.where(q_x > 0, q_x, 1.0)),
        jnp.where(p_x > 0, _BIG, -_BIG),
    )
    s = jnp.concatenate([jnp.zeros((1,), log_ratio.dtype), jnp.cumsum(log_ratio)])
    log_w = s - jax.lax.cummax(s)
    # A target-probability-0 draft token zeroes the weight for the rest of the block.
    dead = jnp.cumsum(p_x <= 0) > 0
    return jnp.where(dead, 0.0, jnp.exp(log_w[1:]))


def block_acceptance(w: Float[Array, " L"], q: Float[Array, "L V"],
                     p: Float[Array, "L+1 V"]) -> Float[Array, " L"]:
    """h_1..h_L of Eq. 5.

    The denominator S_i + 1 - w_i is computed as sum_x max(q - w_i p, 0) (the same number when
    both rows sum to 1): a sum of non-negative terms cannot
    cancel to a tiny or negative value on float32 laws that are normalised only to ~1e-6. It is 0
    only when w_i = 1 and p = q at the next position, where h_i = 1 by convention.
    """
    w_mid = w[:-1, None]  # w_1..w_{L-1}, against the laws after X_<=i (rows 1..L-1)
    excess = jnp.maximum(w_mid * p[1:-1] - q[1:], 0.0).sum(-1)  # S_i
    deficit = jnp.maximum(q[1:] - w_mid * p[1:-1], 0.0).sum(-1)  # S_i + 1 - w_i
    h_mid = jnp.where(deficit > 0, excess / jnp.where(deficit > 0, deficit, 1.0), 1.0)
    return jnp.concatenate([jnp.minimum(h_mid, 1.0), w[-1:]])


@register("block", exact_law="algorithms.exact.block:block_law")
@dataclass(frozen=True, kw_only=True)
class BlockVerifier:
    lossless: ClassVar[bool] = True
    max_drafts: ClassVar[int | None] = 1
    draft_structures: ClassVar[frozenset[str]] = frozenset({IID, DETERMINISTIC})

    def init_state(self, L: int, V: int):
        return ()

    def __call__(
        self,
        key: Array,
        drafts: Int[Array, "K L"],
        q: Float[Array, "K L V"],
        p: Float[Array, "K L+1 V"],
        state=(),
    ) -> tuple[Verdict, tuple]:
        _, L, _ = validate_inputs(self, drafts, q, p)
        x, q, p = drafts[0], q[0], p[0]
        k_coin, k_extra = jax.random.split(key)
        pos = jnp.arange(L)
        w = block_weights(p[pos, x], q[pos, x])
        h = block_acceptance(w, q, p)
        eta = jax.random.uniform(k_coin, (L,))
        # tau = max{i : eta_i <= h_i}, 0 when none passes (scan all i, no early exit). Strict <:
        # uniform() can return exactly 0, and h_i = 0 must never accept (a p = 0 branch).
        tau = jnp.max(jnp.where(eta < h, pos + 1, 0)).astype(jnp.int32)
        i = jnp.minimum(tau, L - 1)
        w_tau = jnp.where(tau == 0, 1.0, w[jnp.maximum(tau - 1, 0)])
        correction = residual(w_tau * p[i], q[i], fallback=p[i])
        law = jnp.where(tau == L, p[L], correction)
        extra = sample(k_extra, law)
        return emit(x, tau, extra, jnp.int32(0)), state
