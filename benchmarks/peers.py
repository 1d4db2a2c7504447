"""specjax beside the engines a researcher already has, on the same machine and prompts.

    python -m benchmarks.peers [--n 5] [--max-new-tokens 64]
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
- llama.cpp through ``llama-cpp-python`` (in the ``peers`` extra; PyPI ships it as a source
  distribution, so installing it compiles llama.cpp), ``n_threads`` = all cores, greedy
  (``temp=0``: llama.cpp's greedy sampler), once per ``--llamacpp-files`` kind: ``as-shipped``
  reads the GGUF files specjax loads (their own quantized tensor types, which specjax
  dequantizes to float32 or re-quantizes to its int8); ``F32`` and ``Q8_0`` are written from
  them by llama.cpp's quantizer (``llama_model_quantize``, all matrices one type) into
  ``<cache>/llamacpp/``. Rows: AR (``Llama.generate``); prompt lookup
  (``LlamaPromptLookupDecoding``, the package's own draft model); and the 0.5B draft through
  ``SpecjaxGreedyDraft``, our adapter for the package's ``LlamaDraftModel`` interface (it runs a
  second ``Llama`` greedily; the Python API has no draft-model speculation of its own).
  Tokens per target call count the target's ``eval`` calls, prefill included. On a VM that
  reports AMX the package's default ``-march=native`` build crashed in llama.cpp's AMX kernels
  on quantized files (docs/benchmarks.md has the build used instead).

Each engine (and each specjax weight format, each llama.cpp file kind) runs in a fresh Python
process started for it (``isolated``): none inherits another's thread pools, OpenMP runtime or
freed memory (torch's and llama.cpp's OpenMP threads outlive their calls in a process), and each
starts from the same empty process. The header prints the load average and the share of idle CPU
time over a few seconds at the start and at the end: on some VMs the 1-minute load sits near 1-2
on an idle machine (kernel threads), so the idle share is the test that the machine was quiet.

A missing peer is skipped with a line that says why. "= own AR" says whether the engine's
speculative output equals its own autoregressive output token for token (it must, greedy);
"= specjax fp32 AR" counts the prompts whose output token ids equal specjax float32 AR's.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import importlib.util
import math
import multiprocessing
import os
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from importlib import metadata
from pathlib import Path

import numpy as np

from benchmarks import command_line, write_report
from specjax.models.quant import WEIGHT_FORMATS
from specjax.platform import hardware, provenance

TARGET, DRAFT = "qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct"


def prompt_ids(n: int) -> tuple[list[list[int]], tuple[int, ...]]:
    """The first ``n`` prompts' token ids in the target's chat template, and its EOS ids."""
    import specjax
    from specjax.prompts import PromptSuite

    target = specjax.load_model(TARGET)
    suite = PromptSuite(suite="humaneval", n=n, chat=True)
    return ([target.encode(t) for t in suite.texts(target)],
            tuple(int(e) for e in (target.eos_ids or ())))


def isolated(fn, *args):
    """``fn(*args)`` in a fresh Python process (``spawn``), its result or its exception returned
    here; environment variables set before the call reach it."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


def cpu_idle_share(seconds: float = 5.0) -> float:
    """The share of all cores' time spent idle over ``seconds`` (``/proc/stat``; NaN where there
    is none): a direct test that nothing else ran, unlike the load average, which counts
    runnable kernel threads too."""
    def times():
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        return fields[3] + fields[4], sum(fields)  # idle + iowait, all

    try:
        idle0, all0 = times()
        time.sleep(seconds)
        idle1, all1 = times()
    except (OSError, ValueError, IndexError):
        return float("nan")
    return (idle1 - idle0) / max(all1 - all0, 1)


def quiet() -> str:
    """The machine's load now, as the header prints it."""
    return (f"load average (1 min) {os.getloadavg()[0]:.2f}, "
            f"{100 * cpu_idle_share():.0f} % of CPU time idle over 5 s")


def run_specjax(ids, max_new: int, weights: str = "float32") -> list[dict]:
    import specjax
    from specjax.drafters import ModelDrafter, NgramDrafter

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


def timed_row(engine: str, label: str, gen, ids, counter) -> dict:
    """One peer row: a 4-token warm-up, then every prompt through ``gen`` in one timed span;
    tokens per target call from ``counter`` (calls counted after the warm-up)."""
    gen(ids[0], new=4)
    counter.calls, tokens = 0, []
    t = time.perf_counter()
    for p in ids:
        tokens.append(gen(p))
    seconds = time.perf_counter() - t
    total_new = sum(len(x) for x in tokens)
    print(engine, label, f"{total_new / seconds:.2f} tok/s", flush=True)
    return dict(engine=engine, method=label, tokens=tokens, new_tokens=total_new,
                seconds=seconds, per_call=total_new / max(counter.calls, 1))


class _CallCounter:
    """Counts the calls of ``model.<method>`` (the target's forward passes)."""

    def __init__(self, model, method: str = "forward"):
        self.calls = 0
        self._forward = getattr(model, method)

        def counted(*args, **kwargs):
            self.calls += 1
            return self._forward(*args, **kwargs)

        setattr(model, method, counted)


def run_hf(ids, max_new: int) -> list[dict]:
    import torch
    from transformers import AutoModelForCausalLM

    from specjax.platform.assets import fetch

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

        rows.append(timed_row("HF transformers (torch CPU, fp32)", label, gen, ids, counter))
    return rows


#: llama.cpp weight files: the project's GGUF files as they ship, and files that llama.cpp's
#: quantizer writes from them (every matrix one type; 1-D tensors stay F32).
LLAMACPP_FILES = ("as-shipped", "F32", "Q8_0")
#: Draft length of the speculative llama.cpp rows (specjax's L, HF's prompt lookup tokens).
LLAMACPP_L = 4


def type_mix(tensors) -> str:
    """``(type name, element count)`` pairs as each type's share of the elements, largest first,
    e.g. "Q4_K 76.1 %, Q6_K 23.8 %, F32 0.1 %"."""
    counts = Counter()
    for name, n in tensors:
        counts[name] += int(n)
    total = sum(counts.values())
    return ", ".join(f"{name} {100 * n / total:.1f} %" for name, n in counts.most_common())


def gguf_types(path) -> str:
    """The tensor types a GGUF file holds (``type_mix`` of its tensors) and its file type."""
    from gguf import GGUFReader, LlamaFileType

    reader = GGUFReader(str(path))
    field = reader.fields.get("general.file_type")
    kind = ""
    if field is not None:
        value = int(field.parts[field.data[0]][0])
        try:
            kind = LlamaFileType(value).name.removeprefix("MOSTLY_").removeprefix("ALL_") + ": "
        except ValueError:
            kind = f"file type {value}: "
    return kind + type_mix((t.tensor_type.name, t.n_elements) for t in reader.tensors)


def llamacpp_file(name: str, kind: str) -> Path:
    """The GGUF file llama.cpp reads for model ``name``: specjax's file itself (``as-shipped``),
    or a ``F32`` / ``Q8_0`` file written from it once by ``llama_model_quantize`` (llama.cpp
    dequantizes each tensor to float32 first, so F32 holds the float32 weights specjax fp32 uses
    and Q8_0 re-quantizes those in blocks of 32)."""
    from specjax.platform.assets import cache_root, fetch

    source = Path(fetch(name))
    if kind == "as-shipped":
        return source
    out = cache_root() / "llamacpp" / f"{name}.{kind}.gguf"
    if out.exists():
        return out
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = {"F32": llama_cpp.LLAMA_FTYPE_ALL_F32,
                    "Q8_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0}[kind]
    params.allow_requantize = True  # the source is already quantized
    params.pure = True  # every matrix, embedding and head included, in ``kind``
    params.nthread = os.cpu_count() or 1
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_suffix(".partial")
    t = time.perf_counter()
    status = llama_cpp.llama_model_quantize(str(source).encode(), str(partial).encode(),
                                            ctypes.byref(params))
    if status != 0:
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"llama_model_quantize({source.name} -> {kind}) returned {status}")
    partial.rename(out)
    print(f"wrote {out} in {time.perf_counter() - t:.0f} s", flush=True)
    return out


def greedy_draft(draft, input_ids, n: int) -> np.ndarray:
    """The ``n`` tokens a ``llama_cpp.Llama`` ``draft`` generates greedily after ``input_ids``.
    ``Llama.generate`` keeps the KV cache of the longest prefix it shares with the previous call,
    so a call evaluates the tokens the target accepted since then and ``n - 1`` drafts."""
    out = []
    stream = draft.generate([int(t) for t in input_ids], temp=0.0, top_k=1, repeat_penalty=1.0)
    try:
        for token in stream:
            out.append(int(token))
            if len(out) >= n:
                break
    finally:
        stream.close()
    return np.array(out, dtype=np.intc)


def llamacpp_draft_adapter(draft, n: int):
    """Our adapter, not a llama.cpp feature: ``llama_cpp.llama_speculative`` offers the abstract
    ``LlamaDraftModel`` (context ids in, draft ids out) and only an n-gram implementation of it;
    this one drafts ``n`` tokens with a second ``Llama`` (the 0.5B), greedily."""
    from llama_cpp.llama_speculative import LlamaDraftModel

    class SpecjaxGreedyDraft(LlamaDraftModel):
        def __call__(self, input_ids, /, **kwargs):
            return greedy_draft(draft, input_ids, n)

    return SpecjaxGreedyDraft()


def run_llamacpp(ids, max_new: int, kinds, eos_ids) -> tuple[list[dict], list[str]]:
    import llama_cpp
    from llama_cpp import GGML_TYPE_F32, Llama
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    threads = os.cpu_count() or 1
    # room for the longest prompt, its new tokens and a draft past them
    n_ctx = 64 * math.ceil((max(map(len, ids)) + max_new + LLAMACPP_L + 8) / 64)
    eos = set(eos_ids)
    rows = []
    notes = [f"- llama.cpp build: {llama_cpp.llama_print_system_info().decode()}; "
             f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}"]
    for kind in kinds:
        target_path, draft_path = llamacpp_file(TARGET, kind), llamacpp_file(DRAFT, kind)
        # the F32 rows keep the KV cache in float32 too, as specjax fp32 does; the others use
        # llama.cpp's default (F16)
        cache = dict(type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32) if kind == "F32" else {}
        kv = "F32" if kind == "F32" else "F16 (default)"
        engine = f"llama.cpp ({kind})"
        notes.append(f"- {engine}: target `{target_path.name}` ({gguf_types(target_path)}), "
                     f"draft `{draft_path.name}` ({gguf_types(draft_path)}); KV cache {kv}; "
                     f"n_threads = n_threads_batch = {threads}, n_ctx {n_ctx}")

        def make(path, cache=cache, **kw):
            return Llama(model_path=str(path), n_ctx=n_ctx, n_batch=n_ctx, n_threads=threads,
                         n_threads_batch=threads, verbose=False, **cache, **kw)

        draft = make(draft_path)
        for label, draft_model in (
                ("AR", None),
                (f"prompt lookup (LlamaPromptLookupDecoding, {LLAMACPP_L} tokens)",
                 LlamaPromptLookupDecoding(num_pred_tokens=LLAMACPP_L)),
                (f"SD, 0.5B draft (our LlamaDraftModel adapter, L={LLAMACPP_L})",
                 llamacpp_draft_adapter(draft, LLAMACPP_L))):
            llm = make(target_path, draft_model=draft_model)
            counter = _CallCounter(llm, "eval")

            def gen(p, llm=llm, draft=draft, new=max_new):
                llm.reset()
                draft.reset()  # no engine reuses a previous prompt's KV cache
                out = []
                stream = llm.generate(p, temp=0.0, top_k=1, repeat_penalty=1.0)
                for token in stream:
                    out.append(int(token))
                    if len(out) >= new or out[-1] in eos:
                        break
                stream.close()
                return out

            rows.append(timed_row(engine, label, gen, ids, counter))
            llm.close()
            del llm, counter
            gc.collect()
        draft.close()
    return rows, notes


def agreement(tokens: list[list[int]], reference: list[list[int]]) -> tuple[int, list[int]]:
    """How many prompts' outputs equal ``reference``'s token for token, and, per prompt, the
    index of the first token that differs (the output's length where none does)."""
    same = sum(a == b for a, b in zip(tokens, reference, strict=True))
    first = [next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                  len(a) if len(a) == len(b) else min(len(a), len(b)))
             for a, b in zip(tokens, reference, strict=True)]
    return same, first


def tps(row: dict) -> float:
    return row["new_tokens"] / row["seconds"]


#: AR rows compared head to head in the table's footer: weights of the same width (specjax int8
#: and Q8_0 both store 8-bit weights with a float scale per group; F32 and fp32 the same floats).
SAME_PRECISION = (("specjax (JAX, fp32)", "llama.cpp (F32)"),
                  ("specjax (JAX, int8)", "llama.cpp (Q8_0)"))


def table(rows: list[dict], skipped: list[str], head: str, notes: list[str] = ()) -> str:
    out = [head, "", "| engine | method | tokens/s | speedup vs own AR | speedup vs HF fp32 AR | "
           "tokens / target call | = own AR | = specjax fp32 AR |",
           "|---|---|---|---|---|---|---|---|"]
    base = {}
    hf_ar = next((r for r in rows if r["engine"].startswith("HF") and r["method"] == "AR"), None)
    spec_fp32 = next((r for r in rows if r["engine"] == "specjax (JAX, fp32)"
                      and r["method"] == "AR"), None)
    for r in rows:
        if r["method"] == "AR":
            base[r["engine"]] = r
        ar = base[r["engine"]]
        same = "-" if r is ar else ("yes" if r["tokens"] == ar["tokens"] else "NO")
        vs_hf = f"{tps(r) / tps(hf_ar):.2f}x" if hf_ar else "-"
        vs_spec = ("-" if spec_fp32 is None or r is spec_fp32 else
                   f"{agreement(r['tokens'], spec_fp32['tokens'])[0]}/{len(r['tokens'])}")
        out.append(f"| {r['engine']} | {r['method']} | {tps(r):.2f} | {tps(r) / tps(ar):.2f}x | "
                   f"{vs_hf} | {r['per_call']:.2f} | {same} | {vs_spec} |")
    ars = [r for r in rows if r["method"] == "AR" and not r["engine"].startswith("HF")]
    fp32_ar = spec_fp32 or hf_ar
    out.append("")
    for ar in ars:
        if hf_ar and ar["engine"].startswith("specjax"):
            out.append(f"{ar['engine']} AR / HF fp32 AR tokens/s: {tps(ar) / tps(hf_ar):.2f}x  ")
        other = hf_ar if ar is fp32_ar else fp32_ar
        if other is not None and other is not ar:
            agree, first = agreement(ar["tokens"], other["tokens"])
            out.append(f"{ar['engine']} and {other['engine']} greedy AR outputs identical on "
                       f"{agree}/{len(other['tokens'])} prompts; first difference at tokens "
                       f"{first} (rounding can flip a near-tie)  ")
    ar_rows = {r["engine"]: r for r in ars}
    for ours, theirs in SAME_PRECISION:
        if ours in ar_rows and theirs in ar_rows:
            out.append(f"{ours} AR / {theirs} AR tokens/s: "
                       f"{tps(ar_rows[ours]) / tps(ar_rows[theirs]):.2f}x  ")
    out += ["", *notes, *[f"- skipped: {s}" for s in skipped]]
    return "\n".join(out) + "\n"


def versions() -> str:
    """The engines' package versions: a peer's speed moves with its release and build (HF's
    float32 decode ran 2.6x faster on one machine than on another: peers_cpu*.md)."""
    found = []
    for package in ("jax", "jaxlib", "torch", "transformers", "llama_cpp_python"):
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
    parser.add_argument("--llamacpp-files", nargs="+", default=list(LLAMACPP_FILES),
                        choices=LLAMACPP_FILES,
                        help="weight files llama.cpp runs: the GGUF files as shipped, and/or "
                             "F32 / Q8_0 files its quantizer writes from them")
    parser.add_argument("--out", default="paper_repro/results/peers_cpu.md")
    args = parser.parse_args()
    commit, at_start = provenance.commit(), quiet()
    print(f"commit {commit}; {at_start}", flush=True)
    ids, eos_ids = isolated(prompt_ids, args.n)
    rows, skipped, notes = [], [], []
    if "specjax" in args.engines:
        for weights in args.weights:
            rows += isolated(run_specjax, ids, args.max_new_tokens, weights)
    if "hf" in args.engines:
        missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
        if missing:
            skipped.append(f"HF transformers: {', '.join(missing)} not installed; "
                           "pip install -e '.[peers]'")
        else:
            rows += isolated(run_hf, ids, args.max_new_tokens)
    if "llamacpp" in args.engines:
        if importlib.util.find_spec("llama_cpp") is None:
            skipped.append("llama.cpp: llama-cpp-python is not installed; "
                           "pip install -e '.[peers]' (compiles llama.cpp from source)")
        else:
            # llama.cpp's OpenMP threads spin while they wait by default; on a machine whose
            # cores other processes share, that made its decode ~10x slower here (19.9 s vs
            # 1.0 s for 16 tokens of the 1.5B, load ~5 on 2 cores). Passive waiting, read when
            # libgomp loads in the llama.cpp process.
            os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
            notes.append("- specjax fp32 and HF fp32 run the as-shipped files dequantized to "
                         "float32 (the F32 files hold the same values: equal bit for bit on the "
                         "1.5B's Q4_K and Q6_K tensors checked); specjax int8 re-quantizes "
                         "those (group 64), Q8_0 does (blocks of 32)")
            for kind in args.llamacpp_files:
                try:
                    more, more_notes = isolated(run_llamacpp, ids, args.max_new_tokens, [kind],
                                                eos_ids)
                except Exception as e:  # one kind failing keeps the rows of the others
                    skipped.append(f"llama.cpp ({kind}): {type(e).__name__}: {e}")
                else:
                    rows += more
                    notes += [n for n in more_notes if n not in notes]
    head = (f"# specjax vs peers\n\nGenerated by `{command_line('benchmarks.peers')}` at commit "
            f"{commit}. {args.n} HumanEval suite prompts, chat template, greedy, "
            f"{args.max_new_tokens} new tokens, batch 1; target {TARGET}, draft {DRAFT}; "
            f"{hardware.describe()}; at the start {at_start}; at the end {quiet()}; each engine "
            f"in a fresh process; {versions()}; prompt lengths {[len(p) for p in ids]}; mean of "
            f"{np.mean([len(p) for p in ids]):.0f} tokens.")
    write_report(table(rows, skipped, head, notes), args.out)


if __name__ == "__main__":
    main()
