"""This machine's limits, measured: memory bandwidth (copy and read-only) and matmul FLOP/s.

Performance is judged against the machine's own roofline measured in the same run (Williams et
al. 2009), because VM kinds differ by up to 3.5x: a pass that reads ``B`` bytes and does ``F``
multiply-adds cannot beat ``max(B / bandwidth, 2 F / FLOP/s)`` here. Every benchmark that
prints a roofline takes its two limits from these probes.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np

#: XLA:CPU compile settings a decoder may run under. YNNPACK is XLA:CPU's default library for
#: fused dots; "eigen" switches it off (it is faster for few-row matmuls, ``docs/decoder.md``).
XLA_CPU_SETTINGS = {"default": None, "eigen": {"xla_cpu_experimental_ynn_fusion_type": ""}}


def _all_core_seconds(work, size: int, threads: int, reps: int) -> float:
    """Best of ``reps`` wall times of ``work(lo, hi)`` over ``size`` elements split into one
    contiguous part per thread (NumPy releases the GIL in copies and reductions)."""
    edges = np.linspace(0, size, threads + 1).astype(int)
    parts = list(zip(edges[:-1], edges[1:], strict=True))
    best = float("inf")
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(reps):
            t = time.perf_counter()
            list(pool.map(lambda part: work(*part), parts))
            best = min(best, time.perf_counter() - t)
    return best


def copy_bandwidth(threads: int | None = None, gib: float = 1.0, reps: int = 7) -> float:
    """GB/s of a multi-threaded float32 copy (bytes read + written), best of ``reps``: the
    STREAM "copy" kernel, one thread per core."""
    src = np.ones(int(gib * (1 << 30)) // 4, np.float32)
    dst = np.empty_like(src)
    seconds = _all_core_seconds(lambda lo, hi: np.copyto(dst[lo:hi], src[lo:hi]), src.size,
                                threads or os.cpu_count() or 1, reps)
    return 2 * src.nbytes / seconds / 1e9


def read_bandwidth(threads: int | None = None, gib: float = 1.0, reps: int = 7) -> float:
    """GB/s of a multi-threaded float32 read: a max over 1 GiB split over one thread per core.

    A decode step only reads its weights, so this is the pure-read ceiling, reported beside
    the copy figure (which stays the roofline). NumPy's max is a SIMD reduction that keeps up
    with memory: it reads as fast as a hand-written AVX-512 loop did on a 2-core Intel Xeon
    (27-32 GB/s), where ``sum`` (pairwise, ~14 GB/s a thread even from cache) did not. On some
    CPUs the read ceiling is well under the copy figure (reads are bound by each core's
    outstanding misses, a copy's streaming stores are not).
    """
    src = np.ones(int(gib * (1 << 30)) // 4, np.float32)
    seconds = _all_core_seconds(lambda lo, hi: src[lo:hi].max(), src.size,
                                threads or os.cpu_count() or 1, reps)
    return src.nbytes / seconds / 1e9


def matmul_flops(n: int = 2048, reps: int = 5) -> float:
    """FLOP/s of a jitted n x n float32 matmul: the best over ``XLA_CPU_SETTINGS`` (best of
    ``reps``)."""
    a = jnp.asarray(np.random.default_rng(0).standard_normal((n, n)), jnp.float32)
    best = float("inf")
    for options in XLA_CPU_SETTINGS.values():
        f = jax.jit(lambda x: x @ x, compiler_options=options)
        f(a).block_until_ready()
        for _ in range(reps):
            t = time.perf_counter()
            f(a).block_until_ready()
            best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best


__all__ = ["XLA_CPU_SETTINGS", "copy_bandwidth", "matmul_flops", "read_bandwidth"]
