"""int8 weights (weight-only, per-output-channel scales) for the decoder's matmuls.

Why weight-only: a decode step on CPU is bound by the bytes of weights it reads, so storing
them as int8 reads 4x fewer bytes, while keeping the activations in float32 keeps the target's
law close to float32's. The branch that quantized the activations too (W8A8, ``int8 x int8``
``dot_general``, per-token scales) changed the greedy token on 2.3 % of positions; here only
the weights are rounded. The product runs in ``specjax.models.kernels`` (int8 converted to float32
in registers, never a float copy of the weights); where that kernel is not available (other
platforms, no compiler) a ``jnp`` path computes the same product from a dequantized copy.

Quantization: symmetric absmax with one float32 scale per output channel and group of
``GROUP`` input columns (Dettmers et al. 2022, "LLM.int8()", §3.1 vector-wise quantization,
here on groups of a row as in Frantar et al. 2023, "GPTQ", §5; weights only). One scale per
whole channel moved the 1.5B's greedy token on 1.08 % of positions; per 64 columns it costs
1/16 byte per weight. Storage is the kernel's packed layout (``pack``): ``[O/32, K, 32]``, the
32 weights of a block of outputs adjacent for each column, and scales ``[K/GROUP, O]``.
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int, Int8

from specjax.models import kernels

#: Allowed values of the ``weights`` option of ``load_model`` / the ``model`` config group.
WEIGHT_FORMATS = ("float32", "bfloat16", "float16", "int8")
#: Formats stored as plain low-precision arrays: products take them as they are and accumulate
#: in float32 (``linear``); activations, norms, the KV cache and the logits stay float32.
LOW_PRECISION = ("bfloat16", "float16")
#: Input columns per scale.
GROUP = 64
#: Outputs per packed block (the kernel's tile width).
BLOCK = 32


class Int8Weight(NamedTuple):
    """A matrix as packed int8 (``pack``) plus float32 scales, one per group of input columns
    and output. The group is the padded K over the number of groups and the output count is
    the scales' (``q`` is padded), so neither needs a field of its own."""

    q: Int8[Array, "blocks Kp 32"]
    scale: Float[Array, "groups out"]


@partial(jax.tree_util.register_dataclass, data_fields=["w"], meta_fields=["out"])
@dataclass(frozen=True)
class F32Weight:
    """A float32 ``y = x @ w`` weight packed for the kernel (``pack`` of ``w.T``); ``out`` is
    its true output count (a static field: the packed array is padded to blocks of 32).

    Why pack float32 at all: for the 1-12 rows of a decode or tree pass XLA:CPU's dot reads
    the weights at 13-24 GB/s, the packed kernel at 19-29 (four of the 1.5B's layers:
    1 row 24.5 vs 29.8 ms, 9 rows 34-37 vs 54 ms, 128 rows 234 vs 304 ms)."""

    w: Float[Array, "blocks K 32"]
    out: int


def pack_float32(w: Float[np.ndarray, "in out"]) -> F32Weight:
    w = np.asarray(w, np.float32)
    return F32Weight(jnp.asarray(pack(w)), w.shape[1])


def pack(a: np.ndarray) -> np.ndarray:
    """``[K, out]`` -> ``[ceil(out/32), K, 32]``, outputs zero-padded: one copy that moves runs
    of 32 (from ``[out, K]`` it would move single elements; loading the 1.5B took 20 s longer)."""
    K, out = a.shape
    if out % BLOCK:
        a = np.pad(a, ((0, 0), (0, -out % BLOCK)))
    return np.ascontiguousarray(a.reshape(K, -1, BLOCK).transpose(1, 0, 2))


def unpack(a: Array, out: int, K: int) -> Array:
    """``pack``'s inverse: ``[blocks, Kp, 32]`` -> ``[out, K]``."""
    return jnp.swapaxes(a, -1, -2).reshape(-1, a.shape[-2])[:out, :K]


def _quantize_out_in(w: Float[np.ndarray, "out K"], group: int) -> Int8Weight:
    if group < 1:
        raise ValueError(f"group must be a positive number of columns, got {group}")
    out, K = w.shape
    padded = np.zeros((out, -(-K // group) * group), np.float32)
    padded[:, :K] = w
    grouped = padded.reshape(out, -1, group)
    scale = np.maximum(np.abs(grouped).max(axis=2), np.finfo(np.float32).tiny) / 127.0
    q = np.clip(np.round(grouped / scale[..., None]), -127, 127).astype(np.int8)
    return Int8Weight(jnp.asarray(pack(q.reshape(out, -1).T)), jnp.asarray(scale.T, jnp.float32))


def quantize(w: Float[np.ndarray, "in out"], group: int = GROUP) -> Int8Weight:
    """A ``y = x @ w`` weight."""
    return _quantize_out_in(np.asarray(w, np.float32).T, group)


def quantize_rows(table: Float[np.ndarray, "V D"], group: int = GROUP) -> Int8Weight:
    """An embedding table whose rows are a tied head's outputs (``h @ E.T``), so the same
    array serves the head (``linear``) and the lookup (``rows``)."""
    return _quantize_out_in(np.asarray(table, np.float32), group)


def dequantize(w: Int8Weight, K: int) -> Float[Array, "out K"]:
    n_scales, out = w.scale.shape
    padded_k = w.q.shape[-2]
    q = unpack(w.q, out, padded_k).astype(jnp.float32)
    return (q * jnp.repeat(w.scale.T, padded_k // n_scales, axis=1))[:, :K]


def _kernel(x, w: Int8Weight | F32Weight):
    if isinstance(w, F32Weight):
        out = jax.ShapeDtypeStruct((*x.shape[:-1], w.out), jnp.float32)
        return jax.ffi.ffi_call(kernels.F32_TARGET, out, vmap_method="expand_dims")(x, w.w)
    out = jax.ShapeDtypeStruct((*x.shape[:-1], w.scale.shape[-1]), jnp.float32)
    return jax.ffi.ffi_call(kernels.Q8_TARGET, out, vmap_method="expand_dims")(x, w.q, w.scale)


def _reference(x, w: Int8Weight | F32Weight):
    dense = unpack(w.w, w.out, x.shape[-1]) if isinstance(w, F32Weight) else dequantize(
        w, x.shape[-1])
    return jax.lax.dot_general(x, dense, (((x.ndim - 1,), (1,)), ((), ())))


#: Set while a prefill is traced (``bulk_rows``): on CPUs where XLA's blocked GEMM beats the
#: kernel for a whole prompt's rows (``kernels.prefill_dot``, by the kernel's instruction set),
#: its products take XLA's dot on the unpacked weights. The kernel streams each weight block
#: once per tile of rows: right for decode and tree passes everywhere, and for a prompt too
#: where its tiles are wide (AVX-512). Only the prefill takes it, for AR and speculative runs
#: alike, so every decode and tree pass keeps the kernel's bits.
_BULK = contextvars.ContextVar("specjax_bulk_rows", default=None)
#: Allowed values of ``prefill_activations`` (``load_model``, the ``model`` config group):
#: float32 rows (the default), int8 rows for int8 weights (W8A8, ``w8a8``), or bfloat16 for float32
#: weights (``bf16_dot``: the rows and the weights rounded to bfloat16, float32 sums). Inside
#: ``bulk_rows`` the context variable above holds one of them, outside it ``None``.
ACTIVATIONS = ("float32", "int8", "bfloat16")
#: Allowed values of ``decode_activations``: every decode and tree pass must take one numerics,
#: and bfloat16 rows buy nothing there (a few rows are bound by the weights' bytes).
PASS_ACTIVATIONS = ("float32", "int8")
#: The rows of the products traced outside a prefill (``pass_rows``: decode, tree and draft
#: passes, the uncached reference), ``decode_activations``.
_PASS = contextvars.ContextVar("specjax_pass_rows", default="float32")


def check_activations(activations: str, weight_format: str,
                      field: str = "prefill_activations", allowed=ACTIVATIONS) -> str:
    """``activations`` for ``field`` (``allowed``: ``ACTIVATIONS`` for a prefill,
    ``PASS_ACTIVATIONS`` for the other passes) with weights of ``weight_format``."""
    if activations not in allowed:
        raise ValueError(f"{field} must be one of {list(allowed)}, got {activations!r}")
    if activations == "int8" and weight_format != "int8":
        raise ValueError(f"{field}='int8' needs int8 weights (weights='int8'), got "
                         f"weights={weight_format!r}")
    if activations == "bfloat16" and weight_format != "float32":
        raise ValueError(f"{field}='bfloat16' needs float32 weights (weights='float32'), got "
                         f"weights={weight_format!r}")
    return activations


@contextlib.contextmanager
def pass_rows(activations: str = "float32"):
    """Trace the products inside (a decode, tree or draft pass, outside any ``bulk_rows``)
    with int8 rows where ``activations`` is ``"int8"`` (``w8a8``, every int8 weight: the
    layers and the head). Every pass of a model must take the same rows, so that a token's
    logits do not depend on which pass scored it: the W8A8 kernel's rows are independent
    (exact int32 sums, one float32 chain per row), and a decode of one row, a tree of nine and
    the uncached reference agree bit for bit."""
    token = _PASS.set(activations)
    try:
        yield
    finally:
        _PASS.reset(token)


@contextlib.contextmanager
def bulk_rows(activations: str = "float32"):
    """Trace the products inside as many-row products (a prefill): XLA's dot where it is the
    faster form on this CPU (``in_bulk``); int8 weights with int8 rows where ``activations``
    is ``"int8"`` (``w8a8``); float32 weights in bfloat16 where it is ``"bfloat16"``
    (``bf16_dot``)."""
    token = _BULK.set(activations)
    try:
        yield
    finally:
        _BULK.reset(token)


def in_bulk() -> bool:
    """Whether the products traced now leave the kernels for XLA's ``jnp`` forms."""
    return _BULK.get() is not None and kernels.prefill_dot() == "xla"


#: The rows' absmax floor: an all-zero row gets a finite reciprocal (127 / the floor).
ROW_FLOOR = 1e-30


def quantize_activations(x: Float[Array, "*N K"], padded_k: int
                         ) -> tuple[Array, Float[Array, "*N"]]:
    """Rows as int8 with one scale each (symmetric absmax, as the weights), stored + 128 as
    uint8 (the VNNI kernel's unsigned operand) and zero-padded (128) to ``padded_k`` columns.
    One reciprocal per row, then a product per entry (not a division): the kernel quantizes
    its rows itself (``_w8a8_kernel``) by these very operations, so both give the same bytes."""
    amax = jnp.maximum(jnp.abs(x).max(axis=-1), np.float32(ROW_FLOOR))
    inv = np.float32(127.0) / amax
    xq = jnp.clip(jnp.round(x * inv[..., None]), -127, 127) + 128
    xq = jnp.pad(xq, [(0, 0)] * (x.ndim - 1) + [(0, padded_k - x.shape[-1])], constant_values=128)
    return xq.astype(jnp.uint8), amax / np.float32(127.0)


def _w8a8_reference(u, sx, w: Int8Weight):
    """The kernel's sums in ``jnp``: exact int32 per group, folded into float32 in group order
    (a scan, so no ``[groups, rows, out]`` intermediate)."""
    groups, out = w.scale.shape
    lead, padded_k = u.shape[:-1], u.shape[-1]
    xq = (u.reshape(-1, groups, padded_k // groups).astype(jnp.int32) - 128).astype(jnp.int8)
    q = unpack(w.q, out, padded_k).reshape(out, groups, -1)

    def group(acc, xs):
        xg, qg, s = xs
        part = jax.lax.dot_general(xg, qg, (((1,), (1,)), ((), ())),
                                   preferred_element_type=jnp.int32)
        return acc + part.astype(jnp.float32) * s, None

    acc0 = jnp.zeros((xq.shape[0], out), jnp.float32)
    acc, _ = jax.lax.scan(group, acc0, (jnp.swapaxes(xq, 0, 1), jnp.swapaxes(q, 0, 1), w.scale))
    return (acc * sx.reshape(-1, 1)).reshape(*lead, out)


def _w8a8_kernel(x, w: Int8Weight):
    """The kernel quantizes the float32 rows itself (``quantize_activations``' operations)."""
    out = jax.ShapeDtypeStruct((*x.shape[:-1], w.scale.shape[-1]), jnp.float32)
    return jax.ffi.ffi_call(kernels.Q8Q8_TARGET, out, vmap_method="expand_dims")(
        x, w.q, w.scale)


def _w8a8_jnp(x, w: Int8Weight):
    return _w8a8_reference(*quantize_activations(x, w.q.shape[-2]), w)


def w8a8(x: Float[Array, "*N K"], w: Int8Weight) -> Float[Array, "*N M"]:
    """``x @ w`` with the rows quantized too (W8A8: per-row scales, int32 sums per weight
    group): on AVX-512 VNNI one instruction does 64 int8 multiply-adds where float32 does 16,
    on AMX tiles 16384. It changes the model's numerics (the rows are rounded), so it is an
    option, per kind of pass: ``prefill_activations`` (the prompt's pass, which AR and
    speculative runs share) and ``decode_activations`` (every decode, tree and draft pass
    alike, ``pass_rows``), so speculative decoding stays exact for the model as computed."""
    x = x.astype(jnp.float32)
    if kernels.vnni():
        return jax.lax.platform_dependent(x, w, cpu=_w8a8_kernel, default=_w8a8_jnp)
    return _w8a8_jnp(x, w)


def bf16_dot(x: Float[Array, "N K"], w) -> Float[Array, "N M"]:
    """``x @ w`` for float32 weights (an ``F32Weight`` or an ``[in, out]`` array) with both
    sides rounded to bfloat16 and the sums in float32: XLA's bfloat16 dot runs on the CPU's
    bfloat16 units (AMX-BF16, AVX512-BF16) where it has them, for a prefill's many rows. The
    packed weights are unpacked and rounded once per call (a prompt's rows pay for it many
    times over). It changes the model's numerics: an option (``prefill_activations``)."""
    if isinstance(w, F32Weight):
        dense = unpack(w.w, w.out, x.shape[-1]).astype(jnp.bfloat16)  # [out, K]
        return jax.lax.dot_general(x.astype(jnp.bfloat16), dense, (((x.ndim - 1,), (1,)), ((), ())),
                                   preferred_element_type=jnp.float32)
    return jnp.matmul(x.astype(jnp.bfloat16), w.astype(jnp.bfloat16),
                      preferred_element_type=jnp.float32)


def linear(x: Float[Array, "N K"], w) -> Float[Array, "N M"]:
    """``x @ w``: a float32 ``[in, out]`` array through XLA's dot, an ``F32Weight`` or an
    ``Int8Weight`` through the packed kernel (or ``jnp`` where it is not available). A bfloat16
    or float16 array multiplies ``x`` rounded to its dtype and accumulates in float32, as
    mixed-precision inference does on accelerators (no float32 copy of the weights)."""
    if _BULK.get() == "bfloat16" and (isinstance(w, F32Weight) or (
            not isinstance(w, Int8Weight) and w.dtype == jnp.float32)):
        return bf16_dot(x, w)
    if not isinstance(w, Int8Weight | F32Weight):
        if w.dtype in (jnp.bfloat16, jnp.float16):
            return jnp.matmul(x.astype(w.dtype), w, preferred_element_type=jnp.float32)
        return x @ w
    if isinstance(w, Int8Weight) and (_BULK.get() or _PASS.get()) == "int8":
        return w8a8(x, w)
    x = x.astype(jnp.float32)
    if kernels.available() and not in_bulk():
        return jax.lax.platform_dependent(x, w, cpu=_kernel, default=_reference)
    return _reference(x, w)


def rows(table, ids: Int[Array, "..."], width: int) -> Float[Array, "... D"]:
    """Rows of an embedding table (float32, low precision or ``quantize_rows``-quantized), as
    float32."""
    if not isinstance(table, Int8Weight):
        rows = table[ids]
        return rows if rows.dtype == jnp.float32 else rows.astype(jnp.float32)
    q = table.q[ids // BLOCK, :, ids % BLOCK].astype(jnp.float32)  # [..., Kp]
    scale = jnp.moveaxis(table.scale[:, ids], 0, -1)  # [..., groups]
    return (q * jnp.repeat(scale, q.shape[-1] // scale.shape[-1], axis=-1))[..., :width]
