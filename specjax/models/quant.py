"""int8 weights (weight-only, per-output-channel scales) for the decoder's matmuls.

Why weight-only: a decode step on CPU is bound by the bytes of weights it reads, so storing
them as int8 reads 4x fewer bytes, while keeping the activations in float32 keeps the target's
law close to float32's. The branch that quantized the activations too (W8A8, ``int8 x int8``
``dot_general``, per-token scales) changed the greedy token on 2.3 % of positions; here only
the weights are rounded. The product runs in ``specjax.kernels`` (int8 converted to float32 in
registers, never a float copy of the weights); where that kernel is not available (other
platforms, no compiler) a ``jnp`` path computes the same product from a dequantized copy.

Quantization: symmetric absmax with one float32 scale per output channel and group of
``GROUP`` input columns (Dettmers et al. 2022, "LLM.int8()", §3.1 vector-wise quantization,
here on groups of a row as in Frantar et al. 2023, "GPTQ", §5; weights only). One scale per
whole channel moved the 1.5B's greedy token on 1.08 % of positions; per 64 columns it costs
1/16 byte per weight. Storage is the kernel's packed layout (``pack``): ``[O/4, K/8, 4, 8]``,
four output rows interleaved in 8-column groups, and scales ``[O, K/GROUP]``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int, Int8

from specjax import kernels

#: Allowed values of the ``weights`` option of ``load_model`` / the ``model`` config group.
WEIGHT_FORMATS = ("float32", "int8")
#: Input columns per scale (a multiple of the kernel's 8-column groups).
GROUP = 64


class Int8Weight(NamedTuple):
    """A matrix with ``out`` outputs as packed int8 (``pack``) plus float32 scales, one per
    output and ``GROUP`` input columns (the column count is ``q``'s padded K / ``GROUP``)."""

    q: Int8[Array, "blocks groups 4 8"]
    scale: Float[Array, "out scale_groups"]


def pack(q: Int8[np.ndarray, "out K"]) -> Int8[np.ndarray, "blocks groups 4 8"]:
    """``[out, K]`` -> ``[ceil(out/4), ceil(K/8), 4, 8]``, zero-padded."""
    out, K = q.shape
    padded = np.zeros((-(-out // 4) * 4, -(-K // 8) * 8), np.int8)
    padded[:out, :K] = q
    blocks, groups = padded.shape[0] // 4, padded.shape[1] // 8
    return np.ascontiguousarray(padded.reshape(blocks, 4, groups, 8).transpose(0, 2, 1, 3))


def unpack(q: Int8[Array, "blocks groups 4 8"], out: int, K: int) -> Int8[Array, "out K"]:
    blocks, groups = q.shape[-4], q.shape[-3]
    return q.transpose(0, 2, 1, 3).reshape(blocks * 4, groups * 8)[:out, :K]


def _quantize_out_in(w: Float[np.ndarray, "out K"], group: int) -> Int8Weight:
    if group % 8:
        raise ValueError(f"group must be a multiple of 8, got {group}")
    out, K = w.shape
    padded = np.zeros((out, -(-K // group) * group), np.float32)
    padded[:, :K] = w
    grouped = padded.reshape(out, -1, group)
    scale = np.maximum(np.abs(grouped).max(axis=2), np.finfo(np.float32).tiny) / 127.0
    q = np.clip(np.round(grouped / scale[..., None]), -127, 127).astype(np.int8)
    return Int8Weight(jnp.asarray(pack(q.reshape(out, -1))), jnp.asarray(scale, jnp.float32))


def quantize(w: Float[np.ndarray, "in out"], group: int = GROUP) -> Int8Weight:
    """A ``y = x @ w`` weight."""
    return _quantize_out_in(np.asarray(w, np.float32).T, group)


def quantize_rows(table: Float[np.ndarray, "V D"], group: int = GROUP) -> Int8Weight:
    """An embedding table whose rows are a tied head's outputs (``h @ E.T``), so the same
    array serves the head (``linear``) and the lookup (``rows``)."""
    return _quantize_out_in(np.asarray(table, np.float32), group)


def dequantize(w: Int8Weight, K: int) -> Float[Array, "out K"]:
    out, n_scales = w.scale.shape
    padded_k = w.q.shape[-3] * 8
    q = unpack(w.q, out, padded_k).astype(jnp.float32)
    return (q * jnp.repeat(w.scale, padded_k // n_scales, axis=1))[:, :K]


def _kernel(x, w: Int8Weight):
    out = jax.ShapeDtypeStruct((*x.shape[:-1], w.scale.shape[0]), jnp.float32)
    return jax.ffi.ffi_call(kernels.TARGET, out, vmap_method="expand_dims")(x, w.q, w.scale)


def _reference(x, w: Int8Weight):
    return jax.lax.dot_general(x, dequantize(w, x.shape[-1]), (((x.ndim - 1,), (1,)), ((), ())))


def linear(x: Float[Array, "N K"], w) -> Float[Array, "N M"]:
    """``x @ w`` for a float32 ``w``; the int8 product for an ``Int8Weight``."""
    if not isinstance(w, Int8Weight):
        return x @ w
    x = x.astype(jnp.float32)
    if kernels.q8dot_available():
        return jax.lax.platform_dependent(x, w, cpu=_kernel, default=_reference)
    return _reference(x, w)


def rows(table, ids: Int[Array, "..."], width: int) -> Float[Array, "... D"]:
    """Rows of an embedding table, float32 or ``quantize_rows``-quantized."""
    if not isinstance(table, Int8Weight):
        return table[ids]
    groups = table.q[ids // 4, :, ids % 4]  # [..., K/8, 8]: the row's interleaved groups
    q = groups.reshape(*ids.shape, -1).astype(jnp.float32)
    scale = jnp.repeat(table.scale[ids], q.shape[-1] // table.scale.shape[-1], axis=-1)
    return (q * scale)[..., :width]
