"""int8 weights with int8 activations (W8A8) for the decoder's matmuls.

Why this form: XLA:CPU does not fuse a weight-only dequantize into its dot, so int8 or bf16
weights converted to float32 first are ~9x slower than float32 (``../shared/PERF_NOTES.md``).
An int8 x int8 ``dot_general`` with int32 accumulation never builds a float copy of the weights,
and XLA:CPU hands it to YNNPACK, which reads the int8 weights directly
(``experiments/benchmarks/quantized_dots.py``). YNNPACK only takes dots of two or more rows,
so a single row is padded to two; the weights are stored ``[out, in]`` because YNNPACK
contracts that layout fastest.

Quantization (Dettmers et al. 2022, "LLM.int8()", §3.1 vector-wise quantization, without the
outlier decomposition): symmetric absmax scales per output channel for the weights, computed
once at load, and per row (token) for the activations, computed on the fly. The target's law
changes slightly; ``experiments/benchmarks/int8_agreement.py`` measures by how much.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int, Int8

#: Allowed values of the ``weights`` option of ``load_model`` / the ``model`` config group.
WEIGHT_FORMATS = ("float32", "int8")


class Int8Weight(NamedTuple):
    """A float32 ``[in, out]`` matrix as int8 ``[out, in]`` plus one float32 scale per output."""

    q: Int8[Array, "out in"]
    scale: Float[Array, " out"]


def quantize(w: Float[np.ndarray, "in out"]) -> Int8Weight:
    """Symmetric per-output-channel absmax quantization of a ``y = x @ w`` weight."""
    w = np.asarray(w, np.float32)
    scale = np.maximum(np.abs(w).max(axis=0), np.finfo(np.float32).tiny) / 127.0
    q = np.clip(np.round(w / scale), -127, 127).astype(np.int8)
    return Int8Weight(jnp.asarray(q.T.copy()), jnp.asarray(scale, jnp.float32))


def quantize_rows(table: Float[np.ndarray, "V D"]) -> Int8Weight:
    """An embedding table ``[V, D]`` whose rows are the outputs of a tied head (``h @ E.T``):
    already in ``[out, in]`` layout, one scale per row."""
    table = np.asarray(table, np.float32)
    scale = np.maximum(np.abs(table).max(axis=1), np.finfo(np.float32).tiny) / 127.0
    q = np.clip(np.round(table / scale[:, None]), -127, 127).astype(np.int8)
    return Int8Weight(jnp.asarray(q), jnp.asarray(scale, jnp.float32))


def linear(x: Float[Array, "N K"], w) -> Float[Array, "N M"]:
    """``x @ w`` for a float32 ``w``; W8A8 for an ``Int8Weight``."""
    if not isinstance(w, Int8Weight):
        return x @ w
    N = x.shape[0]
    if N < 2:  # YNNPACK takes 2+ rows; a 1-row int8 dot runs ~10x slower elsewhere
        x = jnp.concatenate([x, jnp.zeros((2 - N, x.shape[1]), x.dtype)])
    x_scale = jnp.max(jnp.abs(x), axis=-1, keepdims=True) / 127.0
    x_scale = jnp.maximum(x_scale, np.finfo(np.float32).tiny)
    xq = jnp.clip(jnp.round(x / x_scale), -127, 127).astype(jnp.int8)
    acc = jax.lax.dot_general(xq, w.q, (((1,), (1,)), ((), ())),
                              preferred_element_type=jnp.int32)
    return (acc.astype(jnp.float32) * x_scale * w.scale)[:N]


def rows(table, ids: Int[Array, "..."]) -> Float[Array, "... D"]:
    """Rows of an embedding table, float32 or ``quantize_rows``-quantized."""
    if not isinstance(table, Int8Weight):
        return table[ids]
    return table.q[ids].astype(jnp.float32) * table.scale[ids][..., None]
