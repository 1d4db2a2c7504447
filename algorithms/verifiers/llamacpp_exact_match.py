"""llama.cpp's speculative acceptance: sample the target, keep the draft while it matches.

Models ``common_sampler_sample_and_accept_n`` in llama.cpp's ``common/sampling.cpp`` as used by
``examples/speculative-simple`` and the server (ggml-org/llama.cpp). Modelled from the
documented behaviour of the engines that copy it (vllm-project/vllm#40651 calls the same rule
MRV2's "strict" acceptance: a draft token is kept only if it equals the target's sampled token;
NVIDIA/TensorRT-LLM#15775 describes it as strict/exact-match acceptance); the engine source was
not read. At every position i the target samples y_i ~ p_i; draft token x_i is accepted while
x_i == y_i; the first mismatch emits y_i, a full block the bonus y_{L+1} ~ p_{L+1}.

Every emitted token is a target sample, so the rule is lossless for any draft that does not
look at the target's coins; it ignores q and accepts x_i only with probability p_i(x_i), which
is below min(p, q)-style acceptance. Refereed on one i.i.d. block of Q
(``algorithms.exact.engine_rules.llamacpp_exact_match_law``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from algorithms.verifiers.base import DETERMINISTIC, IID, Verdict, emit, sample, validate_inputs
from algorithms.verifiers.registry import register


@register("llamacpp_exact_match",
          exact_law="algorithms.exact.engine_rules:llamacpp_exact_match_law")
@dataclass(frozen=True, kw_only=True)
class LlamaCppExactMatchVerifier:
    """llama.cpp's exact-match acceptance against target samples."""

    models: ClassVar[str] = "llama.cpp common/sampling.cpp sample_and_accept_n (exact match)"
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
        keys = jax.random.split(key, L + 1)
        y = jax.vmap(sample)(keys, p[0]).astype(jnp.int32)  # one target sample per position
        match = drafts[0] == y[:L]
        tau = jnp.where(match.all(), L, jnp.argmin(match)).astype(jnp.int32)
        return emit(drafts[0], tau, y[tau], jnp.int32(0)), state
