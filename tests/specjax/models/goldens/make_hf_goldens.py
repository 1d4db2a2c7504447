"""Regenerate the tiny Hugging Face checkpoints and reference logits under ``goldens/hf/``.

    python -m venv /tmp/hfvenv
    /tmp/hfvenv/bin/pip install torch==2.13.0 'transformers>=4.51,<5' safetensors numpy tokenizers
    /tmp/hfvenv/bin/python tests/specjax/models/goldens/make_hf_goldens.py

Why these goldens exist: specjax loads Hugging Face ``safetensors`` checkpoints with its own
JAX decoder. To check that loader and decoder against an independent implementation, this
script has Hugging Face ``transformers`` itself (PyTorch, float32, eval mode) write tiny random
checkpoints and compute their logits; the checkpoints and ``reference.json`` files are
committed, so the default test suite compares specjax against them without torch or
transformers installed. Only this script needs the venv above.

For each architecture (``llama``, ``qwen2``, ``qwen3``, ``mistral``) it writes
``goldens/hf/<name>/``:

- ``config.json`` + ``model.safetensors`` from ``<Arch>ForCausalLM(config).save_pretrained(dir,
  safe_serialization=True)`` (float32; 2 layers, 4 query heads, 2 KV heads).
  llama: tied embeddings (no ``lm_head.weight`` in the file), llama3 ``rope_scaling`` with
  ``original_max_position_embeddings=64`` so that at head_dim 16 the three llama3 bands
  (unchanged, smoothed, divided by ``factor``) are all hit. qwen2: q/k/v biases, untied.
  qwen3: per-head q/k RMSNorm, ``head_dim=16`` while hidden_size/num_heads = 8, untied.
  mistral: ``sliding_window=None`` (plain causal attention), untied. ``rope_theta`` and
  ``rms_norm_eps`` differ between architectures on purpose.
- Weights: after construction, with ``torch.manual_seed(SEED)``, every parameter is
  re-initialised in ``named_parameters()`` order: parameters whose name ends in ``norm.weight``
  (input/post-attention layernorms, the final norm, qwen3's q_norm/k_norm) get
  ``1 + 0.1 * randn``; every other parameter (embeddings, projection matrices, qwen2's biases)
  gets ``0.2 * randn``. Logits are then far from uniform, so a wrong RoPE, norm or bias
  visibly changes them.
- ``tokenizer.json`` (readable by ``tokenizers.Tokenizer.from_file``), ``tokenizer_config.json``
  (with a jinja ``chat_template``: ChatML for qwen2/qwen3, a simple one for llama/mistral,
  ``bos_token``/``eos_token``) and ``special_tokens_map.json``, via
  ``PreTrainedTokenizerFast(tokenizer_object=...).save_pretrained(dir, save_jinja_files=False)``
  (so the template sits in tokenizer_config.json, not in a separate chat_template.jinja).
  The tokenizer is a byte-level BPE (GPT-2 style ``ByteLevel`` pre-tokenizer and decoder)
  whose vocabulary is the byte-level characters of a fixed corpus plus merges learnt here by a
  deterministic pure-Python BPE (most frequent pair, ties broken by the pair's text), sized so
  that ``get_vocab_size()`` (special tokens included) equals the model's ``vocab_size``
  exactly. Characters outside that small alphabet are dropped on encode (the BPE model has no
  ``unk_token`` and no byte fallback: a full 256-byte alphabet does not fit in vocab < 256;
  mistral's ``<unk>`` is only a special token). Special tokens sit at the end of the id range
  for llama/qwen2/qwen3 and at ids 0.. for mistral; llama and mistral add BOS through a
  ``TemplateProcessing`` post-processor, qwen adds nothing.
- ``generation_config.json`` from ``GenerationConfig`` (written after the model, replacing the
  one ``save_pretrained`` derives): llama has ``eos_token_id`` = a list of two ids.
- ``reference.json``: three fixed prompts of token ids (lengths 5, 9, 16, drawn with a seeded
  generator from the non-special ids), ``logits`` = ``model(input_ids).logits[0]`` for each
  prompt ([T, V], rounded to 6 significant digits; the script asserts every |logit| < 10, so
  the rounding error is <= 5e-6), the greedy continuation of 8 tokens (manual argmax loop with
  a full forward per step, no stopping on EOS) with the smallest top-1/top-2 logit margin seen
  (asserted > 1e-3, so the greedy ids are not a tie), the torch and transformers versions and
  the model config.

The script re-checks its own output at the end: each directory is reloaded with
``AutoModelForCausalLM.from_pretrained`` and must reproduce the stored logits within 1e-5 and
the greedy ids; the tokenizer's vocab size must equal the config's. Attention runs as
``eager`` for the references; the reload check also runs the default (sdpa) path.
"""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import safetensors.numpy
import tokenizers
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import (
    AutoModelForCausalLM,
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

SEED = 1234
OUT = Path(__file__).with_name("hf")
PROMPT_LENGTHS = (5, 9, 16)
NEW_TOKENS = 8
LOGIT_BOUND = 10.0  # |logit| < 10 => 6 significant digits is <= 5e-6 absolute
MIN_MARGIN = 1e-3
RELOAD_TOL = 1e-5

CORPUS = """\
the quick brown fox jumps over the lazy dog.
user: hello, how are you today?
assistant: i am fine, thank you. and you?
system: you are a helpful assistant.
def fibonacci(n):
    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)
print(fibonacci(10))
a cat sat on the mat; the dog sat on the log.
there is no place like home, said the girl in the red shoes.
one two three four five six seven eight nine ten: 0 1 2 3 4 5 6 7 8 9
"""

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
LLAMA_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ message['role'] + ': ' + message['content'] + '<|eot|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}"
)
MISTRAL_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% else %}{{ ' ' + message['content'] + eos_token }}{% endif %}"
    "{% endfor %}"
)

COMMON = dict(
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    hidden_act="silu",
    attention_dropout=0.0,
    attn_implementation="eager",
)

# Qwen2 and Qwen3 share the ChatML tokenizer layout.
QWEN_TOKENIZER = dict(
    specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
    specials_first=False,
    bos="<|endoftext|>",
    eos="<|im_end|>",
    pad="<|endoftext|>",
    gen_eos="<|im_end|>",
    template=CHATML,
    add_bos=False,
)

# name -> config/model classes, config kwargs, special tokens (at the front of the id range or the
# end), bos/eos/pad tokens, generation_config eos, chat template, whether BOS is added on encode
ARCHS = {
    "llama": dict(
        config_cls=LlamaConfig,
        model_cls=LlamaForCausalLM,
        config=dict(
            vocab_size=128,
            hidden_size=64,
            intermediate_size=96,
            rope_theta=10000.0,
            rms_norm_eps=1e-5,
            tie_word_embeddings=True,
            rope_scaling={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
        ),
        specials=["<s>", "</s>", "<|eot|>"],
        specials_first=False,
        bos="<s>",
        eos="</s>",
        pad=None,
        gen_eos=["</s>", "<|eot|>"],
        template=LLAMA_TEMPLATE,
        add_bos=True,
    ),
    "qwen2": dict(
        config_cls=Qwen2Config,
        model_cls=Qwen2ForCausalLM,
        config=dict(
            vocab_size=112,
            hidden_size=48,
            intermediate_size=80,
            rope_theta=1000000.0,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            use_sliding_window=False,
        ),
        **QWEN_TOKENIZER,
    ),
    "qwen3": dict(
        config_cls=Qwen3Config,
        model_cls=Qwen3ForCausalLM,
        config=dict(
            vocab_size=120,
            hidden_size=32,
            head_dim=16,  # hidden_size / num_attention_heads would be 8
            intermediate_size=64,
            rope_theta=1000000.0,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            attention_bias=False,
            use_sliding_window=False,
        ),
        **QWEN_TOKENIZER,
    ),
    "mistral": dict(
        config_cls=MistralConfig,
        model_cls=MistralForCausalLM,
        config=dict(
            vocab_size=96,
            hidden_size=64,
            intermediate_size=96,
            rope_theta=1000000.0,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            sliding_window=None,
        ),
        specials=["<unk>", "<s>", "</s>", "[INST]", "[/INST]"],
        specials_first=True,
        bos="<s>",
        eos="</s>",
        pad=None,
        gen_eos="</s>",
        template=MISTRAL_TEMPLATE,
        add_bos=True,
    ),
}


# --------------------------------------------------------------------------- tokenizer


def byte_level_words(text: str) -> list[str]:
    """The corpus split by the GPT-2 regex and mapped to byte-level characters (Ġ = space)."""
    pre = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    return [piece for piece, _ in pre.pre_tokenize_str(text)]


def learn_bpe(words: list[str], n_tokens: int) -> tuple[list[str], list[tuple[str, str]]]:
    """Deterministic BPE: alphabet (sorted) + merges until ``n_tokens`` tokens exist."""
    counts = Counter(words)
    alphabet = sorted({c for w in counts for c in w})
    if len(alphabet) > n_tokens:
        raise ValueError(f"alphabet of {len(alphabet)} does not fit in {n_tokens} tokens")
    tokens = list(alphabet)
    seqs = {w: list(w) for w in counts}
    merges: list[tuple[str, str]] = []
    while len(tokens) < n_tokens:
        pairs: Counter = Counter()
        for w, n in counts.items():
            s = seqs[w]
            for a, b in zip(s, s[1:], strict=False):
                pairs[(a, b)] += n
        if not pairs:
            raise ValueError("corpus too small for the requested vocabulary")
        (a, b), _ = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))
        merges.append((a, b))
        tokens.append(a + b)
        for w, s in seqs.items():
            i, out = 0, []
            while i < len(s):
                if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
    return tokens, merges


def build_tokenizer(spec: dict, vocab_size: int) -> Tokenizer:
    specials = spec["specials"]
    tokens, merges = learn_bpe(byte_level_words(CORPUS), vocab_size - len(specials))
    ordered = specials + tokens if spec["specials_first"] else tokens + specials
    vocab = {tok: i for i, tok in enumerate(ordered)}
    assert len(vocab) == vocab_size, "duplicate token"
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(specials)
    if spec["add_bos"]:
        bos = spec["bos"]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, vocab[bos])]
        )
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    assert tok.get_vocab_size() == vocab_size, (tok.get_vocab_size(), vocab_size)
    return tok


# --------------------------------------------------------------------------- model


def reinit_(model: torch.nn.Module) -> None:
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape))
            else:
                p.copy_(0.2 * torch.randn(p.shape))


@torch.no_grad()
def forward_logits(model, ids: list[int]) -> torch.Tensor:
    return model(torch.tensor([ids])).logits[0].float()


@torch.no_grad()
def greedy(model, ids: list[int], n: int) -> tuple[list[int], float]:
    seq, out, margin = list(ids), [], float("inf")
    for _ in range(n):
        last = forward_logits(model, seq)[-1]
        top2 = torch.topk(last, 2).values
        margin = min(margin, float(top2[0] - top2[1]))
        nxt = int(torch.argmax(last))
        out.append(nxt)
        seq.append(nxt)
    return out, margin


def sig6(x: float) -> float:
    return float(f"{x:.6g}")


def dump_json(obj, path: Path) -> None:
    """Indented JSON with every innermost list of numbers on one line."""
    text = json.dumps(obj, indent=1)
    text = re.sub(
        r"\[\s*([-+0-9.eE,\s]+?)\s*\]", lambda m: "[" + re.sub(r"\s+", " ", m.group(1)) + "]", text
    )
    path.write_text(text + "\n")


def make(name: str, spec: dict) -> None:
    out = OUT / name
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)

    V = spec["config"]["vocab_size"]
    tok = build_tokenizer(spec, V)
    vocab = tok.get_vocab()
    special_ids = {vocab[s] for s in spec["specials"]}

    def ids(t: str | None) -> int | None:
        return None if t is None else vocab[t]

    gen_eos = spec["gen_eos"]
    gen_eos_id = [vocab[t] for t in gen_eos] if isinstance(gen_eos, list) else vocab[gen_eos]

    config = spec["config_cls"](
        **COMMON,
        **spec["config"],
        bos_token_id=ids(spec["bos"]),
        eos_token_id=ids(spec["eos"]),
        pad_token_id=ids(spec["pad"]),
    )
    torch.manual_seed(SEED)
    model = spec["model_cls"](config)
    reinit_(model)
    model = model.float().eval()
    model.save_pretrained(out, safe_serialization=True)

    GenerationConfig(
        bos_token_id=ids(spec["bos"]),
        eos_token_id=gen_eos_id,
        pad_token_id=ids(spec["pad"]),
        do_sample=False,
    ).save_pretrained(out)

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=spec["bos"],
        eos_token=spec["eos"],
        pad_token=spec["pad"],
        unk_token="<unk>" if "<unk>" in vocab else None,
        additional_special_tokens=[
            s for s in spec["specials"] if s not in (spec["bos"], spec["eos"], spec["pad"], "<unk>")
        ],
        chat_template=spec["template"],
        model_max_length=config.max_position_embeddings,
        clean_up_tokenization_spaces=False,
    )
    # chat_template inside tokenizer_config.json (the long-standing layout), not chat_template.jinja
    fast.save_pretrained(out, save_jinja_files=False)
    assert "chat_template" in json.loads((out / "tokenizer_config.json").read_text())
    assert not (out / "chat_template.jinja").exists()
    for f in out.iterdir():
        f.chmod(0o644)

    # prompts: seeded, from the non-special ids
    normal = np.array(sorted(set(range(V)) - special_ids))
    rng = np.random.default_rng(SEED)
    prompts = [[int(i) for i in rng.choice(normal, size=n)] for n in PROMPT_LENGTHS]

    refs = []
    for p in prompts:
        logits = forward_logits(model, p)
        assert logits.shape == (len(p), V)
        bound = float(logits.abs().max())
        assert bound < LOGIT_BOUND, f"{name}: |logit| {bound} >= {LOGIT_BOUND}"
        cont, margin = greedy(model, p, NEW_TOKENS)
        assert margin > MIN_MARGIN, f"{name}: greedy top-2 margin {margin}"
        refs.append(
            dict(
                input_ids=p,
                logits=[[sig6(x) for x in row] for row in logits.tolist()],
                greedy_new_tokens=cont,
                greedy_min_top2_margin=sig6(margin),
                logits_std=sig6(float(logits.std())),
            )
        )

    dump_json(
        dict(
            architecture=spec["model_cls"].__name__,
            description=(
                "Reference outputs of transformers (float32, eval, eager attention) for the "
                "tiny random checkpoint in this folder; see make_hf_goldens.py."
            ),
            torch_version=torch.__version__,
            transformers_version=transformers.__version__,
            tokenizers_version=tokenizers.__version__,
            seed=SEED,
            init="norm weights 1 + 0.1*randn; every other parameter 0.2*randn",
            logits_rounding="6 significant digits",
            greedy="manual argmax loop, full forward per step, no EOS stop",
            special_tokens={s: vocab[s] for s in spec["specials"]},
            generation_eos_token_id=gen_eos_id,
            config=json.loads((out / "config.json").read_text()),  # as saved
            prompts=refs,
        ),
        out / "reference.json",
    )
    print(f"wrote {out}")


# --------------------------------------------------------------------------- checks


def verify(name: str) -> None:
    d = OUT / name
    ref = json.loads((d / "reference.json").read_text())
    for impl in ("eager", "sdpa"):
        model = AutoModelForCausalLM.from_pretrained(d, attn_implementation=impl).eval()
        assert next(model.parameters()).dtype == torch.float32
        for r in ref["prompts"]:
            got = forward_logits(model, r["input_ids"]).numpy()
            diff = float(np.max(np.abs(got - np.array(r["logits"]))))
            assert diff < RELOAD_TOL, f"{name}/{impl}: max abs diff {diff}"
            assert greedy(model, r["input_ids"], NEW_TOKENS)[0] == r["greedy_new_tokens"], (
                f"{name}/{impl}"
            )
    tok = Tokenizer.from_file(str(d / "tokenizer.json"))
    V = json.loads((d / "config.json").read_text())["vocab_size"]
    assert tok.get_vocab_size() == V, (name, tok.get_vocab_size(), V)
    assert sorted(tok.get_vocab().values()) == list(range(V)), name
    tensors = safetensors.numpy.load_file(str(d / "model.safetensors"))
    assert all(t.dtype == np.float32 for t in tensors.values())
    size = sum(f.stat().st_size for f in d.iterdir())
    assert size < 1 << 20, f"{name}: {size} bytes"
    print(f"verified {name}: {len(tensors)} tensors, {size / 1024:.0f} KiB")


def main() -> None:
    torch.set_num_threads(1)
    for name, spec in ARCHS.items():
        make(name, spec)
    for name in ARCHS:
        verify(name)


if __name__ == "__main__":
    main()
