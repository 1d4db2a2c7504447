"""Decode speed as a user sees it: ``specjax.generate``, greedy, batch 1, 64 new tokens.

    python -m experiments.benchmarks.api_decode [--models ...] [--tokens 64]

Everything the decode loop does per token counts here (the jitted ``while_loop`` with sampling,
EOS checks and bookkeeping), but compilation does not (``generate`` reports it apart). The
prompt is one short HumanEval suite prompt, so prefill is a small share of the wall time; its
share is removed by timing a 1-token run of the same prompt and subtracting. The floor is the
float32 weight bytes over the all-core copy bandwidth measured in the same run (before and
after, the higher kept).
"""

from __future__ import annotations

import argparse

import specjax
from experiments.benchmarks.decode_speed import copy_bandwidth
from specjax.models.loader import MODEL_NAMES

PROMPT = "def fibonacci(n):"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODEL_NAMES)[:0:-1],
                        choices=MODEL_NAMES)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    bw = copy_bandwidth()
    greedy = specjax.Sampling(temperature=0.0)
    rows = []
    for name in args.models:
        model = specjax.load_model(name)
        ids = model.encode(PROMPT)
        one = specjax.generate(model, [ids], sampling=greedy, max_new_tokens=1, progress=False)
        run = specjax.generate(model, [ids], sampling=greedy, max_new_tokens=args.tokens,
                               progress=False)
        n = run.summary["new_tokens"]
        ms = 1e3 * (run.summary["wall_time_s"] - one.summary["wall_time_s"]) / max(n - 1, 1)
        rows.append((name, n, ms, 4 * model.config.num_params))
        print(f"{name}: {ms:.1f} ms/token over {n} tokens", flush=True)
        del model
    bw = max(bw, copy_bandwidth())
    print(f"\nall-core copy bandwidth {bw:.1f} GB/s (read + write)\n")
    print("| model | ms / token (generate, greedy, batch 1) | floor ms | floor / measured |")
    print("|---|---|---|---|")
    for name, _, ms, nbytes in rows:
        floor = 1e3 * nbytes / (bw * 1e9)
        print(f"| {name} | {ms:.1f} | {floor:.1f} | {floor / ms:.2f} |")


if __name__ == "__main__":
    main()
