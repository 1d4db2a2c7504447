"""What the trained-head drafters (EAGLE, Medusa) share: the target's read-out, and loading.

A ``TrainedHead`` drafter reads the target's features through a module ``specjax-train``
trained; each kind says which module that is (``trainable``) and how drafting wraps it with
the target's LM head (``for_drafting``). ``module`` finds the weights through
``specjax.drafters.runs`` (the latest finished run for the target, or a run directory) or builds a
random init; nothing here imports the trainer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import jax.numpy as jnp
import numpy as np
from flax import nnx
from jaxtyping import Array, Float, Int

from algorithms.verifiers.base import IID
from specjax.drafters import runs
from specjax.drafters.base import BlockShape
from specjax.models.config import ModelConfig
from specjax.models.decoder import Decoder, head_logits
from specjax.models.layers import weight_shapes


def layer_weights(config: ModelConfig, rng: np.random.Generator) -> dict:
    """Canonical weights of a 1-layer, 1-token-vocabulary decoder (the layer only is used):
    norms 1, matrices N(0, 1/fan_in), biases 0."""
    out = {}
    for name, shape in weight_shapes(config).items():
        if name.endswith("norm"):
            out[name] = np.ones(shape, np.float32)
        elif name.startswith("b"):
            out[name] = np.zeros(shape, np.float32)
        else:
            out[name] = (rng.standard_normal(shape) / np.sqrt(shape[-2])).astype(np.float32)
    return out


class TargetReadout(nnx.Module):
    """The target's LM head, shared (not copied): tied embedding or separate ``lm_head``.

    ``restrict(ids)`` limits drafting to a token subset (FR-Spec, Zhao et al. 2025, arXiv
    2502.14856: the most frequent tokens of the training text): the head contracts with those
    rows only and every other token gets logit -inf, so q is exactly the law the drafts are
    drawn from (zero outside the subset) and every verifier stays lossless; only the draft
    head's cost shrinks by V / len(ids).
    """

    def __init__(self, target: Decoder):
        if target.weight_format != "float32":
            raise ValueError("eagle / medusa drafters read the target's embedding and head as "
                             f"float32; this target was loaded with weights="
                             f"{target.weight_format!r} (load it with weights='float32')")
        self.weight_format = target.weight_format
        self.config = target.config
        self.embed = target.embed
        self.lm_head = target.lm_head
        self.subset = None
        self.sub_head = None

    def restrict(self, ids) -> None:
        ids = jnp.asarray(np.sort(np.asarray(ids)), jnp.int32)
        head = self.embed[...][ids] if self.config.tie_embeddings else self.lm_head[...][:, ids].T
        self.subset = nnx.data(nnx.Variable(ids))
        self.sub_head = nnx.data(nnx.Variable(head))  # [n, D], a copy of the subset's rows

    def embed_tokens(self, tokens: Int[Array, "*N"]) -> Float[Array, "*N D"]:
        return self.embed[...][tokens]

    def __call__(self, h: Float[Array, "*N D"], *, differentiable: bool = False):
        if self.subset is None:
            return head_logits(h, config=self.config, weight_format=self.weight_format,
                               embed=self.embed, lm_head=self.lm_head,
                               differentiable=differentiable)
        sub = jnp.einsum("...d,nd->...n", h, self.sub_head[...])
        full = jnp.full((*h.shape[:-1], self.config.vocab_size), -jnp.inf, sub.dtype)
        return full.at[..., self.subset[...]].set(sub)


def target_decoder(target, name: str) -> Decoder:
    model = getattr(target, "model", target)
    if not hasattr(model, "forward_features"):
        raise ValueError(f"{name}: the target must expose its features (a specjax Decoder); "
                         f"{type(model).__name__} does not (the tabular toy models have none)")
    return model


@dataclass(frozen=True, kw_only=True)
class TrainedHead(BlockShape):
    """A drafter that reads the target's features through a head ``specjax-train`` trained
    (``kind``). ``checkpoint``: None = the latest finished ``specjax-train drafter=<kind>`` run for
    this target; ``random`` / ``random:<seed>`` = an untrained head (tests, smoke runs); else a
    run directory. ``draft_vocab``: see ``TargetReadout.restrict``.

    Each kind names its module with two static methods: ``trainable(target_config, *, seed,
    **options)``, the module ``specjax-train`` trains (fresh weights from ``seed``), and
    ``for_drafting(trainable, target_decoder)``, that module with the target's read-out as
    ``propose`` reads it."""

    draft_structure: ClassVar[str] = IID
    target_features: ClassVar[bool] = True
    kind: ClassVar[str]
    checkpoint: str | None = None
    draft_vocab: int | None = None  # draft only the n most frequent training tokens (FR-Spec)

    def module(self, target, draft, **defaults):
        """Trained weights (``checkpoint``), or a random init built with ``defaults``; with
        ``draft_vocab``, the read-out restricted to the run's most frequent training tokens
        (``token_counts.npy``; for a random module, ids 0..n-1)."""
        name = type(self).__name__
        decoder = target_decoder(target, name)
        module, counts = self._build(decoder, getattr(target, "name", "target"), **defaults)
        if self.draft_vocab is not None:
            V = int(module.readout.config.vocab_size)
            n = self.draft_vocab
            if not (isinstance(n, int) and 1 <= n <= V):
                raise ValueError(f"{name}: draft_vocab must be an integer in [1, {V}] or null, "
                                 f"got {n!r}")
            ids = np.arange(n) if counts is None else np.argsort(-counts, kind="stable")[:n]
            module.readout.restrict(ids)
        return module

    def _build(self, decoder: Decoder, target_name: str, **defaults):
        """(module, token counts of the training text or None) for ``checkpoint``."""
        name, kind, checkpoint = type(self).__name__, self.kind, self.checkpoint
        if checkpoint is not None and str(checkpoint).startswith("random"):
            seed = int(str(checkpoint).partition(":")[2] or 0)
            return self.for_drafting(self.trainable(decoder.config, seed=seed, **defaults),
                                     decoder), None
        if checkpoint is None:
            run = runs.latest_run(kind, target_name)
            if run is None:
                raise ValueError(
                    f"{name}: no trained {kind} drafter for target {target_name!r} under "
                    f"{runs.kind_root(kind, target_name)}; train one first: specjax-train "
                    f"drafter={kind} target={target_name} (or pass drafter.checkpoint=random "
                    "for an untrained one)")
        else:
            run = Path(checkpoint).expanduser()
        meta = runs.read_run(run)
        if meta["kind"] != kind:
            raise ValueError(f"{name}: checkpoint {run} holds a {meta['kind']!r} run, not "
                             f"{kind!r}")
        trainable = self.trainable(decoder.config, seed=0, **meta["module"])
        runs.restore_params(run, trainable)
        counts = run / "token_counts.npy"
        return (self.for_drafting(trainable, decoder),
                np.load(counts) if counts.is_file() else None)


__all__ = ["TargetReadout", "TrainedHead", "layer_weights", "target_decoder"]
