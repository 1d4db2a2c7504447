"""Batched speculative decoding on a roofline: when does speculation stop paying? [DERIVED]

Leviathan's f(k) assumes verifying k + 1 positions costs one target forward, which holds only
while a forward is memory bound. With batch B the verify pass processes B·(k+1) tokens; once that
crosses the roofline ridge n* = F·b/(2·BW) the pass becomes compute bound and its time grows
linearly (docs/theory.md).

Model (per decoding step, t₀ = one memory-bound target forward):
- AR step:      t₀ · max(1, B/n*)
- draft step:   c · t₀ · max(1, B/n*)   (draft shares the ridge; c = draft/target bytes there)
- verify pass:  t₀ · max(1, B(k+1)/n*)
so S(B, k) = E[n](α, k)·max(1, B/n*) / (k·c·max(1, B/n*) + max(1, B(k+1)/n*)), which is
Leviathan's f for B(k+1) <= n* and < 1 for every k >= 1 once B >= n*: speculation off.

The ridge ignores KV-cache bytes and attention FLOPs, so it upper-bounds the memory-bound batch.
Hardware numbers are vendor datasheet values [2ND], not measurements.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from specjax.theory._arguments import (
    check_alpha,
    check_int,
    check_k,
    check_positive,
    scalar_or_array,
)
from specjax.theory.leviathan import expected_tokens


@dataclass(frozen=True, kw_only=True)
class Accelerator:
    name: str
    peak_flops: float  # dense BF16 FLOP/s
    bandwidth: float  # HBM bytes/s


# 989 TFLOP/s dense BF16 (1,979 with 2:4 sparsity); HBM3 3.35 TB/s, H200 HBM3e 4.8 TB/s.
H100_SXM = Accelerator(name="H100 SXM", peak_flops=989e12, bandwidth=3.35e12)
H200 = Accelerator(name="H200", peak_flops=989e12, bandwidth=4.8e12)


def ridge_tokens(peak_flops, bandwidth, bytes_per_param=2.0):
    """n* = F·b / (2·BW): tokens per forward at which weight reads and FLOPs take equal time."""
    F = check_positive(peak_flops, "peak_flops")
    BW = check_positive(bandwidth, "bandwidth")
    b = check_positive(bytes_per_param, "bytes_per_param")
    return scalar_or_array(F * b / (2 * BW))


def step_time(n_tokens, params, *, peak_flops, bandwidth, bytes_per_param=2.0):
    """Roofline time of one forward over n tokens: max(P·b/BW, 2·P·n/F) seconds."""
    n = check_positive(n_tokens, "n_tokens")
    P = check_positive(params, "params")
    F = check_positive(peak_flops, "peak_flops")
    BW = check_positive(bandwidth, "bandwidth")
    b = check_positive(bytes_per_param, "bytes_per_param")
    return scalar_or_array(np.maximum(P * b / BW, 2 * P * n / F))


def _step_costs(batch, alpha, k, c, ridge):
    B = check_positive(batch, "batch")
    a, k, c = check_alpha(alpha), check_k(k), check_positive(c, "c")
    n_star = check_positive(ridge, "ridge")
    ar = np.maximum(1.0, B / n_star)
    spec = k * c * ar + np.maximum(1.0, B * (k + 1) / n_star)
    return B, np.asarray(expected_tokens(a, k)), ar, spec


def goodput(batch, alpha, k, c, *, ridge):
    """Emitted tokens per t₀ for the whole batch: B·E[n] / (k·c·max(1, B/n*) + verify time).

    k = 0 is plain autoregressive decoding, B / max(1, B/n*).
    """
    B, n_mean, _, spec = _step_costs(batch, alpha, k, c, ridge)
    return scalar_or_array(B * n_mean / spec)


def batch_speedup(batch, alpha, k, c, *, ridge):
    """S(B, k): goodput over autoregressive goodput at the same batch (docs/theory.md)."""
    _, n_mean, ar, spec = _step_costs(batch, alpha, k, c, ridge)
    return scalar_or_array(n_mean * ar / spec)


def k_policy(alpha: float, c: float, batch_sizes: Iterable[int], *,
             ridge: float | None = None, k_max: int = 32) -> dict[int, int]:
    """{B: k*(B)}: the integer lookahead in [0, k_max] maximising S(B, k); 0 = speculation off.

    Exhaustive over k (S is cheap); ties go to the smaller k. ``ridge`` defaults to the H100 SXM
    BF16 ridge (≈295 tokens).
    """
    check_alpha(alpha)
    check_positive(c, "c")
    k_max = check_int(k_max, "k_max", 0)
    if ridge is None:
        ridge = ridge_tokens(H100_SXM.peak_flops, H100_SXM.bandwidth)
    ks = np.arange(k_max + 1)
    policy = {}
    for B in batch_sizes:
        B = check_int(B, "batch_sizes entries", 1)
        policy[B] = int(np.argmax(batch_speedup(B, alpha, ks, c, ridge=ridge)))
    return policy
