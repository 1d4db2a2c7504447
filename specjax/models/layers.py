"""The per-layer math of the decoder, as pure functions of one layer's weight slice.

Kept apart from ``decoder.py`` so the cached path (tree attention over cache + scratch) and the
uncached reference path share exactly the same projections, RoPE and MLP, and differ only in
which keys each query may see.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from specjax.models import kernels
from specjax.models.config import ModelConfig
from specjax.models.quant import linear

NEG_INF = float(np.finfo(np.float32).min)

#: The per-layer weights (one array each per layer in the decoder); biases exist for qkv_bias
#: only, the per-head q / k norms for qk_norm only.
LAYER_WEIGHTS = ("wq", "wk", "wv", "wo", "attn_norm", "mlp_norm", "w_gate", "w_up", "w_down",
                 "bq", "bk", "bv", "q_norm", "k_norm")
#: Matmuls that share their input, concatenated along the outputs when the weights are packed
#: for the CPU kernel (``Decoder``): one call and one weight stream instead of three / two.
#: The kernel sums each output on its own, so the fused product is bit-identical to the parts.
FUSED = {"wqkv": ("wq", "wk", "wv"), "w_gate_up": ("w_gate", "w_up")}

#: How a tensor-parallel ``model`` mesh axis splits each layer weight (``specjax.decode.parallel``):
#: q/k/v and gate/up by output columns (whole heads, MLP columns), wo and w_down by input rows,
#: so every device holds whole heads and XLA adds one all-reduce after each block (Megatron-LM,
#: Shoeybi et al. 2019, §3). Norms, embeddings and the head are kept whole on every device.
TENSOR_PARALLEL = {"wq": (None, "model"), "wk": (None, "model"), "wv": (None, "model"),
                   "bq": ("model",), "bk": ("model",), "bv": ("model",), "wo": ("model", None),
                   "w_gate": (None, "model"), "w_up": (None, "model"), "w_down": ("model", None)}


def weight_shapes(c: ModelConfig) -> dict[str, tuple[int, ...]]:
    """The canonical weight dict (models_shared.md): stacked over layers, y = x @ W."""
    Lyr, D, F, V = c.num_layers, c.hidden_size, c.intermediate_size, c.vocab_size
    q, kv = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    shapes = {
        "embed": (V, D),
        "wq": (Lyr, D, q),
        "wk": (Lyr, D, kv),
        "wv": (Lyr, D, kv),
        "wo": (Lyr, q, D),
        "attn_norm": (Lyr, D),
        "mlp_norm": (Lyr, D),
        "w_gate": (Lyr, D, F),
        "w_up": (Lyr, D, F),
        "w_down": (Lyr, F, D),
        "final_norm": (D,),
    }
    if c.qkv_bias:
        shapes |= {"bq": (Lyr, q), "bk": (Lyr, kv), "bv": (Lyr, kv)}
    if c.qk_norm:
        shapes |= {"q_norm": (Lyr, c.head_dim), "k_norm": (Lyr, c.head_dim)}
    if not c.tie_embeddings:
        shapes["lm_head"] = (D, V)
    return shapes


def rms_norm(x: Float[Array, "N D"], weight: Float[Array, " D"], eps: float):
    """RMSNorm (Zhang & Sennrich 2019, eq. 4) with the multiplicative weight as GGUF stores it."""
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def rope_frequencies(head_dim: int, theta: float, scaling: tuple = ()) -> np.ndarray:
    """RoPE's inverse frequencies under an HF ``rope_scaling`` rule, in float32 as HF computes
    them: "linear" divides them all by ``factor``; "llama3" (Llama 3.1) divides the
    low-frequency ones (wavelength above ``original_max_position_embeddings / low_freq_factor``)
    by ``factor``, keeps the high-frequency ones, and blends linearly in between."""
    inv_freq = (1.0 / (np.float32(theta) ** (np.arange(0, head_dim, 2, dtype=np.float32)
                                             / np.float32(head_dim)))).astype(np.float32)
    s = dict(scaling)
    kind = s.get("rope_type", "default")
    if kind == "linear":
        return (inv_freq / np.float32(s["factor"])).astype(np.float32)
    if kind == "llama3":
        factor, low, high = (np.float32(s[k]) for k in ("factor", "low_freq_factor",
                                                         "high_freq_factor"))
        old = np.float32(s["original_max_position_embeddings"])
        wavelen = np.float32(2 * np.pi) / inv_freq
        scaled = np.where(wavelen > old / low, inv_freq / factor, inv_freq)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old / high) & ~(wavelen > old / low)
        return np.where(medium, smoothed, scaled).astype(np.float32)
    return inv_freq


def rope(x: Float[Array, "N H hd"], positions: Int[Array, " N"], theta: float,
         scaling: tuple = ()):
    """Rotary embedding (Su et al. 2021, eq. 34), half-split pairing (i, i + hd/2).

    Frequencies theta^(-2i/hd) and angles in float32, as the HF reference computes them;
    ``scaling`` (``ModelConfig.rope_scaling``) rescales the frequencies (``rope_frequencies``).
    """
    half = x.shape[-1] // 2
    if scaling:
        inv_freq = jnp.asarray(rope_frequencies(2 * half, theta, scaling))
    else:
        inv_freq = 1.0 / (theta ** (jnp.arange(0, 2 * half, 2, dtype=jnp.float32) / (2 * half)))
    angle = positions.astype(jnp.float32)[:, None] * inv_freq[None, :]
    cos, sin = jnp.cos(angle)[:, None, :], jnp.sin(angle)[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def qkv_matmuls(h: Float[Array, "N D"], w: dict, c: ModelConfig, matmul=linear) -> tuple:
    """h W_q, h W_k, h W_v ([N, H*hd], [N, KV*hd] x 2): one product when the weights are fused
    (``FUSED``), three otherwise. ``matmul`` lets a benchmark time another kind of dot."""
    if "wqkv" in w:
        q_width, kv_width = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
        return tuple(jnp.split(matmul(h, w["wqkv"]), [q_width, q_width + kv_width], axis=-1))
    return matmul(h, w["wq"]), matmul(h, w["wk"]), matmul(h, w["wv"])


def gate_up_matmuls(h: Float[Array, "N D"], w: dict, matmul=linear) -> tuple:
    """h W_gate, h W_up: one product when fused, two otherwise."""
    if "w_gate_up" in w:
        return tuple(jnp.split(matmul(h, w["w_gate_up"]), 2, axis=-1))
    return matmul(h, w["w_gate"]), matmul(h, w["w_up"])


def project_qkv(h: Float[Array, "N D"], w: dict, positions: Int[Array, " N"], c: ModelConfig):
    """q [N, H, hd] and k, v [N, KV, hd]; RoPE applied to q and k (Qwen2: bias before RoPE;
    Qwen3: each head's q and k RMS-normed before RoPE)."""
    N = h.shape[0]
    q, k, v = qkv_matmuls(h, w, c)
    if c.qkv_bias:
        q, k, v = q + w["bq"], k + w["bk"], v + w["bv"]
    q, k = q.reshape(N, c.num_heads, c.head_dim), k.reshape(N, c.num_kv_heads, c.head_dim)
    if c.qk_norm:
        q, k = rms_norm(q, w["q_norm"], c.rms_eps), rms_norm(k, w["k_norm"], c.rms_eps)
    q = rope(q, positions, c.rope_theta, c.rope_scaling)
    k = rope(k, positions, c.rope_theta, c.rope_scaling)
    return q, k, v.reshape(N, c.num_kv_heads, c.head_dim)


def attend(
    q: Float[Array, "N H hd"],
    keys: tuple[Float[Array, "KV S hd"], ...],
    values: tuple[Float[Array, "KV S hd"], ...],
    allowed: tuple[Bool[Array, "N S"] | Bool[Array, " S"], ...],
) -> Float[Array, "N H*hd"]:
    """Grouped-query softmax attention over several key blocks joined in ONE softmax.

    The blocks (committed cache, scratch) are scored separately and concatenated along the key
    axis only as scores, so neither KV block is copied to build a joint key array. Keys are
    head-major (``[KV, S, hd]``): with the G query heads of a group and the N nodes merged into
    one row axis, both products are plain batched matmuls over the KV heads. A 1-D ``allowed``
    is the same for every node (the committed prefix).
    """
    N, H, hd = q.shape
    KV = keys[0].shape[0]
    G = H // KV
    qg = (q * (hd**-0.5)).reshape(N, KV, G, hd).transpose(1, 2, 0, 3).reshape(KV, G * N, hd)
    scores = []
    for k, a in zip(keys, allowed, strict=True):
        s = jnp.einsum("krd,ksd->krs", qg, k)
        a = a[None, None, :] if a.ndim == 1 else jnp.tile(a, (G, 1))[None]
        scores.append(jnp.where(a, s, NEG_INF))
    probs = jax.nn.softmax(jnp.concatenate(scores, axis=-1), axis=-1)
    out, start = 0.0, 0
    for v in values:
        out = out + jnp.einsum("krs,ksd->krd", probs[..., start : start + v.shape[1]], v)
        start += v.shape[1]
    return out.reshape(KV, G, N, hd).transpose(2, 0, 1, 3).reshape(N, H * hd)


def attend_cached(
    q: Float[Array, "N H hd"],
    k: Float[Array, "KV M hd"],
    v: Float[Array, "KV M hd"],
    k_scratch: Float[Array, "KV S hd"],
    v_scratch: Float[Array, "KV S hd"],
    length: Int[Array, ""],
    mask: Bool[Array, "N S"],
    *,
    kernel: bool = False,
) -> Float[Array, "N H*hd"]:
    """``attend`` over the committed block (slots below ``length``) and the scratch block
    (``mask``): the cached decoder's attention. ``kernel=True`` runs it as one call of the CPU
    kernel (``kernels/attention.cc``, where it builds; other backends take ``attend``): the
    ``attend`` form is ~15 small XLA:CPU operations per layer, each with a fixed dispatch cost
    that made up ~40 % of SmolLM2's 9-row tree pass. Same formula, float32 rounding aside."""

    def reference(q, k, v, k_scratch, v_scratch, length, mask):
        committed = jnp.arange(k.shape[1]) < length
        return attend(q, (k, k_scratch), (v, v_scratch), (committed, mask))

    def call(q, k, v, k_scratch, v_scratch, length, mask):
        out = jax.ShapeDtypeStruct((q.shape[0], q.shape[1] * q.shape[2]), jnp.float32)
        return jax.ffi.ffi_call(kernels.ATTENTION_TARGET, out, vmap_method="expand_dims")(
            q, k, v, k_scratch, v_scratch, length, mask)

    args = (q, k, v, k_scratch, v_scratch, jnp.asarray(length, jnp.int32),
            jnp.asarray(mask, bool))
    if kernel and kernels.available():
        return jax.lax.platform_dependent(*args, cpu=call, default=reference)
    return reference(*args)


def mlp(h: Float[Array, "N D"], w: dict) -> Float[Array, "N D"]:
    """SwiGLU (Shazeer 2020, eq. 6): (silu(h W_gate) * h W_up) W_down."""
    gate, up = gate_up_matmuls(h, w)
    return linear(jax.nn.silu(gate) * up, w["w_down"])
