"""Prefill, one-token decode, tree scoring and path commit, built on ``forward``/``commit``.

These are the four uses of the one contract primitive (``specjax.models.base``), written for one
sequence and jit-friendly (static shapes; token counts and indices may be traced). The tree of
``score_tree`` is the one of the speculative-decoding papers with K independent drafts
(SpecInfer, Miao et al. 2024, §4 "tree attention"; SpecTr, Sun et al. 2023): a root (the
pending token) and K chains of length L, scored in ONE forward whose mask lets each node see the
root and its own ancestors only.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from specjax.models.base import Cache, CausalLM


def tree_mask(K: int, L: int, scratch: int) -> np.ndarray:
    """mask[node, slot] for root at slot 0 and draft k token j at slot 1 + k*L + j."""
    N = 1 + K * L
    if N > scratch:
        raise ValueError(f"score_tree: 1 + K*L = {N} nodes need scratch >= {N}, got {scratch}")
    mask = np.zeros((N, scratch), bool)
    mask[:, 0] = True
    for k in range(K):
        for j in range(L):
            mask[1 + k * L + j, 1 + k * L : 1 + k * L + j + 1] = True
    return mask


def tree_depths(K: int, L: int) -> np.ndarray:
    """Depth of each tree node below the root (its RoPE offset from ``cache.length``)."""
    return np.concatenate([[0], np.tile(np.arange(1, L + 1), K)]).astype(np.int32)


def prefill(
    model: CausalLM, tokens: Int[Array, " T"], n: Int[Array, ""], cache: Cache
) -> tuple[Float[Array, "T V"], Cache]:
    """Consume ``tokens[:n]`` (``n`` may be traced): commit their KV and return their logits.

    The engine passes the prompt's first n-1 tokens and keeps the last one pending. Prompts
    longer than the scratch block go through in chunks of ``scratch`` tokens (each chunk causal
    within itself and attending to everything committed before it). Rows ``>= n`` are padding.
    """
    (T,) = tokens.shape
    if T > cache.max_len:
        raise ValueError(
            f"prefill: prompt of {T} tokens does not fit the cache (max_len={cache.max_len})"
        )
    if not isinstance(n, jax.core.Tracer):
        if not 0 <= int(n) <= T:
            raise ValueError(f"prefill: n must be in [0, {T}] (the token count), got {int(n)}")
    C = min(T, cache.scratch)
    mask = jnp.asarray(np.tril(np.ones((C, cache.scratch), bool)))
    slots = jnp.arange(C)
    out = []
    for start in range(0, T, C):
        chunk = tokens[start : start + C]
        chunk = jnp.pad(chunk, (0, C - chunk.shape[0]))
        positions = cache.length + jnp.arange(C)
        logits, cache = model.forward(chunk, positions, slots, mask, cache)
        cache = model.commit(cache, slots, jnp.clip(n - start, 0, C))
        out.append(logits)
    return jnp.concatenate(out)[:T], cache


def decode(
    model: CausalLM, token: Int[Array, ""], cache: Cache
) -> tuple[Float[Array, " V"], Cache]:
    """One token: its logits (the law of the next token) and its KV committed."""
    mask = jnp.asarray(np.eye(1, cache.scratch, dtype=bool))
    slots = jnp.zeros((1,), jnp.int32)
    logits, cache = model.forward(
        jnp.reshape(token, (1,)), jnp.reshape(cache.length, (1,)), slots, mask, cache
    )
    return logits[0], model.commit(cache, slots, 1)


def score_tree(
    model: CausalLM, root: Int[Array, ""], drafts: Int[Array, "K L"], cache: Cache
) -> tuple[Float[Array, "K L+1 V"], Cache]:
    """Target logits p[k, j] at every drafted prefix, all K x (L+1) in one forward.

    p[k, 0] is the root's logits (shared by every draft), p[k, j+1] those of draft k's token j.
    The KV of all 1 + K*L nodes stays in scratch until ``commit_path``.
    """
    K, L = drafts.shape
    tokens = jnp.concatenate([jnp.reshape(root, (1,)), drafts.reshape(-1)])
    positions = cache.length + jnp.asarray(tree_depths(K, L))
    mask = jnp.asarray(tree_mask(K, L, cache.scratch))
    logits, cache = model.forward(tokens, positions, jnp.arange(1 + K * L), mask, cache)
    root_logits = jnp.broadcast_to(logits[0], (K, 1, logits.shape[-1]))
    return jnp.concatenate([root_logits, logits[1:].reshape(K, L, -1)], axis=1), cache


def commit_path(
    model: CausalLM,
    cache: Cache,
    draft_index: Int[Array, ""],
    num_accepted: Int[Array, ""],
    L: int,
) -> Cache:
    """Commit the root and the first ``num_accepted`` (tau) tokens of draft ``draft_index``."""
    slots = jnp.concatenate([jnp.zeros((1,), jnp.int32), 1 + draft_index * L + jnp.arange(L)])
    return model.commit(cache, slots, num_accepted + 1)
