"""Hierarchical Speculative Decoding (HSD) as released: single-draft, backward "step-back" search.

Zhou, Huang, Li, Wu, Wang, Zhang, Lin, Cheng, "Overcoming Joint Intractability with Lossless
Hierarchical Speculative Decoding", arXiv 2601.05724 (2026). The paper's method section was not
available to us; this is our reading of the authors' public code (ZhouYuxuanYX/
Hierarchical-Speculative-Decoding, ``algorithm_clean.py`` with ``HSD=True``, and
``simulation.py``), written from that reading, not copied. Notation: P_t = p(x_<=t), Q_t = q(x_<=t)
are joint prefix probabilities of the draft block x_1..x_L (P_0 = Q_0 = 1).

1. The whole block is accepted with probability min(1, P_L / Q_L) (the *joint* ratio, where BV
   uses its running clipped weight).
2. Otherwise the search "steps back" from branch L-1 towards the root. Branch t (the children of
   x_<=t) carries target mass c_t p(. | x_<=t) against draft mass Q_t q(. | x_<=t); with w_t =
   c_t / Q_t its excess is S_t = sum_y max(w_t p - q, 0) and its deficit D_t = sum_y max(q - w_t p,
   0). The search stops at branch t with probability h_t = S_t / D_t (it steps back otherwise);
   h_0 = 1, since the root is balanced. The coins are independent, so tau = max{t : eta_t < h_t}.
3. The extra token is drawn from norm(max(w_tau p(. | x_<=tau) - q(. | x_<=tau), 0)), or the bonus
   p(. | x) after a full acceptance.

Two variants, as the two files differ:

- ``variant="released"`` (``algorithm_clean.py``): c_t = min(P_t, Q_t), i.e. w_t = min(1, P_t/Q_t),
  and "cumulative ratio >= 1 -> no step back": h_t = 1 whenever P_{t+1} >= Q_{t+1}. Where the
  residual has no mass the released code emits x_<=tau+1 with no extra token; so do we.
- ``variant="simulation"`` (``simulation.py``): c_t = P_t / max(1, max_{j<=t} P_j/Q_j), which is
  exactly BV's clipped running weight, and no override. It differs from BV only in step 1.

Our readings of the ambiguous points: 0/0 in h_t counts as 1 (the block-verification convention;
the released code's nan_to_num gives 0, but there the override already sets h_t = 1 whenever
0/0 can occur, since S_t = D_t = 0 forces w_t = 1 and p = q at branch t).

Neither variant is lossless. The exact checker (tests/algorithms/test_hsd.py) measures TV = 1/9
over the first 4 tokens on the running example at L = 2 for both, with E[tau] = 4/3 against
BV's 11/9; at L = 1 both reduce to token-wise sampling and are exact. Step 1 is the cause: the
target mass of a block that BV's clipped weight had already "spent" on earlier rejections is
counted again, so E[tau] exceeds BV's, which Sun et al. (ICLR 2025) prove optimal among lossless
single-draft verifiers. The released variant's E[tau] is exactly the single-draft bound
sum_t sum_z min(p(z), q(z)), which greedy block verification reaches only by carrying state
across iterations; ``algorithms.exact.lp_optimum`` confirms that no stateless lossless rule
exceeds BV (11/9 on the example).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from algorithms.verifiers.base import Verdict, emit, sample, validate_inputs
from algorithms.verifiers.block import _BIG, block_weights
from algorithms.verifiers.registry import register

VARIANTS = ("released", "simulation")


def joint_log_ratios(p_x: Float[Array, " L"], q_x: Float[Array, " L"]) -> Float[Array, " L"]:
    """log(P_t / Q_t) for t = 1..L, with log 0 -> -_BIG (a p = 0 token kills the block)."""
    log_ratio = jnp.where(
        (p_x > 0) & (q_x > 0),
        jnp.log(jnp.where(p_x > 0, p_x, 1.0)) - jnp.log(jnp.where(q_x > 0, q_x, 1.0)),
        jnp.where(p_x > 0, _BIG, -_BIG),
    )
    return jnp.cumsum(log_ratio)


@register("hsd", exact_law="algorithms.exact.hsd:hsd_law")
@dataclass(frozen=True, kw_only=True)
class HSDVerifier:
    variant: str = "released"

    lossless: ClassVar[bool] = False  # exact TV 1/9 on the running example at L = 2
    max_drafts: ClassVar[int | None] = 1
    # base.IID / base.DETERMINISTIC: one draft, so any drafter's block is a draw from its q
    draft_structures: ClassVar[frozenset[str]] = frozenset({"iid", "deterministic"})

    def __post_init__(self):
        if self.variant not in VARIANTS:
            raise ValueError(
                f"HSDVerifier: variant must be one of {VARIANTS}, got {self.variant!r}")

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
        p_x, q_x = p[pos, x], q[pos, x]
        log_joint = joint_log_ratios(p_x, q_x)  # log P_t/Q_t, t = 1..L
        if self.variant == "released":
            w = jnp.exp(jnp.minimum(log_joint, 0.0))
            w = jnp.where(jnp.cumsum(p_x <= 0) > 0, 0.0, w)
        else:
            w = block_weights(p_x, q_x)
        w_all = jnp.concatenate([jnp.ones((1,), w.dtype), w])  # w_0..w_L
        # Branches t = 1..L-1: stop with probability S_t / D_t (0/0 -> 1).
        excess = jnp.maximum(w_all[1:L, None] * p[1:L] - q[1:L], 0.0).sum(-1)
        deficit = jnp.maximum(q[1:L] - w_all[1:L, None] * p[1:L], 0.0).sum(-1)
        h_mid = jnp.where(deficit > 0, excess / jnp.where(deficit > 0, deficit, 1.0), 1.0)
        if self.variant == "released":
            h_mid = jnp.where(log_joint[1:] >= 0, 1.0, h_mid)  # P_{t+1} >= Q_{t+1}: no step back
        h_top = jnp.exp(jnp.minimum(log_joint[-1:], 0.0))  # step 1: the joint ratio
        h = jnp.concatenate([jnp.minimum(h_mid, 1.0), h_top])  # h_1..h_L
        eta = jax.random.uniform(k_coin, (L,))
        tau = jnp.max(jnp.where(eta < h, pos + 1, 0)).astype(jnp.int32)
        i = jnp.minimum(tau, L - 1)
        r = jnp.maximum(w_all[i] * p[i] - q[i], 0.0)
        mass = r.sum()
        law = jnp.where(tau == L, p[L], r / jnp.where(mass > 0, mass, 1.0))
        # No residual mass below the top: the released code emits x_<=tau+1, no extra token.
        extra = jnp.where((tau < L) & (mass <= 0), x[i], sample(k_extra, jnp.where(
            (tau < L) & (mass <= 0), p[i], law)))
        return emit(x, tau, extra, jnp.int32(0)), state
