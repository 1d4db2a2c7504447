"""vLLM's probabilistic rejection sampler: the token rule min(1, p/q), residual, bonus from p.

Models vLLM's V1 ``RejectionSampler`` random path (``vllm/v1/sample/rejection_sampler.py``,
introduced as "[Speculative decoding 1/9] Optimized rejection sampler", vllm-project/vllm#2336,
which cites Chen et al., arXiv 2302.01318). Modelled from the documented behaviour in #2336 and
#40651 (which describes the acceptance test u < p(x)/q(x) and the recovered-token residual); the
engine source was not read. Accept draft token x_i when q(x_i) > 0 and U < min(1, p_i(x_i) /
q_i(x_i)); at the first rejection emit a token from norm(max(p_i - q_i, 0)); after a full block
a bonus token from p_{L+1}.

Lossless when the draft was sampled from the q it reports (draft structure "iid"): the
referee enumerates one i.i.d. block of Q (``algorithms.exact.engine_rules.vllm_prob_law``).
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
    safe_ratio,
    sample,
    validate_inputs,
)
from algorithms.verifiers.registry import register


@register("vllm_prob", exact_law="algorithms.exact.engine_rules:vllm_prob_law")
@dataclass(frozen=True, kw_only=True)
class VllmProbVerifier:
    """vLLM's probabilistic rejection sampler (token rule with the reported q)."""

    models: ClassVar[str] = "vLLM v1 RejectionSampler, random path (vllm-project/vllm#2336)"
    referee_drafts: ClassVar[str] = "iid"
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
        q_x = q[pos, x]
        u = jax.random.uniform(k_coin, (L,))
        accept = (q_x > 0) & (u < safe_ratio(p[pos, x], q_x))
        tau = jnp.where(accept.all(), L, jnp.argmin(accept)).astype(jnp.int32)
        i = jnp.minimum(tau, L - 1)
        law = jnp.where(tau == L, p[L], residual(p[i], q[i], fallback=p[i]))
        return emit(x, tau, sample(k_extra, law), jnp.int32(0)), state
