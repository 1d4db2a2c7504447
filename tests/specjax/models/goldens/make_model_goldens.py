"""Regenerate model_goldens.json, cross-checked against an independent plain-NumPy forward.

    python tests/specjax/models/goldens/make_model_goldens.py [--models smollm2-135m-instruct ...]

For each model: the prompt ``def fibonacci(n):`` is run (a) through ``reference_forward`` in
this file, a from-scratch float64 NumPy transformer (HF-style ``rotate_half`` RoPE with
duplicated cos/sin, KV heads expanded with ``np.repeat``, one attention per head, its own list
KV cache) and (b) through the JAX decoder (``LoadedModel.forward`` for the prompt logits; the
cached ``prefill`` + ``decode`` passes for a greedy 32-token continuation). The goldens (top-5
ids and logits at every prompt position, the greedy ids) come from the NumPy reference and are
written only when the JAX decoder agrees: same top-5 ids everywhere, same greedy ids, prompt
logits within ``LOGIT_TOL``. llama.cpp is not available here, so this is the independent check.
Only one float32 copy of the weights is alive at a time (the reference runs first; the decoder
then consumes the same dict).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from specjax.models.config import ModelConfig
from specjax.models.decoder import Decoder
from specjax.models.gguf_file import open_gguf
from specjax.models.gguf_weights import read_gguf
from specjax.models.loader import LoadedModel
from specjax.models.passes import JittedPasses
from specjax.models.tokenizer import ChatTokenizer
from specjax.platform.assets import fetch

PROMPT = "def fibonacci(n):"
NEW_TOKENS = 32
TOP = 5
LOGIT_TOL = 2e-3  # float32 decoder vs float64 reference, logits of order 10-30
MODELS = ["smollm2-135m-instruct", "qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct"]
OUT = Path(__file__).with_name("model_goldens.json")


def reference_forward(hp: dict, w: dict, ids: list[int], cache: list) -> np.ndarray:
    """float64 logits [len(ids), V] for ``ids`` following the tokens already in ``cache``."""
    f64 = np.float64
    H, KV, hd = hp["num_heads"], hp["num_kv_heads"], hp["head_dim"]
    start = cache[0][0].shape[0] if cache else 0
    T = len(ids)
    pos = np.arange(start, start + T, dtype=f64)
    inv = 1.0 / hp["rope_theta"] ** (np.arange(0, hd, 2, dtype=f64) / hd)
    ang = np.outer(pos, inv)
    cos = np.concatenate([np.cos(ang), np.cos(ang)], axis=-1)[:, None, :]
    sin = np.concatenate([np.sin(ang), np.sin(ang)], axis=-1)[:, None, :]

    def rotate_half(x):
        return np.concatenate([-x[..., hd // 2 :], x[..., : hd // 2]], axis=-1)

    def norm(x, g):
        return x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + hp["rms_eps"]) * g

    x = w["embed"][ids].astype(f64)
    for i in range(hp["num_layers"]):
        h = norm(x, w["attn_norm"][i])
        q, k, v = (h @ w[n][i].astype(f64) for n in ("wq", "wk", "wv"))
        if hp["qkv_bias"]:
            q, k, v = q + w["bq"][i], k + w["bk"][i], v + w["bv"][i]
        q = q.reshape(T, H, hd)
        k = k.reshape(T, KV, hd)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        v = v.reshape(T, KV, hd)
        if len(cache) <= i:
            cache.append((np.zeros((0, KV, hd)), np.zeros((0, KV, hd))))
        K = np.concatenate([cache[i][0], k])
        Vv = np.concatenate([cache[i][1], v])
        cache[i] = (K, Vv)
        K, Vv = np.repeat(K, H // KV, axis=1), np.repeat(Vv, H // KV, axis=1)
        future = np.arange(K.shape[0])[None, :] > (start + np.arange(T))[:, None]
        out = np.empty((T, H, hd))
        for head in range(H):
            s = q[:, head] @ K[:, head].T / np.sqrt(hd)
            s[future] = -np.inf
            p = np.exp(s - s.max(axis=-1, keepdims=True))
            out[:, head] = (p / p.sum(axis=-1, keepdims=True)) @ Vv[:, head]
        x = x + out.reshape(T, H * hd) @ w["wo"][i].astype(f64)
        h = norm(x, w["mlp_norm"][i])
        g = h @ w["w_gate"][i].astype(f64)
        x = x + ((g / (1 + np.exp(-g))) * (h @ w["w_up"][i].astype(f64))) @ w["w_down"][i]
    x = norm(x, w["final_norm"])
    head = w["embed"].T if hp["tie_embeddings"] else w["lm_head"]
    return x @ head.astype(f64)


def reference_greedy(hp, w, ids, n):
    cache, out = [], []
    logits = reference_forward(hp, w, ids, cache)
    for _ in range(n):
        out.append(int(np.argmax(logits[-1])))
        logits = reference_forward(hp, w, [out[-1]], cache)
    return out


def jax_greedy(model: LoadedModel, ids: list[int], n: int) -> list[int]:
    jp = JittedPasses(model.model)  # the engine's passes: prefill, then one decode per token
    prompt = jnp.asarray(ids + [0] * (16 - len(ids)), jnp.int32)
    cache = jp.with_scratch(jp.prefill(jp.init_cache(64, 16), prompt, len(ids)), 1)
    token, out = ids[-1], []
    for _ in range(n):
        logits, cache = jp.decode(cache, jnp.int32(token))
        token = int(jnp.argmax(logits))
        out.append(token)
    return out


def golden_for(name: str) -> dict:
    t0 = time.time()
    reader = open_gguf(fetch(name))
    hp, weights = read_gguf(reader)
    tokenizer = ChatTokenizer.from_gguf(reader)
    ids = tokenizer.encode(PROMPT, add_special_tokens=True)
    ref_logits = reference_forward(hp, weights, ids, [])
    ref_greedy = reference_greedy(hp, weights, ids, NEW_TOKENS)
    print(f"{name}: numpy reference done in {time.time() - t0:.0f}s")
    config = ModelConfig(**hp)
    model = LoadedModel(name, config, Decoder.from_weights(config, weights), tokenizer)
    jax_logits = model.forward(ids)
    top = np.argsort(-ref_logits, axis=-1, kind="stable")[:, :TOP]
    jax_top = np.argsort(-jax_logits, axis=-1, kind="stable")[:, :TOP]
    err = float(np.max(np.abs(jax_logits - ref_logits)))
    greedy = jax_greedy(model, ids, NEW_TOKENS)
    print(
        f"{name}: max |jax - numpy| prompt logits = {err:.2e}; greedy agree: "
        f"{greedy == ref_greedy}; text: {tokenizer.decode(ref_greedy)!r}"
    )
    if not (np.array_equal(top, jax_top) and greedy == ref_greedy and err <= LOGIT_TOL):
        raise SystemExit(f"{name}: JAX decoder disagrees with the NumPy reference; no golden")
    return {
        "prompt": PROMPT,
        "prompt_ids": [int(i) for i in ids],
        "top5_ids": top.tolist(),
        "top5_logits": np.take_along_axis(ref_logits, top, axis=-1).round(5).tolist(),
        "greedy_ids": ref_greedy,
        "greedy_text": tokenizer.decode(ref_greedy),
        "max_abs_logit_diff_jax_vs_numpy": err,
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="+", default=MODELS, choices=MODELS)
    args = parser.parse_args()
    goldens = json.loads(OUT.read_text()) if OUT.exists() else {}
    for name in args.models:
        goldens[name] = golden_for(name)
        OUT.write_text(json.dumps(goldens, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
