"""Would bf16 or int8 weights make decode faster on XLA:CPU? Side by side with float32.

    python -m benchmarks.quantized_dots [--model qwen2.5-coder-1.5b-instruct]

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

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from specjax.platform.probes import XLA_CPU_SETTINGS

SETTINGS = dict(zip(("ynn", "eigen"), XLA_CPU_SETTINGS.values(), strict=True))


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


def quantize(w) -> tuple:
    """float32 [K, N] -> (int8 [K, N], float32 scale [N]): symmetric, per output channel."""
    scale = jnp.maximum(jnp.max(jnp.abs(w), axis=0), 1e-30) / 127
    return jnp.round(w / scale).astype(jnp.int8), scale


def w8a8_dot(x, w, scale, contract: int = 0):
    """int8 x int8 -> int32 dot with a per-row activation scale; ``w``'s dim ``contract`` is K."""
    xs = jnp.max(jnp.abs(x), axis=-1, keepdims=True) / 127 + 1e-30
    xi = jnp.round(x / xs).astype(jnp.int8)
    acc = lax.dot_general(xi, w, (((1,), (contract,)), ((), ())),
                          preferred_element_type=jnp.int32)
    return acc.astype(jnp.float32) * xs * scale


def w8a8(x, ws, scales):
    return [w8a8_dot(x, w, s) for w, s in zip(ws, scales, strict=True)]


def dequant(x, ws, scales):
    return [x @ (w.astype(jnp.float32) * s) for w, s in zip(ws, scales, strict=True)]


def dot_table():
    K, N, count = 1536, 8960, 8
    rng = np.random.default_rng(0)
    wf = [jnp.asarray(rng.standard_normal((K, N)).astype(np.float32) * 0.02) for _ in range(count)]
    wb = [w.astype(jnp.bfloat16) for w in wf]
    wi, scales = zip(*(quantize(w) for w in wf), strict=True)
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


def _w8a8_rows2(x, weight):
    """x [1, K] times an (int8 [N, K], scale) weight through 2 rows: YNNPACK takes 2+ rows,
    and contracts the [N, K] layout fastest."""
    w_t, scale = weight
    return w8a8_dot(jnp.concatenate([x, jnp.zeros_like(x)]), w_t, scale, contract=1)[:1]


def _quantize_t(w) -> tuple:
    q, scale = quantize(jnp.asarray(w))
    return q.T, scale  # a dense [N, K] copy


def whole_model(name: str, reps: int = 10) -> None:
    from benchmarks.timing import matmuls_alone_ms
    from specjax import load_model

    decoder = load_model(name, packed=False).model  # XLA layout: [in, out] arrays to quantize
    f32_ms = matmuls_alone_ms(decoder, 1, reps)
    names = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")
    layers = [{n: _quantize_t(layer.weights()[n]) for n in names} for layer in decoder.layers]
    head = decoder.embed[...].T if decoder.config.tie_embeddings else decoder.lm_head[...]
    head = _quantize_t(head)
    int8_bytes = sum(w.nbytes for layer in layers for w, _ in layer.values()) + head[0].nbytes
    int8_ms = matmuls_alone_ms(decoder, 1, reps, matmul=_w8a8_rows2, layers=layers, head=head)
    print(f"\n{name}, one decode step's weight matmuls alone (median, best over dot settings): "
          f"float32 {f32_ms:.1f} ms ({4 * decoder.config.streamed_params / 1e9:.2f} GB), int8 "
          f"W8A8 {int8_ms:.1f} ms ({int8_bytes / 1e9:.2f} GB): {f32_ms / int8_ms:.2f}x",
          flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="also time one decode step's matmuls, float32 vs W8A8")
    args = parser.parse_args(argv)
    dot_table()
    if args.model:
        whole_model(args.model)


if __name__ == "__main__":
    main()
