"""Adaptive draft length: the draft model stops drafting when it is no longer confident.

SpecDec++ (Huang et al., arXiv 2405.19715) stops the draft when a learned head predicts that
the next token would be rejected; EAGLE-2 (Li et al., arXiv 2406.16858, §4) ranks draft tokens
by the draft's own confidence, its probability of the token, as a proxy for acceptance. Here
the rule is EAGLE-2's proxy used as SpecDec++'s stop rule: after drafting x_i, keep drafting
iff the draft model's probability of x_i (its softmax at temperature 1, so the rule also acts
under greedy decoding) is at least ``threshold``; L is the maximum. A stop saves the remaining
draft forwards of the step (the loop is a ``while_loop`` over static shapes); the target still
scores L + 1 positions, which on a CPU costs little more than the drafted ones. (The
``drafter_calls`` counter still adds L per step: an upper bound.)

Why it stays lossless: whether x_{i+1} is drafted depends only on the draft's own laws and
tokens up to x_i, never on p, so it is a stopping time of the drafting process. Positions not
drafted carry an all-zero q row (draft structure STOPPED), which the token verifier reads as
"no draft": the first such position emits a token drawn from p itself, the bonus token of a
block of that length. So each step is token-wise speculative sampling with a draft length the
verifier may take as given (Leviathan et al. 2023, Thm 3.5 holds per position).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from algorithms.verifiers.base import STOPPED, Verdict, sample
from specjax.drafters.model import ModelDrafter
from specjax.sampling import Sampling


@dataclass(frozen=True, kw_only=True)
class AdaptiveDrafter(ModelDrafter):
    draft_structure: ClassVar[str] = STOPPED
    threshold: float = 0.5  # keep drafting while the last token's draft probability >= this

    def __post_init__(self):
        super().__post_init__()
        if self.K != 1:
            raise ValueError(f"drafter.K: the adaptive drafter drafts one block (K=1), got "
                             f"K={self.K}")
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"drafter.threshold must be in [0, 1], got {self.threshold}")
        if self.draft_vocab is not None:
            raise ValueError("drafter.draft_vocab: not supported by the adaptive drafter")

    def init_state(self, model, prompt, length, *, max_len: int, scratch: int):
        # (draft cache, tokens drafted at the last step): update commits only drafted slots.
        cache = super().init_state(model, prompt, length, max_len=max_len, scratch=scratch)
        return cache, jnp.int32(self.L)

    def propose(self, model, key: Array, state, history: Int[Array, " T"], n: Int[Array, ""],
                *, sampling: Sampling, vocab_size: int, scratch: int,
                ) -> tuple[Int[Array, "1 L"], Float[Array, "1 L V"], object]:
        L = self.L
        logits, cache, lag, s = self.catch_up(model, state[0], history, n, scratch)
        keys = jax.random.split(key, L)
        pick = (lambda _, law: jnp.argmax(law).astype(jnp.int32)) if sampling.greedy else sample

        def draw(i, lg):
            law = sampling(lg)
            x = pick(keys[i], law)
            return x, law, jax.nn.softmax(lg.astype(jnp.float32))[x]

        x0, q0, c0 = draw(0, logits)
        drafts = jnp.zeros((1, L), jnp.int32).at[0, 0].set(x0)
        q = jnp.zeros((1, L, vocab_size), jnp.float32).at[0, 0].set(q0)

        def more(carry):
            i, _, _, _, confidence = carry
            return (i < L) & (confidence >= self.threshold)

        def step(carry):
            i, drafts, q, cache, _ = carry
            slot = (2 + i - 1).astype(jnp.int32)
            mask = (s == 1) | ((s == 0) & (lag == 1)) | ((s >= 2) & (s <= slot))
            lg, cache = model.forward(drafts[:, i - 1], jnp.full((1,), n + i - 1, jnp.int32),
                                      slot[None], mask[None], cache)
            x, law, confidence = draw(i, lg[0])
            return i + 1, drafts.at[0, i].set(x), q.at[0, i].set(law), cache, confidence

        ell, drafts, q, cache, _ = jax.lax.while_loop(
            more, step, (jnp.int32(1), drafts, q, cache, c0))
        return drafts, q, (cache, ell)

    def update(self, model, state, drafts, verdict: Verdict, n, *, scratch: int):
        cache, ell = state  # only the ell drafted tokens' slots hold draft KV
        return self.commit(model, cache, verdict, n, drafted=ell), ell
