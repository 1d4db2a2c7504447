"""A Hugging Face checkpoint directory as a specjax model: ``config.json`` -> ``ModelConfig``,
``*.safetensors`` -> the decoder's weights, ``tokenizer.json`` -> its tokenizer.

Why a config is read field by field and refused rather than guessed: the decoder computes one
family of transformers (pre-norm, RoPE, grouped-query attention, SwiGLU). A field that changes
that math and is silently dropped (a sliding window shorter than the context, soft-capped
logits, a mixture of experts, another RoPE rule) gives a model whose law is not the
checkpoint's, and every exactness claim downstream would be about the wrong target. So each
field is either computed, known not to change the forward pass, or refused in one line.

Weights are read one tensor at a time from the memory-mapped safetensors files (single or
sharded through ``model.safetensors.index.json``), one layer at a time, each converted to the
decoder's format before the next is read (``Decoder``'s streamed form), so loading needs the
model's bytes in the target format plus one layer, not a float32 copy of the whole model.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from specjax.models.config import ModelConfig

#: ``architectures[0]`` -> the decoder's arch.
ARCHITECTURES = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2",
                 "Qwen3ForCausalLM": "qwen3", "MistralForCausalLM": "mistral"}
#: What each architecture's config class defaults to when a field is absent (transformers').
DEFAULTS = {
    "llama": dict(rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=False),
    "qwen2": dict(rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=False),
    "qwen3": dict(rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=False),
    "mistral": dict(rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=False),
}
#: Fields the forward pass does not read (bookkeeping, training, generation defaults).
INERT = frozenset({
    "architectures", "model_type", "transformers_version", "torch_dtype", "dtype", "use_cache",
    "initializer_range", "attention_dropout", "bos_token_id", "eos_token_id", "pad_token_id",
    "pretraining_tp", "name_or_path", "return_dict", "output_attentions",
    "output_hidden_states", "torchscript", "use_bfloat16", "tie_encoder_decoder",
    "is_decoder", "is_encoder_decoder", "add_cross_attention", "tokenizer_class", "id2label",
    "label2id", "problem_type", "task_specific_params", "prefix", "max_length",
    "use_return_dict", "custom_pipelines",
    "max_window_layers", "layer_types", "use_sliding_window", "sliding_window",
    "attention_bias", "mlp_bias", "hidden_act", "rope_scaling", "head_dim",
})
#: Fields the decoder computes from (see ``config_from_hf``).
COMPUTED = frozenset({
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
    "num_attention_heads", "num_key_value_heads", "max_position_embeddings", "rope_theta",
    "rms_norm_eps", "tie_word_embeddings",
})


def _refuse(field: str, why: str) -> ValueError:
    return ValueError(f"config.json: {field}: {why}")


def config_from_hf(raw: dict[str, Any], *, eos_ids: tuple[int, ...] = ()) -> ModelConfig:
    """The decoder's config for an HF ``config.json``; a field that would change the math in
    a way the decoder does not compute is refused, naming it."""
    archs = raw.get("architectures") or []
    name = archs[0] if archs else None
    if name not in ARCHITECTURES:
        raise _refuse("architectures", f"{name!r} is not supported; supported: "
                                       f"{', '.join(ARCHITECTURES)}")
    arch = ARCHITECTURES[name]
    # "_name_or_path", "_attn_implementation", ...: transformers' bookkeeping, never math
    unknown = sorted(k for k in set(raw) - INERT - COMPUTED if not k.startswith("_"))
    if unknown:
        raise _refuse(unknown[0], f"not understood by specjax's {arch} decoder, and it may "
                                  "change the forward pass, so it is refused rather than ignored "
                                  f"(all unknown fields: {', '.join(unknown)})")
    if raw.get("hidden_act", "silu") != "silu":
        raise _refuse("hidden_act", f"{raw['hidden_act']!r}; the decoder's MLP is SwiGLU "
                                    "(silu)")
    if raw.get("mlp_bias"):
        raise _refuse("mlp_bias", "true; the decoder's MLP has no biases")
    if raw.get("attention_bias") and arch != "qwen2":
        raise _refuse("attention_bias", f"true; {name} then biases o_proj too, which the "
                                        "decoder does not compute")
    context = int(raw["max_position_embeddings"])
    window = raw.get("sliding_window")
    sliding = raw.get("use_sliding_window", arch == "mistral")
    if sliding and window is not None and int(window) < context:
        raise _refuse("sliding_window", f"{window} < max_position_embeddings={context}: "
                                        "sliding-window attention is not computed (full causal "
                                        "attention only)")
    layer_types = raw.get("layer_types") or ()
    if any(t != "full_attention" for t in layer_types):
        raise _refuse("layer_types", f"{sorted(set(layer_types))}; only full_attention layers "
                                     "are computed")
    scaling = dict(raw.get("rope_scaling") or {})
    if "type" in scaling:  # older spelling of rope_type
        scaling.setdefault("rope_type", scaling.pop("type"))
    if scaling.get("rope_type", "default") not in ("default", "linear", "llama3"):
        raise _refuse("rope_scaling", f"rope_type {scaling.get('rope_type')!r} is not "
                                      "computed; allowed: default, linear, llama3")
    if scaling.get("rope_type", "default") == "default":
        scaling = {}
    heads = int(raw["num_attention_heads"])
    defaults = DEFAULTS[arch]
    return ModelConfig(
        arch=arch, vocab_size=int(raw["vocab_size"]),
        num_layers=int(raw["num_hidden_layers"]), hidden_size=int(raw["hidden_size"]),
        num_heads=heads, num_kv_heads=int(raw.get("num_key_value_heads") or heads),
        head_dim=int(raw.get("head_dim") or int(raw["hidden_size"]) // heads),
        intermediate_size=int(raw["intermediate_size"]),
        rope_theta=float(raw.get("rope_theta", defaults["rope_theta"])),
        rms_eps=float(raw.get("rms_norm_eps", defaults["rms_norm_eps"])),
        qkv_bias=arch == "qwen2", qk_norm=arch == "qwen3",
        rope_scaling=tuple(sorted(scaling.items())),
        tie_embeddings=bool(raw.get("tie_word_embeddings", defaults["tie_word_embeddings"])),
        context_length=context,
        bos_id=raw.get("bos_token_id") if isinstance(raw.get("bos_token_id"), int) else None,
        eos_ids=eos_ids,
    )


def read_config(root: Path) -> ModelConfig:
    """``root/config.json`` (EOS ids also from ``generation_config.json``)."""
    path = root / "config.json"
    if not path.is_file():
        raise ValueError(f"model: {root} has no config.json (a Hugging Face checkpoint "
                         "directory holds config.json, *.safetensors and tokenizer.json)")
    raw = json.loads(path.read_text(encoding="utf-8"))
    eos: list[int] = []
    generation = root / "generation_config.json"
    for source in ([json.loads(generation.read_text(encoding="utf-8"))]
                   if generation.is_file() else []) + [raw]:
        ids = source.get("eos_token_id")
        eos += [ids] if isinstance(ids, int) else list(ids or [])
    return config_from_hf(raw, eos_ids=tuple(dict.fromkeys(int(i) for i in eos)))


class SafetensorsDir:
    """The tensors of a checkpoint directory, by name, one at a time (memory-mapped)."""

    def __init__(self, root: Path):
        index = root / "model.safetensors.index.json"
        if index.is_file():
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            self.files = {name: root / file for name, file in weight_map.items()}
        else:
            files = sorted(root.glob("*.safetensors"))
            if not files:
                raise ValueError(f"model: {root} has no *.safetensors weights (other formats, "
                                 "e.g. PyTorch .bin, are not read; convert with "
                                 "save_pretrained(safe_serialization=True))")
            from safetensors import safe_open

            self.files = {}
            for file in files:
                with safe_open(str(file), framework="numpy") as f:
                    self.files.update({name: file for name in f.keys()})  # noqa: SIM118

    def __contains__(self, name: str) -> bool:
        return name in self.files

    def get(self, name: str) -> np.ndarray:
        """One tensor as NumPy in its stored dtype (bfloat16 through ``ml_dtypes``); the file
        is mapped only while this tensor is read."""
        from safetensors import safe_open

        if name not in self.files:
            raise ValueError(f"model: weights have no tensor {name!r}")
        with safe_open(str(self.files[name]), framework="numpy") as f:
            return f.get_tensor(name)


#: Canonical layer name -> (HF name under ``model.layers.<i>.``, transposed to ``[in, out]``).
LAYER_NAMES = {
    "wq": ("self_attn.q_proj.weight", True), "wk": ("self_attn.k_proj.weight", True),
    "wv": ("self_attn.v_proj.weight", True), "wo": ("self_attn.o_proj.weight", True),
    "bq": ("self_attn.q_proj.bias", False), "bk": ("self_attn.k_proj.bias", False),
    "bv": ("self_attn.v_proj.bias", False),
    "q_norm": ("self_attn.q_norm.weight", False), "k_norm": ("self_attn.k_norm.weight", False),
    "attn_norm": ("input_layernorm.weight", False),
    "mlp_norm": ("post_attention_layernorm.weight", False),
    "w_gate": ("mlp.gate_proj.weight", True), "w_up": ("mlp.up_proj.weight", True),
    "w_down": ("mlp.down_proj.weight", True),
}


def _layers(tensors: SafetensorsDir, config: ModelConfig) -> Iterator[dict[str, np.ndarray]]:
    """Each layer's canonical weights (``layers.weight_shapes`` without the layer axis),
    read when the decoder asks for that layer."""
    from specjax.models.layers import weight_shapes

    names = [n for n in weight_shapes(config) if n in LAYER_NAMES]
    for i in range(config.num_layers):
        layer = {}
        for name in names:
            hf_name, transpose = LAYER_NAMES[name]
            value = tensors.get(f"model.layers.{i}.{hf_name}")
            layer[name] = np.ascontiguousarray(value.T) if transpose else value
        yield layer


def read_weights(tensors: SafetensorsDir, config: ModelConfig) -> dict[str, Any]:
    """The decoder's streamed weights form: the global tensors, and ``layers`` read lazily."""
    weights = {"embed": tensors.get("model.embed_tokens.weight"),
               "final_norm": tensors.get("model.norm.weight"),
               "layers": _layers(tensors, config)}
    if not config.tie_embeddings:
        if "lm_head.weight" not in tensors:
            raise ValueError("model: config.json has tie_word_embeddings=false but the weights "
                             "have no lm_head.weight")
        weights["lm_head"] = np.ascontiguousarray(tensors.get("lm_head.weight").T)
    return weights


def find_checkpoint(name: str) -> Path | None:
    """A local checkpoint directory for ``name``: the directory itself, or the snapshot of a
    hub id already in the local Hugging Face cache (never a download). None when ``name`` is
    neither a directory nor shaped like a hub id (``org/name``); a hub id missing from the
    cache raises, naming where it looked."""
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    if name.count("/") != 1 or name.startswith(("/", ".", "~")) or path.suffix == ".gguf":
        return None
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(name, local_files_only=True))
    except LocalEntryNotFoundError:
        raise ValueError(f"model: {name!r} is neither a local directory nor in the local Hugging "
                         f"Face cache ({constants.HF_HUB_CACHE}); specjax never downloads at run "
                         "time: put the checkpoint there first, or pass its directory") from None


__all__ = ["ARCHITECTURES", "SafetensorsDir", "config_from_hf", "find_checkpoint",
           "read_config", "read_weights"]
