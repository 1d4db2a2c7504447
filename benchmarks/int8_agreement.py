"""int8 weights (``specjax.models.quant``) against float32: decode speed and top-1 agreement.

    python -m benchmarks.int8_agreement [--model qwen2.5-coder-1.5b-instruct]
        [--n 8] [--tokens 64] [--activations float32 int8] [--sequences FILE.json]
        [--out paper_repro/results/int8_cpu.md]

- Speed: ``specjax.generate``, greedy, batch 1, ``--tokens`` new tokens on one HumanEval suite
  prompt, per-token time with prefill removed (``timing.per_token_ms``: a 1-token run
  subtracted, median of 3), float32 and int8 in
  the same process, side by side.
- Agreement: the first ``--n`` prompts of each vendored suite (chat template) are decoded
  greedily by the float32 model; the int8 model then reads each float32 sequence (teacher
  forcing, one uncached forward) and the table counts the generated positions where its argmax
  equals the float32 token. Rounding the weights changes the target law, so this is the share
  of greedy positions on which the quantized target would decide the same. Beside it, the mean
  KL(float32 || int8) of the next-token laws over those positions (nats).
- ``--activations int8`` adds the int8 model whose prefill rounds the rows too (W8A8,
  ``prefill_activations="int8"``), read as it runs: the prompt through ``passes.prefill`` (int8
  rows), the continuation through one cached multi-row pass (``score_tree``, float32 rows, the
  decode's numerics), so the prompt's cache carries the W8A8 rounding into every position.
- ``--activations all`` adds the int8 model with int8 rows in every pass (W8A8 prefill and
  ``decode_activations="int8"``: decode and tree passes too), read the same way.
- ``--activations bfloat16`` adds the float32 model whose prefill computes in bfloat16
  (``prefill_activations="bfloat16"``), read the same way (its decode is float32's).
"""

from __future__ import annotations

import argparse
import gc
import json
from pathlib import Path

import jax
import numpy as np

from benchmarks import command_line, write_report
from benchmarks.timing import per_token_ms
from specjax.platform import hardware, provenance

SUITES = ("humaneval", "gsm8k", "alpaca", "mt_bench")
#: ``--activations`` value: (weights, prefill_activations, decode_activations, table label).
VARIANTS = {
    "float32": ("int8", "float32", "float32", "int8"),
    "int8": ("int8", "int8", "float32", "int8, int8 rows in the prefill (W8A8)"),
    "all": ("int8", "int8", "int8", "int8, int8 rows in every pass (W8A8 prefill, decode, tree)"),
    "bfloat16": ("float32", "bfloat16", "float32", "float32, bfloat16 prefill"),
}


def float32_greedy(model, n: int, tokens: int) -> dict[str, list[tuple[list[int], list[int]]]]:
    """Per suite: (prompt ids, float32 greedy continuation) for its first ``n`` prompts."""
    import specjax
    from specjax.prompts import PromptSuite

    out = {}
    for suite in SUITES:
        ids = [model.encode(t) for t in PromptSuite(suite=suite, n=n, chat=True).texts(model)]
        res = specjax.generate(model, ids, sampling=specjax.Sampling(temperature=0.0),
                               max_new_tokens=tokens, progress=False)
        out[suite] = list(zip(ids, res.tokens, strict=True))
        print(f"float32 greedy: {suite} done", flush=True)
    return out


def continuation_logits(model, prompt: list[int], cont: list[int]) -> np.ndarray:
    """[len(cont), V] logits predicting each continuation token. A model loaded with
    ``prefill_activations="int8"`` runs as the decode loop runs it (prefill, then float32 rows
    on the cache); any other reads the whole sequence in one uncached forward."""
    if model.model.prefill_activations == model.model.decode_activations == "float32":
        return model.forward(prompt + cont)[len(prompt) - 1: len(prompt) + len(cont) - 1]
    from specjax.models.passes import JittedPasses

    jp = JittedPasses(model.model)
    n = len(prompt)
    cache = jp.init_cache(n + len(cont) + 8, max(n, len(cont)))
    cache = jp.prefill(cache, jax.numpy.asarray(prompt, jax.numpy.int32), n)
    drafts = jax.numpy.asarray([cont[:-1]], jax.numpy.int32)
    logits, _, _ = jp.score_tree(cache, jax.numpy.int32(prompt[-1]), drafts)
    return np.asarray(logits[0])


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def agreement(model, sequences, reference=None) -> dict[str, tuple[int, int, float]]:
    """Per suite: (positions where the model's argmax equals the given token, positions, summed
    KL(reference || model) over them; NaN without ``reference``, per suite the float32 log-laws
    of each sequence)."""
    out = {}
    for suite, seqs in sequences.items():
        same = total = 0
        kl = 0.0 if reference is not None else float("nan")
        for i, (prompt, cont) in enumerate(seqs):
            logits = continuation_logits(model, prompt, cont)
            same += int(np.sum(logits.argmax(axis=-1) == np.asarray(cont)))
            total += len(cont)
            if reference is not None:
                p = reference[suite][i]
                kl += float(np.sum(np.exp(p) * (p - log_softmax(logits))))
        out[suite] = (same, total, kl)
    return out


def reference_laws(model, sequences) -> dict[str, list[np.ndarray]]:
    """The float32 model's next-token log-laws at each continuation position."""
    return {suite: [log_softmax(continuation_logits(model, p, c)) for p, c in seqs]
            for suite, seqs in sequences.items()}


def main():
    import specjax

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-1.5b-instruct")
    parser.add_argument("--n", type=int, default=8, help="prompts per suite")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--activations", nargs="+", default=["float32"],
                        choices=list(VARIANTS),
                        help="rows of the int8 model (int8: W8A8 prefill; all: every pass), or "
                             "bfloat16: the float32 model with a bfloat16 prefill")
    parser.add_argument("--sequences", help="JSON file to keep / reuse the float32 continuations")
    parser.add_argument("--out", default="paper_repro/results/int8_cpu.md")
    args = parser.parse_args()

    f32 = specjax.load_model(args.model)
    prompt = f32.encode("def fibonacci(n):")
    ms_f32, _ = per_token_ms(f32, prompt, args.tokens)
    print(f"float32: {ms_f32:.1f} ms/token", flush=True)
    key = dict(model=args.model, n=args.n, tokens=args.tokens)
    stored = json.loads(Path(args.sequences).read_text()) if args.sequences and Path(
        args.sequences).exists() else None
    if stored is not None and stored["key"] == key:
        sequences = {k: [tuple(pc) for pc in v] for k, v in stored["sequences"].items()}
        print(f"float32 continuations read from {args.sequences}", flush=True)
    else:
        sequences = float32_greedy(f32, args.n, args.tokens)
        if args.sequences:
            Path(args.sequences).write_text(json.dumps(dict(key=key, sequences=sequences)))
    reference = reference_laws(f32, sequences)
    del f32
    gc.collect()
    agree, ms = {}, {}
    for act in args.activations:
        weights, prefill, decode, _ = VARIANTS[act]
        q8 = specjax.load_model(args.model, weights=weights, prefill_activations=prefill,
                                decode_activations=decode)
        ms[act], _ = per_token_ms(q8, prompt, args.tokens)
        print(f"{act}: {ms[act]:.1f} ms/token", flush=True)
        agree[act] = agreement(q8, sequences, reference)
        del q8
        gc.collect()

    names = {act: label for act, (*_, label) in VARIANTS.items()}
    lines = [
        "# int8 weights (weight-only, one scale per output and 64 columns) and narrower rows vs "
        "float32", "",
        f"Generated by `{command_line('benchmarks.int8_agreement')}` at commit "
        f"{provenance.commit()} on {hardware.describe()}. Same process, "
        f"{jax.devices()[0].platform}.", "",
        "| weights | ms / token (generate, greedy, batch 1) | speed-up |", "|---|---|---|",
        f"| float32 | {ms_f32:.1f} | 1.00x |",
        *(f"| {names[a]} | {ms[a]:.1f} | {ms_f32 / ms[a]:.2f}x |" for a in args.activations), "",
        "Top-1 agreement of the int8 model with float32 greedy decoding (teacher-forced on the "
        f"float32 continuation, {args.tokens} positions per prompt), and the mean "
        "KL(float32 || int8) of the next-token laws at those positions (nats):", "",
        "| suite | model | prompts | positions | int8 argmax = float32 token | mean KL |",
        "|---|---|---|---|---|---|"]
    for act in args.activations:
        same_all = total_all = 0
        kl_all = 0.0
        for suite, (same, total, kl) in agree[act].items():
            lines.append(f"| {suite} | {names[act]} | {args.n} | {total} | {same / total:.2%} | "
                         f"{kl / total:.4f} |")
            same_all, total_all, kl_all = same_all + same, total_all + total, kl_all + kl
        lines.append(f"| all | {names[act]} | {args.n * len(agree[act])} | {total_all} | "
                     f"{same_all / total_all:.2%} | {kl_all / total_all:.4f} |")
    write_report("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
