"""Optimal-acceptance verification for greedy multi-drafting (Hu et al., ICLR 2025).

Hu, Zheng, Liu, Huang, "Towards Optimal Multi-Draft Speculative Decoding", ICLR 2025
(arXiv 2502.18779), the greedy draft construction: of K drafts, the first K-1 start with the K-1
most likely draft tokens at the root (fixed, not sampled), and the last starts with a token
sampled from q restricted to the remaining tokens, q_rest = q 1[x not in top] / (1 - q(top)).
For that draft set the best any verifier can accept at the root is

    alpha_greedy = p(top) + sum_{x not in top} min(p(x), q_rest(x)),

because Y ~ p in the top set always hits a fixed draft and only the sampled draft can meet the
rest. Our reading of the matching verifier (the paper states the bound; the rule is ours):
recursive rejection sampling (SpecInfer; docs/verifiers/specinfer.md) with each draft's own law, the
*sampled* draft tried first. It accepts x_K with min(1, p/q_rest); its residual
norm(max(p - q_rest, 0)) equals p on the top set, and the one-hot trials that follow then accept
Y whenever it lands on a fixed draft, so the root acceptance is exactly alpha_greedy.

Below the root every draft continues with tokens sampled from q given its own prefix, so the
accepted draft's continuation is an ordinary single draft: block verification (Sun et al.,
ICLR 2025, Eq. 4-5; ``block.py``) finishes the iteration. Both stages emit the target law, so
the pair is lossless. On K i.i.d. drafts several drafts can share the accepted root token; their
continuations are i.i.d. q-blocks, and SpecInfer's walk over them keeps the rule exact, so
the verifier also takes i.i.d. drafts (RRS in any trial order is exact).
The drafter must report each draft's true law in ``q`` (one-hot rows for fixed tokens, q_rest for
the sampled one); specjax.drafters.greedy does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Float, Int

from algorithms.verifiers.base import (
    GREEDY,
    IID,
    Verdict,
    emit,
    residual,
    sample,
    validate_inputs,
)
from algorithms.verifiers.block import block_acceptance, block_weights
from algorithms.verifiers.registry import register
from algorithms.verifiers.specinfer import SpecInferVerifier


@register("greedy_draft", exact_law="algorithms.exact.greedy_draft:greedy_draft_law")
@dataclass(frozen=True, kw_only=True)
class GreedyDraftVerifier:
    lossless: ClassVar[bool] = True
    max_drafts: ClassVar[int | None] = None
    # i.i.d. drafts, plus Hu et al.'s greedy construction (fixed top tokens + one sample)
    draft_structures: ClassVar[frozenset[str]] = frozenset({IID, GREEDY})

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
        k_root, k_res, k_chain, k_extra = jax.random.split(key, 4)
        u = jax.random.uniform(k_root, (K,))
        # Root: recursive rejection with per-draft laws (SpecInfer's node), the sampled draft
        # (index K-1) first.
        order = jnp.concatenate([jnp.array([K - 1]), jnp.arange(K - 1)]).astype(jnp.int32)
        first, r = SpecInferVerifier().rrs_node(p[0, 0], drafts[order, 0], q[order, 0],
                                                jnp.ones(K, bool), u[order])
        winner = jnp.where(first >= 0, order[jnp.maximum(first, 0)], -1).astype(jnp.int32)
        lead = jnp.maximum(winner, 0)
        survivors = drafts[:, 0] == drafts[lead, 0]
        if L == 1:
            tau_chain, law = jnp.int32(0), p[lead, 1]
        else:
            # A lone survivor (always, under greedy drafting) gets BV; several i.i.d. survivors
            # get SpecInfer's walk. The choice depends on root tokens only, so both stay exact.
            # cond: unbatched, only the chosen stage runs.
            def by_block():
                tau_b, law_b = self.block_chain(k_chain, drafts[lead, 1:], q[lead, 1:],
                                                p[lead, 1:])
                return tau_b, lead, law_b

            tau_chain, lead, law = lax.cond(
                survivors.sum() == 1, by_block,
                lambda: self.rrs_walk(k_chain, drafts, q, p, survivors, lead))
        tau = jnp.where(winner >= 0, 1 + tau_chain, 0).astype(jnp.int32)
        # cond, not where: one draw over the vocabulary per call instead of two.
        extra = lax.cond(winner >= 0, lambda: sample(k_extra, law), lambda: sample(k_res, r))
        return emit(drafts[lead], tau, extra, lead), state

    @staticmethod
    def block_chain(key, x, q, p):
        """BV (Sun et al. Eq. 4-5) on one draft's tokens 2..L: (accepted count, extra-token law)."""
        n = x.shape[0]
        pos = jnp.arange(n)
        w = block_weights(p[pos, x], q[pos, x])
        h = block_acceptance(w, q, p)
        eta = jax.random.uniform(key, (n,))
        tau = jnp.max(jnp.where(eta < h, pos + 1, 0)).astype(jnp.int32)
        i = jnp.minimum(tau, n - 1)
        w_tau = jnp.where(tau == 0, 1.0, w[jnp.maximum(tau - 1, 0)])
        law = jnp.where(tau == n, p[n], residual(w_tau * p[i], q[i], fallback=p[i]))
        return tau, law

    @staticmethod
    def rrs_walk(key, drafts, q, p, alive, lead):
        """SpecInfer's walk (docs/verifiers/specinfer.md) over the survivors from depth 2:
        (accepted count below the root, lead draft, extra-token law)."""
        K, L = drafts.shape
        u = jax.random.uniform(key, (L, K))
        rrs = SpecInferVerifier().rrs_node

        def depth(carry, t):
            alive, stopped, tau, lead, law = carry
            winner, r = lax.cond(  # cond, not where: nodes after the stop cost nothing
                stopped, lambda: (jnp.int32(-1), law),
                lambda: rrs(p[lead, t], drafts[:, t], q[:, t], alive, u[t]))
            accepted = ~stopped & (winner >= 0)
            survivors = alive & (drafts[:, t] == drafts[jnp.maximum(winner, 0), t])
            alive = jnp.where(accepted, survivors, alive)
            lead = jnp.where(accepted, jnp.argmax(survivors), lead).astype(jnp.int32)
            rejected = ~stopped & (winner < 0)
            law = jnp.where(rejected, r, law)
            return (alive, stopped | rejected, tau + accepted, lead, law), None

        init = (alive, jnp.bool_(False), jnp.int32(0), lead, p[lead, 1])
        (_, stopped, tau, lead, law), _ = lax.scan(depth, init, jnp.arange(1, L))
        return tau, lead, jnp.where(stopped, law, p[lead, L])
