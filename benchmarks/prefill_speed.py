"""Prefill against this machine's compute floor, and what the rest of its time goes to.

    python -m benchmarks.prefill_speed [--models ...] [--weights float32 int8]
        [--activations float32 int8] [--tokens 256 1024 2048] [--reps 2]
        [--out paper_repro/results/prefill_cpu.md]

A prefill runs every prompt token through every layer at once, so it is bound by arithmetic,
not by the weight bytes a decode step reads. Its floor here is the pass's operations over this
machine's peak rate at the precision the prefill computes in: the layers' matmuls (2 per
weight per token; the head is not run, since the last prompt token's logits come from the
first decode step) plus the causal attention (4 x hd per visible (query, key) pair and head).
The peaks are measured on the spot by ``isa_peak.cc`` (register-only chains of one
instruction on every core): float32 FMA for float32 rows and the attention, int8 vpdpbusd
(AVX-512 VNNI) for int8 weights with int8 rows (``prefill_activations="int8"``, W8A8), or the
AMX-INT8 tiles' tdpbusd where the kernel takes them (``kernels.amx``).

int8 weights run both ways (``--activations``): float32 rows (weight-only, the default) and
int8 rows where the CPU has VNNI. Every prefill is ``passes.prefill`` through ``JittedPasses``
(the decode loop's own function),
best of ``--reps`` calls after a warm-up. Beside it, at the same row count: the layers'
matmuls alone (the same weights through the path the prefill takes: XLA's dot on the unpacked
weights, or the packed kernel, per ``kernels.prefill_dot``) and the attention alone (the
kernel at the prefill's shapes, once per layer); "rest" is what the prefill spends besides
those (norms, RoPE, cache writes, unpacking the weights).

XLA's own narrow dots (bf16 x bf16 and int8 x int8 -> int32) are probed too, at 1,024 rows of a
1536 x 8960 matrix, for comparison with the kernels' rates.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import command_line, write_report
from specjax import load_model
from specjax.models import kernels
from specjax.models.layers import attend_cached, gate_up_matmuls, qkv_matmuls
from specjax.models.loader import MODEL_NAMES
from specjax.models.passes import JittedPasses, causal_mask
from specjax.models.quant import ACTIVATIONS, WEIGHT_FORMATS, bulk_rows, linear
from specjax.platform import hardware, provenance

#: /proc/cpuinfo flags that name the CPU's wide and narrow arithmetic (printed when present).
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16",
             "amx_int8")


def instruction_peaks() -> dict[str, float]:
    """``isa_peak.cc``'s rates on every core (G(FL)OP/s): ``float32_fma`` and, with AVX-512
    VNNI, ``int8_vpdpbusd``; compiled here with the system compiler for this CPU."""
    source = Path(__file__).with_name("isa_peak.cc")
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "isa_peak"
        subprocess.run([os.environ.get("CXX", "g++"), "-O3", "-march=native", "-pthread",
                        str(source), "-o", str(exe)], check=True, capture_output=True)
        out = subprocess.run([str(exe), str(os.cpu_count() or 1)], check=True,
                             capture_output=True, text=True).stdout
    return {name: float(rate) for name, rate in (line.split() for line in out.splitlines())}


def best_s(f, reps: int) -> float:
    """Best of ``reps`` calls after one warm-up call (which compiles)."""
    f()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return min(times)


def flops(config, tokens: int) -> tuple[float, float]:
    """(layer matmul FLOPs, causal attention FLOPs) of a prefill of ``tokens`` tokens."""
    c = config
    attention_weights = c.hidden_size * (2 * c.num_heads + 2 * c.num_kv_heads) * c.head_dim
    per_layer = attention_weights + 3 * c.hidden_size * c.intermediate_size
    pairs = tokens * (tokens + 1) / 2
    return (2.0 * per_layer * c.num_layers * tokens,
            4.0 * c.num_layers * c.num_heads * c.head_dim * pairs)


def narrow_rates(rows: int = 1024, k: int = 1536, n: int = 8960, reps: int = 5) -> dict:
    """XLA's own dot rates (GFLOP/s, or GOP/s for int8) at one prefill-sized shape."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    def dot(accumulate):
        return jax.jit(lambda a, b: jnp.matmul(a, b, preferred_element_type=accumulate))

    def int8(a):
        return np.clip(a * 40, -127, 127).astype(np.int8)

    cases = {
        "float32": (dot(jnp.float32), x, w),
        "bf16 x bf16 -> float32": (dot(jnp.float32), x.astype(jnp.bfloat16),
                                   w.astype(jnp.bfloat16)),
        "int8 x int8 -> int32": (dot(jnp.int32), int8(x), int8(w)),
    }
    out = {}
    for name, (f, a, b) in cases.items():
        a, b = jnp.asarray(a), jnp.asarray(b)
        seconds = best_s(lambda f=f, a=a, b=b: f(a, b).block_until_ready(), reps)
        out[name] = 2 * rows * k * n / seconds / 1e9
    return out


def matmuls_alone_s(decoder, tokens: int, reps: int) -> float:
    """The layers' seven dots at ``tokens`` rows as the prefill runs them (``bulk_rows``, with
    the decoder's ``prefill_activations``)."""
    config = decoder.config
    layers = [layer.weights() for layer in decoder.layers]

    def chain(x, layers):
        with bulk_rows(decoder.prefill_activations):
            for w in layers:
                q, k, v = qkv_matmuls(x, w, config, linear)
                x = x + linear(q + 1e-3 * (k.sum() + v.sum()), w["wo"])
                gate, up = gate_up_matmuls(x, w, linear)
                x = x + linear(jax.nn.silu(gate) * up, w["w_down"])
        return x

    f = jax.jit(chain)
    x = jnp.full((tokens, config.hidden_size), 0.01, jnp.float32)
    return best_s(lambda: f(x, layers).block_until_ready(), reps)


def attention_alone_s(config, tokens: int, reps: int) -> float:
    """The cached attention at a prefill's shapes (nothing committed, a causal scratch block),
    once per layer, as the decoder calls it."""
    c = config
    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.standard_normal((tokens, c.num_heads, c.head_dim)), jnp.float32)
    ks = jnp.asarray(rng.standard_normal((c.num_kv_heads, tokens, c.head_dim)), jnp.float32)
    empty = jnp.zeros((c.num_kv_heads, 0, c.head_dim), jnp.float32)
    mask = jnp.asarray(causal_mask(tokens, tokens))
    f = jax.jit(lambda q, ks, m: attend_cached(q, empty, empty, ks, ks, jnp.int32(0), m,
                                               kernel=kernels.available()))
    return c.num_layers * best_s(lambda: f(q, ks, mask).block_until_ready(), reps)


def prefill_s(jp: JittedPasses, V: int, tokens: int, reps: int) -> float:
    prompt = jnp.asarray(np.random.default_rng(1).integers(0, V, tokens), jnp.int32)

    def once():
        cache = jp.init_cache(tokens + 80, tokens)
        jax.block_until_ready(jp.prefill(cache, prompt, tokens))

    return best_s(once, reps)


def label(r: dict) -> str:
    act = r.get("activations")
    return r["weights"] + (f" ({act} rows)" if act in ("int8", "bfloat16") else "")


def render(records: list[dict]) -> str:
    cols = ["model", "weights", "tokens", "prefill s", "floor s (matmuls + attention)",
            "floor / prefill", "matmuls alone s", "matmul rate / peak", "attention alone s",
            "rest s", "prefill / float32 prefill"]
    rows = []
    f32 = {(r["model"], r["tokens"]): r["prefill_s"] for r in records
           if r["weights"] == "float32" and r.get("activations", "float32") == "float32"}
    for r in records:
        base = f32.get((r["model"], r["tokens"]))
        floor = r["floor_s"]
        rest = r["prefill_s"] - r["matmuls_s"] - r["attention_s"]
        rows.append(
            f"| {r['model']} | {label(r)} | {r['tokens']} | {r['prefill_s']:.2f} | "
            f"{floor:.2f} ({r['matmul_floor_s']:.2f} + {r['attention_floor_s']:.2f}) | "
            f"{floor / r['prefill_s']:.2f} | {r['matmuls_s']:.2f} | "
            f"{r['matmul_floor_s'] / r['matmuls_s']:.2f} | {r['attention_s']:.2f} | "
            f"{rest:.2f} | {'-' if base is None else format(r['prefill_s'] / base, '.2f')} |")
    return "\n".join(["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols), *rows])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODEL_NAMES)[::-1], choices=MODEL_NAMES)
    parser.add_argument("--weights", nargs="+", default=["float32", "int8"],
                        choices=list(WEIGHT_FORMATS))
    parser.add_argument("--activations", nargs="+", default=list(ACTIVATIONS),
                        choices=list(ACTIVATIONS),
                        help="rows of the prefills: int8 for int8 weights (needs AVX-512 VNNI), "
                             "bfloat16 for float32 weights")
    parser.add_argument("--tokens", nargs="+", type=int, default=[256, 1024, 2048])
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--out", default="paper_repro/results/prefill_cpu.md")
    parser.add_argument("--rerender", metavar="JSON",
                        help="re-render an earlier run's table from its JSON (no timing)")
    parser.add_argument("--timed-by", metavar="COMMAND",
                        help="with --rerender: the command that timed it, where the JSON "
                             "predates recording it")
    args = parser.parse_args()
    if args.rerender:
        old = json.loads(Path(args.rerender).read_text())
        return report(args.out, old["records"], old["peaks"], old["narrow_gflops"],
                      old.get("reps", args.reps), old["commit"], old["hardware"], old["isa"],
                      old["prefill_path"], old.get("command") or args.timed_by or "(not recorded)",
                      rendered=command_line("benchmarks.prefill_speed"))

    peaks = instruction_peaks()
    narrow = narrow_rates()
    print(f"peaks {peaks}; XLA's dots at 1024 x 1536 x 8960: "
          + ", ".join(f"{k} {v:.0f}" for k, v in narrow.items()), flush=True)
    int8_rows = [a for a in args.activations if a == "float32" or (a == "int8" and kernels.vnni())]
    float_rows = [a for a in args.activations if a in ("float32", "bfloat16")] or ["float32"]
    if "float32" not in float_rows:
        float_rows.insert(0, "float32")  # the baseline every ratio is taken against
    variants = [(w, a) for w in args.weights
                for a in (int8_rows if w == "int8" else float_rows if w == "float32"
                          else ["float32"])]
    records = []
    for name in args.models:
        for weights, act in variants:
            model = load_model(name, weights=weights, prefill_activations=act)
            jp = JittedPasses(model.model)
            for tokens in args.tokens:
                mm, att = flops(model.config, tokens)
                r = dict(model=name, weights=weights, activations=act, tokens=tokens,
                         prefill_s=prefill_s(jp, model.vocab_size, tokens, args.reps),
                         matmuls_s=matmuls_alone_s(model.model, tokens, args.reps),
                         attention_s=attention_alone_s(model.config, tokens, args.reps),
                         matmul_flops=mm, attention_flops=att)
                records.append(r)
                print(r, flush=True)
            del jp, model
    later = instruction_peaks()  # a busy moment only lowers a peak; keep the higher
    peaks = {k: max(v, later.get(k, v)) for k, v in peaks.items()}
    f32_peak = 1e9 * peaks["float32_fma"]
    int8_unit, bf16_unit = units(peaks)
    for r in records:
        rate = 1e9 * peaks[{"int8": int8_unit, "bfloat16": bf16_unit}.get(r["activations"],
                                                                         "float32_fma")]
        r["matmul_floor_s"] = r["matmul_flops"] / rate
        r["attention_floor_s"] = r["attention_flops"] / f32_peak
        r["floor_s"] = r["matmul_floor_s"] + r["attention_floor_s"]
    flags = set(hardware.cpuinfo("flags").split())
    isa = ", ".join(f for f in ISA_FLAGS if f in flags) or "none of " + ", ".join(ISA_FLAGS)
    path = ("XLA's float32 dot on weights unpacked per call (`kernels.prefill_dot` = xla)"
            if kernels.prefill_dot() == "xla" else "the packed CPU kernel")
    report(args.out, records, peaks, narrow, args.reps, provenance.commit(), hardware.describe(),
           isa, path, command_line("benchmarks.prefill_speed"))


def units(peaks: dict) -> tuple[str, str]:
    """The peaks int8 rows and bfloat16 rows are judged against: the AMX tiles where the kernel
    (int8) or the probe (bfloat16) has them."""
    return ("int8_amx" if kernels.amx() and "int8_amx" in peaks else "int8_vpdpbusd",
            "bf16_amx" if "bf16_amx" in peaks else "float32_fma")


def report(out, records, peaks, narrow, reps, commit, machine, isa, path, command,
           rendered=None):
    """Write the table (markdown and JSON); ``rendered``: the command that re-rendered it."""
    int8_unit, bf16_unit = units(peaks)
    again = "" if rendered is None else f" (table re-rendered by `{rendered}`)"
    text = (
        f"# Prefill vs this machine's compute floor\n\nGenerated by "
        f"`{command}` at commit {commit}{again}.\n\n"
        f"Machine: {machine}. Instruction sets: {isa}. Peaks measured by "
        f"`benchmarks/isa_peak.cc` on every core (the higher of before and after the prefills): "
        + ", ".join(f"{k} {v:.0f} G(FL)OP/s" for k, v in peaks.items())
        + f". Float32 rows (float32 weights, and int8 weights dequantized in registers) run "
        f"{path} against the float32 FMA peak; int8 weights with int8 rows "
        f"(`prefill_activations=int8`, W8A8: the rows rounded per row, int32 sums per weight "
        f"group, `specjax.models.quant.w8a8`) run the W8A8 kernel against the "
        + ("AMX tdpbusd peak (its products of 16 rows and more take AMX tiles; the per-group "
           "fold of the int32 sums into float32, not the tiles, bounds them) "
           if int8_unit == "int8_amx" else "vpdpbusd peak ")
        + f"({int8_unit}). float32 weights with bfloat16 rows (`prefill_activations="
        f"bfloat16`, `quant.bf16_dot`: XLA's bfloat16 dot on the weights unpacked and rounded "
        f"per call) against {bf16_unit}. "
        f"The attention is float32 in every row. XLA's own dots at 1024 x 1536 x 8960, for "
        f"comparison: " + ", ".join(f"{k} {v:.0f} G(FL)OP/s" for k, v in narrow.items())
        + f". Best of {reps} calls after a warm-up. The last column divides by the float32 "
        f"model's prefill with float32 rows.\n\n"
        f"{render(records)}\n")
    write_report(text, out)
    Path(out).with_suffix(".json").write_text(json.dumps(dict(
        hardware=machine, isa=isa, commit=commit, command=command, reps=reps, peaks=peaks,
        narrow_gflops=narrow, prefill_path=path, int8_unit=int8_unit, records=records),
        indent=1))


if __name__ == "__main__":
    main()
