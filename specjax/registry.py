"""Model names -> loaders: ``specjax.load_model``, the one place a name becomes a model.

The API (``specjax.generate``), the CLI (``specjax-run``) and training (``specjax-train``) all
resolve names here. A name is one of:

- a GGUF model in ``MODEL_NAMES`` (``specjax.models.loader.load_gguf``: downloaded once, then
  cached; the only kind ``weights="int8"`` and ``packed`` apply to);
- ``toy-target`` / ``toy-draft`` (optionally ``-v<V>``): tabular models with an exactly known
  law (``specjax.models.toy``);
- ``tiny-<preset>`` (``tiny-llama``, ``tiny-qwen2``): a random tiny ``Decoder``, the real code
  path at test size;
- ``family/<target>/d<D>-l<layers>``: a trained draft-family decoder (``specjax-train
  drafter=family``; ``specjax.drafters.family``).
"""

from __future__ import annotations

from specjax.drafters.family import load_family
from specjax.models.config import tiny_config
from specjax.models.decoder import Decoder
from specjax.models.loader import MODEL_NAMES, LoadedModel, load_gguf
from specjax.models.quant import WEIGHT_FORMATS
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


def load_model(name: str, cache_dir=None, weights: str = "float32",
               packed: bool | None = None) -> LoadedModel | ToyLoaded:
    """The model called ``name`` (see the module doc for the names).

    ``weights="int8"`` quantizes a GGUF model's matmul weights at load (``models.quant``):
    faster decode on CPU, a slightly different target law. ``packed`` (float32 GGUF models):
    the layer matmuls in the CPU kernel's layout; ``None`` = on the CPU backend
    (``Decoder``), ``False`` keeps XLA's dot (benchmarks compare the two).
    """
    if not isinstance(name, str):
        raise ValueError(f"load_model: name must be a str, got {type(name).__name__}")
    if weights not in WEIGHT_FORMATS:
        raise ValueError(f"load_model: weights must be one of {list(WEIGHT_FORMATS)}, "
                         f"got {weights!r}")
    prefix = next((p for p in PREFIXES if name.startswith(p)), None)
    if prefix is not None:
        if weights != "float32":
            raise ValueError(f"load_model: weights={weights!r} applies to the GGUF models "
                             f"{list(MODEL_NAMES)} only, not {name!r}")
        return PREFIXES[prefix](name, cache_dir)
    if name not in MODEL_NAMES:
        raise ValueError(
            f"load_model: unknown model name={name!r}; allowed: {list(MODEL_NAMES)} "
            f"or a name starting with {', '.join(repr(p) for p in PREFIXES)} (e.g. toy-target, "
            "toy-draft, tiny-llama)")
    return load_gguf(name, cache_dir, weights=weights, packed=packed)


__all__ = ["MODEL_NAMES", "PREFIXES", "load_model", "load_tiny"]
