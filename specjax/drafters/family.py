"""The draft family as ``model`` drafters: ``family/<target>/d<D>-l<layers>`` names.

``specjax-train drafter=family module.hidden_size=D module.num_layers=N target=<target>`` trains
one member; ``specjax.load_model("family/<target>/dD-lN")`` (and so ``specjax-run drafter=model
model.draft=family/<target>/dD-lN``) loads the most recently finished run with that shape, with
the target's tokenizer (the GGUF's, for real targets).
"""

from __future__ import annotations

import json
import re

import numpy as np

from specjax.drafters import runs
from specjax.drafters.trained import layer_weights
from specjax.models.config import ModelConfig
from specjax.models.decoder import Decoder
from specjax.models.loader import LoadedModel
from specjax.models.tokenizer import ChatTokenizer
from specjax.models.toy import ToyLoaded
from specjax.platform.assets import fetch

NAME = re.compile(r"^family/(?P<target>[^/]+)/d(?P<d>\d+)-l(?P<l>\d+)$")


def family_name(target_name: str, hidden_size: int, num_layers: int) -> str:
    return f"family/{target_name}/d{hidden_size}-l{num_layers}"


def family_config(target_config: ModelConfig, hidden_size: int, num_layers: int) -> ModelConfig:
    """A tiny llama-style decoder with the target's vocabulary: head_dim 32, GQA 2:1 from 4
    heads up, SwiGLU width 3·d, tied embeddings."""
    if hidden_size % 32 or hidden_size < 32:
        raise ValueError(f"family: hidden_size must be a positive multiple of 32, got "
                         f"{hidden_size}")
    heads = hidden_size // 32
    return ModelConfig(arch="llama", vocab_size=target_config.vocab_size, num_layers=num_layers,
                       hidden_size=hidden_size, num_heads=heads,
                       num_kv_heads=heads // 2 if heads >= 4 else heads, head_dim=32,
                       intermediate_size=3 * hidden_size, rope_theta=target_config.rope_theta,
                       rms_eps=target_config.rms_eps, tie_embeddings=True,
                       context_length=min(target_config.context_length, 4096),
                       bos_id=target_config.bos_id, eos_ids=target_config.eos_ids)


def family_decoder(target_config: ModelConfig, hidden_size: int, num_layers: int, *,
                   seed: int = 0) -> Decoder:
    """A fresh member (what ``specjax-train drafter=family`` trains): layers as
    ``layer_weights``, the embedding N(0, 0.02²)."""
    config = family_config(target_config, hidden_size, num_layers)
    weights = layer_weights(config, np.random.default_rng(seed))
    weights["embed"] = weights["embed"] * 0.02 * np.sqrt(config.vocab_size)
    return Decoder(config, weights)


def load_family(name: str, cache_dir=None):
    """The latest finished run of the member ``name``, with its target's tokenizer."""
    m = NAME.match(name)
    if m is None:
        raise ValueError(f"model: family name {name!r} must look like "
                         "family/<target>/d<hidden>-l<layers>, e.g. "
                         "family/smollm2-135m-instruct/d128-l2")
    target_name, d, n = m["target"], int(m["d"]), int(m["l"])
    run = runs.find_family_run(target_name, d, n, cache_dir)
    if run is None:
        raise ValueError(f"model: no trained draft {name!r} under "
                         f"{runs.kind_root('family', target_name, cache_dir)}; train it: "
                         f"specjax-train drafter=family target={target_name} "
                         f"module.hidden_size={d} module.num_layers={n}")
    final = json.loads((run / "final.json").read_text())
    target_config = ModelConfig(**final["target_config"])
    model = family_decoder(target_config, d, n)
    runs.restore_params(run, model)
    if target_name.startswith("tiny-"):
        return ToyLoaded(name=name, model=model, eos_ids=target_config.eos_ids)
    tokenizer = ChatTokenizer.from_gguf(fetch(target_name, cache_dir))
    return LoadedModel(name, model.config, model, tokenizer)
