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
from flax import nnx
from jaxtyping import Array, Float, Int

from specjax.models.base import Cache, CausalLM
from specjax.tree import tree_depths, tree_mask  # noqa: F401 (re-exported for callers)


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


class JittedPasses:
    """The four passes jitted once for one model: ``nnx.split`` here, ``nnx.merge`` inside jit.

    The weights enter each compiled function as an argument (never as baked-in constants), and
    the cache argument is donated so XLA updates the KV arrays in place. The weights travel as
    a flat list of arrays: flattening the nnx state (one Python call per Variable) on every call
    costs milliseconds per pass for a model with hundreds of per-layer arrays.
    """

    def __init__(self, model: CausalLM, compiler_options: dict | None = None):
        graphdef, state = nnx.split(model)
        self._leaves, treedef = jax.tree.flatten(state)

        def merge(leaves):
            return nnx.merge(graphdef, jax.tree.unflatten(treedef, leaves))

        donate = dict(donate_argnames="cache", compiler_options=compiler_options)
        self._prefill = jax.jit(lambda s, t, n, cache: prefill(merge(s), t, n, cache), **donate)
        self._decode = jax.jit(lambda s, t, cache: decode(merge(s), t, cache), **donate)
        self._decode_batch = jax.jit(
            lambda s, t, cache: jax.vmap(lambda ti, ci: decode(merge(s), ti, ci))(t, cache),
            **donate,
        )
        self._score = jax.jit(lambda s, r, d, cache: score_tree(merge(s), r, d, cache), **donate)
        self._commit = jax.jit(
            lambda s, cache, d, tau, L: commit_path(merge(s), cache, d, tau, L),
            static_argnames="L",
            **donate,
        )
        self._logits = jax.jit(lambda s, t: merge(s).logits(t), compiler_options=compiler_options)
        self.model = model

    def init_cache(self, max_len: int | None = None, scratch: int = 16) -> Cache:
        return self.model.init_cache(max_len, scratch)

    def prefill(self, tokens, n, cache):
        if tokens.shape[0] > cache.max_len:  # the clear error, before tracing
            raise ValueError(
                f"prefill: prompt of {tokens.shape[0]} tokens does not fit the cache "
                f"(max_len={cache.max_len})"
            )
        return self._prefill(self._leaves, tokens, n, cache)

    def decode(self, token, cache):
        return self._decode(self._leaves, token, cache)

    def decode_batch(self, tokens, caches):
        """``decode`` vmapped over a batch of sequences (caches stacked on a leading axis)."""
        return self._decode_batch(self._leaves, tokens, caches)

    def score_tree(self, root, drafts, cache):
        tree_mask(*drafts.shape, cache.scratch)  # raises the clear error before tracing
        return self._score(self._leaves, root, drafts, cache)

    def commit_path(self, cache, draft_index, num_accepted, L: int):
        return self._commit(self._leaves, cache, draft_index, num_accepted, L=L)

    def logits(self, tokens):
        return self._logits(self._leaves, tokens)
