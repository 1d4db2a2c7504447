"""GGUF file -> canonical hyperparameters and float32 weights (the model agreement's layout).

The decoder (``specjax.models``) consumes a plain hparams dict and a dict of float32 arrays
stacked over layers, each matrix laid out (in, out) so that ``y = x @ W``. GGUF stores matrices
(out, in) (ggml's ``ne = [in, out]``) and quantized; ``gguf.quants.dequantize`` unpacks every
type these files use (F32, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K).

Two conversions matter for correctness:
- llama-arch files store Q and K rows permuted so that llama.cpp can apply RoPE to interleaved
  pairs (x[2i], x[2i+1]); HF checkpoints and our decoder rotate half-split pairs (x[i],
  x[i + hd/2]) (RoFormer, Su et al. 2021, eq. 34, with the GPT-NeoX pairing). ``unpermute_qk``
  restores the half-split row order per head. qwen2 files are stored half-split already.
- Memory: the 1.5B model is ~7 GB in float32, so the stacked arrays are allocated once and each
  tensor is dequantized in row chunks straight into its slot (peak RSS ~ float32 size + the
  memory-mapped file), never materialising a second copy.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from gguf.quants import dequantize
from jaxtyping import Float

from specjax.models.gguf_file import CONTROL, GGUFFile, TensorInfo, open_gguf

#: Per-layer canonical key -> GGUF tensor name suffix in ``blk.N.``.
LAYER_TENSORS: dict[str, str] = {
    "wq": "attn_q.weight",
    "wk": "attn_k.weight",
    "wv": "attn_v.weight",
    "wo": "attn_output.weight",
    "attn_norm": "attn_norm.weight",
    "mlp_norm": "ffn_norm.weight",
    "w_gate": "ffn_gate.weight",
    "w_up": "ffn_up.weight",
    "w_down": "ffn_down.weight",
}
BIAS_TENSORS: dict[str, str] = {"bq": "attn_q.bias", "bk": "attn_k.bias", "bv": "attn_v.bias"}
SUPPORTED_ARCHS = ("llama", "qwen2")
#: Control tokens that end a turn in the chat formats these models use.
_END_OF_TURN = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<end_of_turn>", "<|end|>")
_CHUNK_ELEMS = 1 << 24  # 64 MiB of float32 per dequantization chunk


def permute_qk(w: Float[np.ndarray, "out in"], n_heads: int) -> Float[np.ndarray, "out in"]:
    """HF half-split row order -> llama.cpp interleaved order (what llama GGUFs store).

    Within each head, row ``half * hd/2 + i`` moves to row ``2 * i + half``.
    """
    out, rest = w.shape[0], w.shape[1:]
    hd = _head_dim(out, n_heads)
    return w.reshape(n_heads, 2, hd // 2, *rest).swapaxes(1, 2).reshape(out, *rest)


def unpermute_qk(w: Float[np.ndarray, "out in"], n_heads: int) -> Float[np.ndarray, "out in"]:
    """Inverse of ``permute_qk``: row ``2 * i + half`` of each head returns to ``half*hd/2 + i``."""
    out, rest = w.shape[0], w.shape[1:]
    hd = _head_dim(out, n_heads)
    return w.reshape(n_heads, hd // 2, 2, *rest).swapaxes(1, 2).reshape(out, *rest)


def _head_dim(rows: int, n_heads: int) -> int:
    if n_heads <= 0 or rows % n_heads or (rows // n_heads) % 2:
        raise ValueError(f"cannot split {rows} rows into n_heads={n_heads} heads of even size")
    return rows // n_heads


def read_hparams(reader: GGUFFile) -> dict[str, Any]:
    """Canonical hyperparameters (keys of ``specjax.models.config.ModelConfig``)."""
    arch = reader.get("general.architecture")
    if arch not in SUPPORTED_ARCHS:
        raise ValueError(f"unsupported GGUF arch={arch!r}; allowed: {list(SUPPORTED_ARCHS)}")
    tensors = reader.tensors
    tokens = reader.get("tokenizer.ggml.tokens", [])
    vocab = int(_tensor(tensors, "token_embd.weight").shape[1])
    heads = int(_require(reader, f"{arch}.attention.head_count"))
    hidden = int(_require(reader, f"{arch}.embedding_length"))
    head_dim = int(reader.get(f"{arch}.attention.key_length", hidden // heads))
    add_bos = bool(reader.get("tokenizer.ggml.add_bos_token", arch == "llama"))
    bos = reader.get("tokenizer.ggml.bos_token_id")
    return {
        "arch": arch,
        "vocab_size": vocab,
        "num_layers": int(_require(reader, f"{arch}.block_count")),
        "hidden_size": hidden,
        "num_heads": heads,
        "num_kv_heads": int(reader.get(f"{arch}.attention.head_count_kv", heads)),
        "head_dim": head_dim,
        "intermediate_size": int(_require(reader, f"{arch}.feed_forward_length")),
        "rope_theta": float(reader.get(f"{arch}.rope.freq_base", 10000.0)),
        "rms_eps": float(_require(reader, f"{arch}.attention.layer_norm_rms_epsilon")),
        "qkv_bias": "blk.0.attn_q.bias" in tensors,
        "tie_embeddings": "output.weight" not in tensors,
        "context_length": int(_require(reader, f"{arch}.context_length")),
        # The token to prepend to prompts; None when the model's tokenizer adds none.
        "bos_id": int(bos) if bos is not None and add_bos else None,
        "eos_ids": eos_ids(reader, tokens),
    }


def _require(reader: GGUFFile, key: str) -> Any:
    value = reader.get(key)
    if value is None:
        raise ValueError(f"GGUF file {reader.path} lacks metadata key {key!r}")
    return value


def eos_ids(reader: GGUFFile, tokens: list[str] | None = None) -> tuple[int, ...]:
    """``eos_token_id``, ``eot_token_id`` and the end-of-turn control tokens present."""
    tokens = reader.get("tokenizer.ggml.tokens", []) if tokens is None else tokens
    types = reader.get("tokenizer.ggml.token_type", [])
    ids = [reader.get(f"tokenizer.ggml.{k}_token_id") for k in ("eos", "eot")]
    index = {t: i for i, t in enumerate(tokens) if t in _END_OF_TURN}
    for name in _END_OF_TURN:
        i = index.get(name)
        if i is not None and (not types or types[i] == CONTROL):
            ids.append(i)
    return tuple(dict.fromkeys(int(i) for i in ids if i is not None))


def read_gguf(
    path: str | os.PathLike | GGUFFile,
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Read ``path`` into (canonical hparams, canonical float32 weights); see the module doc.

    Accepts an open ``GGUFFile`` too, so a loader can share one with ``ChatTokenizer``.
    """
    reader = open_gguf(path)
    hp = read_hparams(reader)
    tensors = reader.tensors
    n, d, f = hp["num_layers"], hp["hidden_size"], hp["intermediate_size"]
    q, kv = hp["num_heads"] * hp["head_dim"], hp["num_kv_heads"] * hp["head_dim"]
    shapes = {
        "wq": (n, d, q),
        "wk": (n, d, kv),
        "wv": (n, d, kv),
        "wo": (n, q, d),
        "attn_norm": (n, d),
        "mlp_norm": (n, d),
        "w_gate": (n, d, f),
        "w_up": (n, d, f),
        "w_down": (n, f, d),
    }
    if hp["qkv_bias"]:
        shapes |= {"bq": (n, q), "bk": (n, kv), "bv": (n, kv)}
    names = LAYER_TENSORS | BIAS_TENSORS
    weights = {k: np.empty(s, np.float32) for k, s in shapes.items()}
    heads = {"wq": hp["num_heads"], "wk": hp["num_kv_heads"], "bq": hp["num_heads"]}
    heads["bk"] = hp["num_kv_heads"]
    weights["embed"] = np.empty((hp["vocab_size"], d), np.float32)
    weights["final_norm"] = np.empty((d,), np.float32)
    jobs = [(_tensor(tensors, "token_embd.weight"), weights["embed"], None, False)]
    if not hp["tie_embeddings"]:
        weights["lm_head"] = np.empty((d, hp["vocab_size"]), np.float32)
        jobs.append((_tensor(tensors, "output.weight"), weights["lm_head"], None, True))
    jobs += [(_tensor(tensors, f"blk.{layer}.{names[key]}"), weights[key][layer],
              heads.get(key) if hp["arch"] == "llama" else None, True)
             for key in shapes for layer in range(n)]
    jobs.append((_tensor(tensors, "output_norm.weight"), weights["final_norm"], None, True))
    # Each tensor fills its own slot and NumPy's large array operations release the GIL, so
    # threads dequantize on all cores, the embedding and head (the largest) first (the 1.5B,
    # alternating runs: 28.0 / 29.2 s on one thread, 18.5 / 18.6 s on two). At most 8: each
    # holds a chunk's temporaries (a few x 64 MiB).
    with ThreadPoolExecutor(min(8, os.cpu_count() or 1)) as pool:
        for job in [pool.submit(_dequantize_into, *job) for job in jobs]:
            job.result()
    return hp, weights


def _tensor(tensors: dict[str, TensorInfo], name: str) -> TensorInfo:
    if name not in tensors:
        raise ValueError(f"GGUF file lacks tensor {name!r}")
    return tensors[name]


def _dequantize_into(
    t: TensorInfo, dest: np.ndarray, unpermute_heads: int | None = None, transpose: bool = True
) -> None:
    """Dequantize GGUF tensor ``t`` (rows = out) into ``dest`` ((in, out), or (out, in) when
    ``transpose`` is False), a chunk of whole rows (whole heads when un-permuting) at a time."""
    qtype, data = t.qtype, t.data
    expected = tuple(int(x) for x in reversed(t.shape))
    got = dest.shape[::-1] if transpose and dest.ndim == 2 else dest.shape
    if tuple(got) != expected:
        raise ValueError(f"tensor {t.name!r} has shape {expected}, expected {tuple(got)}")
    if dest.ndim == 1:
        out = _dequantize(data, qtype).reshape(-1)
        dest[:] = unpermute_qk(out[:, None], unpermute_heads)[:, 0] if unpermute_heads else out
        return
    rows, cols = expected
    step = max(1, _CHUNK_ELEMS // cols)
    if unpermute_heads:
        hd = rows // unpermute_heads
        step = max(hd, step // hd * hd)
    for r0 in range(0, rows, step):
        block = _dequantize(data[r0 : r0 + step], qtype).reshape(-1, cols)
        if unpermute_heads:
            block = unpermute_qk(block, block.shape[0] // hd)
        if transpose:  # in 128-row tiles: a strided transpose copy is ~2x faster tiled
            for t0 in range(0, block.shape[0], 128):
                tile = block[t0 : t0 + 128]
                dest[:, r0 + t0 : r0 + t0 + tile.shape[0]] = tile.T
        else:
            dest[r0 : r0 + block.shape[0]] = block


def _dequantize(data: np.ndarray, qtype: Any) -> np.ndarray:
    return np.asarray(dequantize(np.asarray(data), qtype), dtype=np.float32)
