"""Token-wise speculative sampling (modified rejection sampling).

Leviathan, Kalman, Matias, "Fast Inference from Transformers via Speculative Decoding",
ICML 2023 (arXiv 2211.17192), Algorithm 1; Chen et al., arXiv 2302.01318, Algorithm 2.
Accept draft token X_i with probability min(1, p_i(X_i) / q_i(X_i)); at the first rejection emit a
correction from r(x) ∝ max(p_i(x) - q_i(x), 0) (Leviathan Thm 3.5); after a full block emit a
bonus token from p_{L+1}.

A position whose q row is all zero was not drafted (a drafter that stops early, draft structure
STOPPED): its token is rejected and the correction is drawn from p itself (the residual of
p against 0), which is exactly the bonus token of a block that ended there, so a draft length
chosen by the drafter from its own laws keeps the target's law. A drafted token always has
q(x) > 0, so the guard changes nothing for the other structures.
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
    STOPPED,
    Verdict,
    emit,
    residual,
    safe_ratio,
    sample,
    validate_inputs,
)
from algorithms.verifiers.registry import register


@register("token", exact_law="algorithms.exact.token:token_law")
@dataclass(frozen=True, kw_only=True)
class TokenVerifier:
    lossless: ClassVar[bool] = True
    max_drafts: ClassVar[int | None] = 1
    draft_structures: ClassVar[frozenset[str]] = frozenset({IID, DETERMINISTIC, STOPPED})

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
        p_x = p[pos, x]
        q_x = q[pos, x]
        u = jax.random.uniform(k_coin, (L,))
        # Strict: uniform() can return exactly 0, and "0 <= 0" would accept a token p gives mass 0.
        accept = (u < safe_ratio(p_x, q_x)) & (q_x > 0)
        # tau = index of the first rejection, or L when every token is accepted.
        tau = jnp.where(accept.all(), L, jnp.argmin(accept)).astype(jnp.int32)
        i = jnp.minimum(tau, L - 1)
        correction = residual(p[i], q[i], fallback=p[i])
        law = jnp.where(tau == L, p[L], correction)
        extra = sample(k_extra, law)
        return emit(x, tau, extra, jnp.int32(0)), state
