"""Greedy multi-drafting (Hu et al., "Towards Optimal Multi-Draft Speculative Decoding", ICLR 2025,
arXiv 2502.18779): draft k < K-1 starts with the (k+1)-th most likely draft token (fixed, one-hot
law), the last draft starts with a token sampled from q restricted to the other tokens, and every
draft continues by sampling the draft model. Paired with ``algorithms.verifiers.greedy_draft``,
the root acceptance is p(top) + sum_{x not in top} min(p(x), q_rest(x)), the best any verifier
can reach for this draft set.

The root is the only difference from ``ModelDrafter``: this class overrides ``ModelDrafter.root``
and inherits the cache layout, the catch-up chunk, the draft loop and ``update``. The reported q
is each token's true law: one-hot rows for the fixed tokens, q_rest for the sampled one. The draft
structure is GREEDY: neither i.i.d. nor deterministic, so only verifiers that list it
(``greedy_draft``) take K > 1 of them (``algorithms.verifiers.base.check_pairing``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from algorithms.verifiers.base import GREEDY, sample
from specjax.drafters.model import ModelDrafter


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

    def root(self, keys: Array, law: Float[Array, " V"], pick
             ) -> tuple[Int[Array, " K"], Float[Array, "K V"]]:
        return greedy_root(keys[0], law, self.K)
