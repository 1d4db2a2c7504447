"""Leviathan's min(1, p/q) applied child by child to a deterministic top-k tree (biased).

Models the rule warpfront/hipfire#483 rejected for its DDTree verify at temperature > 0: the
tree is built from the draft's top-k marginals (no draft sample), and the token rule's test
min(1, p(c)/q(c)) is applied to its children with the draft's softmax q. Modelled from the
documented behaviour in hipfire#483 ("the min(1, p/q) rejection rule is provably biased for
these trees (a first candidate proposed w.p. 1 over-accepts)"; it switched to SpecInfer-style
naive sampling, the ``sglang_topk_target_only`` law); the engine source was not read, so the
rule's details below are the plain reading of "the token rule per child".

At a node with target law p and draft law q, the distinct children c with q(c) > 0 are tried
in sibling order, each accepted with min(1, p(c)/q(c)) against the unchanged p; the first
accepted one is followed. When all fail, the extra token is drawn from norm(max(p - q, 0)) (from
p when no child was tried); after a full path the bonus comes from p. Refereed on the top-k
tree of Q (``algorithms.exact.engine_rules.topk_min_ratio_law``): not lossless.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from algorithms.verifiers.base import (
    IID,
    Verdict,
    emit,
    residual,
    safe_ratio,
    sample,
    validate_inputs,
)
from algorithms.verifiers.registry import register
from algorithms.verifiers.sglang_topk_target_only import first_of_each_token
from algorithms.verifiers.specinfer import survivor_scan


@register("topk_min_ratio", exact_law="algorithms.exact.engine_rules:topk_min_ratio_law")
@dataclass(frozen=True, kw_only=True)
class TopKMinRatioVerifier:
    """min(1, p/q) per child of a deterministic top-k tree (hipfire#483 case; biased)."""

    models: ClassVar[str] = "hipfire DDTree temp>0 verify, the min(1,p/q) rule (hipfire#483)"
    referee_drafts: ClassVar[str] = "topk"
    lossless: ClassVar[bool] = False
    max_drafts: ClassVar[int | None] = None
    draft_structures: ClassVar[frozenset[str]] = frozenset({IID})

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
        K, L, _ = validate_inputs(self, drafts, q, p)
        k_coin, k_extra = jax.random.split(key)
        u = jax.random.uniform(k_coin, (L, K))

        def node(t, lead, alive):
            tokens, p_t, q_t = drafts[:, t], p[lead, t], q[lead, t]
            q_x = jnp.take_along_axis(q[:, t], tokens[:, None], 1)[:, 0]
            tried = first_of_each_token(tokens, alive) & (q_x > 0)
            accept = tried & (u[t] < safe_ratio(p_t[tokens], q_x))
            winner = jnp.where(accept.any(), jnp.argmax(accept), -1).astype(jnp.int32)
            law = jnp.where(tried.any(), residual(p_t, q_t, fallback=p_t), p_t)
            return winner, law

        tau, lead, law = survivor_scan(drafts, p, node)
        return emit(drafts[lead], tau, sample(k_extra, law), lead), state
