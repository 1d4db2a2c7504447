"""GGUF container reader and GGUF -> canonical weights (the model agreement's layout).

Synthetic files are written with ``gguf.GGUFWriter`` (an independent writer) from weights the
test draws in the HF layout; for llama they are stored with Q/K rows permuted the way llama.cpp
stores them, written here with explicit index arithmetic, so ``read_gguf`` must recover exactly
the HF matrices transposed to (in, out). The real SmolLM2 file is checked against the issue table.
"""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from specjax.models import gguf_weights as G
from specjax.models.gguf_file import GGUFFile
from specjax.platform.assets import fetch

LAYERS, D, H, KV, HD, F, V = 2, 32, 4, 2, 8, 48, 40


def llama_storage_order(w_hf: np.ndarray, n_heads: int) -> np.ndarray:
    """Row ``h*hd + half*hd/2 + i`` of the HF matrix is stored at ``h*hd + 2*i + half``."""
    hd = w_hf.shape[0] // n_heads
    out = np.empty_like(w_hf)
    for h in range(n_heads):
        for half in range(2):
            for i in range(hd // 2):
                out[h * hd + 2 * i + half] = w_hf[h * hd + half * (hd // 2) + i]
    return out


def write_model(path, arch: str, seed: int = 0) -> dict[str, np.ndarray]:
    """A tiny model file; returns the HF-layout (out, in) matrices it encodes."""
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, arch=arch)
    for key, value in (("block_count", LAYERS), ("embedding_length", D), ("context_length", 64)):
        w.add_uint32(f"{arch}.{key}", value)
    w.add_uint32(f"{arch}.feed_forward_length", F)
    w.add_uint32(f"{arch}.attention.head_count", H)
    w.add_uint32(f"{arch}.attention.head_count_kv", KV)
    w.add_float32(f"{arch}.rope.freq_base", 5000.0)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)
    tokens = [f"t{i}" for i in range(V - 2)] + ["<|im_end|>", "<|endoftext|>"]
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.token_type", [1] * (V - 2) + [3, 3])
    w.add_uint32("tokenizer.ggml.bos_token_id", V - 1)
    w.add_uint32("tokenizer.ggml.eos_token_id", V - 2)
    w.add_bool("tokenizer.ggml.add_bos_token", arch == "llama")
    hf: dict[str, np.ndarray] = {}

    def put(name: str, x: np.ndarray, quant: bool = False) -> None:
        hf[name] = x.astype(np.float32)
        if quant:  # Q8_0: exercises the dequantization path
            q = gguf.quants.quantize(hf[name], gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(name, q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(name, hf[name])

    put("token_embd.weight", rng.normal(size=(V, D)))
    put("output_norm.weight", rng.normal(size=D))
    if arch == "qwen2":
        put("output.weight", rng.normal(size=(V, D)), quant=True)
    for layer in range(LAYERS):
        p = f"blk.{layer}."
        for name, shape in (("attn_q", (H * HD, D)), ("attn_k", (KV * HD, D))):
            x = rng.normal(size=shape)
            hf[p + name + ".weight"] = x.astype(np.float32)
            stored = llama_storage_order(x, shape[0] // HD) if arch == "llama" else x
            w.add_tensor(p + name + ".weight", stored.astype(np.float32))
        put(p + "attn_v.weight", rng.normal(size=(KV * HD, D)))
        put(p + "attn_output.weight", rng.normal(size=(D, H * HD)))
        put(p + "attn_norm.weight", rng.normal(size=D))
        put(p + "ffn_norm.weight", rng.normal(size=D))
        put(p + "ffn_gate.weight", rng.normal(size=(F, D)), quant=True)
        put(p + "ffn_up.weight", rng.normal(size=(F, D)))
        put(p + "ffn_down.weight", rng.normal(size=(D, F)))
        if arch == "qwen2":
            for name, n in (("attn_q", H), ("attn_k", KV), ("attn_v", KV)):
                put(p + name + ".bias", rng.normal(size=n * HD))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return hf


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_read_gguf_recovers_hf_layout(tmp_path, monkeypatch, arch):
    path = tmp_path / f"{arch}.gguf"
    hf = write_model(path, arch)
    monkeypatch.setattr(G, "_CHUNK_ELEMS", 3 * D)  # force many row chunks (whole heads)
    hp, w = G.read_gguf(path)
    assert hp == {
        "arch": arch, "vocab_size": V, "num_layers": LAYERS, "hidden_size": D, "num_heads": H,
        "num_kv_heads": KV, "head_dim": HD, "intermediate_size": F, "rope_theta": 5000.0,
        "rms_eps": pytest.approx(1e-5), "qkv_bias": arch == "qwen2",
        "tie_embeddings": arch == "llama", "context_length": 64,
        "bos_id": V - 1 if arch == "llama" else None, "eos_ids": (V - 2, V - 1),
    }  # fmt: skip
    exact = {"wq": "attn_q", "wk": "attn_k", "wv": "attn_v", "wo": "attn_output"}
    exact |= {"w_up": "ffn_up", "w_down": "ffn_down"}
    for layer in range(LAYERS):
        p = f"blk.{layer}."
        for key, name in exact.items():
            np.testing.assert_array_equal(w[key][layer], hf[p + name + ".weight"].T, err_msg=key)
        np.testing.assert_array_equal(w["attn_norm"][layer], hf[p + "attn_norm.weight"])
        np.testing.assert_array_equal(w["mlp_norm"][layer], hf[p + "ffn_norm.weight"])
        # Q8_0: 32-value blocks, q = round(x/s), s = max|x|/127 stored as fp16 (relative
        # error <= 2^-11), so |x - fp16(s) q| <= s/2 + 127 s 2^-11.
        gate = hf[p + "ffn_gate.weight"]
        scale = np.abs(gate.reshape(F, -1, 32)).max(-1, keepdims=True) / 127
        bound = scale * (0.5 + 127 * 2.0**-11)
        err = np.abs(w["w_gate"][layer].T - gate).reshape(F, -1, 32)
        assert (err <= bound + 1e-6).all()
        if arch == "qwen2":
            for key in ("bq", "bk", "bv"):
                want = hf[p + f"attn_{key[1]}.bias"]
                np.testing.assert_array_equal(w[key][layer], want)
    np.testing.assert_array_equal(w["embed"], hf["token_embd.weight"])
    np.testing.assert_array_equal(w["final_norm"], hf["output_norm.weight"])
    assert ("lm_head" in w) == (arch == "qwen2")
    if arch == "qwen2":
        assert w["lm_head"].shape == (D, V)
        np.testing.assert_allclose(w["lm_head"], hf["output.weight"].T, atol=0.05)
    assert all(v.dtype == np.float32 for v in w.values())


def test_gguf_file_matches_gguf_reader(tmp_path):
    """Our fast parser against the ``gguf`` package's reader on every field and tensor."""
    path = tmp_path / "m.gguf"
    write_model(path, "qwen2")
    ours, ref = GGUFFile(path), gguf.GGUFReader(path)
    want = {k: f.contents() for k, f in ref.fields.items() if not k.startswith("GGUF.")}
    assert ours.fields == want
    assert set(ours.tensors) == {t.name for t in ref.tensors}
    for t in ref.tensors:
        mine = ours.tensors[t.name]
        assert mine.qtype == t.tensor_type and mine.shape == tuple(int(x) for x in t.shape)
        assert mine.data.tobytes() == np.asarray(t.data).tobytes()


def test_unpermute_inverts_permute():
    w = np.arange(6 * 8 * 3, dtype=np.float32).reshape(6 * 8, 3)
    np.testing.assert_array_equal(G.permute_qk(w, 6), llama_storage_order(w, 6))
    np.testing.assert_array_equal(G.unpermute_qk(G.permute_qk(w, 6), 6), w)
    np.testing.assert_array_equal(G.permute_qk(G.unpermute_qk(w, 6), 6), w)
    assert not np.array_equal(G.unpermute_qk(w, 6), w)  # not the identity
    with pytest.raises(ValueError, match="n_heads"):
        G.unpermute_qk(w, 5)


def rope(x: np.ndarray, pos: int, interleaved: bool, theta: float = 10000.0) -> np.ndarray:
    """Rotate pairs of one head's vector: (2i, 2i+1) or half-split (i, i + hd/2)."""
    hd = x.shape[-1]
    ang = pos * theta ** (-np.arange(hd // 2) * 2 / hd)
    a, b = (x[0::2], x[1::2]) if interleaved else (x[: hd // 2], x[hd // 2 :])
    ra, rb = a * np.cos(ang) - b * np.sin(ang), a * np.sin(ang) + b * np.cos(ang)
    out = np.empty_like(x)
    if interleaved:
        out[0::2], out[1::2] = ra, rb
    else:
        out[: hd // 2], out[hd // 2 :] = ra, rb
    return out


def test_unpermuted_weights_with_half_split_rope_match_llama_cpp_scores():
    """llama.cpp (interleaved RoPE on stored rows) and the decoder (half-split RoPE on
    un-permuted rows) must give the same attention logits q_m . k_n."""
    rng = np.random.default_rng(1)
    heads, hd, d = 3, 16, 24
    wq, wk, x = (
        rng.normal(size=(heads * hd, d)),
        rng.normal(size=(heads * hd, d)),
        rng.normal(size=(2, d)),
    )
    sq, sk = llama_storage_order(wq, heads), llama_storage_order(wk, heads)  # as llama GGUFs
    uq, uk = G.unpermute_qk(sq, heads), G.unpermute_qk(sk, heads)
    for h in range(heads):
        blk = slice(h * hd, (h + 1) * hd)
        cpp = rope(sq[blk] @ x[0], 7, True) @ rope(sk[blk] @ x[1], 3, True)
        ours = rope(uq[blk] @ x[0], 7, False) @ rope(uk[blk] @ x[1], 3, False)
        wrong = rope(sq[blk] @ x[0], 7, False) @ rope(sk[blk] @ x[1], 3, False)
        assert ours == pytest.approx(cpp, rel=1e-9)
        assert wrong != pytest.approx(cpp, rel=1e-3)  # skipping the un-permute is detectable


def test_bad_files(tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"NOPE" + bytes(64))
    with pytest.raises(ValueError, match="not a GGUF file"):
        G.read_gguf(bad)
    with pytest.raises(TypeError, match="path or GGUFFile"):
        G.read_gguf(3)
    for arch, match in (("gemma2", r"arch='gemma2'.*llama"), ("llama", "token_embd.weight")):
        path = tmp_path / f"{arch}.gguf"
        w = gguf.GGUFWriter(path, arch=arch)  # metadata and tensors missing
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        with pytest.raises(ValueError, match=match):
            G.read_gguf(path)


@pytest.fixture(scope="module")
def smollm2():
    return G.read_gguf(fetch("smollm2-135m-instruct", progress=False))


def test_smollm2_hparams_and_shapes(smollm2):
    hp, w = smollm2
    assert hp["arch"] == "llama" and hp["num_layers"] == 30 and hp["hidden_size"] == 576
    assert (hp["num_heads"], hp["num_kv_heads"], hp["head_dim"]) == (9, 3, 64)
    assert hp["tie_embeddings"] and not hp["qkv_bias"] and "lm_head" not in w
    assert hp["vocab_size"] == 49152 and 2 in hp["eos_ids"]  # <|im_end|> ends a chat turn
    n, d, f, v = 30, 576, hp["intermediate_size"], 49152
    shapes = {
        "embed": (v, d), "wq": (n, d, 576), "wk": (n, d, 192), "wv": (n, d, 192),
        "wo": (n, 576, d), "attn_norm": (n, d), "mlp_norm": (n, d), "w_gate": (n, d, f),
        "w_up": (n, d, f), "w_down": (n, f, d), "final_norm": (d,),
    }  # fmt: skip
    assert {k: a.shape for k, a in w.items()} == shapes
    for k, a in w.items():
        assert a.dtype == np.float32 and np.isfinite(a).all(), k
        assert np.abs(a).max() > 0, k  # every slot was written


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, layers, hidden, heads, kv",
    [
        ("qwen2.5-coder-0.5b-instruct", 24, 896, 14, 2),
        ("qwen2.5-coder-1.5b-instruct", 28, 1536, 12, 2),
    ],
)
def test_qwen_hparams_match_the_issue_table(name, layers, hidden, heads, kv):
    hp = G.read_hparams(GGUFFile(fetch(name, progress=False)))
    assert (hp["arch"], hp["num_layers"], hp["hidden_size"]) == ("qwen2", layers, hidden)
    assert (hp["num_heads"], hp["num_kv_heads"]) == (heads, kv)
    assert hp["qkv_bias"] and not hp["tie_embeddings"]  # separate output head
    assert hp["eos_ids"][0] == 151645  # <|im_end|>


PEAK_RSS_SCRIPT = """
import resource, sys
from specjax.models.gguf_weights import read_gguf
hp, w = read_gguf(sys.argv[1])
print(sum(a.nbytes for a in w.values()), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


@pytest.mark.slow
def test_qwen_1_5b_peak_rss_within_budget():
    """The agreement: peak RSS of loading the 1.5B <= 1.5 x its float32 size (fresh process)."""
    import subprocess
    import sys

    path = fetch("qwen2.5-coder-1.5b-instruct", progress=False)
    out = subprocess.run(
        [sys.executable, "-c", PEAK_RSS_SCRIPT, str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    f32, peak = map(int, out.stdout.split())
    assert f32 == 1_777_088_000 * 4  # every parameter once, float32
    assert peak <= 1.5 * f32, f"peak RSS {peak / 2**30:.2f} GiB vs float32 {f32 / 2**30:.2f} GiB"
