"""Throughput against batch size: AR and SD tokens/s on this machine, against specjax.theory.

    python -m benchmarks.throughput [--batches 1 2 4 8 16] [--tokens 32] [--L 4]
        [--mesh-devices 8] [--out paper_repro/results/throughput_cpu.md]
    python -m benchmarks.throughput --smoke --out /tmp/throughput.md  # tiny models

For each batch size B the first B prompts are decoded by ``specjax.generate`` in one call,
autoregressively (AR) and speculatively (SD: the draft model proposes L tokens, token
verifier), with batch_size = B. The prompts are HumanEval prompts without the chat template,
cut to ``--prompt-tokens``. Tokens/s is decoding only: prefill is taken out by also timing a
1-token run of the same call (``decode``), compile is never counted, and the best of
``--reps`` calls is kept. The JSON also keeps tokens/s with prefill included.

The model comes from ``specjax.theory.batch``: the roofline ridge n* = F·b / (2·BW) with this
machine's FLOP/s and copy bandwidth (measured first, as ``decode_speed`` does) and b = 4 bytes
(float32 weights). The SD speedup is S(B, L) = E[n]·max(1, B/n*) / (L·c·max(1, B/n*) +
max(1, B(L+1)/n*)), with α fitted so that E[n](α, L) equals the measured block efficiency and
c = draft/target parameter count (both passes are weight-bound at small batch). The lookahead
policy k*(B) maximizes S over k and is 0 where speculation stops paying. Predicted AR tokens/s is
B / (t₁·max(1, B/n*)), calibrated on the measured batch-1 AR step time t₁.

Mesh overhead: the largest batch is decoded again in a subprocess that has ``--mesh-devices``
forced CPU devices (``XLA_FLAGS=--xla_force_host_platform_device_count``), on one device of
them and on a data mesh over all of them, with the same total batch. The forced devices share
this machine's cores, so the comparison measures what sharding costs (partitioning, collectives
in the loop), not a speedup. The table also says whether the tokens match the one-device run.
Every forced device holds its own copy of the weights, so the mesh part runs its own, smaller
pair (``--mesh-target`` / ``--mesh-draft``, SmolLM2-135M by default): 8 float32 copies of the
Qwen pair need ~64 GB. A failed mesh part is recorded in the table; the batch sweep is kept.

Writes ``<out>.md``, ``<out>.json`` and ``<out>.png``. Run time with the Qwen pair on 2 CPU cores
is an estimate, not a measurement: about 1 to 1.5 hours. About 20 compiles of ~1 min each
(4 per batch size) and 8 more in the mesh subprocess, with the rest decoding and prefill.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from scipy import optimize

FAST = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}
DEFAULT_OUT = Path("paper_repro/results/throughput_cpu.md")


# ---- measuring ---------------------------------------------------------------------------------

def _models(smoke: bool, target: str, draft: str):
    if smoke:  # two tiny random decoders with a shared vocabulary: seconds, no download
        from specjax.models.config import tiny_config
        from specjax.models.decoder import Decoder
        from specjax.models.toy import ToyLoaded

        t = ToyLoaded(name="tiny-target", model=Decoder.random(tiny_config("qwen2"), seed=0))
        d = ToyLoaded(name="tiny-draft",
                      model=Decoder.random(tiny_config("qwen2", num_layers=1), seed=1))
        return t, d
    from specjax.models.loader import load_model

    return load_model(target), load_model(draft)


def _prompts(target, n: int, length: int, smoke: bool) -> list[list[int]]:
    if smoke:
        rng = np.random.default_rng(0)
        return [rng.integers(0, target.vocab_size, length).tolist() for _ in range(n)]
    from specjax.prompts import PromptSuite

    texts = PromptSuite(suite="humaneval", n=n, chat=False).texts(target)
    return [list(target.encode(t))[:length] for t in texts]


def _params(loaded) -> int:
    return int(loaded.model.config.num_params)


def decode(target, draft, prompts, *, B: int, tokens: int, L: int, temperature: float,
           reps: int, compiler_options, mesh=None) -> dict:
    """AR and SD on the first B prompts in one call each, best of ``reps`` calls.

    ``tokens_per_s`` excludes prefill: a 1-token run of the same call (prefill + one step) is
    timed too, and the full run's remaining ``steps - 1`` loop steps give the step time, so
    tokens/s = new tokens / (steps x step time). ``tokens_per_s_with_prefill`` is the plain
    new tokens / wall time (the README's SR convention).
    """
    import specjax
    from specjax.drafters import ModelDrafter

    def best(max_new_tokens, kw):
        runs = [specjax.generate(target, prompts[:B], sampling=specjax.Sampling(
                    temperature=temperature), max_new_tokens=max_new_tokens, batch_size=B,
                    seed=0, progress=False, compiler_options=compiler_options, mesh=mesh, **kw)
                for _ in range(reps)]
        return min(runs, key=lambda r: r.summary["wall_time_s"])

    out = {}
    for method, kw in (("ar", {}), ("sd", dict(draft=draft, drafter=ModelDrafter(K=1, L=L),
                                                verifier="token"))):
        full, first = best(tokens, kw), best(1, kw)
        s, wall1 = full.summary, first.summary["wall_time_s"]
        steps = max(p["target_calls"] for p in full.per_prompt)  # loop steps of the batch
        step = (s["wall_time_s"] - wall1) / max(steps - 1, 1)
        out[method] = {"tokens_per_s": s["new_tokens"] / (steps * step) if step > 0 else
                       float("nan"),
                       "tokens_per_s_with_prefill": s["new_tokens"] / s["wall_time_s"],
                       "step_s": step, "steps": steps, "prefill_and_step_s": wall1,
                       "wall_time_s": s["wall_time_s"], "new_tokens": s["new_tokens"],
                       "block_efficiency": s["block_efficiency"],
                       "acceptance_rate": s.get("acceptance_rate", 0.0), "tokens": full.tokens}
    return out


def mesh_worker(args) -> None:
    """Run inside the forced-device subprocess: one device vs a data mesh over all of them."""
    import jax

    from specjax.decode.parallel import make_mesh

    target, draft = _models(args.smoke, args.mesh_target, args.mesh_draft)
    prompts = _prompts(target, args.mesh_batch, args.prompt_tokens, args.smoke)
    kw = dict(B=args.mesh_batch, tokens=args.tokens, L=args.L, temperature=args.temperature,
              reps=args.reps, compiler_options=FAST if args.smoke else None)
    one = decode(target, draft, prompts, **kw)
    mesh = decode(target, draft, prompts, mesh=make_mesh(jax.device_count(), 1), **kw)
    json.dump({"devices": jax.device_count(), "one": one, "mesh": mesh}, sys.stdout)


def run_mesh_overhead(args) -> dict:
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={args.mesh_devices}")
    cmd = [sys.executable, "-m", "benchmarks.throughput", "--mesh-worker",
           "--mesh-batch", str(args.mesh_batch), "--tokens", str(args.tokens), "--L", str(args.L),
           "--temperature", str(args.temperature), "--reps", str(args.reps),
           "--prompt-tokens", str(args.prompt_tokens), "--mesh-target", args.mesh_target,
           "--mesh-draft", args.mesh_draft] + (["--smoke"] if args.smoke else [])
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1])
    if proc.returncode:  # recorded, not raised: the batch sweep measured before it is kept
        why = "killed (out of memory?)" if proc.returncode < 0 else f"exit {proc.returncode}"
        print(f"throughput: mesh worker failed ({why}):\n{proc.stderr[-3000:]}", file=sys.stderr)
        return {"error": f"mesh worker failed: {why}"}
    return json.loads(proc.stdout)


# ---- theory ------------------------------------------------------------------------------------

def fit_alpha(block_efficiency: float, L: int) -> float:
    """α with E[n](α, L) = the measured tokens per target call (Leviathan eq. 1)."""
    from specjax.theory import expected_tokens

    be = float(np.clip(block_efficiency, 1.0, L + 1.0))
    if be >= L + 1 - 1e-12:
        return 1.0
    if be <= 1 + 1e-12:
        return 0.0
    return float(optimize.brentq(lambda a: expected_tokens(a, L) - be, 0.0, 1.0))


def predict(batches, *, alpha: float, c: float, ridge: float, L: int, t1: float) -> dict:
    """Per B: predicted AR tokens/s, S(B, L), SD tokens/s and the policy k*(B)."""
    from specjax.theory import batch_speedup, k_policy

    policy = k_policy(alpha, c, batches, ridge=ridge, k_max=16)
    rows = {}
    for B in batches:
        ar = B / (t1 * max(1.0, B / ridge))
        s = float(batch_speedup(B, alpha, L, c, ridge=ridge))
        rows[B] = {"ar_tokens_per_s": ar, "speedup": s, "sd_tokens_per_s": ar * s,
                   "k_star": policy[B]}
    return rows


def compare(measured: dict, predicted: dict) -> list[str]:
    """Two questions answered from the numbers: does the advantage of SD over AR shrink with
    batch, and from which batch does the model switch speculation off (k* = 0)?"""
    bs = sorted(measured)
    sm = [measured[b]["sd"]["tokens_per_s"] / measured[b]["ar"]["tokens_per_s"] for b in bs]
    sp = [predicted[b]["speedup"] for b in bs]

    def trend(v):
        return "shrinks" if v[-1] < 0.95 * v[0] else "grows" if v[-1] > 1.05 * v[0] else "stays"

    lines = [
        f"- SD / AR measured: {sm[0]:.2f}x at B={bs[0]} -> {sm[-1]:.2f}x at B={bs[-1]}; "
        f"model S(B, L): {sp[0]:.2f}x -> {sp[-1]:.2f}x. Measured, the advantage {trend(sm)} "
        f"with batch; the model predicts it {trend(sp)}.",
    ]
    off = [b for b in bs if predicted[b]["k_star"] == 0]
    lose = [b for b, s in zip(bs, sm, strict=True) if s < 1]
    lines.append(
        "- k*(B) (model): " + ", ".join(f"B={b}: {predicted[b]['k_star']}" for b in bs) + "; "
        + (f"speculation switches off from B = {off[0]}." if off else
           "speculation stays on at every measured batch."))
    lines.append("- Measured: SD is " + (f"slower than AR from B = {lose[0]}."
                                         if lose else "at least as fast as AR at every batch."))
    return lines


# ---- output ------------------------------------------------------------------------------------

def render(report: dict) -> str:
    m, p, h = report["measured"], report["predicted"], report["header"]
    out = [f"# Throughput against batch size ({h['machine']})", "",
           f"`python -m benchmarks.throughput {h['argv']}`", "",
           f"- target {h['target']} ({h['target_params'] / 1e6:.1f}M params), draft "
           f"{h['draft']} ({h['draft_params'] / 1e6:.1f}M), c = {h['c']:.3f} (param ratio)",
           f"- {h['tokens']} new tokens per prompt, prompts cut to {h['prompt_tokens']} tokens, "
           f"T = {h['temperature']:g}, SD: model drafter K = 1, L = {h['L']}, token verifier",
           f"- machine: copy bandwidth {h['bandwidth'] / 1e9:.1f} GB/s, matmul "
           f"{h['flops'] / 1e9:.0f} GFLOP/s -> ridge n* = F·4/(2·BW) = {h['ridge']:.1f} tokens "
           "(float32)",
           f"- α = {h['alpha']:.3f}, fitted to the measured block efficiency "
           f"{h['block_efficiency']:.2f} at B = {h['alpha_batch']}; t₁ = {1e3 * h['t1']:.1f} ms "
           f"(from the measured AR step at B = {h['t1_batch']})", "",
           "Tokens/s exclude prefill; the last column keeps it (new tokens / wall time).", "",
           "| B | AR tok/s | AR model | SD tok/s | SD model | SD/AR | S(B, L) model | k*(B) | "
           "block eff. | SD/AR with prefill |", "|---|---|---|---|---|---|---|---|---|---|"]
    for B in sorted(m, key=int):
        a, s, q = m[B]["ar"], m[B]["sd"], p[B]
        out.append(f"| {B} | {a['tokens_per_s']:.1f} | {q['ar_tokens_per_s']:.1f} | "
                   f"{s['tokens_per_s']:.1f} | {q['sd_tokens_per_s']:.1f} | "
                   f"{s['tokens_per_s'] / a['tokens_per_s']:.2f} | {q['speedup']:.2f} | "
                   f"{q['k_star']} | {s['block_efficiency']:.2f} | "
                   f"{s['tokens_per_s_with_prefill'] / a['tokens_per_s_with_prefill']:.2f} |")
    out += ["", "Against the model:", "", *report["comparison"], ""]
    if report.get("mesh") and "error" in report["mesh"]:
        out += ["## Mesh overhead", "", f"Not measured: {report['mesh']['error']}.", ""]
    elif report.get("mesh"):
        mo, B = report["mesh"], report["header"]["mesh_batch"]
        n = mo["devices"]
        h = report["header"]
        same = (h.get("mesh_target", h["target"]), h.get("mesh_draft", h["draft"])) == (
            h["target"], h["draft"])
        out += [f"## Mesh overhead (total batch {B}, {n} forced CPU devices on the same cores)",
                "", "Models: the same pair as above." if same else
                f"Models: {h.get('mesh_target')} (target) and {h.get('mesh_draft')} (draft), not "
                "the pair above: every forced CPU device holds its own copy of the weights, and "
                f"{n} float32 copies of the pair above do not fit this machine's memory. The "
                "'plain' column is therefore not measured for them.",
                "", "| method | 1 device (plain) tok/s | 1 of {n} devices tok/s | data mesh x{n} "
                "tok/s | mesh / 1 device | tokens identical |".replace("{n}", str(n)),
                "|---|---|---|---|---|---|"]
        for method in ("ar", "sd"):
            plain = (m[B][method]["tokens_per_s"] if B in m and same else float("nan"))
            one, mesh = mo["one"][method], mo["mesh"][method]
            out.append(f"| {method.upper()} | {plain:.1f} | {one['tokens_per_s']:.1f} | "
                       f"{mesh['tokens_per_s']:.1f} | "
                       f"{mesh['tokens_per_s'] / one['tokens_per_s']:.2f} | "
                       f"{mesh['tokens'] == one['tokens']} |")
        out.append("")
    return "\n".join(out)


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    m, p = report["measured"], report["predicted"]
    bs = sorted(m, key=int)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for method, color in (("ar", "tab:blue"), ("sd", "tab:orange")):
        ax1.plot(bs, [m[b][method]["tokens_per_s"] for b in bs], "o", color=color,
                 label=f"{method.upper()} measured")
        ax1.plot(bs, [p[b][f"{method}_tokens_per_s"] for b in bs], "-", color=color,
                 label=f"{method.upper()} model")
    ax1.set(xscale="log", yscale="log", xlabel="batch B", ylabel="tokens / s",
            title="throughput")
    ax1.axvline(report["header"]["ridge"], color="grey", ls=":", label="ridge n*")
    ax1.legend(fontsize=8)
    ax2.plot(bs, [m[b]["sd"]["tokens_per_s"] / m[b]["ar"]["tokens_per_s"] for b in bs], "o",
             label="SD/AR measured")
    ax2.plot(bs, [p[b]["speedup"] for b in bs], "-", label="S(B, L) model")
    ax2.axhline(1.0, color="grey", ls=":")
    for b in bs:
        ax2.annotate(f"k*={p[b]['k_star']}", (b, p[b]["speedup"]), fontsize=7,
                     textcoords="offset points", xytext=(0, 6), ha="center")
    ax2.set(xscale="log", xlabel="batch B", ylabel="speedup", title="SD advantage vs batch")
    ax2.legend(fontsize=8)
    for ax in (ax1, ax2):
        ax.set_xticks(bs, [str(b) for b in bs])
        ax.minorticks_off()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---- main --------------------------------------------------------------------------------------

def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="qwen2.5-coder-1.5b-instruct")
    parser.add_argument("--draft", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--L", type=int, default=4)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--mesh-devices", type=int, default=8, help="0 skips the mesh part")
    parser.add_argument("--mesh-target", default="smollm2-135m-instruct",
                        help="target of the mesh part: each forced device holds a full copy, so "
                             "8 copies must fit in RAM (the 1.5B pair needs ~8 x 8 GB)")
    parser.add_argument("--mesh-draft", default="smollm2-135m-instruct",
                        help="draft of the mesh part (the same model drafting for itself "
                             "measures the mesh overhead, not a useful speed-up)")
    parser.add_argument("--mesh-batch", type=int, default=None,
                        help="total batch of the mesh part (default: the largest of --batches)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--smoke", action="store_true",
                        help="tiny random decoders, batches 1 2, 4 tokens, 2 devices: a check")
    parser.add_argument("--mesh-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.smoke and not args.mesh_worker:
        args.batches, args.tokens, args.L, args.reps = [1, 2], 4, 2, 1
        args.prompt_tokens, args.mesh_devices = 8, 2
    args.mesh_batch = args.mesh_batch or max(args.batches)
    if args.out is None and not args.mesh_worker:
        if args.smoke:
            parser.error("--smoke needs --out (smoke numbers do not belong in paper_repro/)")
        args.out = DEFAULT_OUT
    return args


def main(argv=None) -> dict:
    args = parse(argv)
    if args.mesh_worker:
        mesh_worker(args)
        return {}
    from specjax.platform.probes import copy_bandwidth, matmul_flops
    from specjax.theory import ridge_tokens

    bw = 1e9 * copy_bandwidth(gib=0.125 if args.smoke else 1.0, reps=2 if args.smoke else 7)
    flops = matmul_flops(n=256 if args.smoke else 2048, reps=2 if args.smoke else 5)
    ridge = float(ridge_tokens(flops, bw, bytes_per_param=4.0))
    target, draft = _models(args.smoke, args.target, args.draft)
    prompts = _prompts(target, max(args.batches), args.prompt_tokens, args.smoke)
    measured = {}
    for B in args.batches:
        print(f"throughput: batch {B} ...", file=sys.stderr, flush=True)
        measured[B] = decode(target, draft, prompts, B=B, tokens=args.tokens, L=args.L,
                             temperature=args.temperature, reps=args.reps,
                             compiler_options=FAST if args.smoke else None)
    Bmax = max(args.batches)
    alpha = fit_alpha(measured[Bmax]["sd"]["block_efficiency"], args.L)
    params = _params(target), _params(draft)
    c = params[1] / params[0]
    del target, draft  # the mesh subprocess loads its own copy: do not hold two in memory
    gc.collect()
    mesh = run_mesh_overhead(args) if args.mesh_devices > 1 else None
    B1 = min(args.batches)  # below the ridge an AR step takes t1 whatever the batch
    t1 = measured[B1]["ar"]["step_s"] / max(1.0, B1 / ridge)
    predicted = predict(args.batches, alpha=alpha, c=c, ridge=ridge, L=args.L, t1=t1)
    from specjax.platform import hardware

    report = {
        "header": {"machine": hardware.describe(), "argv": " ".join(argv or sys.argv[1:]),
                   "target": args.target if not args.smoke else "tiny-target",
                   "draft": args.draft if not args.smoke else "tiny-draft",
                   "target_params": params[0], "draft_params": params[1], "c": c,
                   "tokens": args.tokens, "prompt_tokens": args.prompt_tokens, "L": args.L,
                   "temperature": args.temperature, "bandwidth": bw, "flops": flops,
                   "ridge": ridge, "alpha": alpha, "alpha_batch": Bmax, "t1": t1, "t1_batch": B1,
                   "block_efficiency": measured[Bmax]["sd"]["block_efficiency"],
                   "mesh_batch": args.mesh_batch,
                   "mesh_target": args.mesh_target if not args.smoke else "tiny-target",
                   "mesh_draft": args.mesh_draft if not args.smoke else "tiny-draft"},
        "measured": measured, "predicted": predicted,
        "comparison": compare(measured, predicted),
        "mesh": mesh,
    }
    if report["mesh"] and "error" not in report["mesh"]:  # recorded in the table, not raised
        for method in ("ar", "sd"):
            one, mesh = report["mesh"]["one"][method], report["mesh"]["mesh"][method]
            if one["tokens"] != mesh["tokens"]:
                print(f"throughput: WARNING: {method}: the data mesh changed the tokens",
                      file=sys.stderr)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text(render(report))
    def drop_tokens(x):  # the JSON keeps the numbers, not every generated id
        if isinstance(x, dict):
            return {k: drop_tokens(v) for k, v in x.items() if k != "tokens"}
        return x

    out.with_suffix(".json").write_text(json.dumps(drop_tokens(report), indent=1))
    plot(report, out.with_suffix(".png"))
    print(out.with_suffix(".md").read_text())
    return report


if __name__ == "__main__":
    main()
