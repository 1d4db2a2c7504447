"""Medusa heads: L residual heads on the target's last hidden state, read by the target's head.

Cai et al., "Medusa: Simple LLM Inference Acceleration Framework with Multiple Decoding Heads"
(ICML 2024, arXiv 2401.10774), §2.1.1: head i is one residual block, h_i = f + SiLU(W_i f + b_i),
and the target's LM head reads it, p_i = softmax(LMHead(h_i)). Given the feature f_t at position
t, head i (1-based) predicts token t + i + 1; the target's own head already predicted t + 1.

Here f_t is the feature of the last target-scored position whose token was accepted (the root
or the last accepted node): it predicted the pending token x_{t+1}, so draft token j (0-based)
is x_{t+2+j}, drawn from head j+1's law. The heads do not see earlier draft tokens, so every
draft token is an independent draw from its head's law: q[k, j] is that law for every k, and
the K drafts are i.i.d. (draft structure IID), which makes every verifier applicable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jaxtyping import Array, Float, Int

from algorithms.verifiers.base import Verdict, sample
from specjax.drafters.trained import TargetReadout, TrainedHead
from specjax.models.config import ModelConfig
from specjax.models.decoder import Decoder
from specjax.models.sampling import Sampling


class MedusaHeads(nnx.Module):
    def __init__(self, hidden_size: int, num_heads: int, seed: int = 0):
        rng = np.random.default_rng(seed)
        D = hidden_size
        self.num_heads = num_heads
        self.w = nnx.Param(jnp.asarray(rng.standard_normal((num_heads, D, D)) / np.sqrt(D),
                                       jnp.float32))
        self.b = nnx.Param(jnp.zeros((num_heads, D), jnp.float32))

    def __call__(self, f: Float[Array, "*N D"]) -> Float[Array, "*N H D"]:
        """Every head's residual output for each feature row."""
        z = jnp.einsum("...d,hde->...he", f, self.w[...]) + self.b[...]
        return f[..., None, :] + jax.nn.silu(z)


class MedusaModule(nnx.Module):
    def __init__(self, heads: MedusaHeads, readout: TargetReadout):
        self.heads, self.readout = heads, readout


@dataclass(frozen=True, kw_only=True)
class MedusaDrafter(TrainedHead):
    """``checkpoint`` as for ``TrainedHead``; the trained run must have >= L heads."""

    kind: ClassVar[str] = "medusa"

    @staticmethod
    def trainable(target_config: ModelConfig, *, seed: int = 0,
                  num_heads: int = 4) -> MedusaHeads:
        return MedusaHeads(target_config.hidden_size, num_heads, seed=seed)

    @staticmethod
    def for_drafting(trainable: MedusaHeads, target: Decoder) -> MedusaModule:
        return MedusaModule(trainable, TargetReadout(target))

    def module(self, target, draft):
        module = super().module(target, draft, num_heads=self.L)
        if module.heads.num_heads < self.L:
            raise ValueError(f"MedusaDrafter: L={self.L} needs >= {self.L} heads, the checkpoint "
                             f"has {module.heads.num_heads}")
        return module

    def scratch(self) -> int:
        return 0

    def calls_per_step(self) -> int:
        return 1

    def init_state(self, model, prompt, length, *, max_len: int, scratch: int, features):
        # The feature that predicted the pending prompt token (none for a 1-token prompt).
        last = features[jnp.maximum(length - 2, 0)]
        return jnp.where(length >= 2, last, 0.0).astype(jnp.float32)

    def propose(self, model, key: Array, state, history, n, *, sampling: Sampling,
                vocab_size: int, scratch: int
                ) -> tuple[Int[Array, "K L"], Float[Array, "K L V"], object]:
        K, L = self.K, self.L
        h = model.heads(state)[:L]  # [L, D]: head j+1 drafts token j
        laws = sampling(model.readout(h))  # [L, V]
        if sampling.greedy:
            drafts = jnp.broadcast_to(jnp.argmax(laws, axis=-1), (K, L)).astype(jnp.int32)
        else:
            keys = jax.random.split(key, K * L).reshape(K, L)
            drafts = jax.vmap(jax.vmap(sample))(keys, jnp.broadcast_to(laws, (K, L, vocab_size)))
        return drafts, jnp.broadcast_to(laws, (K, L, vocab_size)), state

    def update(self, model, state, drafts, verdict: Verdict, n, *, scratch: int, features):
        # The feature of the last accepted position (the root when τ = 0).
        return features[verdict.draft_index, verdict.num_emitted - 1]


__all__ = ["MedusaDrafter", "MedusaHeads", "MedusaModule"]
