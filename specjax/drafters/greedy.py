"""Greedy multi-drafting (Hu et al., "Towards Optimal Multi-Draft Speculative Decoding", ICLR 2025,
arXiv 2502.18779): draft k < K-1 starts with the (k+1)-th most likely draft token (fixed, one-hot
law), the last draft starts with a token sampled from q restricted to the other tokens, and every
draft continues by sampling the draft model. Paired with ``algorithms.verifiers.greedy_draft``,
the root acceptance is p(top) + sum_{x not in top} min(p(x), q_rest(x)), the best any verifier
can reach for this draft set.

The root is the only difference from ``ModelDrafter``; the cache layout, the catch-up chunk and
``update`` are ModelDrafter's (``propose`` mirrors its body with the root replaced, since the
root tokens feed every later draft forward). The reported q is each token's true law: one-hot
rows for the fixed tokens, q_rest for the sampled one. The draft structure is "greedy": neither
i.i.d. nor deterministic, so ``check_pairing`` must list it before the engine accepts the pair
(``algorithms.verifiers.base.DRAFT_STRUCTURES``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from algorithms.verifiers.base import sample
from specjax.drafters.model import ModelDrafter
from specjax.sampling import Sampling

GREEDY = "greedy"


def greedy_root(key: Array, law: Float[Array, " V"], K: int
                ) -> tuple[Int[Array, " K"], Float[Array, "K V"]]:
    """Root tokens and their laws: K-1 fixed top tokens (repeating past V), one sample from q
    restricted to the rest (q itself when the top tokens cover its support)."""
    V = law.shape[0]
    top = jnp.argsort(-law, stable=True)[jnp.arange(K - 1) % V]
    rest = law.at[top].set(0.0)
    mass = rest.sum()
    rest = jnp.where(mass > 0, rest / jnp.where(mass > 0, mass, 1.0), law)
    x_last = sample(key, rest)
    tokens = jnp.concatenate([top, x_last[None]]).astype(jnp.int32)
    laws = jnp.concatenate([jax.nn.one_hot(top, V, dtype=law.dtype), rest[None]])
    return tokens, laws


@dataclass(frozen=True, kw_only=True)
class GreedyDrafter(ModelDrafter):
    draft_structure: ClassVar[str] = GREEDY

    def propose(self, model, key: Array, state, history: Int[Array, " T"], n: Int[Array, ""],
                *, sampling: Sampling, vocab_size: int, scratch: int,
                ) -> tuple[Int[Array, "K L"], Float[Array, "K L V"], object]:
        K, L = self.K, self.L
        cache = state
        lag = (n - 1 - cache.length).astype(jnp.int32)
        s = jnp.arange(scratch)
        chunk = history[jnp.stack([jnp.maximum(n - 2, 0), n - 1])]
        chunk_pos = jnp.stack([jnp.maximum(n - 2, 0), n - 1]).astype(jnp.int32)
        chunk_mask = jnp.stack([s == 0, (s == 1) | ((s == 0) & (lag == 1))])
        logits, cache = model.forward(chunk, chunk_pos, jnp.arange(2, dtype=jnp.int32),
                                      chunk_mask, cache)
        keys = jax.random.split(key, K * L)
        x0, q0 = greedy_root(keys[0], sampling(logits[1]), K)
        drafts = jnp.zeros((K, L), jnp.int32).at[:, 0].set(x0)
        q = jnp.zeros((K, L, vocab_size), jnp.float32).at[:, 0].set(q0)
        branch = 2 + jnp.arange(K) * L

        def step(i, carry):
            drafts, q, cache = carry
            slots = (branch + i - 1).astype(jnp.int32)
            mask = ((s[None, :] == 1) | ((s[None, :] == 0) & (lag == 1))
                    | ((s[None, :] >= branch[:, None]) & (s[None, :] <= slots[:, None])))
            positions = jnp.full((K,), n + i - 1, jnp.int32)
            logits, cache = model.forward(drafts[:, i - 1], positions, slots, mask, cache)
            qi = sampling(logits)
            xi = jax.vmap(sample)(jax.lax.dynamic_slice_in_dim(keys, i * K, K), qi)
            return drafts.at[:, i].set(xi), q.at[:, i].set(qi), cache

        drafts, q, cache = jax.lax.fori_loop(1, L, step, (drafts, q, cache))
        return drafts, q, cache
