"""specjax beside the engines a researcher already has, on the same machine and prompts.

    python -m experiments.benchmarks.peers [--n 5] [--max-new-tokens 64]
        [--weights float32 int8] [--out paper_repro/results/peers_cpu.md]

Workload: the first ``--n`` HumanEval suite prompts in the target's chat template (ChatML for
Qwen), greedy, ``--max-new-tokens`` new tokens, batch 1, Qwen2.5-Coder-1.5B-Instruct as the
target and 0.5B-Instruct as the draft. Every engine gets the same token ids (specjax's GGUF
tokenizer), and is timed on total new tokens / total time, compile and first-call costs excluded for
every engine alike (specjax reports wall time without compilation; HF runs a short warm-up).

- specjax: autoregressive; speculative with the 0.5B draft (token verifier, K=1, L=4); and with
  n-gram prompt lookup (K=1, L=4); once per ``--weights`` format (int8: target and draft
  quantized at load, ``specjax.models.quant``, a slightly different target law than float32,
  so its rows are compared with its own AR and its AR output with float32's).
- HF transformers on torch CPU, float32, weights read from the same GGUF files
  (``from_pretrained(gguf_file=...)``): ``generate``, assisted generation with the 0.5B, prompt
  lookup decoding. Tokens per target call are counted by wrapping the target's ``forward``.
- llama.cpp through ``llama-cpp-python``: only if it is installed (PyPI ships it as a source
  distribution that compiles llama.cpp, so it is not part of the ``peers`` extra).

A missing peer is skipped with a line that says why. "= own AR" says whether the engine's
speculative output equals its own autoregressive output token for token (it must, greedy).
"""

from __future__ import annotations

import argparse
import gc
import os
import time
from importlib import metadata
from pathlib import Path

import numpy as np

from experiments.benchmarks import command_line, write_report
from specjax import hardware
from specjax.models.quant import WEIGHT_FORMATS

TARGET, DRAFT = "qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct"


def prompt_ids(n: int) -> tuple[list[list[int]], object]:
    import specjax
    from specjax.data import PromptSuite

    target = specjax.load_model(TARGET)
    suite = PromptSuite(suite="humaneval", n=n, chat=True)
    return [target.encode(t) for t in suite.texts(target)], target


def run_specjax(ids, target, max_new: int, weights: str = "float32") -> list[dict]:
    import specjax
    from specjax.drafters import ModelDrafter, NgramDrafter

    if weights != "float32":
        target = specjax.load_model(TARGET, weights=weights)
    draft = specjax.load_model(DRAFT, weights=weights)
    greedy = specjax.Sampling(temperature=0.0)
    rows = []
    for label, kw in (("AR", {}),
                      ("SD, 0.5B draft (K=1, L=4)",
                       dict(draft=draft, drafter=ModelDrafter(K=1, L=4), verifier="token")),
                      ("SD, n-gram lookup (K=1, L=4)",
                       dict(drafter=NgramDrafter(K=1, L=4), verifier="token"))):
        # wall_time_s excludes compilation (generate compiles before it starts the clock)
        res = specjax.generate(target, ids, sampling=greedy, max_new_tokens=max_new,
                               batch_size=1, **kw)
        s = res.summary
        engine = "specjax (JAX, fp32)" if weights == "float32" else f"specjax (JAX, {weights})"
        rows.append(dict(engine=engine, method=label, tokens=res.tokens,
                         new_tokens=s["new_tokens"], seconds=s["wall_time_s"],
                         per_call=s["block_efficiency"] if "block_efficiency" in s else 1.0))
        print(rows[-1]["method"], f"{s['new_tokens'] / s['wall_time_s']:.2f} tok/s", flush=True)
    return rows


class _CallCounter:
    def __init__(self, model):
        self.calls = 0
        self._forward = model.forward

        def counted(*args, **kwargs):
            self.calls += 1
            return self._forward(*args, **kwargs)

        model.forward = counted


def run_hf(ids, max_new: int) -> list[dict]:
    import torch
    from transformers import AutoModelForCausalLM

    from specjax.assets import fetch

    torch.set_num_threads(os.cpu_count() or 1)

    def load(name):
        path = Path(fetch(name))
        return AutoModelForCausalLM.from_pretrained(
            str(path.parent), gguf_file=path.name, torch_dtype=torch.float32).eval()

    target = load(TARGET)
    counter = _CallCounter(target)
    assistant = load(DRAFT)
    rows = []
    for label, kw in (("AR", {}),
                      ("assisted generation, 0.5B draft", dict(assistant_model=assistant)),
                      ("prompt lookup", dict(prompt_lookup_num_tokens=4))):
        def gen(p, kw=kw, new=max_new):
            x = torch.tensor([p])
            with torch.inference_mode():
                out = target.generate(x, attention_mask=torch.ones_like(x), do_sample=False,
                                      max_new_tokens=new,
                                      pad_token_id=0, **kw)
            return out[0, len(p):].tolist()

        gen(ids[0], new=4)  # warm-up
        counter.calls, total_new, tokens = 0, 0, []
        t = time.perf_counter()
        for p in ids:
            tokens.append(gen(p))
            total_new += len(tokens[-1])
        seconds = time.perf_counter() - t
        rows.append(dict(engine="HF transformers (torch CPU, fp32)", method=label, tokens=tokens,
                         new_tokens=total_new, seconds=seconds,
                         per_call=total_new / max(counter.calls, 1)))
        print(label, f"{total_new / seconds:.2f} tok/s", flush=True)
    return rows


def table(rows: list[dict], skipped: list[str], head: str) -> str:
    out = [head, "", "| engine | method | tokens/s | speedup vs own AR | tokens / target call | "
           "= own AR |", "|---|---|---|---|---|---|"]
    base = {}
    for r in rows:
        tps = r["new_tokens"] / r["seconds"]
        if r["method"] == "AR":
            base[r["engine"]] = r
        ar = base[r["engine"]]
        same = "-" if r is ar else ("yes" if r["tokens"] == ar["tokens"] else "NO")
        speed = tps / (ar["new_tokens"] / ar["seconds"])
        out.append(f"| {r['engine']} | {r['method']} | {tps:.2f} | {speed:.2f}x | "
                   f"{r['per_call']:.2f} | {same} |")
    spec_ars = [r for r in rows if r["engine"].startswith("specjax") and r["method"] == "AR"]
    hf_ar = next((r for r in rows if r["engine"].startswith("HF") and r["method"] == "AR"), None)
    fp32_ar = next((r for r in spec_ars if r["engine"] == "specjax (JAX, fp32)"), hf_ar)
    out.append("")
    for spec_ar in spec_ars:
        if hf_ar:
            ratio = (spec_ar["new_tokens"] / spec_ar["seconds"]) / (hf_ar["new_tokens"]
                                                                  / hf_ar["seconds"])
            out.append(f"{spec_ar['engine']} AR / HF fp32 AR tokens/s: {ratio:.2f}x  ")
        other = hf_ar if spec_ar is fp32_ar else fp32_ar
        if other is not None and other is not spec_ar:
            agree = sum(a == b for a, b in zip(spec_ar["tokens"], other["tokens"], strict=True))
            first = [next((i for i, (x, y) in enumerate(zip(a, b, strict=False))
                           if x != y), len(a))
                     for a, b in zip(spec_ar["tokens"], other["tokens"], strict=True)]
            out.append(f"{spec_ar['engine']} and {other['engine']} greedy AR outputs identical on "
                       f"{agree}/{len(other['tokens'])} prompts; first difference at tokens "
                       f"{first} (rounding can flip a near-tie)  ")
    out += ["", *[f"- skipped: {s}" for s in skipped]]
    return "\n".join(out) + "\n"


def versions() -> str:
    """The engines' package versions: a peer's speed moves with its release and build (HF's
    float32 decode ran 2.6x faster on one VM than on another, see the README)."""
    found = []
    for package in ("jax", "jaxlib", "torch", "transformers"):
        try:
            found.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            found.append(f"{package} not installed")
    return ", ".join(found)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--engines", nargs="+", default=["specjax", "hf", "llamacpp"],
                        choices=["specjax", "hf", "llamacpp"])
    parser.add_argument("--weights", nargs="+", default=["float32", "int8"],
                        choices=list(WEIGHT_FORMATS), help="specjax weight formats to run")
    parser.add_argument("--out", default="paper_repro/results/peers_cpu.md")
    args = parser.parse_args()
    ids, target = prompt_ids(args.n)
    rows, skipped = [], []
    if "specjax" in args.engines:
        for weights in args.weights:
            rows += run_specjax(ids, target, args.max_new_tokens, weights)
            gc.collect()
    del target
    gc.collect()
    if "hf" in args.engines:
        try:
            import torch  # noqa: F401
            import transformers  # noqa: F401
        except ImportError as e:
            skipped.append(f"HF transformers: not installed ({e}); pip install -e '.[peers]'")
        else:
            rows += run_hf(ids, args.max_new_tokens)
    if "llamacpp" in args.engines:
        try:
            import llama_cpp  # noqa: F401
        except ImportError:
            skipped.append("llama.cpp: llama-cpp-python is not installed; PyPI has no wheel "
                           "for it (a source build of llama.cpp only), so it is not in the "
                           "peers extra")
        else:
            skipped.append("llama.cpp: installed, but this benchmark has no driver for it yet")
    head = (f"# specjax vs peers\n\nGenerated by `{command_line('experiments.benchmarks.peers')}`. "
            f"{args.n} HumanEval suite prompts, chat template, greedy, {args.max_new_tokens} new "
            f"tokens, batch 1; target {TARGET}, draft {DRAFT}; {hardware.describe()}, "
            f"load average {os.getloadavg()[0]:.1f}; {versions()}; prompt lengths "
            f"{[len(p) for p in ids]}; mean of {np.mean([len(p) for p in ids]):.0f} tokens.")
    write_report(table(rows, skipped, head), args.out)


if __name__ == "__main__":
    main()
