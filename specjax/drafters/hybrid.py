"""Hybrid drafter: prompt lookup where the context has a match, the draft model otherwise.

A reconstruction of an idea several systems share, not one paper's algorithm: text that copies
from its context (summarization, RAG, code edits) is drafted for free by lookup (Prompt Lookup
Decoding, Saxena 2023; LLMA, Yang et al. 2023, arXiv 2304.04487), and everything else by a small
model (Leviathan et al. 2023, arXiv 2211.17192). SAM-Decoding (Hu et al. 2024, arXiv 2411.10666)
chooses between a suffix-automaton retrieval and an auxiliary drafter by match length; here the
choice is simpler: ``NgramDrafter``'s lookup over prompt + generated text with n-grams of
``min_ngram``..``max_ngram`` tokens, the latest longest match wins, and no match runs the model.

Why it stays exact: the choice depends on the history only (never on the target's law or on
this step's randomness), so each step proposes one block from a law fixed by the context, the
one-hot continuation or the draft model's q, and reports that law. With one draft (K = 1) every
lossless verifier stays lossless on either (``NgramDrafter``'s note on deterministic drafts).

Cache sync: a lookup step runs no draft forward, so the draft model's cache falls behind; the
next model step first feeds it the missing tokens (``ModelDrafter.feed_lag``, one multi-row
forward per ``scratch`` tokens), the way it catches up after autoregressive steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp

from algorithms.verifiers.base import DETERMINISTIC, Verdict
from specjax.drafters.model import ModelDrafter
from specjax.drafters.ngram import NgramDrafter


@dataclass(frozen=True, kw_only=True)
class HybridDrafter(ModelDrafter):
    # A step's draft is either a draw from the model's q or a fixed continuation: declared as
    # the stricter of the two (with K = 1 every lossless verifier accepts it).
    draft_structure: ClassVar[str] = DETERMINISTIC
    max_ngram: int = 3
    min_ngram: int = 2  # shorter matches run the model (a 1-gram matches nearly always)

    def __post_init__(self):
        super().__post_init__()
        if self.K != 1:
            raise ValueError(f"drafter.K: the hybrid drafter drafts one block (K=1), got "
                             f"K={self.K}")
        if self.draft_vocab is not None:
            raise ValueError("drafter.draft_vocab: the hybrid drafter drafts from the full "
                             f"vocabulary (null), got {self.draft_vocab}")
        self.lookup()  # validates the n-gram range

    def lookup(self) -> NgramDrafter:
        return NgramDrafter(K=1, L=self.L, max_ngram=self.max_ngram, min_ngram=self.min_ngram)

    # State: (draft cache, whether this step's draft came from the lookup).
    def init_state(self, model, prompt, length, *, max_len: int, scratch: int):
        cache = super().init_state(model, prompt, length, max_len=max_len, scratch=scratch)
        return cache, jnp.bool_(False)

    def propose(self, model, key, state, history, n, *, sampling, vocab_size: int, scratch: int):
        cache, _ = state
        prio, conts = self.lookup().candidates(history, n)
        found = jnp.any(prio >= 0)

        def by_lookup(cache):
            drafts = conts[jnp.argmax(prio)][None].astype(jnp.int32)
            return drafts, jax.nn.one_hot(drafts, vocab_size, dtype=jnp.float32), cache

        def by_model(cache):
            cache = self.feed_lag(model, cache, history, n, scratch)
            return ModelDrafter.propose(self, model, key, cache, history, n, sampling=sampling,
                                        vocab_size=vocab_size, scratch=scratch)

        drafts, q, cache = jax.lax.cond(found, by_lookup, by_model, cache)
        return drafts, q, (cache, found)

    def resync(self, model, state, history, n, *, scratch: int):
        return self.feed_lag(model, state[0], history, n, scratch), jnp.bool_(False)

    def update(self, model, state, drafts, verdict: Verdict, n, *, scratch: int):
        cache, looked_up = state
        cache = jax.lax.cond(looked_up, lambda c: c,
                             lambda c: self.commit(model, c, verdict, n, drafted=self.L), cache)
        return cache, looked_up
