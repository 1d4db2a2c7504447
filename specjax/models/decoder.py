"""Llama / Qwen2 decoder in Flax NNX with a static-shape KV cache and tree attention.

The transformer is the standard pre-norm decoder (Touvron et al. 2023, "LLaMA"; Qwen2 adds a bias
on the q/k/v projections): RMSNorm (Zhang & Sennrich 2019), rotary position embedding in the
half-split ("NEOX") layout (Su et al. 2021, eq. 34 with the pairs (i, i + hd/2)), grouped-query
attention (Ainslie et al. 2023), SwiGLU MLP (Shazeer 2020, eq. 6). Weights are stacked over layers
and the layer loop is a ``lax.scan``: compile time stays flat in depth and the loop is not
unrolled.

The cache follows ``specjax.models.base``: ``max_len`` committed slots, then ``scratch`` slots.
``forward`` writes the KV of its N new nodes into scratch and attends to (committed prefix) ∪
(scratch slots allowed by ``mask``); the committed part and the scratch part are scored
separately and joined in one softmax, so only the small scratch block is rewritten per layer.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx, struct
from jaxtyping import Array, Bool, Float, Int

from specjax.models.config import IMPLEMENTED_ARCHS, ModelConfig
from specjax.models.layers import attend, mlp, project_qkv, rms_norm, weight_shapes


@struct.dataclass
class KVCache:
    k: Float[Array, "Lyr S KV hd"]  # S = max_len + scratch
    v: Float[Array, "Lyr S KV hd"]
    length: Int[Array, ""]
    max_len: int = struct.field(pytree_node=False)
    scratch: int = struct.field(pytree_node=False)


class Decoder(nnx.Module):
    """One sequence, no batch axis (the engine vmaps). Implements ``base.CausalLM``."""

    def __init__(self, config: ModelConfig, weights: dict, *, active_layers: int | None = None):
        if config.arch not in IMPLEMENTED_ARCHS:
            raise ValueError(
                f"config.arch {config.arch!r} is not implemented by the decoder; "
                f"allowed: {IMPLEMENTED_ARCHS}"
            )
        self.config = config
        self.vocab_size = config.vocab_size
        self.max_len = min(config.context_length, 4096)
        self.active_layers = config.num_layers if active_layers is None else active_layers
        if not 1 <= self.active_layers <= config.num_layers:
            raise ValueError(
                f"early-exit layer count must be in [1, {config.num_layers}], "
                f"got {self.active_layers}"
            )
        expected = weight_shapes(config)
        missing = sorted(set(expected) - set(weights))
        extra = sorted(set(weights) - set(expected))
        if missing or extra:
            raise ValueError(f"weights: missing keys {missing}, unexpected keys {extra}")
        for name in expected:
            # Pop as we go: a NumPy dict and its device copy are never both fully alive.
            value = weights.pop(name)
            if tuple(value.shape) != expected[name]:
                raise ValueError(
                    f"weights[{name!r}] must have shape {expected[name]}, got {tuple(value.shape)}"
                )
            if not isinstance(value, nnx.Param):
                value = nnx.Param(jnp.asarray(value, dtype=jnp.float32))
            setattr(self, name, value)
            del value
        if config.tie_embeddings:
            self.lm_head = None
        if not config.qkv_bias:
            self.bq = self.bk = self.bv = None

    @classmethod
    def from_weights(cls, config: ModelConfig, weights: dict) -> Decoder:
        """Takes ownership of ``weights`` (the canonical float32 dict): entries are popped."""
        return cls(config, weights)

    @classmethod
    def random(cls, config: ModelConfig, seed: int = 0) -> Decoder:
        """Random weights scaled so that every layer visibly changes the logits (for tests)."""
        rng = np.random.default_rng(seed)
        weights = {}
        for name, shape in weight_shapes(config).items():
            if name.endswith("norm"):
                weights[name] = 1.0 + 0.2 * rng.standard_normal(shape)
            elif name.startswith("b"):
                weights[name] = 0.2 * rng.standard_normal(shape)
            elif name == "embed":  # tied head: logits of order 1, not a near-one-hot law
                weights[name] = rng.standard_normal(shape) * (2.0 / np.sqrt(shape[1]))
            else:
                weights[name] = rng.standard_normal(shape) / np.sqrt(shape[-2])
        return cls(config, {k: v.astype(np.float32) for k, v in weights.items()})

    def early_exit(self, n: int) -> Decoder:
        """The first ``n`` layers + final norm + head, sharing these weights (self-speculation)."""
        shared = {name: getattr(self, name) for name in weight_shapes(self.config)}
        return Decoder(self.config, shared, active_layers=n)

    # ---- parameters -------------------------------------------------------------------------

    def _layer_params(self) -> dict:
        n = self.active_layers
        names = ["wq", "wk", "wv", "wo", "attn_norm", "mlp_norm", "w_gate", "w_up", "w_down"]
        if self.config.qkv_bias:
            names += ["bq", "bk", "bv"]
        params = {name: getattr(self, name)[...] for name in names}
        if n < self.config.num_layers:
            params = {name: w[:n] for name, w in params.items()}
        return params

    def _head(self, x: Float[Array, "N D"]) -> Float[Array, "N V"]:
        x = rms_norm(x, self.final_norm[...], self.config.rms_eps)
        if self.config.tie_embeddings:  # contract with embed's rows: no transposed copy
            return jax.lax.dot_general(x, self.embed[...], (((1,), (1,)), ((), ())))
        return x @ self.lm_head[...]

    # ---- the cached contract -----------------------------------------------------------------

    def init_cache(self, max_len: int | None = None, scratch: int = 16) -> KVCache:
        max_len = self.max_len if max_len is None else max_len
        if max_len < 0 or scratch < 1:
            raise ValueError(
                f"init_cache: need max_len >= 0 and scratch >= 1, got {max_len}, {scratch}"
            )
        c = self.config
        shape = (self.active_layers, max_len + scratch, c.num_kv_heads, c.head_dim)
        # Two distinct buffers: k and v are donated (updated in place) independently.
        k, v = jnp.zeros(shape, jnp.float32), jnp.zeros(shape, jnp.float32)
        return KVCache(
            k=k, v=v, length=jnp.zeros((), jnp.int32), max_len=max_len, scratch=scratch
        )

    def forward(
        self,
        tokens: Int[Array, " N"],
        positions: Int[Array, " N"],
        slots: Int[Array, " N"],
        mask: Bool[Array, "N S"],
        cache: KVCache,
    ) -> tuple[Float[Array, "N V"], KVCache]:
        (N,) = tokens.shape
        M, S = cache.max_len, cache.scratch
        if positions.shape != (N,) or slots.shape != (N,) or mask.shape != (N, S):
            raise ValueError(
                f"forward: tokens {tokens.shape} needs positions and slots of shape {(N,)} and "
                f"mask of shape {(N, S)}; got {positions.shape}, {slots.shape}, {mask.shape}"
            )
        c = self.config
        committed = jnp.broadcast_to(jnp.arange(M) < cache.length, (N, M))

        def layer(x, xs):
            w, k_layer, v_layer = xs
            q, k_new, v_new = project_qkv(rms_norm(x, w["attn_norm"], c.rms_eps), w, positions, c)
            k_scr = k_layer[M:].at[slots].set(k_new)
            v_scr = v_layer[M:].at[slots].set(v_new)
            keys = (k_layer[:M], k_scr)
            values = (v_layer[:M], v_scr)
            x = x + attend(q, keys, values, (committed, mask)) @ w["wo"]
            x = x + mlp(rms_norm(x, w["mlp_norm"], c.rms_eps), w)
            return x, (k_scr, v_scr)

        x = self.embed[...][tokens]
        x, (k_scr, v_scr) = jax.lax.scan(layer, x, (self._layer_params(), cache.k, cache.v))
        cache = cache.replace(
            k=jax.lax.dynamic_update_slice_in_dim(cache.k, k_scr, M, axis=1),
            v=jax.lax.dynamic_update_slice_in_dim(cache.v, v_scr, M, axis=1),
        )
        return self._head(x), cache

    def commit(self, cache: KVCache, slots: Int[Array, " M"], n: Int[Array, ""]) -> KVCache:
        """Copy scratch ``slots[:n]`` to committed ``[length, length + n)``; advance ``length``.

        Rows ``i >= n`` are sent out of bounds and dropped, so ``n`` may be a traced value.
        Overflowing ``max_len`` drops the excess rows too; callers keep ``length + n <= max_len``.
        """
        M = cache.max_len
        i = jnp.arange(slots.shape[0])
        dest = jnp.where(i < n, cache.length + i, M + cache.scratch)
        dest = jnp.where(dest < M, dest, M + cache.scratch)  # never overwrite the scratch block
        k = cache.k.at[:, dest].set(cache.k[:, M + slots], mode="drop")
        v = cache.v.at[:, dest].set(cache.v[:, M + slots], mode="drop")
        return cache.replace(k=k, v=v, length=cache.length + jnp.asarray(n, jnp.int32))

    # ---- uncached reference path -------------------------------------------------------------

    def logits(self, tokens: Int[Array, " T"]) -> Float[Array, "T V"]:
        """Full causal forward without a cache (positions 0..T-1); the equivalence reference."""
        (T,) = tokens.shape
        c = self.config
        positions = jnp.arange(T)
        causal = jnp.tril(jnp.ones((T, T), bool))

        def layer(x, w):
            q, k, v = project_qkv(rms_norm(x, w["attn_norm"], c.rms_eps), w, positions, c)
            x = x + attend(q, (k,), (v,), (causal,)) @ w["wo"]
            return x + mlp(rms_norm(x, w["mlp_norm"], c.rms_eps), w), None

        x, _ = jax.lax.scan(layer, self.embed[...][tokens], self._layer_params())
        return self._head(x)
