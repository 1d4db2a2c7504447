"""Llama / Qwen2 decoder in Flax NNX with a static-shape KV cache and tree attention.

The transformer is the standard pre-norm decoder (Touvron et al. 2023, "LLaMA"; Qwen2 adds a bias
on the q/k/v projections): RMSNorm (Zhang & Sennrich 2019), rotary position embedding in the
half-split ("NEOX") layout (Su et al. 2021, eq. 34 with the pairs (i, i + hd/2)), grouped-query
attention (Ainslie et al. 2023), SwiGLU MLP (Shazeer 2020, eq. 6).

Speed on XLA:CPU decides the layout (``docs/decoder.md``, re-measured in
``benchmarks/decode_speed.py``):

- **One array per layer and per weight, and a Python-unrolled layer loop.** A ``lax.scan`` over
  stacked weights makes XLA copy every layer's weight slice before its ``dot`` (about 3x the
  weight traffic of a decode step); separate arrays are consumed in place. Compile time grows
  with depth instead, which ``JittedPasses`` and the engine pay once per shape.
- **A KV cache split per layer into a committed block ``[KV, max_len, hd]`` and a scratch block
  ``[KV, scratch, hd]``**, head-major so each attention product is a plain batched matmul. The
  forward writes only scratch; ``commit`` scatters accepted rows into the committed block in
  place. Each layer's scratch output carries a zero-valued data dependency on that layer's
  attention output, so XLA orders the commit's in-place write after the attention's read instead
  of copying the committed block.

``forward`` writes the KV of its N new nodes into scratch and attends to (committed prefix) ∪
(scratch slots allowed by ``mask``); the committed part and the scratch part are scored
separately and joined in one softmax.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx, struct
from jaxtyping import Array, Bool, Float, Int

from specjax.models import kernels
from specjax.models.config import IMPLEMENTED_ARCHS, ModelConfig
from specjax.models.layers import (
    FUSED,
    LAYER_WEIGHTS,
    TENSOR_PARALLEL,
    attend,
    attend_cached,
    mlp,
    project_qkv,
    rms_norm,
    weight_shapes,
)
from specjax.models.quant import (
    LOW_PRECISION,
    WEIGHT_FORMATS,
    F32Weight,
    Int8Weight,
    linear,
    pack_float32,
    pass_rows,
    quantize,
    quantize_rows,
    rows,
)


def _rows_times_embed(x: Float[Array, "R D"], embed: Float[Array, "V D"]) -> Float[Array, "R V"]:
    # XLA:CPU's Eigen path runs this contraction ~7x slower for 2..7 rows than for 8
    # (benchmarks/decode_speed.py; 124-139 ms vs 19.5 ms at V=49,152): pad to 8.
    R = x.shape[0]
    pad = 8 - R if 2 <= R < 8 else 0
    if embed.dtype != jnp.float32:  # a low-precision table: round x to it, accumulate float32
        out = jax.lax.dot_general(jnp.pad(x, ((0, pad), (0, 0))).astype(embed.dtype), embed,
                                  (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
        return out[:R]
    out = jax.lax.dot_general(jnp.pad(x, ((0, pad), (0, 0))), embed, (((1,), (1,)), ((), ())))
    return out[:R]


@jax.custom_batching.custom_vmap
def tied_head(x: Float[Array, "N D"], embed: Float[Array, "V D"]) -> Float[Array, "N V"]:
    """Logits of a tied head: hidden states contracted with the embedding's rows.

    Under ``vmap`` (the engine's batch) the rows of every sequence go through ONE contraction,
    so the padding rule above sees the real row count B·N instead of N.
    """
    return _rows_times_embed(x, embed)


@tied_head.def_vmap
def _tied_head_vmap(axis_size, in_batched, x, embed):
    if in_batched[1]:  # a batched embedding: no shared weights to exploit
        return jax.vmap(_rows_times_embed)(x, embed), True
    out = _rows_times_embed(x.reshape(-1, x.shape[-1]), embed)
    return out.reshape(*x.shape[:-1], out.shape[-1]), True


def head_logits(h: Float[Array, "*N D"], *, config: ModelConfig, weight_format: str, embed,
                lm_head, kernel_head: Int8Weight | F32Weight | None = None,
                differentiable: bool = False) -> Float[Array, "*N V"]:
    """Logits from normed features through a head: the CPU kernel's ``kernel_head`` when there
    is one, else XLA's contraction with the tied ``embed`` (its rows, no transposed copy) or
    ``lm_head``. ``tied_head``'s custom_vmap has no reverse-mode rule, so training
    (``differentiable=True``) takes a plain contraction with the same result. Shared by the
    decoder and by drafters that read a target's head (``drafters.trained.TargetReadout``)."""
    if kernel_head is not None and not differentiable:
        out = linear(h.reshape(-1, h.shape[-1]), kernel_head)
        return out.reshape(*h.shape[:-1], out.shape[-1])
    if differentiable and weight_format != "float32":
        raise ValueError("training reads a float32 target's head; this target was "
                         f"loaded with weights={weight_format!r}")
    if config.tie_embeddings:
        if differentiable:
            return jnp.einsum("...d,vd->...v", h, embed[...])
        return tied_head(h, embed[...])
    return linear(h, lm_head[...])


@struct.dataclass
class KVCache:
    k: tuple  # per layer: committed keys [KV, max_len, hd]
    v: tuple
    k_scratch: tuple  # per layer: [KV, scratch, hd]
    v_scratch: tuple
    length: Int[Array, ""]
    max_len: int = struct.field(pytree_node=False)
    scratch: int = struct.field(pytree_node=False)


#: The layer matmuls that ``weights="int8"`` quantizes (norms and biases stay float32).
QUANTIZED = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")


class DecoderLayer(nnx.Module):
    """One layer's weights as separate arrays (``layers.LAYER_WEIGHTS``; biases may be None;
    packed weights hold q/k/v and gate/up as their ``layers.FUSED`` concatenations).

    An ``Int8Weight`` is held as two arrays, ``<name>`` (packed int8, ``quant.pack``) and
    ``<name>_scale``, an ``F32Weight`` as ``<name>`` (packed float32) and ``<name>_out`` (its
    output count); ``weights()`` hands them back whole for ``quant.linear``.
    """

    def __init__(self, weights: dict):
        for name in (*LAYER_WEIGHTS, *FUSED):
            value, scale, out = weights.get(name), None, None
            if isinstance(value, F32Weight):
                value, out = nnx.Param(value.w), value.out
            elif isinstance(value, Int8Weight):
                value, scale = nnx.Param(value.q), nnx.Param(value.scale)
                if name in TENSOR_PARALLEL:  # [in/group, out]: split by outputs only
                    scale.set_metadata(out_sharding=(None, TENSOR_PARALLEL[name][1]))
            if (scale is not None or out is not None) and name in TENSOR_PARALLEL:
                spec = TENSOR_PARALLEL[name]  # packed [out/32, in, 32]: flip the split
                value.set_metadata(out_sharding=(spec[1], spec[0], None))
            elif value is not None and not isinstance(value, nnx.Param):
                low = isinstance(value, jax.Array) and value.dtype in (jnp.bfloat16, jnp.float16)
                value = nnx.Param(value if low else jnp.asarray(value, dtype=jnp.float32))
            if value is not None and scale is None and out is None and name in TENSOR_PARALLEL:
                value.set_metadata(out_sharding=TENSOR_PARALLEL[name])  # nnx.get_partition_spec
            setattr(self, name, value)
            if name in QUANTIZED or name in FUSED:
                setattr(self, f"{name}_scale", scale)
                setattr(self, f"{name}_out", out)

    def weights(self) -> dict:
        out = {}
        for n in (*LAYER_WEIGHTS, *FUSED):
            value = getattr(self, n)
            scale, n_out = getattr(self, f"{n}_scale", None), getattr(self, f"{n}_out", None)
            if value is None:
                continue
            if scale is not None:
                out[n] = Int8Weight(value[...], scale[...])
            elif n_out is not None:
                out[n] = F32Weight(value[...], n_out)
            else:
                out[n] = value[...]
        return out


class Decoder(nnx.Module):
    """One sequence, no batch axis (the engine vmaps). Implements ``base.CausalLM``."""

    #: The rows a prefill's int8-weight products take (``quant.ACTIVATIONS``; ``load_model``'s
    #: ``prefill_activations``): float32 (weight-only int8) unless asked for int8 (W8A8).
    prefill_activations = "float32"
    #: The rows of every other pass's int8-weight products (decode, tree, draft passes and the
    #: uncached reference, ``quant.pass_rows``; ``load_model``'s ``decode_activations``).
    decode_activations = "float32"

    def __init__(self, config: ModelConfig, weights: dict | Decoder, *,
                 active_layers: int | None = None, weight_format: str = "float32",
                 packed: bool | None = False):
        """``weights``: the canonical stacked dict (``layers.weight_shapes``; entries are popped
        as they are converted), the same with the layers streamed (``_convert_weights``), or a
        ``Decoder`` whose weights this one shares (early exit). ``weight_format="int8"`` quantizes
        every matmul weight and the head (``quant``); the norms, biases and an untied input
        embedding stay float32. ``"bfloat16"`` / ``"float16"`` store the matmul weights, the
        embedding and the head in that dtype (products accumulate in float32, ``quant.linear``);
        norms, biases, activations and the KV cache stay float32. ``packed``: float32 layer matmuls
        stored for the CPU kernel (``quant.F32Weight``) rather than as XLA's ``[in, out]`` arrays,
        and the head kept a second time, packed (``packed_head``; the original stays for lookups,
        EAGLE / Medusa and training, which need its gradient: +V x D x 4 bytes of memory, no more
        bytes read per pass). ``None`` packs when JAX's default backend is the CPU and the kernel
        builds (``load_model`` does; the same logits up to float32 rounding). Off by default because
        the kernel has no gradient: decoders that are trained keep XLA's layout."""
        if weight_format not in WEIGHT_FORMATS:
            raise ValueError(f"weights must be one of {list(WEIGHT_FORMATS)}, "
                             f"got {weight_format!r}")
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
        if isinstance(weights, Decoder):
            self._share_weights(weights)
        else:
            self._convert_weights(weights, weight_format, packed)

    def _share_weights(self, other: Decoder) -> None:
        """Hold ``other``'s arrays themselves, never copies (an early exit of ``other``)."""
        self.embed, self.final_norm = other.embed, other.final_norm
        self.lm_head, self.layers = other.lm_head, other.layers
        self.embed_scale, self.lm_head_scale = other.embed_scale, other.lm_head_scale
        self.weight_format, self.packed = other.weight_format, other.packed
        self.packed_head = other.packed_head
        self.prefill_activations = other.prefill_activations
        self.decode_activations = other.decode_activations

    def _convert_weights(self, weights: dict, weight_format: str, packed: bool | None) -> None:
        """The canonical weights into this decoder's format: per-layer arrays, int8, packed or
        low-precision matmuls, the head as the kernel reads it. ``weights`` is the stacked dict
        (``layers.weight_shapes``) or, for readers that stream one layer at a time (Hugging
        Face checkpoints), the global tensors plus ``"layers"``: an iterable of per-layer dicts
        without the layer axis. Entries are popped as they are converted, so a NumPy tensor and
        its device copy are never both fully alive."""
        config = self.config
        self.weight_format = weight_format
        int8 = weight_format == "int8"
        if packed is None:
            packed = weight_format == "float32" and jax.default_backend() == "cpu" and (
                kernels.available())
        self.packed = bool(packed) and weight_format == "float32"
        expected = weight_shapes(config)
        streamed = weights.pop("layers", None)
        if streamed is not None:
            expected = {k: v for k, v in expected.items() if k not in LAYER_WEIGHTS}
        missing = sorted(set(expected) - set(weights))
        extra = sorted(set(weights) - set(expected))
        if missing or extra:
            raise ValueError(f"weights: missing keys {missing}, unexpected keys {extra}")
        for name, shape in expected.items():
            if tuple(weights[name].shape) != shape:
                raise ValueError(
                    f"weights[{name!r}] must have shape {shape}, got {tuple(weights[name].shape)}"
                )
        fuse = quantize if int8 else pack_float32 if self.packed else None
        if streamed is not None:
            per_layer = [self._convert_layer(i, layer, fuse) for i, layer in enumerate(streamed)]
            if len(per_layer) != config.num_layers:
                raise ValueError(f"weights: {len(per_layer)} layers, the config has "
                                 f"{config.num_layers}")
        else:
            per_layer = self._convert_stacked_layers(weights, fuse)
        for name in [name for name in expected if name in weights]:
            value = weights.pop(name)
            if int8 and (name == "lm_head" or (name == "embed" and config.tie_embeddings)):
                q = quantize(value) if name == "lm_head" else quantize_rows(value)
                setattr(self, name, nnx.Param(q.q))
                setattr(self, f"{name}_scale", nnx.Param(q.scale))
            elif not isinstance(value, nnx.Param):
                if self.packed and (name == "lm_head" or (name == "embed"
                                                          and config.tie_embeddings)):
                    head = np.asarray(value, np.float32)  # [D, V], or the tied [V, D]
                    self.packed_head = nnx.Param(
                        pack_float32(head.T if name == "embed" else head).w)
                dtype = self._dtype if name in ("embed", "lm_head") else jnp.float32
                setattr(self, name, nnx.Param(jnp.asarray(value, dtype=dtype)))
            else:
                setattr(self, name, value)
            del value
        self.layers = nnx.List([DecoderLayer(w) for w in per_layer])
        for name in ("embed_scale", "lm_head_scale", "packed_head"):  # absent in this format
            if not hasattr(self, name):
                setattr(self, name, None)
        if config.tie_embeddings:
            self.lm_head = None

    @property
    def _dtype(self):
        """The storage dtype of plain matmul weights and of the embedding / head."""
        return jnp.dtype(self.weight_format) if self.weight_format in LOW_PRECISION else (
            jnp.float32)

    def _matmul_weight(self, value):
        """One layer matmul as this format stores it (int8 and packed go through ``fuse``)."""
        if self.weight_format == "int8":
            return quantize(value)
        if self.packed:
            return pack_float32(value)
        return jnp.asarray(value, dtype=self._dtype)

    def _convert_stacked_layers(self, weights: dict, fuse) -> list[dict]:
        """Per-layer converted weights from the stacked dict, one weight name at a time."""
        per_layer = [{} for _ in range(self.config.num_layers)]
        for fused, names in FUSED.items() if fuse is not None else ():
            parts = [weights.pop(name) for name in names]
            for i, layer in enumerate(per_layer):
                layer[fused] = fuse(np.concatenate(
                    [np.asarray(part[i], np.float32) for part in parts], axis=1))
            del parts
        for name in [name for name in LAYER_WEIGHTS if name in weights]:
            value = weights.pop(name)
            for i, layer in enumerate(per_layer):
                layer[name] = (self._matmul_weight(value[i]) if name in QUANTIZED
                               else jnp.asarray(value[i], dtype=jnp.float32))
            del value
        return per_layer

    def _convert_layer(self, index: int, layer: dict, fuse) -> dict:
        """One streamed layer (names of ``LAYER_WEIGHTS`` without the layer axis), converted."""
        expected = {k: v[1:] for k, v in weight_shapes(self.config).items()
                    if k in LAYER_WEIGHTS}
        if set(layer) != set(expected):
            raise ValueError(f"weights: layer {index} has {sorted(layer)}, expected "
                             f"{sorted(expected)}")
        for name, shape in expected.items():
            if tuple(layer[name].shape) != shape:
                raise ValueError(f"weights: layer {index} {name!r} must have shape {shape}, "
                                 f"got {tuple(layer[name].shape)}")
        out = {}
        for fused, names in FUSED.items() if fuse is not None else ():
            out[fused] = fuse(np.concatenate([np.asarray(layer.pop(n), np.float32)
                                              for n in names], axis=1))
        for name in list(layer):
            value = layer.pop(name)
            out[name] = (self._matmul_weight(value) if name in QUANTIZED
                         else jnp.asarray(value, dtype=jnp.float32))
        return out

    @classmethod
    def from_weights(cls, config: ModelConfig, weights: dict, weight_format: str = "float32",
                     packed: bool | None = False) -> Decoder:
        """Takes ownership of ``weights`` (the canonical float32 dict): entries are popped."""
        return cls(config, weights, weight_format=weight_format, packed=packed)

    @classmethod
    def random(cls, config: ModelConfig, seed: int = 0, weight_format: str = "float32",
               packed: bool | None = False) -> Decoder:
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
        return cls(config, {k: v.astype(np.float32) for k, v in weights.items()},
                   weight_format=weight_format, packed=packed)

    def early_exit(self, n: int) -> Decoder:
        """The first ``n`` layers + final norm + head, sharing these weights (self-speculation)."""
        return Decoder(self.config, self, active_layers=n)

    def _head(self, x: Float[Array, "N D"]) -> Float[Array, "N V"]:
        return self.read_out(self.features_of(x))

    def features_of(self, x: Float[Array, "N D"]) -> Float[Array, "N D"]:
        """The last hidden state as the head reads it (after the final norm): the feature that
        EAGLE / Medusa drafters take from the target."""
        return rms_norm(x, self.final_norm[...], self.config.rms_eps)

    def read_out(self, h: Float[Array, "N D"], *, differentiable: bool = False
                 ) -> Float[Array, "N V"]:
        """Logits from normed features (``head_logits`` with this decoder's head)."""
        return head_logits(h, config=self.config, weight_format=self.weight_format,
                           embed=self.embed, lm_head=self.lm_head,
                           kernel_head=self.kernel_head(), differentiable=differentiable)

    def kernel_head(self) -> Int8Weight | F32Weight | None:
        """The head as the CPU kernel multiplies it: int8 (the embedding's rows when tied, else
        lm_head), the packed float32 copy, or None (XLA's contraction with embed / lm_head)."""
        if self.weight_format == "int8":
            if self.config.tie_embeddings:
                return Int8Weight(self.embed[...], self.embed_scale[...])
            return Int8Weight(self.lm_head[...], self.lm_head_scale[...])
        return None if self.packed_head is None else F32Weight(self.packed_head[...],
                                                                 self.vocab_size)

    def embed_rows(self, tokens: Int[Array, "..."]) -> Float[Array, "... D"]:
        """Input embeddings of ``tokens`` (dequantized rows of an int8 tied table)."""
        scale = self.embed_scale
        return rows(self.embed[...] if scale is None else Int8Weight(self.embed[...], scale[...]),
                    tokens, self.config.hidden_size)

    # ---- the cached contract -----------------------------------------------------------------

    def _zeros(self, slots: int) -> tuple:
        c = self.config
        # Distinct buffers per layer and for k and v: each is donated and updated in place.
        return tuple(jnp.zeros((c.num_kv_heads, slots, c.head_dim), jnp.float32)
                     for _ in range(self.active_layers))

    def init_cache(self, max_len: int | None = None, scratch: int = 16) -> KVCache:
        max_len = self.max_len if max_len is None else max_len
        if max_len < 0 or scratch < 1:
            raise ValueError(
                f"init_cache: need max_len >= 0 and scratch >= 1, got {max_len}, {scratch}"
            )
        return KVCache(k=self._zeros(max_len), v=self._zeros(max_len),
                       k_scratch=self._zeros(scratch), v_scratch=self._zeros(scratch),
                       length=jnp.zeros((), jnp.int32), max_len=max_len, scratch=scratch)

    def with_scratch(self, cache: KVCache, scratch: int) -> KVCache:
        """The same committed entries with an empty scratch block of ``scratch`` slots."""
        return cache.replace(k_scratch=self._zeros(scratch), v_scratch=self._zeros(scratch),
                             scratch=scratch)

    def forward(
        self,
        tokens: Int[Array, " N"],
        positions: Int[Array, " N"],
        slots: Int[Array, " N"],
        mask: Bool[Array, "N S"],
        cache: KVCache,
    ) -> tuple[Float[Array, "N V"], KVCache]:
        with pass_rows(self.decode_activations):
            x, cache = self._forward_hidden(tokens, positions, slots, mask, cache)
            return self._head(x), cache

    def forward_features(self, tokens, positions, slots, mask, cache: KVCache
                         ) -> tuple[Float[Array, "N V"], Float[Array, "N D"], KVCache]:
        """``forward`` that also returns each node's feature (``features_of``), for drafters
        that read the target's hidden states; the computation is the same."""
        with pass_rows(self.decode_activations):
            x, cache = self._forward_hidden(tokens, positions, slots, mask, cache)
            h = self.features_of(x)
            return self.read_out(h), h, cache

    def _forward_hidden(self, tokens, positions, slots, mask, cache: KVCache):
        return self.layers_forward(self.embed_rows(tokens), positions, slots, mask, cache)

    def layers_forward(self, x: Float[Array, "N D"], positions, slots, mask, cache: KVCache
                       ) -> tuple[Float[Array, "N D"], KVCache]:
        """The cached layer stack on given inputs (an EAGLE head feeds its own, not embeddings);
        returns the residual stream after the last layer."""
        N = x.shape[0]
        S = cache.scratch
        if positions.shape != (N,) or slots.shape != (N,) or mask.shape != (N, S):
            raise ValueError(
                f"forward: tokens {(N,)} needs positions and slots of shape {(N,)} and "
                f"mask of shape {(N, S)}; got {positions.shape}, {slots.shape}, {mask.shape}"
            )
        c = self.config
        k_scratch, v_scratch = [], []
        for i in range(self.active_layers):
            w = self.layers[i].weights()
            q, k_new, v_new = project_qkv(rms_norm(x, w["attn_norm"], c.rms_eps), w, positions, c)
            ks = cache.k_scratch[i].at[:, slots].set(k_new.transpose(1, 0, 2))
            vs = cache.v_scratch[i].at[:, slots].set(v_new.transpose(1, 0, 2))
            attn = attend_cached(q, cache.k[i], cache.v[i], ks, vs, cache.length, mask,
                                 kernel=self.packed or self.weight_format == "int8")
            # Zero-valued dependency: whatever consumes this scratch (commit's in-place write
            # into cache.k[i]) is ordered after the attention read of cache.k[i].
            dep = 0.0 * attn[0, 0]
            k_scratch.append(ks + dep)
            v_scratch.append(vs + dep)
            x = x + linear(attn, w["wo"])
            x = x + mlp(rms_norm(x, w["mlp_norm"], c.rms_eps), w)
        cache = cache.replace(k_scratch=tuple(k_scratch), v_scratch=tuple(v_scratch))
        return x, cache

    def commit(self, cache: KVCache, slots: Int[Array, " M"], n: Int[Array, ""]) -> KVCache:
        """Copy scratch ``slots[:n]`` to committed ``[length, length + n)``; advance ``length``.

        Rows ``i >= n`` are sent out of bounds and dropped, so ``n`` may be a traced value.
        Overflowing ``max_len`` drops the excess rows too; callers keep ``length + n <= max_len``.
        """
        M = cache.max_len
        i = jnp.arange(slots.shape[0])
        dest = jnp.where(i < n, cache.length + i, M)
        dest = jnp.where(dest < M, dest, M)  # out of bounds: dropped
        k = tuple(c.at[:, dest].set(s[:, slots], mode="drop")
                  for c, s in zip(cache.k, cache.k_scratch, strict=True))
        v = tuple(c.at[:, dest].set(s[:, slots], mode="drop")
                  for c, s in zip(cache.v, cache.v_scratch, strict=True))
        return cache.replace(k=k, v=v, length=cache.length + jnp.asarray(n, jnp.int32))

    # ---- uncached reference path -------------------------------------------------------------

    def logits(self, tokens: Int[Array, " T"]) -> Float[Array, "T V"]:
        """Full causal forward without a cache (positions 0..T-1); the equivalence reference."""
        with pass_rows(self.decode_activations):
            return self._head(self.hidden(tokens))

    def hidden(self, tokens: Int[Array, " T"]) -> Float[Array, "T D"]:
        """The residual stream after the last layer (before the final norm), uncached; with
        ``features_of`` and ``read_out(differentiable=True)`` it is the training path."""
        return self.layers_uncached(self.embed_rows(tokens))

    def layers_uncached(self, x: Float[Array, "T D"]) -> Float[Array, "T D"]:
        """The layer stack on given inputs, causal over positions 0..T-1, no cache."""
        T = x.shape[0]
        c = self.config
        positions = jnp.arange(T)
        causal = jnp.tril(jnp.ones((T, T), bool))
        for i in range(self.active_layers):
            w = self.layers[i].weights()
            q, k, v = project_qkv(rms_norm(x, w["attn_norm"], c.rms_eps), w, positions, c)
            attn = attend(q, (k.transpose(1, 0, 2),), (v.transpose(1, 0, 2),), (causal,))
            x = x + linear(attn, w["wo"])
            x = x + mlp(rms_norm(x, w["mlp_norm"], c.rms_eps), w)
        return x
