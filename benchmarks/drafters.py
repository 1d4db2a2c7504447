"""Trained drafters vs early exit and prompt lookup: BE, acceptance per position, SD speedup.

    python -m benchmarks.drafters                       # SmolLM2-135M, after training
    python -m benchmarks.drafters --smoke --out /tmp/d.md   # seconds, tiny decoder

For every drafter (``eagle`` and ``medusa`` from their latest ``specjax-train`` run, the draft
family members found in the cache as ``model`` drafters, ``early_exit`` and ``ngram``), every
suite and every sampling setting, the same prompts are decoded autoregressively and
speculatively in one session (``specjax.generate``, same seed): block efficiency, acceptance per
draft position and the speedup (SD tokens/s over AR tokens/s, compile excluded) go to a markdown
table and a JSON sidecar (``--out`` with ``.json``). A drafter without a trained run is listed as
missing, with the command that trains it, instead of stopping the benchmark.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

SAMPLINGS = {"greedy": 0.0, "t07": 0.7, "t1": 1.0}
DEFAULT_OUT = Path("paper_repro/results/drafters.md")


def family_members(target_name: str) -> list[str]:
    """``family/<target>/dD-lN`` of every finished family run in the cache (sorted by size)."""
    from specjax.drafters import runs
    from specjax.drafters.family import family_name

    shapes = set()
    for final in runs.kind_root("family", target_name).glob("*/final.json"):
        module = json.loads(final.read_text()).get("module", {})
        shapes.add((module["hidden_size"], module["num_layers"]))
    return [family_name(target_name, d, n) for d, n in sorted(shapes)]


def trained_runs(target_name: str) -> list[dict]:
    """What each trained drafter in the table learnt from: its run's ``final.json``."""
    from specjax.drafters import runs

    found = [(kind, runs.latest_run(kind, target_name)) for kind in ("eagle", "medusa")]
    found += [("family", f.parent) for f in
              sorted(runs.kind_root("family", target_name).glob("*/final.json"))]
    out = []
    for kind, run in found:
        if run is None:
            continue
        final = json.loads((run / "final.json").read_text())
        module = final.get("module", {})
        label = (f"d{module['hidden_size']}-l{module['num_layers']}" if kind == "family"
                 else kind)
        out.append(dict(drafter=label, run=run.name, steps=final["step"],
                        tokens=final["tokens_seen"], wall_time_s=final["wall_time_s"],
                        params=final["params"], alpha=final["eval"].get("alpha")))
    return out


def drafters_for(target, args) -> tuple[list[tuple[str, object, object]], list[str]]:
    """(label, drafter, draft model) triples, and notes on the drafters that are missing."""
    import specjax
    from specjax.drafters import (
        EagleDrafter,
        EarlyExitDrafter,
        MedusaDrafter,
        ModelDrafter,
        NgramDrafter,
    )

    K, L = args.K, args.L
    out, missing = [], []
    ckpt = "random" if args.smoke else None
    for label, cls in (("eagle", EagleDrafter), ("medusa", MedusaDrafter)):
        for n in (None, *args.draft_vocab):
            drafter = cls(K=K, L=L, checkpoint=ckpt, draft_vocab=n)
            try:
                drafter.module(target, None)
            except ValueError as e:
                if n is None:
                    missing.append(f"{label}: {e}")
                break
            out.append((label if n is None else f"{label} (draft vocab {n})", drafter, None))
    if args.smoke:
        from specjax.models.config import tiny_config
        from specjax.models.decoder import Decoder
        from specjax.models.toy import ToyLoaded

        out.append(("family d48-l3 (random)", ModelDrafter(K=K, L=L), ToyLoaded(
            name="tiny-draft", model=Decoder.random(tiny_config("llama"), seed=1))))
    else:
        for name in family_members(target.name):
            out.append((name.rsplit("/", 1)[-1], ModelDrafter(K=K, L=L),
                        specjax.load_model(name)))
        if not out or not any(lbl.startswith("d") for lbl, _, _ in out):
            missing.append("family: no trained member; specjax-train drafter=family "
                           f"target={target.name} module.hidden_size=D module.num_layers=N")
    layers = min(args.early_exit_layers, target.model.config.num_layers - 1)
    out.append((f"early_exit ({layers} layers)", EarlyExitDrafter(K=K, L=L, num_layers=layers),
                None))
    out.append(("ngram", NgramDrafter(K=K, L=L), None))
    return out, missing


def prompts_for(target, suite: str, n: int, smoke: bool):
    if smoke:
        return [[5, 9, 11, 5, 9, 11, 5], [7, 3, 2, 1]][:n]
    from specjax.prompts import PromptSuite

    return PromptSuite(suite=suite, n=n).texts(target)


def be_ci(per_prompt: list[dict]) -> tuple[float, float]:
    """95 % percentile-bootstrap CI of BE over the prompts (``specjax.eval.bootstrap``: the same
    seeded resamples for every drafter, so the CIs of two drafters are paired)."""
    from specjax.eval import bootstrap

    stat = bootstrap.ratio([p["new_tokens"] for p in per_prompt],
                           [p["target_calls"] for p in per_prompt])
    _, lo, hi = bootstrap.estimate(stat, len(per_prompt))
    return lo, hi


def run(args, on_row=None) -> dict:
    """The benchmark; ``on_row(result so far)`` after every row (main writes the table then, so
    a run stopped midway keeps every row it measured)."""
    import specjax
    from specjax.eval.metrics import speedup
    from specjax.models.sampling import Sampling
    from specjax.training.loop import load_target

    target = load_target(args.target)
    drafters, missing = drafters_for(target, args)
    if args.drafters:
        drafters = [d for d in drafters if d[0].startswith(tuple(args.drafters))]
    common = dict(max_new_tokens=args.max_new_tokens, seed=args.seed, batch_size=args.batch_size,
                  progress=not args.quiet)
    if args.smoke:
        common["compiler_options"] = {"xla_backend_optimization_level": 0}
    rows = []
    result = {"target": target.name, "K": args.K, "L": args.L, "verifier": args.verifier,
              "n": args.n, "max_new_tokens": args.max_new_tokens, "batch_size": args.batch_size,
              "rows": rows, "missing": missing, "smoke": bool(args.smoke),
              "trained": [] if args.smoke else trained_runs(target.name), "partial": True}
    for suite in args.suites:
        prompts = prompts_for(target, suite, args.n, args.smoke)
        for sname in args.samplings:
            sampling = Sampling(temperature=SAMPLINGS[sname])
            ar = specjax.generate(target, prompts, sampling=sampling, **common)
            for label, drafter, draft in drafters:
                t0 = time.perf_counter()
                sd = specjax.generate(target, prompts, draft=draft, drafter=drafter,
                                      verifier=args.verifier, sampling=sampling, **common)
                s = sd.summary
                rows.append(dict(drafter=label, suite=suite, sampling=sname,
                                 block_efficiency=s["block_efficiency"],
                                 block_efficiency_ci=be_ci(sd.per_prompt),
                                 mean_accepted=s["mean_accepted"],
                                 per_position_acceptance=s["per_position_acceptance"],
                                 speedup=speedup(sd, ar), sd_tokens_per_s=s["tokens_per_s"],
                                 ar_tokens_per_s=ar.summary["tokens_per_s"],
                                 greedy_matches_ar=(sd.tokens == ar.tokens) if sname == "greedy"
                                 else None, seconds=time.perf_counter() - t0))
                if not args.quiet:
                    r = rows[-1]
                    print(f"{suite:9s} {sname:6s} {label:24s} BE {r['block_efficiency']:.2f} "
                          f"speedup {r['speedup']:.2f}", file=sys.stderr, flush=True)
                if on_row is not None:
                    on_row(result)
    result["partial"] = False
    return result


def render(result: dict) -> str:
    lines = [f"# Drafters on {result['target']}" + (" (SMOKE: untrained tiny decoder)"
                                                    if result["smoke"] else ""), "",
             f"K = {result['K']}, L = {result['L']}, verifier `{result['verifier']}`, "
             f"{result['n']} prompts per suite, {result['max_new_tokens']} new tokens, batch "
             f"{result['batch_size']}; AR and SD on the same prompts and seed in one session "
             "(`python -m benchmarks.drafters`). BE = tokens per target call; "
             "acceptance per position = P(τ > i); speedup = SD tokens/s ÷ AR tokens/s, compile "
             "excluded. BE's 95 % CI: percentile bootstrap over the prompts (2,000 seeded "
             "resamples, the same for every drafter); the speedup is one wall-time ratio per "
             "cell (no CI).", "",
             *(["**Partial:** the run was stopped (or is still running) after "
                f"{len(result['rows'])} rows.", ""] if result.get("partial") else []),
             "| suite | sampling | drafter | BE [95 % CI] | accepted/step | "
             "acceptance per position | speedup | greedy == AR |",
             "|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        acc = " / ".join(f"{a:.2f}" for a in r["per_position_acceptance"])
        same = "" if r["greedy_matches_ar"] is None else ("yes" if r["greedy_matches_ar"]
                                                           else "**no**")
        lo, hi = r.get("block_efficiency_ci", (float("nan"),) * 2)
        lines.append(f"| {r['suite']} | {r['sampling']} | {r['drafter']} | "
                     f"{r['block_efficiency']:.2f} [{lo:.2f}, {hi:.2f}] | "
                     f"{r['mean_accepted']:.2f} | {acc} | "
                     f"{r['speedup']:.2f} | {same} |")
    if result.get("trained"):
        lines += ["", "Trained runs (`specjax-train`, the latest finished run of each; held-out "
                  "α = mean Σ min(p, q) at T = 1 for the first drafted token):", "",
                  "| drafter | run | steps | tokens | wall time | params | held-out α |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {t['drafter']} | {t['run']} | {t['steps']} | {t['tokens']:,} | "
                  f"{t['wall_time_s'] / 60:.1f} min | {t['params'] / 1e6:.2f}M | "
                  f"{t['alpha']:.3f} |" for t in result["trained"]]
    if result["missing"]:
        lines += ["", "Not measured (no trained run):", ""]
        lines += [f"- {m}" for m in result["missing"]]
    return "\n".join(lines) + "\n"


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="smollm2-135m-instruct")
    ap.add_argument("--suites", nargs="+", default=["humaneval", "gsm8k", "mt_bench"])
    ap.add_argument("--samplings", nargs="+", default=["greedy", "t07"], choices=SAMPLINGS)
    ap.add_argument("--n", type=int, default=8, help="prompts per suite")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--K", type=int, default=1)
    ap.add_argument("--L", type=int, default=4)
    ap.add_argument("--verifier", default="token")
    ap.add_argument("--early-exit-layers", type=int, default=10)
    ap.add_argument("--draft-vocab", type=int, nargs="*", default=[8192],
                    help="also run eagle/medusa drafting only the n most frequent tokens")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--drafters", nargs="+", default=None,
                    help="only drafters whose label starts with one of these (e.g. eagle ngram)")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny random decoder and untrained heads, 2 prompts, 6 tokens")
    args = ap.parse_args(argv)
    if args.smoke:
        args.target, args.suites, args.n = "tiny-llama", ["smoke"], 2
        args.max_new_tokens, args.L = min(args.max_new_tokens, 6), min(args.L, 3)
        args.draft_vocab = [min(n, 32) for n in args.draft_vocab]
    return args


def write(result: dict, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(result))
    out.with_suffix(".json").write_text(json.dumps(result, indent=1))


def main(argv=None) -> dict:
    args = parse_args(argv)
    result = run(args, on_row=lambda partial: write(partial, args.out))
    write(result, args.out)
    print(f"wrote {args.out} and {args.out.with_suffix('.json')}", file=sys.stderr)
    return result


if __name__ == "__main__":
    main()
