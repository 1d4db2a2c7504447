"""Prompt-lookup drafter: propose what followed the latest earlier occurrence of the suffix.

Prompt Lookup Decoding (Saxena, 2023) and LLMA (Yang et al., 2023, arXiv 2304.04487): match the
last g tokens (g from ``max_ngram`` down to ``min_ngram``, longest first) against prompt +
generated text, take the latest match and propose the L tokens that followed it. Drafts are
deterministic, so q is one-hot on each draft's own tokens. K > 1 takes the K highest-priority
matches with distinct continuations; missing ones repeat draft 0.

Draft structure: DETERMINISTIC, not i.i.d. The K drafts are distinct fixed blocks, not K draws
from one shared law, so a verifier whose proof needs exchangeable draws is biased on them (SpecTr's
K-SEQ residual was: TV 0.146 on a V = 3 toy). With K = 1 every lossless verifier stays lossless
(one draw from a one-hot law); with K > 1 only the verifiers that list DETERMINISTIC in
``draft_structures`` are lossless, and ``check_pairing`` refuses the others before compiling.

When the continuation runs into the present (the match is only P = n - g - s tokens back), it is
extended periodically with period P, which is what the text would be if the repetition continues.
No match at all drafts the pending token repeated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp
from jaxtyping import Array, Int

from algorithms.verifiers.base import DETERMINISTIC
from specjax.drafters.base import BlockShape


@dataclass(frozen=True, kw_only=True)
class NgramDrafter(BlockShape):
    draft_structure: ClassVar[str] = DETERMINISTIC
    max_ngram: int = 3
    min_ngram: int = 1

    def __post_init__(self):
        super().__post_init__()
        if not (isinstance(self.min_ngram, int) and 1 <= self.min_ngram <= self.max_ngram):
            raise ValueError(f"NgramDrafter: need integers 1 <= min_ngram <= max_ngram, got "
                             f"min_ngram={self.min_ngram}, max_ngram={self.max_ngram}")

    def module(self, target, draft):
        return None

    def scratch(self) -> int:
        return 0

    def calls_per_step(self) -> int:
        return 0

    def init_state(self, model, prompt, length, *, max_len: int, scratch: int):
        return ()

    def resync(self, model, state, history, n, *, scratch: int):
        return state  # nothing cached: candidates are read from the history each step

    def update(self, model, state, drafts, verdict, n, *, scratch: int):
        return state

    def candidates(self, history: Int[Array, " T"], n: Int[Array, ""]):
        """All (priority, continuation) pairs; priority -1 = no match. Longest n-gram first,
        then the latest start."""
        T, L = history.shape[0], self.L
        s = jnp.arange(T)
        prios, conts = [], []
        for g in range(self.max_ngram, self.min_ngram - 1, -1):
            match = (s + g <= n - 1) & (n - g >= 0)  # excludes the suffix itself
            for i in range(g):
                suffix_i = history[jnp.clip(n - g + i, 0, T - 1)]
                match &= history[jnp.clip(s + i, 0, T - 1)] == suffix_i
            period = jnp.maximum(n - g - s, 1)
            idx = s[:, None] + g + jnp.arange(L)[None, :] % period[:, None]
            conts.append(history[jnp.clip(idx, 0, T - 1)])
            prios.append(jnp.where(match, (g - self.min_ngram) * T + s, -1))
        return jnp.concatenate(prios), jnp.concatenate(conts)

    def propose(self, model, key, state, history: Int[Array, " T"], n: Int[Array, ""], *,
                sampling, vocab_size: int, scratch: int):
        prio, conts = self.candidates(history, n)
        fallback = jnp.full((self.L,), history[n - 1], jnp.int32)
        drafts = []
        for _ in range(self.K):
            avail = prio >= 0
            for d in drafts:
                avail &= jnp.any(conts != d[None, :], axis=1)
            best = jnp.argmax(jnp.where(avail, prio, -1))
            default = drafts[0] if drafts else fallback
            drafts.append(jnp.where(avail.any(), conts[best], default).astype(jnp.int32))
        drafts = jnp.stack(drafts)
        return drafts, jax.nn.one_hot(drafts, vocab_size, dtype=jnp.float32), state
