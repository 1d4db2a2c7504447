"""Would bf16 or int8 weights make decode faster on XLA:CPU? Side by side with float32.

    python -m experiments.benchmarks.quantized_dots

Eight Qwen2.5-Coder-1.5B MLP-sized matrices (1536 x 8960), 1 row (decode) and 9 rows (a tree
of 1 + 8), each form jitted under both XLA:CPU dot settings (YNNPACK on, Eigen):

- float32 weights (what the decoder ships);
- bf16 x bf16 ``dot_general`` with float32 accumulation;
- int8 x int8 ``dot_general`` with int32 accumulation and per-token activation scales (W8A8);
- int8 weights dequantized to float32 before the dot (weight-only).

Decode reads the weights once per token, so a 2-4x smaller weight format could only pay off if
XLA streams it without materialising a float copy; the table says whether it does.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

SETTINGS = {"ynn": None, "eigen": {"xla_cpu_experimental_ynn_fusion_type": ""}}


def best_ms(f, *args, reps: int = 10) -> float:
    jax.block_until_ready(f(*args))
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        jax.block_until_ready(f(*args))
        times.append(time.perf_counter() - t)
    return 1e3 * min(times)


def f32(x, ws):
    return [x @ w for w in ws]


def bf16(x, ws):
    return [lax.dot_general(x.astype(jnp.bfloat16), w, (((1,), (0,)), ((), ())),
                            preferred_element_type=jnp.float32) for w in ws]


def w8a8(x, ws, scales):
    out = []
    for w, s in zip(ws, scales, strict=True):
        xs = jnp.max(jnp.abs(x), axis=-1, keepdims=True) / 127
        xi = jnp.round(x / xs).astype(jnp.int8)
        acc = lax.dot_general(xi, w, (((1,), (0,)), ((), ())), preferred_element_type=jnp.int32)
        out.append(acc.astype(jnp.float32) * xs * s)
    return out


def dequant(x, ws, scales):
    return [x @ (w.astype(jnp.float32) * s) for w, s in zip(ws, scales, strict=True)]


def main():
    K, N, count = 1536, 8960, 8
    rng = np.random.default_rng(0)
    wf = [jnp.asarray(rng.standard_normal((K, N)).astype(np.float32) * 0.02) for _ in range(count)]
    wb = [w.astype(jnp.bfloat16) for w in wf]
    scales = [jnp.max(jnp.abs(w), axis=0) / 127 for w in wf]
    wi = [jnp.round(w / s).astype(jnp.int8) for w, s in zip(wf, scales, strict=True)]
    print("| rows | dots | float32 ms | bf16 x bf16 | int8 W8A8 | int8 dequant |")
    print("|---|---|---|---|---|---|")
    for rows in (1, 9):
        x = jnp.asarray(rng.standard_normal((rows, K)).astype(np.float32))
        for name, opts in SETTINGS.items():
            jit = lambda f, o=opts: jax.jit(f, compiler_options=o)  # noqa: E731
            base = best_ms(jit(f32), x, wf)
            cells = [best_ms(jit(bf16), x, wb), best_ms(jit(w8a8), x, wi, scales),
                     best_ms(jit(dequant), x, wi, scales)]
            print(f"| {rows} | {name} | {base:.1f} | " + " | ".join(
                f"{ms:.1f} ({base / ms:.2f}x)" for ms in cells) + " |", flush=True)


if __name__ == "__main__":
    main()
