"""DSpark-style confidence truncation of a draft chain, then the token rule.

Models the static-threshold confidence pruning of DSpark drafts (DSpark, arXiv 2607.05147:
a per-position confidence head on the draft); the form modelled is llama.cpp's
``--spec-draft-conf-min`` (ggml-org/llama.cpp#25173: the drafted block is cut at the first
position whose predicted acceptance is below the threshold), verified by the token rule.
Modelled from the documented behaviour in #25173 and vllm-project/speculators#849 (the
confidence head reads the draft's hidden state and the previous token); the engine source was
not read. Toy stand-in for the learned head: the draft's confidence at position i is
max_x q_i(x), which is known before x_i is drawn.

The block is cut at the first i with max q_i < ``threshold``; positions i.. count as not drafted
(the correction there is drawn from p itself, as for a STOPPED draft), the positions before are
verified by min(1, p/q) with residual norm(max(p - q, 0)), and a full block gets a bonus from p.
The cut depends on draft-side information only, so the rule stays lossless on i.i.d. drafts; a
cut on q_i(x_i) of the drawn token would look at the token it discards and is biased (the exact
law's ``confidence="drafted"``, docs/verifiers/engine_rules.md).
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


@register("dspark_truncation", exact_law="algorithms.exact.engine_rules:dspark_truncation_law")
@dataclass(frozen=True, kw_only=True)
class DSparkTruncationVerifier:
    """DSpark-style draft-confidence truncation, then token-wise verification."""

    threshold: float = 0.7
    models: ClassVar[str] = "DSpark confidence pruning (ggml-org/llama.cpp#25173 conf-min)"
    referee_drafts: ClassVar[str] = "iid"
    lossless: ClassVar[bool] = True
    max_drafts: ClassVar[int | None] = 1
    draft_structures: ClassVar[frozenset[str]] = frozenset({IID, DETERMINISTIC})

    def __post_init__(self):
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"DSparkTruncationVerifier: threshold must be in [0, 1], "
                             f"got {self.threshold!r}")

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
        kept = jnp.cumprod(q.max(-1) >= self.threshold).astype(bool)  # cut at the first low one
        q_x = q[pos, x]
        u = jax.random.uniform(k_coin, (L,))
        accept = kept & (q_x > 0) & (u < safe_ratio(p[pos, x], q_x))
        tau = jnp.where(accept.all(), L, jnp.argmin(accept)).astype(jnp.int32)
        i = jnp.minimum(tau, L - 1)
        correction = jnp.where(kept[i], residual(p[i], q[i], fallback=p[i]), p[i])
        law = jnp.where(tau == L, p[L], correction)
        return emit(x, tau, sample(k_extra, law), jnp.int32(0)), state
