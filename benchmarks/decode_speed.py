"""Decoder passes against this machine's roofline, measured in the same run.

    python -m benchmarks.decode_speed [--models smollm2-135m-instruct ...]
        [--reps 10] [--max-len 512] [--out paper_repro/results/decode_speed_cpu.md]

The roofline (Williams et al. 2009) of a pass that runs ``t`` tokens through a model of ``P``
float32 parameters is ``max(4 P / bandwidth, 2 P t / matmul FLOP/s)``: every weight is read
once, and every weight does one multiply-add per token. ``P`` is ``ModelConfig.streamed_params``:
an untied input embedding table is indexed, not read (one row per token), so it is left out.
Both machine limits are measured here, before the models, with all cores:

- bandwidth: a copy of a 1 GiB float32 array split over one thread per core (read + write
  bytes, best of several), the STREAM "copy" kernel;
- FLOP/s: a large jitted float32 matmul (best of the compile settings the decoder may use);
- the pure-read ceiling: a max over 1 GiB split the same way. It is not the roofline, but it
  is printed beside it ("read ceiling / best"): on some CPUs reads alone stop well below the
  copy's bandwidth (27.5 vs 41.6 GB/s on a 2-core Intel Xeon), which no weight-streaming pass
  can beat.

Passes: the decode loop's own functions (``specjax.models.passes``: ``prefill``, ``decode``,
``score_tree``, as ``specjax.decode.engine`` calls them), jitted one at a time (``JittedPasses``),
each the median of ``--reps`` calls after warm-up with the cache holding a 128-token prompt:
decode (1 token) at batch 1, 4 and 16 (``jax.vmap``, as the engine batches), tree scoring at
(K, L) = (1, 8), (4, 2), (3, 8), (4, 8) (random drafts, so all 1 + K·L nodes are distinct and
the trie cannot shrink the tree), and prefill of 128 tokens. Each row prints
measured ms, roofline ms and ``roofline / measured`` (1.0 = at the limit). Every pass is run
under each compile setting in ``SETTINGS`` side by side, and the table marks the faster one.
float32 models run once per ``--layouts``: the layer matmuls through the packed CPU kernel
(``load_model``'s default on CPU) and through XLA's dot (rows marked "XLA dot").
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import command_line
from benchmarks.timing import matmuls_alone_ms, median_ms
from specjax import load_model
from specjax.models.loader import MODEL_NAMES
from specjax.models.passes import JittedPasses
from specjax.models.quant import WEIGHT_FORMATS, pass_rows
from specjax.platform import hardware, provenance
from specjax.platform.probes import XLA_CPU_SETTINGS, copy_bandwidth, matmul_flops, read_bandwidth

PROMPT = 128
TREES = ((1, 8), (4, 2), (3, 8), (4, 8))
BATCHES = (4, 16)
SETTINGS = XLA_CPU_SETTINGS  # measured side by side


#: ``--weights`` value: int8 weights with int8 rows in every pass (``decode_activations``).
INT8_ROWS = "int8-rows"


def bench_passes(jp: JittedPasses, V: int, reps: int, max_len: int) -> dict:
    """Measured (compile s, ms) per pass name for one JittedPasses."""
    rng = np.random.default_rng(0)
    prompt = jnp.asarray(rng.integers(0, V, PROMPT), jnp.int32)
    out = {}

    def prefill():
        cache = jp.init_cache(max_len, PROMPT)
        jax.block_until_ready(jp.prefill(cache, prompt, PROMPT))

    out["prefill 128"] = median_ms(prefill, max(3, reps // 2))
    # The autoregressive loop's scratch is the root alone (``DecodeLoop.target_scratch``).
    base = jp.with_scratch(jp.prefill(jp.init_cache(max_len, PROMPT), prompt, PROMPT), 1)
    box = {"cache": base}
    token = jnp.int32(7)

    def decode():
        logits, box["cache"] = jp.decode(box["cache"], token)
        logits.block_until_ready()

    out["decode"] = median_ms(decode, reps)
    for K, L in TREES:
        drafts = jnp.asarray(rng.integers(0, V, (K, L)), jnp.int32)
        box["cache"] = jp.with_scratch(box["cache"], 1 + K * L)

        def tree(drafts=drafts):
            p, box["cache"], _ = jp.score_tree(box["cache"], token, drafts)
            p.block_until_ready()

        out[f"tree {K}x{L}"] = median_ms(tree, reps)
    box["cache"] = jp.with_scratch(box["cache"], 1)
    for B in BATCHES:
        caches = jax.tree.map(lambda x, B=B: jnp.broadcast_to(x, (B, *x.shape)).copy(),
                              box["cache"])
        tokens = jnp.full((B,), 7, jnp.int32)
        box[B] = caches

        def batch(B=B, tokens=tokens):
            logits, box[B] = jp.decode_batch(box[B], tokens)
            logits.block_until_ready()

        out[f"decode B={B}"] = median_ms(batch, max(3, reps // 2))
        del box[B]
    return out


def tokens_of(pass_name: str) -> int:
    if pass_name.startswith("tree"):
        K, L = map(int, pass_name.split()[1].split("x"))
        return 1 + K * L
    if pass_name.startswith("prefill"):
        return int(pass_name.split()[1])
    if "B=" in pass_name:
        return int(pass_name.split("B=")[1])
    return 1


def render(timings: list[dict], settings: list[str], bw: float, flops: float, read_bw: float
           ) -> tuple[list[str], list[dict]]:
    """Table rows and records from raw timings (model, params, pass, ms/compile per setting,
    and ``ms_matmuls``: the pass's matmuls alone, when measured)."""
    rows, records = [], []
    for t in timings:
        P, tokens = t["params"], tokens_of(t["pass_"])
        weight_bytes = t.get("bytes_per_param", 4) * P
        read_s = weight_bytes / (bw * 1e9)
        compute_s = 2 * P * tokens / flops
        roof_ms = 1e3 * max(read_s, compute_s)
        # The same roofline with the pure-read ceiling in place of the copy's bandwidth.
        read_roof_ms = 1e3 * max(weight_bytes / (read_bw * 1e9), compute_s)
        bound = "bandwidth" if read_s >= compute_s else "compute"
        ms = {s: t[f"ms_{s}"] for s in settings}
        best = min(ms, key=ms.get)
        mm = t.get("ms_matmuls")
        records.append({**t, "tokens": tokens, "roofline_ms": roof_ms, "bound": bound,
                        "best": best, "ratio": roof_ms / ms[best],
                        "read_ratio": read_roof_ms / ms[best],
                        "matmuls_ratio": None if mm is None else mm / ms[best]})
        cells = " | ".join(f"**{ms[s]:.1f}**" if s == best else f"{ms[s]:.1f}" for s in settings)
        mm_cells = "- | -" if mm is None else f"{mm:.1f} | {mm / ms[best]:.2f}"
        rows.append(f"| {t['model']} | {t['pass_']} | {tokens} | {cells} | {roof_ms:.1f} "
                    f"({bound}) | {roof_ms / ms[best]:.2f} | {read_roof_ms / ms[best]:.2f} | "
                    f"{mm_cells} |")
    return rows, records


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODEL_NAMES)[::-1], choices=MODEL_NAMES)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--max-len", type=int, default=512,
                        help="committed KV slots (the engine sizes its cache to prompt + new)")
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--weights", nargs="+", default=["float32"],
                        choices=[*WEIGHT_FORMATS, INT8_ROWS],
                        help="int8 rows are judged against their own bytes (1 per parameter); "
                             f"{INT8_ROWS}: int8 weights with int8 rows in every pass (W8A8, "
                             "decode_activations=int8)")
    parser.add_argument("--layouts", nargs="+", default=["packed", "xla"],
                        choices=["packed", "xla"],
                        help="float32 layer matmuls through the packed CPU kernel (load_model's "
                             "default here) and/or XLA's dot, as separate rows")
    parser.add_argument("--out", default="paper_repro/results/decode_speed_cpu.md")
    parser.add_argument("--rejudge", metavar="JSON",
                        help="re-measure the machine limits only and re-render the timings of an "
                             "earlier run's JSON against the higher of the old and new limits")
    args = parser.parse_args()

    # The limits are measured before and after the models and the higher value is kept: a busy
    # moment can only lower a measured limit, and a lower limit would flatter every ratio.
    bw, flops, read_bw = copy_bandwidth(), matmul_flops(), read_bandwidth()
    print(f"machine limits now: {bw:.1f} GB/s copy, {read_bw:.1f} GB/s read, "
          f"{flops / 1e9:.1f} GFLOP/s", flush=True)
    machine, commit = hardware.describe(), provenance.commit()
    if args.rejudge:
        old = json.loads(Path(args.rejudge).read_text())
        commit = old.get("commit", "not recorded")
        machine = (f"{old.get('hardware', 'not recorded')} (the timings); limits re-measured on "
                   f"{machine}")
        timings, settings = old["timings"], old["settings"]
        bw, flops = max(bw, old["bandwidth_gbs"]), max(flops, 1e9 * old["matmul_gflops"])
        read_bw = max(read_bw, old.get("read_bandwidth_gbs", 0.0))
        max_len, reps = old["max_len"], old["reps"]
    else:
        settings, max_len, reps, timings = args.settings, args.max_len, args.reps, []
        runs = [(n, w, lay) for n in args.models for w in args.weights
                for lay in (args.layouts if w == "float32" else ["packed"])]
        for name, weights, layout in runs:
            rows8 = weights == INT8_ROWS
            model = load_model(name, weights="int8" if rows8 else weights,
                               packed=layout == "packed",
                               **(dict(prefill_activations="int8", decode_activations="int8")
                                  if rows8 else {}))
            label = (f"{name} (int8, int8 rows)" if rows8 else
                     f"{name} ({weights})" if weights != "float32" else
                     f"{name} (XLA dot)" if layout == "xla" else name)
            measured = {}
            for s in settings:
                print(f"{label}: compiling and timing the passes with settings={s} ...", flush=True)
                jp = JittedPasses(model.model, SETTINGS[s])
                measured[s] = bench_passes(jp, model.vocab_size, reps, max_len)
                del jp
            for pass_name in measured[settings[0]]:
                timings.append(dict(model=label, params=model.config.streamed_params,
                                    bytes_per_param=4 if weights == "float32" else 1,
                                    pass_=pass_name,
                                    **{f"ms_{s}": measured[s][pass_name][1] for s in settings},
                                    **{f"compile_s_{s}": measured[s][pass_name][0]
                                       for s in settings}))
                print(timings[-1], flush=True)
            print(f"{label}: timing the matmuls alone ...", flush=True)
            with pass_rows("int8" if rows8 else "float32"):  # read as the alone chain traces
                alone = {n: matmuls_alone_ms(model.model, n, reps)
                         for n in sorted({tokens_of(t["pass_"]) for t in timings
                                            if t["model"] == label})}
            for t in timings:
                if t["model"] == label:
                    t["ms_matmuls"] = alone[tokens_of(t["pass_"])]
            del model
        bw, flops = max(bw, copy_bandwidth()), max(flops, matmul_flops())
        read_bw = max(read_bw, read_bandwidth())
    head = (f"Machine: {machine}; all-core copy bandwidth {bw:.1f} GB/s (read + write), the "
            f"roofline's bandwidth; all-core read-only stream {read_bw:.1f} GB/s (a max "
            f"reduction; \"read ceiling / best\" is the roofline with it in place of the copy's "
            f"bandwidth: no pass that only reads its weights can beat it here); "
            f"fp32 matmul {flops / 1e9:.1f} GFLOP/s (2048^3, jitted); both the higher of the "
            f"measurements before and after the passes. KV cache {max_len} committed slots, "
            f"128-token prompt; median of {reps} calls. \"matmuls alone\": the same weights "
            f"and row count through nothing but each layer's seven dots and the head "
            f"(`matmuls_alone_ms`), the fastest any decoder built on those dots can run here; "
            f"matmuls / best near 1 means the rest of the pass costs little.")
    rows, records = render(timings, settings, bw, flops, read_bw)
    cols = ["model", "pass", "tokens", *[f"ms ({s})" for s in settings],
            "roofline ms", "roofline / best", "read ceiling / best", "matmuls alone ms",
            "matmuls / best"]
    table = "\n".join(["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols), *rows])
    text = (f"# Decoder passes vs this machine's roofline\n\nGenerated by "
            f"`{command_line('benchmarks.decode_speed')}` at commit {commit} (the timings')."
            f"\n\n{head}\n\n{table}\n")
    print("\n" + head + "\n\n" + table)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    out.with_suffix(".json").write_text(json.dumps(
        dict(hardware=machine, commit=commit, bandwidth_gbs=bw, read_bandwidth_gbs=read_bw,
             matmul_gflops=flops / 1e9,
             max_len=max_len, reps=reps, settings=settings, timings=timings, rows=records),
        indent=1))
    print(f"wrote {out} and {out.with_suffix('.json')}")


if __name__ == "__main__":
    main()
