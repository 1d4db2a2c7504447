"""The draft-tree layout every caller of the model contract shares (engine and model drafters).

A step scores K draft blocks of length L in ONE target forward over 1 + K·L nodes: the pending
token (last emitted, KV not yet cached) is the root at scratch slot 0, draft k token j sits at slot
1 + k·L + j and attends to the root and to its own ancestors only (tree attention, as in SpecInfer,
Miao et al. 2024, §4.2, and Medusa's tree mask). Root logits give p[k, 0] for every k; node (k, j)
gives p[k, j + 1]. The accepted path (root + τ tokens of draft d) is committed from scratch to the
cache. Masks are built with NumPy because K, L and the scratch size are static.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from specjax.models.base import Cache, CausalLM


def causal_mask(n: int, scratch: int) -> np.ndarray:
    """[n, scratch] mask: node j attends to scratch slots 0..j."""
    mask = np.zeros((n, scratch), bool)
    mask[:, :n] = np.tril(np.ones((n, n), bool))
    return mask


def prefill(model: CausalLM, cache: Cache, prompt: Int[Array, " P"], length: Int[Array, ""],
            scratch: int) -> Cache:
    """Cache the prompt's first ``length - 1`` tokens; the last prompt token stays pending.

    ``prompt`` is right-padded to a static P; padded nodes are computed but never committed.
    """
    P = prompt.shape[0]
    pos = jnp.arange(P, dtype=jnp.int32)
    _, cache = model.forward(prompt, pos, pos, jnp.asarray(causal_mask(P, scratch)), cache)
    return model.commit(cache, pos, length - 1)


def tree_mask(K: int, L: int, scratch: int) -> np.ndarray:
    """[1 + K·L, scratch] tree mask: node (k, j) sees the root and draft k's tokens 0..j."""
    N = 1 + K * L
    mask = np.zeros((N, scratch), bool)
    mask[:, 0] = True
    for k in range(K):
        for j in range(L):
            mask[1 + k * L + j, 1 + k * L: 1 + k * L + j + 1] = True
    return mask


def tree_depths(K: int, L: int) -> np.ndarray:
    return np.concatenate([[0], np.tile(np.arange(1, L + 1), K)]).astype(np.int32)


def score_tree(model: CausalLM, cache: Cache, root: Int[Array, ""], drafts: Int[Array, "K L"],
               scratch: int) -> tuple[Float[Array, "K L+1 V"], Cache]:
    """Target logits at every drafted prefix, [K, L+1, V], from one forward over the tree."""
    K, L = drafts.shape
    tokens = jnp.concatenate([root[None].astype(jnp.int32), drafts.reshape(-1).astype(jnp.int32)])
    positions = cache.length + jnp.asarray(tree_depths(K, L))
    slots = jnp.arange(1 + K * L, dtype=jnp.int32)
    logits, cache = model.forward(tokens, positions, slots,
                                  jnp.asarray(tree_mask(K, L, scratch)), cache)
    V = logits.shape[-1]
    root_logits = jnp.broadcast_to(logits[0], (K, 1, V))
    return jnp.concatenate([root_logits, logits[1:].reshape(K, L, V)], axis=1), cache


def commit_path(model: CausalLM, cache: Cache, draft_index: Int[Array, ""],
                num_accepted: Int[Array, ""], L: int) -> Cache:
    """Commit root + the first ``num_accepted`` tokens of draft ``draft_index``."""
    slots = jnp.concatenate([jnp.zeros((1,), jnp.int32),
                             1 + draft_index * L + jnp.arange(L, dtype=jnp.int32)])
    return model.commit(cache, slots, num_accepted + 1)


def score_root(model: CausalLM, cache: Cache, root: Int[Array, ""],
               scratch: int) -> tuple[Float[Array, " V"], Cache]:
    """One-token decode (the autoregressive baseline): logits after the pending token."""
    mask = np.zeros((1, scratch), bool)
    mask[0, 0] = True
    logits, cache = model.forward(root[None].astype(jnp.int32), cache.length[None],
                                  jnp.zeros((1,), jnp.int32), jnp.asarray(mask), cache)
    return logits[0], cache
