"""SpecInfer's recursive rejection sampling on EAGLE's deterministic top-k tree (biased).

Models EAGLE's tree verification as SpecInfer's RRS run with the draft's softmax q although
EAGLE's children are the draft's top-k tokens, not samples from q: the question of
SafeAILab/EAGLE#329 ("non-greedy rejection sampling ignores draft (q)") and #221 (top-k drafting
vs. SpecInfer's sampling assumption). Written from SpecInfer's RRS (Miao et al., arXiv
2305.09781) and from reading ``evaluate_posterior`` in EAGLE's ``eagle/model/utils.py`` at commit
08dc06cc (an EAGLE-1 version that used q; it also renormalised q over the untried siblings,
which this class does not model). The current EAGLE sets q(x) = 1 and removes rejected children
from p (#183, #329), which is the naive-sampling law of ``sglang_topk_target_only``: lossless.

At a node with target law p and draft law q: r = p; each distinct child c with q(c) > 0, in
sibling order, is accepted with min(1, r(c)/q(c)), and on rejection r <- norm(max(r - q, 0));
the first accepted child is followed; when all fail the extra token is drawn from the final r;
after a full path the bonus comes from p. Refereed on the top-k tree of Q
(``algorithms.exact.engine_rules.eagle_topk_rrs_law``): not lossless.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp
from jax import lax
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


@register("eagle_topk_rrs", exact_law="algorithms.exact.engine_rules:eagle_topk_rrs_law")
@dataclass(frozen=True, kw_only=True)
class EagleTopKRRSVerifier:
    """SpecInfer's RRS with softmax q on EAGLE's top-k tree (EAGLE#329 case; biased)."""

    models: ClassVar[str] = "EAGLE eagle/model/utils.py evaluate_posterior with q (EAGLE#329)"
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
            tokens = drafts[:, t]
            q_x = jnp.take_along_axis(q[:, t], tokens[:, None], 1)[:, 0]
            tried = first_of_each_token(tokens, alive) & (q_x > 0)

            def trial(carry, k):
                r, winner = carry
                trying = tried[k] & (winner < 0)
                accept = u[t, k] < safe_ratio(r[tokens[k]], q_x[k])
                winner = jnp.where(trying & accept, k, winner).astype(jnp.int32)
                r = jnp.where(trying & ~accept, residual(r, q[k, t], fallback=r), r)
                return (r, winner), None

            (r, winner), _ = lax.scan(trial, (p[lead, t], jnp.int32(-1)), jnp.arange(K))
            return winner, r

        tau, lead, law = survivor_scan(drafts, p, node)
        return emit(drafts[lead], tau, sample(k_extra, law), lead), state
