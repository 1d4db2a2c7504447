"""SGLang's target-only tree verification: one target draw per node picks the child.

Models ``TreeSpeculativeSamplingTargetOnly`` in SGLang's ``sgl-kernel/csrc/speculative/
speculative_sampling.cuh`` (exposed as ``tree_speculative_sampling_target_only``; read at
sgl-project/sglang commit 120affb9), with its default thresholds (threshold_single =
threshold_acc = 1) and an all-zero draft_probs buffer, which the kernel's "FIXME: leverage
draft probs" says it does not use (assumed from that comment; the caller was not read).

At a node with target law p, one uniform U is drawn and the children are scanned in sibling
order adding up their target mass; the first child at which U falls below the running sum is
accepted and the walk moves to it with a fresh U. When none is, the extra token is drawn from p
with the children's mass removed (the kernel writes p(c) into draft_probs at each rejected child
and samples relu(p - draft_probs)); after a full path the bonus comes from p. So each child is
accepted with probability p(c) and the extra token has law p off the children: the node emits
exactly p(.|z) whatever the tree, as long as the tree does not depend on the target's coins.
q is never read. Siblings are the distinct next tokens of the surviving drafts (SGLang's tree
has no duplicate siblings; a duplicate would add its mass twice). Refereed on the top-k tree
of Q (``algorithms.exact.engine_rules.sglang_topk_target_only_law``): lossless.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from algorithms.verifiers.base import IID, Verdict, emit, residual, sample, validate_inputs
from algorithms.verifiers.registry import register
from algorithms.verifiers.specinfer import survivor_scan


def first_of_each_token(tokens: Int[Array, " K"], live: Bool[Array, " K"]) -> Bool[Array, " K"]:
    """The live drafts whose token no earlier live draft has: the node's distinct children."""
    K = tokens.shape[0]
    earlier = jnp.tril(jnp.ones((K, K), bool), -1)  # [k, j]: j < k
    seen = (earlier & live[None, :] & (tokens[:, None] == tokens[None, :])).any(1)
    return live & ~seen


@register("sglang_topk_target_only",
          exact_law="algorithms.exact.engine_rules:sglang_topk_target_only_law")
@dataclass(frozen=True, kw_only=True)
class SGLangTargetOnlyVerifier:
    """SGLang's tree_speculative_sampling_target_only (one target draw per node)."""

    models: ClassVar[str] = "SGLang sgl-kernel speculative_sampling.cuh TargetOnly tree kernel"
    referee_drafts: ClassVar[str] = "topk"
    lossless: ClassVar[bool] = True
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
        _, L, V = validate_inputs(self, drafts, q, p)
        k_coin, k_extra = jax.random.split(key)
        u = jax.random.uniform(k_coin, (L,))

        def node(t, lead, alive):
            tokens, p_t = drafts[:, t], p[lead, t]
            child = first_of_each_token(tokens, alive)
            running = jnp.cumsum(jnp.where(child, p_t[tokens], 0.0))
            hit = child & (u[t] < running)  # strict: U = 0 never takes a p = 0 child
            winner = jnp.where(hit.any(), jnp.argmax(hit), -1).astype(jnp.int32)
            covered = jnp.zeros(V, p.dtype).at[tokens].max(child.astype(p.dtype))
            off = residual(p_t * (1.0 - covered), jnp.zeros_like(p_t), fallback=p_t)
            return winner, off

        tau, lead, law = survivor_scan(drafts, p, node)
        return emit(drafts[lead], tau, sample(k_extra, law), lead), state
