"""The draft-tree layout every caller of the model contract shares (engine and model drafters).

A step scores K draft blocks of length L in ONE target forward over 1 + K·L nodes: the pending
token (last emitted, KV not yet cached) is the root at scratch slot 0, draft k token j sits at slot
1 + k·L + j and attends to the root and to its own ancestors only (tree attention, as in SpecInfer,
Miao et al. 2024, §4.2, and Medusa's tree mask). Root logits give p[k, 0] for every k; node (k, j)
gives p[k, j + 1]. The accepted path (root + τ tokens of draft d) is committed from scratch to the
cache. Masks are built with NumPy because K, L and the scratch size are static.

These functions are the decode loop's passes (``specjax.decode.engine`` calls ``prefill``,
``decode``, ``score_tree`` and ``commit_path``, vmapped over the batch) and the only ones:
``JittedPasses`` jits the same functions one at a time, for the benchmarks and the equivalence
tests.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jaxtyping import Array, Float, Int

from specjax.models.base import Cache, CausalLM
from specjax.models.quant import bulk_rows


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
    if P > scratch or P > getattr(cache, "max_len", P):
        raise ValueError(f"prefill: prompt of {P} tokens does not fit the cache (scratch="
                         f"{scratch}, max_len={getattr(cache, 'max_len', None)})")
    pos = jnp.arange(P, dtype=jnp.int32)
    # A fresh cache's length is the constant 0, which lets XLA constant-fold the fully masked
    # attention over the empty committed block, once per layer, for seconds each. min(n, 0)
    # is still 0 but depends on a runtime value, so nothing is folded.
    cache = cache.replace(length=cache.length + jnp.minimum(length, 0).astype(jnp.int32))
    mask = jnp.asarray(causal_mask(P, scratch))
    # A whole prompt's rows: XLA's dot where it beats the kernel, int8 rows where the model asks
    # (quant.bulk_rows).
    with bulk_rows(getattr(model, "prefill_activations", "float32")):
        if features:
            _, h, cache = model.forward_features(prompt, pos, pos, mask, cache)
            return model.commit(cache, pos, length - 1), h
        _, cache = model.forward(prompt, pos, pos, mask, cache)
    return model.commit(cache, pos, length - 1)


def trie(drafts: Int[Array, "K L"]) -> tuple[Int[Array, "K L"], Int[Array, ""]]:
    """Scratch slot of every drafted node once duplicate prefixes are merged, and the count.

    Node (k, j) is the prefix ``drafts[k, :j+1]``; drafts that share a prefix share its nodes
    (at temperature 0 every draft of a model drafter is the same, so K·L nodes collapse to L).
    The canonical node of a prefix is its first draft's; canonical nodes take slots 1, 2, ...
    in (k, j) order, so with no duplicates node (k, j) sits at 1 + k·L + j (the layout above).
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
    if N > scratch:
        raise ValueError(f"score_tree: {N} tree nodes need scratch >= {N}, got {scratch}")
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


def decode(model: CausalLM, cache: Cache, root: Int[Array, ""],
           scratch: int) -> tuple[Float[Array, " V"], Cache]:
    """One-token decode (the autoregressive step): the logits after the pending token, whose
    KV is then committed (the token drawn from them becomes the next pending one)."""
    mask = np.zeros((1, scratch), bool)
    mask[0, 0] = True
    slots = jnp.zeros((1,), jnp.int32)
    logits, cache = model.forward(root[None].astype(jnp.int32), cache.length[None], slots,
                                  jnp.asarray(mask), cache)
    return logits[0], model.commit(cache, slots, jnp.int32(1))


class JittedPasses:
    """This module's passes jitted for one model: ``nnx.split`` here, ``nnx.merge`` inside jit.

    The same functions the decode loop runs, one call at a time (the engine runs them inside
    its ``lax.while_loop``): ``decode_batch`` is ``decode`` vmapped over stacked caches, as the
    engine batches. The scratch size is the cache's own (``cache.scratch``). The weights enter
    each compiled function as an argument (never as baked-in constants), and the cache
    argument is donated so XLA updates the KV arrays in place. The weights travel as a flat
    list of arrays: flattening the nnx state (one Python call per Variable) on every call
    costs milliseconds per pass for a model with hundreds of per-layer arrays.
    """

    def __init__(self, model: CausalLM, compiler_options: dict | None = None):
        graphdef, state = nnx.split(model)
        self._leaves, treedef = jax.tree.flatten(state)

        def merge(leaves):
            return nnx.merge(graphdef, jax.tree.unflatten(treedef, leaves))

        jit = dict(donate_argnames="cache", compiler_options=compiler_options)
        self._prefill = jax.jit(
            lambda s, cache, prompt, length, features: prefill(
                merge(s), cache, prompt, length, cache.scratch, features=features),
            static_argnames="features", **jit)
        self._decode = jax.jit(
            lambda s, cache, root: decode(merge(s), cache, root, cache.scratch), **jit)
        self._decode_batch = jax.jit(lambda s, cache, roots: jax.vmap(
            lambda c, r: decode(merge(s), c, r, c.scratch))(cache, roots), **jit)
        self._score = jax.jit(
            lambda s, cache, root, drafts, nodes, features: score_tree(
                merge(s), cache, root, drafts, cache.scratch, nodes, features=features),
            static_argnames=("nodes", "features"), **jit)
        self._commit = jax.jit(
            lambda s, cache, slot, d, tau: commit_path(merge(s), cache, slot, d, tau), **jit)
        self._logits = jax.jit(lambda s, t: merge(s).logits(t), compiler_options=compiler_options)
        self.model = model

    def init_cache(self, max_len: int, scratch: int) -> Cache:
        return self.model.init_cache(max_len, scratch)

    def with_scratch(self, cache: Cache, scratch: int) -> Cache:
        return self.model.with_scratch(cache, scratch)

    def prefill(self, cache, prompt, length, *, features: bool = False):
        """``prefill`` through the cache's scratch block (sized >= the padded prompt)."""
        return self._prefill(self._leaves, cache, prompt, length, features)

    def decode(self, cache, root):
        return self._decode(self._leaves, cache, root)

    def decode_batch(self, caches, roots):
        """``decode`` vmapped over a batch of sequences (caches stacked on a leading axis)."""
        return self._decode_batch(self._leaves, caches, roots)

    def score_tree(self, cache, root, drafts, nodes: int | None = None, *,
                   features: bool = False):
        return self._score(self._leaves, cache, root, drafts, nodes, features)

    def commit_path(self, cache, slot, draft_index, num_accepted):
        return self._commit(self._leaves, cache, slot, draft_index, num_accepted)

    def logits(self, tokens):
        return self._logits(self._leaves, tokens)
