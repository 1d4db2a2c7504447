"""Logits -> sampling law, applied identically to target and draft.

Speculative decoding is lossless with respect to the *processed* target: temperature, top-k and
top-p must be applied to both p and q with the same settings, or the verifier compares laws the
tokens were not drawn from. Temperature 0 is the one-hot argmax law, under which every lossless
verifier reduces to exact-match greedy decoding.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from algorithms.verifiers.base import sample


@dataclass(frozen=True, kw_only=True)
class Sampling:
    temperature: float = 1.0
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off

    def __post_init__(self):
        if not self.temperature >= 0:
            raise ValueError(f"sampling.temperature must be >= 0, got {self.temperature}")
        if not (isinstance(self.top_k, int) and self.top_k >= 0):
            raise ValueError(f"sampling.top_k must be an integer >= 0 (0 = off), got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"sampling.top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def draw(self, key: Array, logits: Float[Array, " V"]) -> Int[Array, ""]:
        """One token from the processed law of ``logits``; greedy skips the law entirely.

        ``argmax`` of the logits is the token the one-hot law would give, and it saves a
        categorical draw over the whole vocabulary on every autoregressive step.
        """
        if self.greedy:
            return jnp.argmax(logits, axis=-1).astype(jnp.int32)
        return sample(key, self(logits))

    def __call__(self, logits: Float[Array, "*B V"]) -> Float[Array, "*B V"]:
        logits = logits.astype(jnp.float32)
        V = logits.shape[-1]
        if self.greedy:
            return jax.nn.one_hot(jnp.argmax(logits, axis=-1), V, dtype=jnp.float32)
        logits = logits / self.temperature
        if self.top_k and self.top_k < V:
            kth = jax.lax.top_k(logits, self.top_k)[0][..., -1:]
            logits = jnp.where(logits >= kth, logits, -jnp.inf)
        probs = jax.nn.softmax(logits, axis=-1)
        if self.top_p < 1.0:
            # Keep the smallest set of most likely tokens whose mass reaches top_p: a token stays
            # iff the mass strictly before it (in descending order) is < top_p.
            order = jnp.argsort(-probs, axis=-1)
            sorted_p = jnp.take_along_axis(probs, order, axis=-1)
            before = jnp.cumsum(sorted_p, axis=-1) - sorted_p
            keep_sorted = before < self.top_p
            keep = jnp.zeros_like(keep_sorted)
            keep = jnp.put_along_axis(keep, order, keep_sorted, axis=-1, inplace=False)
            probs = jnp.where(keep, probs, 0.0)
            probs = probs / probs.sum(-1, keepdims=True)
        return probs
