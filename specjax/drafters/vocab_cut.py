"""A draft model that scores only part of the vocabulary: the cheaper head of a cheaper draft.

Why: the draft's output head is a large share of a small model's bytes (Qwen2.5 0.5B: 151,936 x
896 of its ~494M weights, about a quarter of each draft forward), while the draft's tokens are
almost always among the most frequent ones. Scoring only the first ``n`` token ids (byte-level
BPE vocabularies are numbered in merge order, so low ids are the frequent merges) plus the
end-of-sequence ids cuts that share by V / n.

Why it stays exact: the logits of the other tokens are set to -inf, so the sampling transform
gives them probability 0 and the draft never samples them; the q the drafter reports is then the
exact law its tokens were drawn from (a law over the full vocabulary, zero outside the kept ids),
which is all the verifiers need (Leviathan et al. 2023, Thm 3.5 holds for any q). What changes
is only how often drafts are accepted: a target token outside the kept set can never be drafted.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from flax import nnx
from jaxtyping import Array, Float, Int

from specjax.models.quant import linear, pack_float32, quantize


def kept_ids(n: int, vocab_size: int, always: tuple[int, ...] = ()) -> np.ndarray:
    """The first ``n`` ids plus ``always`` (EOS), sorted, without repeats."""
    if not (isinstance(n, int) and 1 <= n <= vocab_size):
        raise ValueError(f"draft_vocab must be an integer in [1, {vocab_size}] (the draft's "
                         f"vocabulary), got {n!r}")
    bad = [t for t in always if not 0 <= t < vocab_size]
    if bad:
        raise ValueError(f"draft_vocab: ids {bad} are outside the vocabulary [0, {vocab_size})")
    return np.unique(np.concatenate([np.arange(n), np.asarray(always, np.int64)])).astype(
        np.int32)


class VocabCut(nnx.Module):
    """``decoder`` with a head over ``ids`` only; the same cache contract as the decoder.

    For a ``Decoder`` the cut head is its head restricted to ``ids`` in the decoder's own
    weight format (packed float32 for the CPU kernel, or int8), so the saving is in bytes read,
    not only in FLOPs. Any other model (the tabular toys) gets its full logits masked: the same
    law, no saving. Logits come back over the full vocabulary with -inf outside ``ids``.
    """

    def __init__(self, decoder, ids: np.ndarray):
        self.decoder = decoder
        self.vocab_size = decoder.vocab_size
        self.max_len = decoder.max_len
        self.ids = nnx.Variable(jnp.asarray(ids, jnp.int32))
        self.n = int(len(ids))
        self.fast = hasattr(decoder, "_forward_hidden")
        head = q = scale = None
        if self.fast:
            dense = np.asarray(self._dense_head(decoder), np.float32)[:, ids]  # [D, n]
            if decoder.weight_format == "int8":
                w = quantize(dense)
                q, scale = nnx.Param(w.q), nnx.Param(w.scale)
            else:
                head = nnx.Param(pack_float32(dense).w if decoder.packed else jnp.asarray(dense))
        self.head, self.head_q, self.head_scale = nnx.data(head), nnx.data(q), nnx.data(scale)

    @staticmethod
    def _dense_head(decoder) -> Float[np.ndarray, "D V"]:
        """The decoder's head as a float32 ``[D, V]`` matrix (dequantized when int8)."""
        from specjax.models.quant import Int8Weight, dequantize

        D = decoder.config.hidden_size
        if decoder.weight_format == "int8":
            table = decoder.embed if decoder.config.tie_embeddings else None
            if table is not None:
                w = Int8Weight(decoder.embed[...], decoder.embed_scale[...])
                return np.asarray(dequantize(w, D)).T
            w = Int8Weight(decoder.lm_head[...], decoder.lm_head_scale[...])
            return np.asarray(dequantize(w, D)).T
        if decoder.config.tie_embeddings:
            return np.asarray(decoder.embed[...]).T
        return np.asarray(decoder.lm_head[...])

    def _cut_head(self):
        from specjax.models.quant import F32Weight, Int8Weight

        if self.head is None:
            return Int8Weight(self.head_q[...], self.head_scale[...])
        return F32Weight(self.head[...], self.n) if self.decoder.packed else self.head[...]

    def _mask(self, full: Float[Array, "N V"]) -> Float[Array, "N V"]:
        keep = jnp.zeros((self.vocab_size,), bool).at[self.ids[...]].set(True)
        return jnp.where(keep, full, -jnp.inf)

    def forward(self, tokens: Int[Array, " N"], positions, slots, mask, cache
                ) -> tuple[Float[Array, "N V"], object]:
        if not self.fast:
            full, cache = self.decoder.forward(tokens, positions, slots, mask, cache)
            return self._mask(full), cache
        x, cache = self.decoder._forward_hidden(tokens, positions, slots, mask, cache)
        cut = linear(self.decoder.features_of(x), self._cut_head())  # [N, n]
        full = jnp.full((x.shape[0], self.vocab_size), -jnp.inf, jnp.float32)
        return full.at[:, self.ids[...]].set(cut), cache

    def logits(self, tokens: Int[Array, " T"]) -> Float[Array, "T V"]:
        """Uncached reference: the decoder's logits with the same cut."""
        return self._mask(self.decoder.logits(tokens))

    def init_cache(self, *args, **kwargs):
        return self.decoder.init_cache(*args, **kwargs)

    def with_scratch(self, cache, scratch: int):
        return self.decoder.with_scratch(cache, scratch)

    def commit(self, cache, slots, n):
        return self.decoder.commit(cache, slots, n)
