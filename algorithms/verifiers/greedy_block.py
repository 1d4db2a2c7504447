"""Greedy block verification (GBV) with the cross-iteration target fix-up.

Sun et al., "Block Verification Accelerates Speculative Decoding", ICLR 2025 (arXiv 2403.10444),
the greedy variant of Sec. 4; identical to SpecTr-GBV (Lin et al., arXiv 2604.25925, Eq. 2-4)
with one draft. docs/verifiers/greedy_block.md (the fix-up is a reconstruction, checked exactly in
``algorithms/exact/greedy_block.py``).

Per iteration, with T the effective target (p when no fix-up is active), T_i and Q_i the joints
of X_<=i and a(z) = min(T(z), Q(z)), sub-block X_<=i is accepted with probability

    h_i = [a(X_<=i) - sum_x a(X_<=i, x)] / [Q_i - sum_x a(X_<=i, x)]   (i < L),   h_L = a/Q_L,

and tau = max{i : eta_i <= h_i}. Then P(tau >= t, X_<=t = z) = min(T(z), Q(z)): the per-iteration
optimum sum_t sum_z min(p(z), q(z)) (12/9 on the running example, against BV's 11/9). Dividing by
Q_i, h_i is BV's Eq. 5 with the *unclipped* joint ratio r_i = T_i / Q_i in place of w_i, and
h_i = 1 once r_i >= 1. The correction is drawn from max(T_tau T(. | X_<=tau) - Q_tau q(.), 0).

That optimum takes target mass from strings that extend a correction inside the old window, so
one iteration alone is biased (TV 2-17% over 5 tokens). The fix-up repays it: a correction c
after X_<=tau with tau + 1 < L pushes a modification with weight omega = Q(v) / T(v), v = X_<=tau c,
covering the next L - 1 - tau positions. There the target is T <- norm(max(T - omega q, 0)),
modifications applied oldest first, and after each token x the weight follows the path,
omega <- omega q(x) / T_before(x), T_before being the target just before that modification.

State (fixed shape, so the decode loop can carry it through ``lax.while_loop``): ``omega[L]`` and
``remaining[L]`` (positions from the start of the next iteration a modification still covers,
0 = empty slot), oldest first. Older modifications always expire first, so at most L - 1 are
live. ``fixup=False`` ignores the state: the biased per-iteration rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

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

# Finite stand-in for log(0) / log(inf) in the running log ratio (exp(-_BIG) == 0); the ratio
# itself is capped at exp(_LOG_CAP) so r * T cannot overflow float32 (only terms with
# T(x) < q(x) * 1e-26 notice the cap).
_BIG = 1e4
_LOG_CAP = 60.0


class GreedyBlockState(NamedTuple):
    omega: Float[Array, " M"]  # fix-up weight Q(v)/T(v), followed along the committed path
    remaining: Int[Array, " M"]  # positions of the next iteration still covered; 0 = empty


def fixed_target(p_row: Float[Array, " V"], q_row: Float[Array, " V"], omega: Float[Array, " M"],
                 active: Array, token: Int[Array, ""]):
    """Effective target at one position and, per modification, T_before(token).

    Applies T <- norm(max(T - omega_k q, 0)) for the active modifications, oldest first. A
    non-finite omega or an all-zero result only occurs where the joint target probability is
    already 0 (docs/verifiers/greedy_block.md): the modification is skipped there.
    """
    def step(t, mod):
        w, on = mod
        cut = jnp.maximum(t - jnp.where(jnp.isfinite(w), w, 0.0) * q_row, 0.0)
        mass = cut.sum()
        use = on & jnp.isfinite(w) & (mass > 0)
        return jnp.where(use, cut / jnp.where(mass > 0, mass, 1.0), t), t[token]

    return jax.lax.scan(step, p_row, (omega, active))


def follow(omega: Float[Array, " M"], active: Array, q_x: Float[Array, ""],
           before_x: Float[Array, " M"]) -> Float[Array, " M"]:
    """omega_k <- omega_k q(x) / T_before_k(x) on active modifications (inf off the support)."""
    ratio = jnp.where(before_x > 0, q_x / jnp.where(before_x > 0, before_x, 1.0), jnp.inf)
    return jnp.where(active, omega * ratio, omega)


@register("greedy_block", exact_law="algorithms.exact.greedy_block:greedy_block_law")
@dataclass(frozen=True, kw_only=True)
class GreedyBlockVerifier:
    fixup: bool = True
    max_drafts: ClassVar[int | None] = 1
    draft_structures: ClassVar[frozenset[str]] = frozenset({IID, DETERMINISTIC})

    def __post_init__(self):
        if not isinstance(self.fixup, bool):
            raise ValueError(
                f"GreedyBlockVerifier: fixup must be True or False, got {self.fixup!r}")

    @property
    def lossless(self) -> bool:
        """Lossless only with the fix-up: a read-only fact of the option, not a settable field."""
        return self.fixup

    def init_state(self, L: int, V: int) -> GreedyBlockState:
        return GreedyBlockState(jnp.zeros((L,)), jnp.zeros((L,), jnp.int32))

    def __call__(
        self,
        key: Array,
        drafts: Int[Array, "K L"],
        q: Float[Array, "K L V"],
        p: Float[Array, "K L+1 V"],
        state: GreedyBlockState,
    ) -> tuple[Verdict, GreedyBlockState]:
        _, L, _ = validate_inputs(self, drafts, q, p)
        x, q, p = drafts[0], q[0], p[0]
        k_coin, k_extra = jax.random.split(key)
        remaining = state.remaining if self.fixup else jnp.zeros_like(state.remaining)
        # Row L (bonus position) has no draft law; no well-formed modification reaches it.
        q_ext = jnp.concatenate([q, p[L:]])
        x_next = jnp.concatenate([x, jnp.zeros((1,), x.dtype)])

        def position(carry, inputs):
            omega, log_r = carry
            j, p_row, q_row, tok = inputs
            active = remaining > j
            t_row, before = fixed_target(p_row, q_row, omega, active, tok)
            t_x, q_x = t_row[tok], q_row[tok]
            log_ratio = jnp.where(
                (t_x > 0) & (q_x > 0),
                jnp.log(jnp.where(t_x > 0, t_x, 1.0)) - jnp.log(jnp.where(q_x > 0, q_x, 1.0)),
                jnp.where(t_x > 0, _BIG, -_BIG))
            out = (t_row, omega, log_r)
            return (follow(omega, active, q_x, before), log_r + log_ratio), out

        init = (state.omega.astype(p.dtype), jnp.zeros((), p.dtype))
        _, (t_rows, omegas, log_r) = jax.lax.scan(
            position, init, (jnp.arange(L + 1), p, q_ext, x_next))
        r = jnp.exp(jnp.minimum(log_r, _LOG_CAP))  # r_j = T(X_<=j) / Q(X_<=j), j = 0..L

        # h_i for i = 1..L-1: BV's Eq. 5 with the unclipped ratio; h_i = 1 once r_i >= 1.
        rt = r[1:L, None] * t_rows[1:L]
        excess = jnp.maximum(rt - q[1:], 0.0).sum(-1)
        deficit = jnp.maximum(q[1:] - rt, 0.0).sum(-1)
        h_mid = jnp.where((r[1:L] >= 1) | (deficit <= 0), 1.0,
                          excess / jnp.where(deficit > 0, deficit, 1.0))
        h = jnp.concatenate([jnp.minimum(h_mid, 1.0), jnp.minimum(r[L:], 1.0)])
        eta = jax.random.uniform(k_coin, (L,))
        # tau = max{i : eta_i <= h_i}, 0 when none passes (scan all i, no early exit). Strict <:
        # uniform() can return exactly 0, and h_i = 0 must never accept (a p = 0 branch).
        tau = jnp.max(jnp.where(eta < h, jnp.arange(1, L + 1), 0)).astype(jnp.int32)

        t_tau, q_tau = t_rows[tau], q_ext[tau]
        correction = residual(r[tau] * t_tau, q_tau, fallback=t_tau)
        extra = sample(k_extra, jnp.where(tau == L, t_tau, correction))
        verdict = emit(x, tau, extra, jnp.int32(0))
        if not self.fixup:
            return verdict, state
        return verdict, self._next_state(state, remaining, omegas[tau], p[tau], q_tau, tau, extra,
                                         r[tau] * t_tau[extra], L)

    @staticmethod
    def _next_state(state, remaining, omega_tau, p_tau, q_tau, tau, extra, t_joint_ratio, L):
        """Follow the live weights through the extra token, age them, push the new one."""
        active = remaining > tau
        _, before = fixed_target(p_tau, q_tau, omega_tau, active, extra)
        omega = follow(omega_tau, active, q_tau[extra], before)
        remaining = remaining - (tau + 1)
        alive = remaining > 0
        # Oldest first: survivors keep their order and move to the front.
        order = jnp.argsort(~alive, stable=True)
        omega = jnp.where(alive, omega, 0.0)[order]
        remaining = jnp.where(alive, remaining, 0)[order]
        # omega = Q(v) / T(v) for v = X_<=tau c: q_tau(c) / (r_tau T_tau(c)).
        push = (tau + 1) < L
        new_omega = jnp.where(t_joint_ratio > 0,
                              q_tau[extra] / jnp.where(t_joint_ratio > 0, t_joint_ratio, 1.0),
                              jnp.inf)
        slot = jnp.minimum(alive.sum(), remaining.shape[0] - 1)
        omega = jnp.where(push, omega.at[slot].set(new_omega), omega)
        remaining = jnp.where(push, remaining.at[slot].set(L - 1 - tau), remaining)
        return GreedyBlockState(omega.astype(state.omega.dtype),
                                remaining.astype(state.remaining.dtype))
