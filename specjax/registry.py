"""Model names -> loaders: ``specjax.load_model``, the one place a name becomes a model.

The API (``specjax.generate``), the CLI (``specjax-run``) and training (``specjax-train``) all
resolve names here. A name is one of:

- a GGUF model in ``MODEL_NAMES`` (``specjax.models.loader.load_gguf``: downloaded once, then
  cached), or the path of a local ``.gguf`` file of a supported architecture;
- a Hugging Face checkpoint: a local directory (``config.json``, ``*.safetensors``,
  ``tokenizer.json``), or a hub id (``org/name``) already in the local Hugging Face cache, never
  downloaded (``specjax.models.hf``);
- ``toy-target`` / ``toy-draft`` (optionally ``-v<V>``): tabular models with an exactly known
  law (``specjax.models.toy``);
- ``tiny-<preset>`` (``tiny-llama``, ``tiny-qwen2``): a random tiny ``Decoder``, the real code
  path at test size;
- ``family/<target>/d<D>-l<layers>``: a trained draft-family decoder (``specjax-train
  drafter=family``; ``specjax.drafters.family``).

``weights`` (float32, bfloat16, float16, int8) applies to the real models (GGUF and Hugging
Face); None is the device's default: float32 on the CPU, bfloat16 on an accelerator.
"""

from __future__ import annotations

from pathlib import Path

from specjax.drafters.family import load_family
from specjax.models.config import tiny_config
from specjax.models.decoder import Decoder
from specjax.models.hf import find_checkpoint
from specjax.models.loader import MODEL_NAMES, LoadedModel, load_gguf, load_hf
from specjax.models.quant import PASS_ACTIVATIONS, WEIGHT_FORMATS, check_activations
from specjax.models.toy import ToyLoaded, load_toy


def load_tiny(name: str, cache_dir=None) -> ToyLoaded:
    """``tiny-<preset>``: ``Decoder.random(tiny_config(preset), seed=0)``."""
    preset = name.removeprefix("tiny-")
    config = tiny_config(preset)
    return ToyLoaded(name=name, model=Decoder.random(config, seed=0), eos_ids=config.eos_ids)


#: Name prefix -> loader(name, cache_dir) for the models that are not GGUF files.
PREFIXES = {
    "toy": lambda name, cache_dir=None: load_toy(name),
    "tiny-": load_tiny,
    "family/": load_family,
}


def default_weights() -> str:
    """The weight format a real model loads in when none is asked for: float32 where the CPU
    kernels run, bfloat16 on an accelerator (half the bytes a decode step reads)."""
    import jax

    return "float32" if jax.default_backend() == "cpu" else "bfloat16"


def load_model(name: str, cache_dir=None, weights: str | None = None,
               packed: bool | None = None,
               prefill_activations: str = "float32",
               decode_activations: str = "float32") -> LoadedModel | ToyLoaded:
    """The model called ``name`` (see the module doc for the names).

    ``weights="int8"`` quantizes a real model's matmul weights at load (``models.quant``):
    faster decode on CPU, a slightly different target law; ``"bfloat16"`` / ``"float16"`` store
    them in that dtype. ``prefill_activations="int8"`` (int8 weights only) rounds the prompt's
    rows to int8 too in the prefill (W8A8, ``quant.w8a8``): a faster prefill on CPUs with
    AVX-512 VNNI, a slightly different model; ``prefill_activations="bfloat16"`` (float32
    weights) computes a float32 model's prefill in bfloat16 (``quant.bf16_dot``: AMX-BF16 or
    AVX512-BF16 units where XLA finds them), also another model. ``decode_activations="int8"``
    rounds the rows of every other pass to int8 (decode, tree and draft passes alike, so
    speculative decoding stays exact for that model): a tree pass of a few rows then costs
    little more than a decode step.
    ``packed`` (float32 models): the layer matmuls in
    the CPU kernel's layout; ``None`` = on the CPU backend (``Decoder``), ``False`` keeps XLA's
    dot (benchmarks compare the two).
    """
    if not isinstance(name, str):
        raise ValueError(f"load_model: name must be a str, got {type(name).__name__}")
    if weights is not None and weights not in WEIGHT_FORMATS:
        raise ValueError(f"load_model: weights must be one of {list(WEIGHT_FORMATS)}, "
                         f"got {weights!r}")
    prefix = next((p for p in PREFIXES if name.startswith(p)), None)
    own = weights or ("float32" if prefix else default_weights())
    check_activations(prefill_activations, own)
    check_activations(decode_activations, own, "decode_activations", PASS_ACTIVATIONS)
    if prefix is not None:
        if weights not in (None, "float32"):
            raise ValueError(f"load_model: weights={weights!r} applies to the GGUF and Hugging "
                             f"Face models only (e.g. {list(MODEL_NAMES)}), not {name!r}")
        return PREFIXES[prefix](name, cache_dir)
    weights = weights or default_weights()
    if name in MODEL_NAMES or (name.endswith(".gguf") and Path(name).expanduser().is_file()):
        loaded = load_gguf(name, cache_dir, weights=weights, packed=packed)
    elif (checkpoint := find_checkpoint(name)) is not None:
        loaded = load_hf(checkpoint, name, weights=weights, packed=packed)
    else:
        loaded = None
    if loaded is not None:
        loaded.model.prefill_activations = prefill_activations
        loaded.model.decode_activations = decode_activations
        return loaded
    raise ValueError(
        f"load_model: unknown model name={name!r}; allowed: {list(MODEL_NAMES)}, a local .gguf "
        "file, a Hugging Face checkpoint directory or a hub id in the local HF cache, or a name "
        f"starting with {', '.join(repr(p) for p in PREFIXES)} (e.g. toy-target, toy-draft, "
        "tiny-llama)")


__all__ = ["MODEL_NAMES", "PREFIXES", "default_weights", "load_model", "load_tiny"]
