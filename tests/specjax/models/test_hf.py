"""Hugging Face checkpoints through ``load_model``: logits against ``transformers``, the
tokenizer files, bfloat16 pairs, and the refusals.

The four checkpoints in ``goldens/hf/`` (Llama with llama3 RoPE scaling and a tied head,
Qwen2, Qwen3 with per-head q/k norms and head_dim != hidden / heads, Mistral) were written by
``transformers`` (``save_pretrained``) with random weights, and their ``reference.json`` holds
``transformers``' own float32 logits and greedy continuations
(``goldens/make_hf_goldens.py``): an independent implementation, so torch is not needed here.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from collections import Counter
from pathlib import Path

import jax
import ml_dtypes
import numpy as np
import pytest
from exactness import FAST, FPR

import specjax
from algorithms.exact.monte_carlo import chi_square
from specjax.drafters import ModelDrafter
from specjax.models.hf import config_from_hf

GOLDENS = Path(__file__).parent / "goldens" / "hf"
ARCHS = ("llama", "qwen2", "qwen3", "mistral")
# transformers' logits are stored to 6 significant digits (|logit| < 10: <= 5e-6 off); the rest
# is float32 rounding of two implementations (measured <= 1e-5).
LOGIT_TOL = 3e-5
GREEDY = specjax.Sampling(temperature=0.0)


def reference(arch: str) -> dict:
    return json.loads((GOLDENS / arch / "reference.json").read_text())


@pytest.fixture(scope="module", params=ARCHS)
def hf_model(request):
    return request.param, specjax.load_model(str(GOLDENS / request.param), weights="float32")


def test_logits_match_transformers(hf_model):
    arch, model = hf_model
    assert model.config.arch == arch
    for prompt in reference(arch)["prompts"]:
        got = model.forward(prompt["input_ids"])
        want = np.asarray(prompt["logits"], np.float32)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=0, atol=LOGIT_TOL)


def test_cached_greedy_decoding_matches_transformers(hf_model):
    """The engine's prefill + cached decode, batched over the prompts of different lengths."""
    arch, model = hf_model
    prompts = reference(arch)["prompts"]
    out = specjax.generate(model, [p["input_ids"] for p in prompts], sampling=GREEDY,
                           max_new_tokens=8, progress=False, compiler_options=FAST)
    assert out.tokens == [p["greedy_new_tokens"] for p in prompts]


def test_the_configs_features_are_read():
    llama = specjax.load_model(str(GOLDENS / "llama"))
    assert llama.config.tie_embeddings and dict(llama.config.rope_scaling)["rope_type"] == "llama3"
    qwen3 = specjax.load_model(str(GOLDENS / "qwen3")).config
    assert qwen3.qk_norm and qwen3.head_dim == 16 != qwen3.hidden_size // qwen3.num_heads
    assert specjax.load_model(str(GOLDENS / "qwen2")).config.qkv_bias


def test_tokenizer_chat_template_and_eos_come_from_the_files():
    llama = specjax.load_model(str(GOLDENS / "llama"))
    assert llama.eos_ids == (126, 127)  # generation_config.json's list, then config.json's
    ids = llama.encode("hello")
    assert ids[0] == 125 and ids.count(125) == 1  # BOS from the tokenizer's post-processor
    chat = llama.apply_chat_template([{"role": "user", "content": "hi"}])
    assert chat.startswith("<s>") and llama.encode(chat).count(125) == 1  # BOS once
    qwen = specjax.load_model(str(GOLDENS / "qwen2"))
    assert qwen.encode("hello")[0] != 109 and qwen.eos_ids == (111,)
    assert qwen.apply_chat_template([{"role": "user", "content": "hi"}]) == (
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


# --- bfloat16: a tiny checkpoint pair written here -------------------------------------------

V = 8
TOKENS = ["a", "b", "c", "d", "e", "f", "<s>", "</s>"]


def write_checkpoint(root: Path, seed: int, dtype=ml_dtypes.bfloat16,
                     tokens: list[str] = TOKENS, noise: float = 0.0) -> Path:
    """A Qwen3-shaped checkpoint directory (config.json, model.safetensors in ``dtype``,
    tokenizer.json), random weights scaled so every layer changes the logits. ``noise`` > 0:
    seed 0's weights plus that much of seed ``seed``'s (a draft that agrees with the target
    often, but not always)."""
    from safetensors.numpy import save_file
    from tokenizers import Tokenizer, models, pre_tokenizers

    root.mkdir(parents=True)
    D, H, KV, hd, F, layers = 32, 4, 2, 8, 48, 2
    config = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": V,
              "hidden_size": D, "intermediate_size": F, "num_hidden_layers": layers,
              "num_attention_heads": H, "num_key_value_heads": KV, "head_dim": hd,
              "max_position_embeddings": 128, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
              "tie_word_embeddings": False, "hidden_act": "silu", "attention_bias": False,
              "bos_token_id": 6, "eos_token_id": 7, "torch_dtype": "bfloat16"}
    (root / "config.json").write_text(json.dumps(config))
    rng = np.random.default_rng(0 if noise else seed)
    other = np.random.default_rng(seed)

    def draw(shape):
        return rng.standard_normal(shape) + noise * other.standard_normal(shape)

    def mat(*shape):
        return (draw(shape) * (1.5 / np.sqrt(shape[-1]))).astype(dtype)

    def norm(n):
        return (1 + 0.1 * draw(n)).astype(dtype)

    tensors = {"model.embed_tokens.weight": mat(V, D), "model.norm.weight": norm(D),
               "lm_head.weight": mat(V, D)}
    for i in range(layers):
        p = f"model.layers.{i}."
        tensors |= {p + "self_attn.q_proj.weight": mat(H * hd, D),
                    p + "self_attn.k_proj.weight": mat(KV * hd, D),
                    p + "self_attn.v_proj.weight": mat(KV * hd, D),
                    p + "self_attn.o_proj.weight": mat(D, H * hd),
                    p + "self_attn.q_norm.weight": norm(hd),
                    p + "self_attn.k_norm.weight": norm(hd),
                    p + "input_layernorm.weight": norm(D),
                    p + "post_attention_layernorm.weight": norm(D),
                    p + "mlp.gate_proj.weight": mat(F, D), p + "mlp.up_proj.weight": mat(F, D),
                    p + "mlp.down_proj.weight": mat(D, F)}
    save_file(tensors, str(root / "model.safetensors"))
    tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(tokens)}, unk_token="a"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(root / "tokenizer.json"))
    return root


@pytest.fixture(scope="module")
def bf16_pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("bf16")
    target = specjax.load_model(str(write_checkpoint(root / "target", 0)), weights="bfloat16")
    draft = specjax.load_model(str(write_checkpoint(root / "draft", 1, noise=0.5)),
                               weights="bfloat16")
    return target, draft


def test_bf16_weights_stay_bf16_and_the_laws_are_float32(bf16_pair):
    target, _ = bf16_pair
    assert target.model.layers[0].wq[...].dtype == jax.numpy.bfloat16
    assert target.model.embed[...].dtype == jax.numpy.bfloat16
    logits = target.forward([0, 1, 2])
    assert logits.dtype == np.float32 and np.isfinite(logits).all()


def test_bf16_pair_greedy_speculative_equals_autoregressive(bf16_pair):
    target, draft = bf16_pair
    prompts = [[0, 1, 2, 3], [5], [4, 4, 2, 1, 0, 3]]
    ar = specjax.generate(target, prompts, sampling=GREEDY, max_new_tokens=12, progress=False,
                          compiler_options=FAST)
    sd = specjax.generate(target, prompts, draft=draft, drafter=ModelDrafter(K=1, L=3),
                          sampling=GREEDY, max_new_tokens=12, progress=False,
                          compiler_options=FAST)
    assert sd.tokens == ar.tokens
    calls = lambda r: sum(p["target_calls"] for p in r.per_prompt)  # noqa: E731
    assert calls(sd) < calls(ar)  # drafts were accepted, not only rejected


def exact_first_tokens(model, prompt: list[int], n: int) -> dict[tuple, float]:
    """Float64 law of the first n tokens at T = 1 (a sequence ends at its EOS), from the
    model's uncached float32 logits."""
    law = {(): 1.0}
    for _ in range(n):
        nxt = {}
        for seq, pr in law.items():
            if seq and seq[-1] in model.eos_ids:
                nxt[seq] = pr
                continue
            row = model.forward(prompt + list(seq))[-1].astype(np.float64)
            p = np.exp(row - row.max())
            p /= p.sum()
            nxt.update({seq + (x,): pr * p[x] for x in range(V)})
        law = nxt
    return law


@dataclasses.dataclass(frozen=True, kw_only=True)
class FlatDrafter(ModelDrafter):
    """Mutation: samples from q but reports q flattened halfway to uniform."""

    def propose(self, model, key, state, history, n, **kw):
        drafts, q, state = super().propose(model, key, state, history, n, **kw)
        return drafts, 0.5 * q + 0.5 / kw["vocab_size"], state


@pytest.mark.parametrize("drafter, passes", [(ModelDrafter(K=1, L=2), True),
                                             (FlatDrafter(K=1, L=2), False)])
def test_bf16_pair_token_verifier_samples_the_targets_law(bf16_pair, drafter, passes):
    """Chi-square at false-positive rate 1e-6 on 20,000 seeds; the mutant must fail it."""
    target, draft = bf16_pair
    prompt, n = [0, 1, 2], 3
    out = specjax.generate(target, [prompt] * 20_000, draft=draft, drafter=drafter,
                           verifier="token", sampling=specjax.Sampling(temperature=1.0),
                           max_new_tokens=n, seed=0, progress=False, compiler_options=FAST)
    fit = chi_square(Counter(tuple(t) for t in out.tokens), exact_first_tokens(target, prompt, n))
    assert out.summary["acceptance_rate"] > 0.1
    assert fit.passes(FPR) == passes, fit


# --- refusals ---------------------------------------------------------------------------------

def test_a_directory_without_config_json_is_refused(tmp_path):
    with pytest.raises(ValueError, match="has no config.json"):
        specjax.load_model(str(tmp_path))


@pytest.mark.parametrize("change, match", [
    ({"architectures": ["GPT2LMHeadModel"]}, "architectures: 'GPT2LMHeadModel' is not supported"),
    ({"sliding_window": 64, "max_position_embeddings": 128, "use_sliding_window": True},
     "sliding_window: 64 < max_position_embeddings=128"),
    ({"attn_logit_softcapping": 50.0}, "attn_logit_softcapping: not understood"),
    ({"num_local_experts": 8}, "num_local_experts: not understood"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope_type 'yarn' is not computed"),
    ({"hidden_act": "gelu"}, "hidden_act: 'gelu'"),
])
def test_config_fields_that_change_the_math_are_refused(change, match):
    raw = json.loads((GOLDENS / "qwen3" / "config.json").read_text()) | change
    with pytest.raises(ValueError, match=match):
        config_from_hf(raw)


def test_a_pair_with_different_tokenizers_is_refused(tmp_path):
    target = write_checkpoint(tmp_path / "t", 0)
    swapped = [TOKENS[1], TOKENS[0], *TOKENS[2:]]
    draft = write_checkpoint(tmp_path / "d", 1, tokens=swapped)
    t, d = specjax.load_model(str(target)), specjax.load_model(str(draft))
    with pytest.raises(ValueError, match=r"do not share a tokenizer: token 'a' is id 1 in the "
                                         r"draft and 0 in the target"):
        specjax.generate(t, [[0, 1]], draft=d, drafter=ModelDrafter(K=1, L=2), progress=False)


def test_a_hub_id_missing_from_the_cache_names_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ValueError, match="nor in the local Hugging Face cache "
                                         + re.escape(f"({tmp_path})") + "; specjax never "
                                         "downloads"):
        specjax.load_model("nobody/no-such-model")


def test_a_hub_id_in_the_cache_loads_offline(tmp_path, monkeypatch):
    """A snapshot laid out as the HF cache stores it resolves without any network."""
    snapshot = tmp_path / "models--org--tiny" / "snapshots" / ("0" * 40)
    shutil.copytree(GOLDENS / "qwen2", snapshot)
    (tmp_path / "models--org--tiny" / "refs").mkdir()
    (tmp_path / "models--org--tiny" / "refs" / "main").write_text("0" * 40)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    model = specjax.load_model("org/tiny", weights="float32")
    assert model.config.arch == "qwen2" and model.name == "org/tiny"
