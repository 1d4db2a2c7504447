"""Timers the benchmarks share: a jitted call's median, a pass's weight matmuls alone, and the
API's per-token decode time with prefill taken out.

The machine's own limits (bandwidth, FLOP/s) are ``specjax.platform.probes``; these time
specjax's passes against them, so every benchmark measures a pass the same way.
"""

from __future__ import annotations

import statistics
import time

import jax
import jax.numpy as jnp

import specjax
from specjax.models.layers import gate_up_matmuls, qkv_matmuls
from specjax.models.quant import linear
from specjax.platform.probes import XLA_CPU_SETTINGS


def median_ms(fn, reps: int, warmup: int = 2) -> tuple[float, float]:
    """(first-call seconds, i.e. compile + one run; median ms of ``reps`` calls after warm-up)."""
    t = time.perf_counter()
    fn()
    first = time.perf_counter() - t
    for _ in range(warmup - 1):
        fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return first, 1e3 * statistics.median(times)


def matmuls_alone_ms(decoder, tokens: int, reps: int, *, matmul=linear, layers=None,
                     head=None) -> float:
    """Median ms of ONLY a pass's weight matmuls: the same arrays, ``tokens`` rows, the seven
    dots of every layer and the head, nothing else (best over ``XLA_CPU_SETTINGS``).

    No decoder built from these dots can beat this on this machine, so measured / this separates
    the decoder's own overhead (attention, norms, cache writes) from the dot library's speed.
    ``matmul(x, w)`` with ``layers`` / ``head`` in its own weight format times another kind of
    dot on the same chain (``quantized_dots``: W8A8); by default the decoder's own weights and
    head as it runs them (``linear``: the kernel for packed or int8 weights, XLA's dot else; a
    tied XLA head contracted against the embedding's rows).
    """
    if layers is None:
        layers = [layer.weights() for layer in decoder.layers]
    head_matmul = matmul
    if head is None and decoder.kernel_head() is not None:
        head, head_matmul = decoder.kernel_head(), linear
    elif head is None:
        head = decoder.embed[...] if decoder.config.tie_embeddings else decoder.lm_head[...]
        if decoder.config.tie_embeddings:
            def head_matmul(x, e):
                return jax.lax.dot_general(x, e, (((1,), (1,)), ((), ())))

    def chain(x, layers, head):
        for w in layers:  # the fused matmuls as the decoder runs them (layers.FUSED)
            q, k, v = qkv_matmuls(x, w, decoder.config, matmul)
            x = x + matmul(q + 1e-3 * (k.sum() + v.sum()), w["wo"])  # keep k, v alive
            gate, up = gate_up_matmuls(x, w, matmul)
            x = x + matmul(jax.nn.silu(gate) * up, w["w_down"])
        return head_matmul(x, head)

    x = jnp.full((tokens, decoder.config.hidden_size), 0.01, jnp.float32)
    best = float("inf")
    for options in XLA_CPU_SETTINGS.values():
        f = jax.jit(chain, compiler_options=options)
        _, ms = median_ms(lambda f=f: f(x, layers, head).block_until_ready(), reps)
        best = min(best, ms)
    return best


def per_token_ms(model, ids, tokens: int, reps: int = 3) -> tuple[float, int]:
    """Median over ``reps`` of ms per decoded token, greedy, batch 1, with prefill removed by
    subtracting a 1-token run of the same prompt (``generate``'s wall time excludes
    compilation); also the number of tokens the last run decoded."""
    greedy = specjax.Sampling(temperature=0.0)
    per_token = []
    for _ in range(reps):
        one = specjax.generate(model, [ids], sampling=greedy, max_new_tokens=1, progress=False)
        run = specjax.generate(model, [ids], sampling=greedy, max_new_tokens=tokens,
                               progress=False)
        n = run.summary["new_tokens"]
        per_token.append(1e3 * (run.summary["wall_time_s"] - one.summary["wall_time_s"])
                         / max(n - 1, 1))
    return statistics.median(per_token), n
