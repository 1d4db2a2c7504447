"""Deliberately broken verifiers shared by several Monte Carlo tests (each must FAIL them)."""

import dataclasses

import jax
import jax.numpy as jnp

from algorithms.verifiers.base import emit, sample


def residual_is_target(base: type) -> type:
    """Single-draft mutant of ``base``: after a rejection the correction comes from p(. | X_<=tau)
    instead of the verifier's residual (Leviathan Thm 3.5 / Sun et al. Eq. 4 dropped)."""

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class ResidualIsTarget(base):
        lossless: bool = False

        def __call__(self, key, drafts, q, p, state=()):
            verdict, state = super().__call__(key, drafts, q, p, state)
            tau = verdict.num_emitted - 1
            L = drafts.shape[1]
            redraw = sample(jax.random.fold_in(key, 7), p[0, jnp.minimum(tau, L)])
            extra = jnp.where(tau == L, verdict.tokens[L], redraw)
            return emit(drafts[0], tau, extra, jnp.int32(0)), state

    ResidualIsTarget.__name__ = f"ResidualIsTarget{base.__name__}"
    return ResidualIsTarget
