"""Host memory of loading a Hugging Face checkpoint, against the checkpoint's bytes.

    python -m benchmarks.load_memory                    # Llama-3.2-1B shapes, bfloat16
    python -m benchmarks.load_memory --shape tiny       # seconds (the tests)

Why: loading reads the safetensors files a tensor at a time and converts each layer to the
decoder's format before reading the next (``specjax.models.hf``), so an 8B model in bfloat16
should need about its own 16 GB, not a float32 copy of it (32 GB) on top. This writes a random
checkpoint of real shapes (two shards and an index, as ``save_pretrained`` writes large models),
loads it with ``specjax.load_model`` in a fresh process, and reports that process's peak
resident memory (``VmHWM``) minus what it held before loading, over the checkpoint's bytes.
On the CPU the decoder's arrays are themselves host memory, so 1.0x is the floor.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ml_dtypes
import numpy as np

from benchmarks import command_line, write_report

SHAPES = {
    # Llama-3.2-1B's config.json (1.24B parameters with the tied embedding).
    "llama-3.2-1b": dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192,
                         num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                         head_dim=64, tie_word_embeddings=True),
    "tiny": dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                 tie_word_embeddings=True),
}

# VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, so a child would report its
# parent's peak (the writer held the whole checkpoint); VmHWM belongs to the new process image.
_LOAD = """
import json, sys, time
import specjax

def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])

before = hwm()
t = time.perf_counter()
model = specjax.load_model(sys.argv[1], weights=sys.argv[2])
seconds = time.perf_counter() - t
print(json.dumps(dict(before_kib=before, peak_kib=hwm(), seconds=seconds,
                      params=model.config.num_params)))
"""


def write_checkpoint(root: Path, shape: dict, seed: int = 0) -> int:
    """A random Llama checkpoint of ``shape`` in bfloat16, two shards plus an index; returns
    the bytes of its tensors."""
    from safetensors.numpy import save_file
    from tokenizers import Tokenizer, models

    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    D, F, V = shape["hidden_size"], shape["intermediate_size"], shape["vocab_size"]
    H, KV, hd = shape["num_attention_heads"], shape["num_key_value_heads"], shape["head_dim"]

    def mat(*s):
        return (rng.standard_normal(s, np.float32) / np.sqrt(s[-1])).astype(ml_dtypes.bfloat16)

    def ones(n):
        return np.ones(n, ml_dtypes.bfloat16)

    layers = shape["num_hidden_layers"]
    shards: list[dict] = [{}, {}]
    shards[0]["model.embed_tokens.weight"] = mat(V, D)
    shards[1]["model.norm.weight"] = ones(D)
    for i in range(layers):
        p, s = f"model.layers.{i}.", shards[0 if i < layers // 2 else 1]
        s |= {p + "self_attn.q_proj.weight": mat(H * hd, D),
              p + "self_attn.k_proj.weight": mat(KV * hd, D),
              p + "self_attn.v_proj.weight": mat(KV * hd, D),
              p + "self_attn.o_proj.weight": mat(D, H * hd),
              p + "input_layernorm.weight": ones(D), p + "post_attention_layernorm.weight": ones(D),
              p + "mlp.gate_proj.weight": mat(F, D), p + "mlp.up_proj.weight": mat(F, D),
              p + "mlp.down_proj.weight": mat(D, F)}
    weight_map, total = {}, 0
    for k, shard in enumerate(shards):
        name = f"model-{k + 1:05d}-of-00002.safetensors"
        save_file(shard, str(root / name))
        weight_map |= {t: name for t in shard}
        total += sum(a.nbytes for a in shard.values())
    shards.clear()
    (root / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}))
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
              "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
              "hidden_act": "silu", "torch_dtype": "bfloat16", "bos_token_id": 0,
              "eos_token_id": 1, **shape}
    (root / "config.json").write_text(json.dumps(config))
    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(V)}, unk_token="t0"))
    tok.save(str(root / "tokenizer.json"))
    return total


def measure(root: Path, weights: str) -> dict:
    """Load ``root`` in a fresh process; its resident memory before and at peak."""
    proc = subprocess.run([sys.executable, "-c", _LOAD, str(root), weights], capture_output=True,
                          text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.load_memory",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="llama-3.2-1b")
    ap.add_argument("--weights", default="bfloat16", choices=("bfloat16", "float32"))
    ap.add_argument("--out", type=Path, help="report path (default: "
                    "paper_repro/results/load_memory_cpu.md)")
    args = ap.parse_args(argv)
    from specjax.platform import hardware, provenance

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "checkpoint"
        t = time.perf_counter()
        nbytes = write_checkpoint(root, SHAPES[args.shape])
        written = time.perf_counter() - t
        m = measure(root, args.weights)
    loaded = m["peak_kib"] * 1024 - m["before_kib"] * 1024
    held = nbytes * (1 if args.weights == "bfloat16" else 2)  # the model in its load format
    result = dict(shape=args.shape, weights=args.weights, params=m["params"],
                  checkpoint_bytes=nbytes, format_bytes=held, before_bytes=m["before_kib"] * 1024,
                  peak_bytes=m["peak_kib"] * 1024, load_seconds=m["seconds"],
                  write_seconds=written, ratio=loaded / held, hardware=hardware.describe(),
                  commit=provenance.commit(), date=time.strftime("%Y-%m-%d"),
                  command=command_line("benchmarks.load_memory"))
    gib = 2**30
    text = (f"# Host memory of loading a Hugging Face checkpoint\n\n"
            f"Generated by `{result['command']}` at commit {result['commit']}, "
            f"{result['date']}, on {result['hardware']}.\n\n"
            f"A random {args.shape} checkpoint ({m['params'] / 1e9:.2f}B parameters, bfloat16 "
            f"safetensors in two shards, {nbytes / gib:.2f} GiB) loaded with "
            f"`specjax.load_model(path, weights=\"{args.weights}\")` in a fresh process:\n\n"
            "| resident before load | peak resident | added by the load | the model in its "
            "format | added / model | load s |\n|---|---|---|---|---|---|\n"
            f"| {result['before_bytes'] / gib:.2f} GiB | {result['peak_bytes'] / gib:.2f} GiB | "
            f"{loaded / gib:.2f} GiB | {held / gib:.2f} GiB | **{result['ratio']:.2f}x** | "
            f"{m['seconds']:.1f} |\n\n"
            "Peak resident memory is the process's `VmHWM`; on the CPU the decoder's arrays "
            "live in host memory, so 1.00x is the floor and the rest is what loading adds on "
            "top (one layer in transit, the memory-mapped pages of the tensor being read).\n")
    out = args.out or Path(__file__).resolve().parents[1] / "paper_repro" / "results" / (
        "load_memory_cpu.md")
    write_report(text, out)
    return result


if __name__ == "__main__":
    main()
