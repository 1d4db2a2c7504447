"""vLLM's greedy (strict) rejection sampler: accept a draft token iff it is the target argmax.

Models the all-greedy path of vLLM's V1 ``RejectionSampler`` (``vllm/v1/sample/
rejection_sampler.py``; "[perf] v1/spec_decode: skip softmax for all-greedy rejection sampling",
vllm-project/vllm#32852). Modelled from the documented behaviour in #32852 and #40651; the
engine source was not read. Draft token x_i is accepted while it equals argmax p_i; the first
mismatch emits argmax p_i, a full block the bonus argmax p_{L+1}. The rule reads neither q nor
the key.

It emits the target's greedy path, so it is exact for T = 0 (one-hot p) only; under sampling it
is not the target law, hence ``lossless = False``. The referee drafts the argmax chain of Q, as
vLLM does since #16899 (``algorithms.exact.engine_rules.vllm_strict_law``). Ties in p go to the
lower token id.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from algorithms.verifiers.base import DETERMINISTIC, IID, Verdict, emit, validate_inputs
from algorithms.verifiers.registry import register


@register("vllm_strict", exact_law="algorithms.exact.engine_rules:vllm_strict_law")
@dataclass(frozen=True, kw_only=True)
class VllmStrictVerifier:
    """vLLM's greedy rejection sampler (exact for T = 0 only)."""

    models: ClassVar[str] = "vLLM v1 RejectionSampler, all-greedy path (vllm-project/vllm#32852)"
    referee_drafts: ClassVar[str] = "argmax"
    lossless: ClassVar[bool] = False
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
        greedy = jnp.argmax(p[0], axis=-1).astype(jnp.int32)  # [L+1], first maximum
        match = drafts[0] == greedy[:L]
        tau = jnp.where(match.all(), L, jnp.argmin(match)).astype(jnp.int32)
        return emit(drafts[0], tau, greedy[tau], jnp.int32(0)), state
