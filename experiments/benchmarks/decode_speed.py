"""Decode speed of the JAX decoder on this CPU against its float32 memory-bandwidth floor.

    python -m experiments.benchmarks.decode_speed [--models smollm2-135m-instruct ...]

One decode step must read every weight once, so weight bytes / memory bandwidth is a floor on
its latency (the roofline argument, Williams et al. 2009; for LLM decoding see Leviathan et al.
2023, §1: "memory bandwidth" bound). Speculative decoding pays off only if scoring a tree of
L+1 tokens costs about one decode step, which is why the 9-node tree score is timed too.

Measured, per model: decode ms/token (one token through ``decode``, cache filled with a
128-token prompt), tree-score ms for K=1, L=8 (9 nodes) and K=4, L=2 (9 nodes), prefill of 128
tokens; each the median of ``--reps`` timed calls after warm-up. Bandwidth: a large NumPy array
copy, counting bytes read + bytes written.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from specjax.models.loader import MODEL_NAMES, load_model

PROMPT = 128


def copy_bandwidth(gib: float = 1.0, reps: int = 7) -> float:
    """GB/s of ``np.copyto`` on a ``gib`` GiB float32 array (read + write bytes), best of reps."""
    src = np.ones(int(gib * (1 << 30)) // 4, np.float32)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t)
    return 2 * src.nbytes / best / 1e9


def timed(fn, reps: int, warmup: int = 3) -> float:
    """Median wall milliseconds of ``fn()`` (which blocks on its result) after warm-up."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1e3 * statistics.median(times)


def bench_model(name: str, reps: int, max_len: int) -> dict:
    model = load_model(name)
    peak_rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # KiB -> ~GB
    jp = model.passes
    V = model.vocab_size
    prompt = jnp.asarray(np.random.default_rng(0).integers(0, V, PROMPT), jnp.int32)
    box = {}

    def prefill():
        cache = jp.init_cache(max_len, PROMPT)
        jax.block_until_ready(cache)
        t = time.perf_counter()
        logits, box["cache"] = jp.prefill(prompt, PROMPT, cache)
        jax.block_until_ready(box["cache"])
        box.setdefault("prefill", []).append(time.perf_counter() - t)

    for _ in range(reps + 2):  # the cache allocation stays outside the timed region
        prefill()
    prefill_ms = 1e3 * statistics.median(box["prefill"][2:])

    cache = jp.init_cache(max_len, 16)
    _, cache = jp.prefill(prompt, PROMPT, cache)
    state = {"cache": cache}
    token = jnp.int32(7)

    def decode():
        logits, state["cache"] = jp.decode(token, state["cache"])
        logits.block_until_ready()

    decode_ms = timed(decode, reps)

    def tree(K, L):
        drafts = jnp.asarray(np.random.default_rng(K).integers(0, V, (K, L)), jnp.int32)

        def run():
            p, state["cache"] = jp.score_tree(token, drafts, state["cache"])
            p.block_until_ready()

        return timed(run, reps)

    tree18, tree42 = tree(1, 8), tree(4, 2)
    weight_bytes = 4 * model.config.num_params
    return dict(
        name=name,
        params_m=weight_bytes / 4e6,
        decode_ms=decode_ms,
        tree_1x8_ms=tree18,
        tree_4x2_ms=tree42,
        prefill128_ms=prefill_ms,
        weight_gb=weight_bytes / 1e9,
        peak_rss_gb=peak_rss_gb,
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODEL_NAMES)[::-1], choices=MODEL_NAMES)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--max-len", type=int, default=1024)
    args = parser.parse_args()
    rows = []
    for name in args.models:
        rows.append(bench_model(name, args.reps, args.max_len))
        print(rows[-1], flush=True)
    # After the models: the 2 GiB of copy buffers must not count in their peak RSS.
    bw = copy_bandwidth()
    print(
        f"memory bandwidth (numpy copy, read+write): {bw:.1f} GB/s; cores: {os.cpu_count()}; "
        f"load average: {os.getloadavg()[0]:.1f}; cache max_len={args.max_len}"
    )
    cols = (
        "model",
        "params",
        "decode ms",
        "floor ms",
        "floor/decode",
        "tree 1x8 ms",
        "tree/decode",
        "tree 4x2 ms",
        "prefill-128 ms",
        "peak RSS so far / f32 weights",
    )
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        floor = 1e3 * r["weight_gb"] / bw
        print(
            f"| {r['name']} | {r['params_m']:.0f}M | {r['decode_ms']:.1f} | {floor:.1f} | "
            f"{floor / r['decode_ms']:.2f} | {r['tree_1x8_ms']:.1f} | "
            f"{r['tree_1x8_ms'] / r['decode_ms']:.2f} | {r['tree_4x2_ms']:.1f} | "
            f"{r['prefill128_ms']:.0f} | {r['peak_rss_gb']:.2f} / {r['weight_gb']:.2f} GB |"
        )


if __name__ == "__main__":
    main()
