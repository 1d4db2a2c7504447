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
            scratch: int, *, features: bool = False):
    """Cache the prompt's first ``length - 1`` tokens; the last prompt token stays pending.

    ``prompt`` is right-padded to a static P; padded nodes are computed but never committed.
    ``features=True`` returns ``(cache, features [P, D])`` (``model.forward_features``).
    """
    P = prompt.shape[0]
    pos = jnp.arange(P, dtype=jnp.int32)
    # A fresh cache's length is the constant 0, which lets XLA constant-fold the fully masked
    # attention over the empty committed block, once per layer, for seconds each. min(n, 0)
    # is still 0 but depends on a runtime value, so nothing is folded.
    cache = cache.replace(length=cache.length + jnp.minimum(length, 0).astype(jnp.int32))
    mask = jnp.asarray(causal_mask(P, scratch))
    if features:
        _, h, cache = model.forward_features(prompt, pos, pos, mask, cache)
        return model.commit(cache, pos, length - 1), h
    _, cache = model.forward(prompt, pos, pos, mask, cache)
    return model.commit(cache, pos, length - 1)


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


def trie(drafts: Int[Array, "K L"]) -> tuple[Int[Array, "K L"], Int[Array, ""]]:
    """Scratch slot of every drafted node once duplicate prefixes are merged, and the count.

    Node (k, j) is the prefix ``drafts[k, :j+1]``; drafts that share a prefix share its nodes
    (at temperature 0 every draft of a model drafter is the same, so K·L nodes collapse to L).
    The canonical node of a prefix is its first draft's; canonical nodes take slots 1, 2, ...
    in (k, j) order, so with no duplicates node (k, j) sits at 1 + k·L + j as in ``tree_mask``.
    Returns ``slot[k, j]`` (the slot holding prefix (k, j)) and the number of distinct nodes.
    """
    K, L = drafts.shape
    same = jnp.cumprod(drafts[:, None, :] == drafts[None, :, :], axis=-1).astype(bool)
    first = jnp.argmax(same, axis=1)  # [K, L]: first draft sharing prefix (k, j); k itself at worst
    unique = (first == jnp.arange(K)[:, None]).reshape(-1)
    rank = (jnp.cumsum(unique) - 1).reshape(K, L)
    slot = 1 + rank[first, jnp.arange(L)[None, :]]
    return slot.astype(jnp.int32), unique.sum().astype(jnp.int32)


def score_tree(model: CausalLM, cache: Cache, root: Int[Array, ""], drafts: Int[Array, "K L"],
               scratch: int, nodes: int | None = None, *, features: bool = False
               ) -> tuple[Float[Array, "K L+1 V"], Cache, Int[Array, "K L"]]:
    """Target logits at every drafted prefix, [K, L+1, V], from one forward over the trie.

    Each distinct prefix is scored once: the forward runs ``nodes`` rows (default 1 + K·L; a
    caller that knows the drafts have fewer distinct prefixes passes fewer), the distinct nodes
    first and padding after, and the [K, L+1, V] laws are gathered back from their slots.
    Returns the laws, the cache (KV of the scored nodes in scratch) and ``slot[k, j]``, which
    ``commit_path`` needs. ``features=True`` appends the target's features at the same
    positions, [K, L+1, D] (``model.forward_features``), for drafters that read them.
    """
    K, L = drafts.shape
    N = 1 + K * L if nodes is None else nodes
    slot, _ = trie(drafts)
    depth = jnp.broadcast_to(jnp.arange(1, L + 1, dtype=jnp.int32), (K, L))
    tokens = jnp.zeros((N,), jnp.int32).at[0].set(root.astype(jnp.int32))
    tokens = tokens.at[slot].set(drafts.astype(jnp.int32), mode="drop")
    positions = cache.length + jnp.zeros((N,), jnp.int32).at[slot].set(depth, mode="drop")
    # Node slot[k, j] sees the root and the slots of its ancestors slot[k, i], i <= j.
    rows = jnp.broadcast_to(slot[:, :, None], (K, L, L))
    cols = jnp.broadcast_to(slot[:, None, :], (K, L, L))
    below = jnp.arange(L)[None, :] <= jnp.arange(L)[:, None]  # [j, i]: i <= j
    mask = jnp.zeros((N, scratch), bool).at[:, 0].set(True)
    mask = mask.at[jnp.where(below, rows, N), cols].set(True, mode="drop")
    mask = mask.at[jnp.arange(N), jnp.arange(N)].set(True)  # padding rows see themselves
    args = (tokens, positions, jnp.arange(N, dtype=jnp.int32), mask, cache)
    if features:
        logits, h, cache = model.forward_features(*args)
    else:
        logits, cache = model.forward(*args)
    gather = lambda a: jnp.concatenate(  # noqa: E731 (root row for every draft, then its nodes)
        [jnp.broadcast_to(a[0], (K, 1, a.shape[-1])), a[slot]], axis=1)
    if features:
        return gather(logits), cache, slot, gather(h)
    return gather(logits), cache, slot


def commit_path(model: CausalLM, cache: Cache, slot: Int[Array, "K L"],
                draft_index: Int[Array, ""], num_accepted: Int[Array, ""]) -> Cache:
    """Commit root + the first ``num_accepted`` tokens of draft ``draft_index``."""
    slots = jnp.concatenate([jnp.zeros((1,), jnp.int32), slot[draft_index]])
    return model.commit(cache, slots, num_accepted + 1)


def score_root(model: CausalLM, cache: Cache, root: Int[Array, ""],
               scratch: int) -> tuple[Float[Array, " V"], Cache]:
    """One-token decode (the autoregressive baseline): logits after the pending token."""
    mask = np.zeros((1, scratch), bool)
    mask[0, 0] = True
    logits, cache = model.forward(root[None].astype(jnp.int32), cache.length[None],
                                  jnp.zeros((1,), jnp.int32), jnp.asarray(mask), cache)
    return logits[0], cache
