"""The engine on whatever device JAX sees: exactness first, then what a target call costs.

    python -m benchmarks.device_check                      # real shapes on an accelerator
    python -m benchmarks.device_check --preset tiny        # seconds, any device (the tests)

A verifier compiled for a GPU is another program than the one the CPU tests checked, and a
decode loop's speed-up there depends on how a target call's cost grows with the tokens it
scores. Three parts, on the default JAX device:

1. **One-step laws.** Every registered verifier's jitted verify step, sampled ``--samples``
   times on the device, against its float64 exact law by a G-test
   (``algorithms.exact.one_step``, the "random" case, false-positive rate 1e-4 per verifier).
2. **Greedy SD == AR.** Random weights of real architectures (``--preset real``: Llama-3.2-1B
   shapes drafting for Llama-3.1-8B shapes, llama3 RoPE scaling, grouped-query attention, in
   bfloat16; ``tiny``: the same features at toy sizes), greedy speculative decoding against
   autoregressive decoding, token for token. Random weights need no download and are enough
   for equality and timing; they accept few drafts, so this part checks exactness only.
3. **Cost of a call against the tokens it scores.** One target pass over n tokens (1 ... 512)
   after a cached prompt: the measured ridge (the n where a pass stops costing what one token
   costs: the 1-token time over the large-n time per token) beside the theory's
   ``F b / (2 BW)`` for known accelerators, and the latency speed-up that Table 1's measured
   block efficiencies would give at these per-call costs, labelled as projected.

The report names the device and the commit; on a CPU it is the same script at the same shapes
the issue asks of a GPU only when ``--preset real`` is given (minutes to hours on a CPU).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import command_line, write_report

RESULTS = Path(__file__).resolve().parents[1] / "paper_repro" / "results"

#: Llama-3.1-8B and Llama-3.2-1B (their config.json), random weights.
LLAMA3_ROPE = dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                   original_max_position_embeddings=8192)
SHAPES = {
    "real": dict(
        target=dict(arch="llama", vocab_size=128256, num_layers=32, hidden_size=4096,
                    num_heads=32, num_kv_heads=8, head_dim=128, intermediate_size=14336,
                    rope_theta=500000.0, rms_eps=1e-5, tie_embeddings=False,
                    context_length=131072, rope_scaling=tuple(LLAMA3_ROPE.items())),
        draft=dict(arch="llama", vocab_size=128256, num_layers=16, hidden_size=2048,
                   num_heads=32, num_kv_heads=8, head_dim=64, intermediate_size=8192,
                   rope_theta=500000.0, rms_eps=1e-5, tie_embeddings=True,
                   context_length=131072,
                   rope_scaling=tuple((LLAMA3_ROPE | {"factor": 32.0}).items())),
        tokens=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512), samples=20_000, new_tokens=32),
    "tiny": dict(
        target=dict(arch="llama", vocab_size=256, num_layers=2, hidden_size=64, num_heads=4,
                    num_kv_heads=2, head_dim=16, intermediate_size=128, rope_theta=500000.0,
                    rms_eps=1e-5, tie_embeddings=False, context_length=4096,
                    rope_scaling=tuple((LLAMA3_ROPE | {"original_max_position_embeddings": 64})
                                       .items())),
        draft=dict(arch="llama", vocab_size=256, num_layers=1, hidden_size=32, num_heads=4,
                   num_kv_heads=2, head_dim=8, intermediate_size=64, rope_theta=500000.0,
                   rms_eps=1e-5, tie_embeddings=True, context_length=4096,
                   rope_scaling=tuple((LLAMA3_ROPE | {"original_max_position_embeddings": 64})
                                      .items())),
        tokens=(1, 2, 4, 8, 16, 32), samples=4_000, new_tokens=12),
}
SHAPE_WORDS = {"real": "Llama-3.2-1B drafting for Llama-3.1-8B",
               "tiny": "toy sizes, the same architecture features"}
PROMPT_TOKENS = 64
#: Peak bf16 FLOP/s and bandwidth of accelerators the theory knows (``specjax.theory``).
KNOWN = {"H100": "H100_SXM", "H200": "H200"}


def random_decoder(shape: dict, key, weights: str):
    """A ``Decoder`` of ``shape`` with N(0, 1/fan_in) weights drawn on the device, one layer at
    a time, in the storage dtype (no host copy of an 8B model)."""
    from specjax.models.config import ModelConfig
    from specjax.models.decoder import Decoder
    from specjax.models.layers import LAYER_WEIGHTS, weight_shapes

    config = ModelConfig(**shape)
    dtype = jnp.dtype(weights)
    shapes = weight_shapes(config)

    def draw(k, shape):
        if len(shape) == 1:  # norms
            return jnp.ones(shape, jnp.float32)
        return (jax.random.normal(k, shape, jnp.float32) / np.sqrt(shape[-2])).astype(dtype)

    def layers():
        for i in range(config.num_layers):
            keys = jax.random.split(jax.random.fold_in(key, i), len(LAYER_WEIGHTS))
            yield {n: draw(k, shapes[n][1:]) for n, k in zip(LAYER_WEIGHTS, keys, strict=True)
                   if n in shapes}

    k_embed, k_head = jax.random.split(jax.random.fold_in(key, config.num_layers))
    D, V = config.hidden_size, config.vocab_size
    weights_in = {"embed": (jax.random.normal(k_embed, (V, D)) / np.sqrt(D)).astype(dtype),
                  "final_norm": jnp.ones((D,), jnp.float32), "layers": layers()}
    if not config.tie_embeddings:
        weights_in["lm_head"] = draw(k_head, (D, V))
    return Decoder.from_weights(config, weights_in, weight_format=weights, packed=False)


def one_step_laws(samples: int, names=None) -> list[dict]:
    from algorithms.exact.one_step import ALPHA, fit
    from algorithms.verifiers import get_verifier, list_verifiers

    rows = []
    for name in names or list_verifiers():
        t = time.perf_counter()
        result = fit(get_verifier(name), "random", n=samples)
        rows.append(dict(verifier=name, G=result.statistic, df=result.df, p=result.p_value,
                         passes=result.passes(ALPHA), seconds=time.perf_counter() - t))
    return rows


def greedy_equality(target, draft, new_tokens: int, L: int = 4) -> dict:
    import specjax
    from specjax.drafters import ModelDrafter
    from specjax.models.toy import ToyLoaded

    rng = np.random.default_rng(0)
    V = target.config.vocab_size
    prompts = [rng.integers(0, V, n).tolist() for n in (PROMPT_TOKENS, 17, 40)]
    greedy = specjax.Sampling(temperature=0.0)
    t, d = ToyLoaded(name="target", model=target), ToyLoaded(name="draft", model=draft)
    ar = specjax.generate(t, prompts, sampling=greedy, max_new_tokens=new_tokens,
                          progress=False)
    sd = specjax.generate(t, prompts, draft=d, drafter=ModelDrafter(K=1, L=L), sampling=greedy,
                          max_new_tokens=new_tokens, progress=False)
    return dict(equal=ar.tokens == sd.tokens, prompts=len(prompts), new_tokens=new_tokens,
                L=L, block_efficiency=sd.summary["block_efficiency"])


def pass_ms(model, n: int, reps: int) -> float:
    """Median ms of one jitted pass over n new tokens after a cached ``PROMPT_TOKENS`` prompt
    (the tree pass of one draft of n - 1 tokens: what a target call scores)."""
    from specjax.models.passes import JittedPasses

    jp = JittedPasses(model)
    prompt = jnp.arange(PROMPT_TOKENS, dtype=jnp.int32) % model.vocab_size
    cache = jp.with_scratch(jp.prefill(jp.init_cache(PROMPT_TOKENS + 1024, PROMPT_TOKENS),
                                       prompt, PROMPT_TOKENS), n)
    drafts = (jnp.arange(n - 1, dtype=jnp.int32) % model.vocab_size)[None] if n > 1 else None

    def call(cache):  # the passes donate the cache: thread the one they hand back
        if drafts is None:
            return jp.decode(cache, jnp.int32(1))[1]
        return jp.score_tree(cache, jnp.int32(1), drafts)[1]

    cache = jax.block_until_ready(call(cache))
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        cache = jax.block_until_ready(call(cache))
        times.append(time.perf_counter() - t)
    return 1e3 * statistics.median(times)


def ridge(costs: dict[int, float]) -> float:
    """Tokens per pass where a pass stops costing one token's time: t(1) over the per-token
    time of the two largest passes (the compute-bound slope)."""
    ns = sorted(costs)
    slope = (costs[ns[-1]] - costs[ns[-2]]) / (ns[-1] - ns[-2])
    return float(costs[ns[0]] / slope) if slope > 0 else float("inf")


def projected_speedups(target_ms: dict[int, float], draft_ms: dict[int, float]) -> list[dict]:
    """SR = BE t(1) / (t(1 + K L) + L t_draft(K)) with Table 1's measured BE per method: what
    those block efficiencies would give at these per-call costs (no loop overhead counted)."""
    path = RESULTS / "table1_cpu.json"
    if not path.is_file():
        return []
    table = json.loads(path.read_text())
    L = table["setting"]["L"]

    def at(costs, n):  # the measured pass nearest above n (costs grow with n)
        return costs[min((m for m in costs if m >= n), default=max(costs))]

    out = []
    for row in table["rows"]:
        if row["method"] == "ar":
            continue
        K = row["K"]
        for dataset, cell in row["datasets"].items():
            be = cell["BE"][0]
            step = at(target_ms, 1 + K * L) + L * at(draft_ms, K)
            out.append(dict(method=row["method"], K=K, L=L, dataset=dataset, BE=be,
                            SR=be * target_ms[1] / step))
    return out


def render(report: dict) -> str:
    lines = [f"# Device check: {report['device']}", "",
             f"Generated by `{report['command']}` at commit {report['commit']}, "
             f"{report['date']}, JAX {report['jax']} on {report['platform']} "
             f"({report['device']}); preset `{report['preset']}`.", ""]
    laws = report["one_step_laws"]
    lines += ["## One-step laws on this device", "",
              f"Each registered verifier's jitted verify step, {report['samples']:,} samples, "
              "against its float64 exact law (G-test, the `random` case of "
              "`algorithms.exact.one_step`, false-positive rate 1e-4 each).", "",
              "| verifier | G | df | p | passes | s |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['verifier']} | {r['G']:.1f} | {r['df']} | {r['p']:.3f} | "
              f"{'yes' if r['passes'] else '**NO**'} | {r['seconds']:.1f} |" for r in laws]
    g = report["greedy"]
    lines += ["", "## Greedy speculative == autoregressive", "",
              f"{report['shapes']}; {g['prompts']} prompts x {g['new_tokens']} tokens, "
              f"ModelDrafter K = 1, L = {g['L']}: **{'equal' if g['equal'] else 'DIFFERENT'}** "
              f"token for token (BE {g['block_efficiency']:.2f}: random weights rarely agree).",
              "", "## Cost of one target call against the tokens it scores", "",
              "| tokens | target ms | draft ms | target ms / token |", "|---|---|---|---|"]
    for n, ms in sorted(report["target_ms"].items()):
        lines.append(f"| {n} | {ms:.2f} | {report['draft_ms'][n]:.2f} | {ms / n:.3f} |")
    seed = report.get("theory_ridge")
    lines += ["", f"Measured ridge: {report['ridge']:.0f} tokens (the 1-token time over the "
              "per-token slope of the two largest passes)"
              + (f"; theory `F b / (2 BW)` for this device: {seed:.0f}." if seed else "; the "
                 "theory's value is known only for the H100 / H200 (~295 / ~206 tokens)."), ""]
    if report["projected"]:
        lines += ["## Latency speed-up projected from measured per-call costs", "",
                  "SR = BE t(1) / (t(1 + K L) + L t_draft(K)), with the block efficiencies "
                  "Table 1 measured on the Qwen pair (`table1_cpu.json`) and the per-call "
                  "costs above; no loop overhead is counted, so these are projections, not "
                  "measurements.", "", "| method | K | L | dataset | BE (Table 1) | "
                  "projected SR |", "|---|---|---|---|---|---|"]
        lines += [f"| {p['method']} | {p['K']} | {p['L']} | {p['dataset']} | {p['BE']:.2f} | "
                  f"{p['SR']:.2f} |" for p in report["projected"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.device_check",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", choices=("auto", *SHAPES), default="auto",
                    help="model shapes: real (an accelerator), tiny (seconds); auto = real on "
                         "an accelerator, tiny on a CPU")
    ap.add_argument("--weights", default="bfloat16", choices=("float32", "bfloat16"))
    ap.add_argument("--samples", type=int, help="verify steps per one-step G-test")
    ap.add_argument("--verifiers", help="comma list (default: every registered verifier)")
    ap.add_argument("--reps", type=int, default=5, help="timed calls per pass (median)")
    ap.add_argument("--tokens", help="comma list of tokens per pass to time (default: the "
                                     "preset's, 1 ... 512 for real shapes)")
    ap.add_argument("--out", type=Path, help="report path (default: "
                    "paper_repro/results/device_check_<platform>.md)")
    args = ap.parse_args(argv)
    from specjax.platform import hardware, provenance
    from specjax.theory import batch

    platform = jax.default_backend()
    preset = args.preset if args.preset != "auto" else ("tiny" if platform == "cpu" else "real")
    shapes = SHAPES[preset]
    device = jax.devices()[0].device_kind
    start = time.perf_counter()
    laws = one_step_laws(args.samples or shapes["samples"],
                         args.verifiers.split(",") if args.verifiers else None)
    key = jax.random.key(0)
    target = random_decoder(shapes["target"], jax.random.fold_in(key, 1), args.weights)
    draft = random_decoder(shapes["draft"], jax.random.fold_in(key, 2), args.weights)
    greedy = greedy_equality(target, draft, shapes["new_tokens"])
    sizes = [int(n) for n in args.tokens.split(",")] if args.tokens else shapes["tokens"]
    if 1 not in sizes or len(sizes) < 3:
        ap.error("--tokens must include 1 and at least two larger sizes (the ridge's slope)")
    target_ms = {n: pass_ms(target, n, args.reps) for n in sizes}
    draft_ms = {n: pass_ms(draft, n, args.reps) for n in sizes}
    known = next((v for k, v in KNOWN.items() if k in device), None)
    theory_ridge = None
    if known is not None:
        acc = getattr(batch, known)
        theory_ridge = float(batch.ridge_tokens(acc.peak_flops, acc.bandwidth))
    report = dict(
        device=device if platform != "cpu" else hardware.describe(), platform=platform,
        preset=preset, weights=args.weights, jax=jax.__version__, commit=provenance.commit(),
        date=time.strftime("%Y-%m-%d"), command=command_line("benchmarks.device_check"),
        samples=args.samples or shapes["samples"], one_step_laws=laws, greedy=greedy,
        shapes=f"{preset} shapes ({SHAPE_WORDS[preset]}), {args.weights}, random weights",
        target_ms=target_ms, draft_ms=draft_ms, ridge=ridge(target_ms),
        theory_ridge=theory_ridge, projected=projected_speedups(target_ms, draft_ms),
        seconds=time.perf_counter() - start)
    out = args.out or RESULTS / f"device_check_{platform}.md"
    write_report(render(report), out)
    Path(out).with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    return report


if __name__ == "__main__":
    main()
