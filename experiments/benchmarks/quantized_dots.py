"""Would bf16 or int8 weights make decode faster on XLA:CPU? Side by side with float32.

    python -m experiments.benchmarks.quantized_dots [--model qwen2.5-coder-1.5b-instruct]

Eight Qwen2.5-Coder-1.5B MLP-sized matrices (1536 x 8960), 1 row (decode) and 9 rows (a tree
of 1 + 8), each form jitted under both XLA:CPU dot settings (YNNPACK on, Eigen):

- float32 weights (what the decoder ships);
- bf16 x bf16 ``dot_general`` with float32 accumulation;
- int8 x int8 ``dot_general`` with int32 accumulation and per-token activation scales (W8A8);
- int8 weights dequantized to float32 before the dot (weight-only).

Decode reads the weights once per token, so a 2-4x smaller weight format could only pay off if
XLA streams it without materialising a float copy; the table says whether it does.

YNNPACK takes a dot only with 2 or more rows; a 1-row int8 or bf16 dot falls back to a path
~10x slower than float32. So the whole-model part (``--model``) pads the decode row to 2 and
runs every weight matmul of one decode step (the seven per layer and the head, nothing else)
as float32 and as W8A8 with per-output-channel weight scales, side by side: the speed-up of
the matmuls alone bounds what an int8 decoder could gain end to end (attention, norms and the
loop stay float32 and do not shrink).
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


def _w8a8_rows2(x, w_t, scale):
    """x [1, K] times int8 w_t [N, K] (contracting K, which YNNPACK runs fastest) via 2 rows."""
    xp = jnp.concatenate([x, jnp.zeros_like(x)])
    xs = jnp.max(jnp.abs(xp), axis=-1, keepdims=True) / 127 + 1e-30
    xi = jnp.round(xp / xs).astype(jnp.int8)
    acc = lax.dot_general(xi, w_t, (((1,), (1,)), ((), ())), preferred_element_type=jnp.int32)
    return (acc.astype(jnp.float32) * xs * scale)[:1]


def _quantize_t(w) -> tuple:
    """float32 [K, N] -> (int8 [N, K], float32 scale [N]): symmetric, per output channel."""
    w = np.asarray(w)
    scale = np.maximum(np.abs(w).max(axis=0), 1e-30) / 127
    return jnp.asarray(np.round(w / scale).astype(np.int8).T.copy()), jnp.asarray(scale)


def whole_model(name: str, reps: int = 10) -> None:
    from experiments.benchmarks.decode_speed import matmuls_alone_ms
    from specjax.models.loader import load_model

    decoder = load_model(name).model
    f32_ms = matmuls_alone_ms(decoder, 1, reps)
    names = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")
    layers = [{n: _quantize_t(layer.weights()[n]) for n in names} for layer in decoder.layers]
    head = decoder.embed[...] if decoder.config.tie_embeddings else decoder.lm_head[...].T
    head = _quantize_t(np.asarray(head).T)
    int8_bytes = sum(w.nbytes for layer in layers for w, _ in layer.values()) + head[0].nbytes

    def chain(x, layers, head):
        mm = lambda h, ws: _w8a8_rows2(h, *ws)  # noqa: E731
        for w in layers:
            q, k, v = mm(x, w["wq"]), mm(x, w["wk"]), mm(x, w["wv"])
            x = x + mm(q + 1e-3 * (k.sum() + v.sum()), w["wo"])
            x = x + mm(jax.nn.silu(mm(x, w["w_gate"])) * mm(x, w["w_up"]), w["w_down"])
        return mm(x, head)

    x = jnp.full((1, decoder.config.hidden_size), 0.01, jnp.float32)
    int8_ms = min(best_ms(jax.jit(chain, compiler_options=o), x, layers, head, reps=reps)
                  for o in SETTINGS.values())
    print(f"\n{name}, one decode step's weight matmuls alone (best over dot settings): "
          f"float32 {f32_ms:.1f} ms ({4 * decoder.config.streamed_params / 1e9:.2f} GB), int8 W8A8 "
          f"{int8_ms:.1f} ms ({int8_bytes / 1e9:.2f} GB): {f32_ms / int8_ms:.2f}x", flush=True)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="also time one decode step's matmuls, float32 vs W8A8")
    args = parser.parse_args()
    main()
    if args.model:
        whole_model(args.model)
