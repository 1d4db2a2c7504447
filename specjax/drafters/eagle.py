"""EAGLE-style feature drafter: one decoder layer that extrapolates the target's features.

Li et al., "EAGLE: Speculative Sampling Requires Rethinking Feature Uncertainty" (ICML 2024,
arXiv 2401.15077), §3: the head reads the pair (feature f_{j-1}, embedding of token x_j), maps
it with ``fc`` ([2D] -> [D]) and one decoder layer (attending over all earlier pairs through its
own KV cache) to a predicted feature f̂_j, and the *target's* LM head turns f̂_j into the law of
x_{j+1}. The feature is the target's last hidden state as its head reads it (after the final
norm, ``Decoder.features_of``).

Roots and cache sync. The target's features come from the engine's scoring pass (``prefill``
and ``score_tree`` with ``features=True``; the drafter sets ``target_features``). After a
verification that accepted τ tokens of draft d, the pairs at positions n .. n+τ are known
exactly: (target feature at the root / accepted node, the accepted token or the emitted extra
token). They are the next step's *chunk*: ``propose`` runs them through the layer (the last one
predicts the feature at the pending token, whose law gives the first draft token), then drafts
L-1 more steps per branch on its own predicted features; ``update`` commits the chunk to the
head's cache and stores the next one. Invariant at ``propose``: committed pairs + chunk = n.

Scratch layout: slots 0..L = the chunk (``count`` valid rows), branch k's step i (1 <= i < L)
at slot L + 1 + k·(L-1) + (i-1). Draft structure: IID (the K branches are independent draws
from the same laws given a shared prefix), and q is the law each token was drawn from, so every
verifier applies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx, struct
from jaxtyping import Array, Float, Int

from algorithms.verifiers.base import Verdict, sample
from specjax.drafters.trained import TargetReadout, TrainedHead, layer_weights
from specjax.models.config import ModelConfig
from specjax.models.decoder import Decoder, KVCache
from specjax.models.sampling import Sampling


class EagleHead(nnx.Module):
    """fc + one decoder layer (KV cache and math of ``Decoder`` with a single layer)."""

    def __init__(self, target_config: ModelConfig, seed: int = 0):
        self.config = target_config.replace(num_layers=1, vocab_size=1, tie_embeddings=True)
        D = self.config.hidden_size
        rng = np.random.default_rng(seed)
        self.body = Decoder(self.config, layer_weights(self.config, rng))
        # [embedding; feature] -> D, starting as "the feature, plus a little of the token".
        fc = np.concatenate([rng.standard_normal((D, D)) / np.sqrt(2 * D), np.eye(D)])
        self.fc = nnx.Param(jnp.asarray(fc, jnp.float32))

    def inputs(self, emb: Float[Array, "N D"], feats: Float[Array, "N D"]):
        return jnp.concatenate([emb, feats], axis=-1) @ self.fc[...]

    def forward(self, emb, feats, positions, slots, mask, cache: KVCache):
        """Predicted features f̂ for N new pairs (their KV written to scratch ``slots``)."""
        return self.body.layers_forward(self.inputs(emb, feats), positions, slots, mask, cache)

    def sequence(self, emb: Float[Array, "T D"], feats: Float[Array, "T D"]):
        """Uncached causal pass over pairs at positions 0..T-1 (the training path)."""
        return self.body.layers_uncached(self.inputs(emb, feats))


class EagleModule(nnx.Module):
    def __init__(self, head: EagleHead, readout: TargetReadout):
        self.head, self.readout = head, readout


@struct.dataclass
class EagleState:
    cache: KVCache  # the head's committed pairs (positions 0 .. length-1) + scratch
    chunk_feats: Float[Array, "L+1 D"]  # the next pairs to feed (positions length ..)
    chunk_tokens: Int[Array, " L+1"]
    count: Int[Array, ""]  # valid chunk rows; length + count == n at propose


@dataclass(frozen=True, kw_only=True)
class EagleDrafter(TrainedHead):
    kind: ClassVar[str] = "eagle"

    @staticmethod
    def trainable(target_config: ModelConfig, *, seed: int = 0) -> EagleHead:
        return EagleHead(target_config, seed=seed)

    @staticmethod
    def for_drafting(trainable: EagleHead, target: Decoder) -> EagleModule:
        return EagleModule(trainable, TargetReadout(target))

    def scratch(self) -> int:
        return (self.L + 1) + self.K * (self.L - 1)

    def calls_per_step(self) -> int:
        return self.L

    def init_state(self, model, prompt, length, *, max_len: int, scratch: int, features):
        P = prompt.shape[0]
        D = features.shape[-1]
        head, readout = model.head, model.readout
        # Pair j = (f_{j-1}, x_j), f_{-1} = 0; commit pairs 0..n-2, keep pair n-1 as the chunk.
        prev = jnp.concatenate([jnp.zeros((1, D), features.dtype), features[:-1]])
        cache = head.body.init_cache(max_len, P)
        cache = cache.replace(length=cache.length + jnp.minimum(length, 0).astype(jnp.int32))
        pos = jnp.arange(P, dtype=jnp.int32)
        mask = jnp.tril(jnp.ones((P, P), bool))
        _, cache = head.forward(readout.embed_tokens(prompt), prev, pos, pos, mask, cache)
        cache = head.body.commit(cache, pos, length - 1)
        last = jnp.maximum(length - 1, 0)
        L1 = self.L + 1
        return EagleState(
            cache=head.body.with_scratch(cache, scratch),
            chunk_feats=jnp.zeros((L1, D), jnp.float32).at[0].set(prev[last]),
            chunk_tokens=jnp.zeros((L1,), jnp.int32).at[0].set(prompt[last]),
            count=jnp.int32(1))

    def propose(self, model, key: Array, state: EagleState, history, n, *, sampling: Sampling,
                vocab_size: int, scratch: int
                ) -> tuple[Int[Array, "K L"], Float[Array, "K L V"], EagleState]:
        K, L = self.K, self.L
        head, readout = model.head, model.readout
        c, cache = state.count, state.cache
        s = jnp.arange(scratch)
        rows = jnp.arange(L + 1)
        own = s[None, :] == rows[:, None]
        chunk_mask = (s[None, :] <= rows[:, None]) & ((s[None, :] < c) | own)
        f, cache = head.forward(readout.embed_tokens(state.chunk_tokens), state.chunk_feats,
                                cache.length + rows, rows, chunk_mask, cache)
        keys = jax.random.split(key, K * L)
        pick = (lambda _, law: jnp.argmax(law).astype(jnp.int32)) if sampling.greedy else sample
        q0 = jnp.broadcast_to(sampling(readout(f[c - 1][None])[0]), (K, vocab_size))
        drafts = jnp.zeros((K, L), jnp.int32).at[:, 0].set(jax.vmap(pick)(keys[:K], q0))
        q = jnp.zeros((K, L, vocab_size), jnp.float32).at[:, 0].set(q0)
        feats = jnp.broadcast_to(f[c - 1], (K, f.shape[-1]))
        branch = L + 1 + jnp.arange(K) * (L - 1)  # first slot of each branch

        def step(i, carry):
            drafts, q, feats, cache = carry
            slots = (branch + i - 1).astype(jnp.int32)
            mask = (s[None, :] < c) | ((s[None, :] >= branch[:, None])
                                       & (s[None, :] <= slots[:, None]))
            positions = jnp.full((K,), n - 1 + i, jnp.int32)
            feats, cache = head.forward(readout.embed_tokens(drafts[:, i - 1]), feats, positions,
                                        slots, mask, cache)
            qi = sampling(readout(feats))
            xi = jax.vmap(pick)(jax.lax.dynamic_slice_in_dim(keys, i * K, K), qi)
            return drafts.at[:, i].set(xi), q.at[:, i].set(qi), feats, cache

        drafts, q, _, cache = jax.lax.fori_loop(1, L, step, (drafts, q, feats, cache))
        return drafts, q, state.replace(cache=cache)

    def update(self, model, state: EagleState, drafts, verdict: Verdict, n, *, scratch: int,
               features):
        cache = model.head.body.commit(state.cache, jnp.arange(self.L + 1, dtype=jnp.int32),
                                       state.count)
        # Pairs n..n+τ: (target feature at the root / accepted node i, emitted token i).
        return EagleState(cache=cache, chunk_feats=features[verdict.draft_index],
                          chunk_tokens=jnp.maximum(verdict.tokens, 0).astype(jnp.int32),
                          count=verdict.num_emitted.astype(jnp.int32))


__all__ = ["EagleDrafter", "EagleHead", "EagleModule", "EagleState", "TargetReadout"]
