"""A dynamic draft tree: K i.i.d. draft paths, each grown only while the draft is confident in it.

EAGLE-2 (Li et al., arXiv 2406.16858, §4) shapes the draft tree by the draft model's confidence:
the value of a node is the product of the draft's probabilities along its path (its estimate of
the chance that the whole path is accepted), and the tree grows where that value is high, up to
a node budget. Here the same value decides the same thing, under static shapes: each of the K
paths (the K × L budget is the static maximum) drafts its next token only while its cumulative
confidence, the product of the draft's temperature-1 probabilities of its tokens so far, is at
least ``threshold``. The loop is one ``while_loop`` that ends once every path has stopped, so an
unconfident step saves the remaining draft forwards; paths that share a prefix share its value,
so they stop together, and the tree's shape follows the draft's confidence.

Why it stays lossless, and why EAGLE-2's exact rule is not used. Whether path k drafts its next
token is decided from the draft's own laws and tokens already drawn, before that token is drawn,
so at every node the tokens the verifier sees are i.i.d. draws from the q they report, in a
number fixed by the past: the setting in which recursive rejection sampling (``specinfer``) is
exact, node by node (its proof needs each candidate's law given the earlier ones, nothing
about how many there will be). EAGLE-2 instead reranks the expanded nodes and keeps the top
ones; which tokens survive then depends on the tokens drawn beside them, the draws are no
longer from q, and that selection is not used here. Positions a path did not draft carry an
all-zero q row (draft structure STOPPED), which the verifiers that take STOPPED read as "no
draft here".

``AdaptiveDrafter`` is the one-path case with the confidence of the last token alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from algorithms.verifiers.base import STOPPED, Verdict, sample
from specjax.drafters.model import ModelDrafter
from specjax.models.sampling import Sampling


def draft_confidence(logits: Float[Array, "K V"], x: Int[Array, " K"]) -> Float[Array, " K"]:
    """The draft's temperature-1 probability of each drawn token: the rule also acts under
    greedy decoding, whose sampled law is one-hot."""
    lg = logits.astype(jnp.float32)
    return jnp.exp(jnp.take_along_axis(lg, x[:, None], 1)[:, 0] - jax.nn.logsumexp(lg, -1))


@dataclass(frozen=True, kw_only=True)
class DynamicTreeDrafter(ModelDrafter):
    draft_structure: ClassVar[str] = STOPPED
    # True: a path's value is the product of its tokens' confidences (EAGLE-2); False: the last.
    cumulative: ClassVar[bool] = True
    threshold: float = 0.1  # a path grows while its value is >= this

    def __post_init__(self):
        super().__post_init__()
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"drafter.threshold must be in [0, 1], got {self.threshold}")
        if self.draft_vocab is not None:
            raise ValueError(f"drafter.draft_vocab: not supported by {type(self).__name__}")

    def init_state(self, model, prompt, length, *, max_len: int, scratch: int):
        # (draft cache, tokens each path drafted at the last step): update commits only those.
        cache = super().init_state(model, prompt, length, max_len=max_len, scratch=scratch)
        return cache, jnp.full((self.K,), self.L, jnp.int32)

    def propose(self, model, key: Array, state, history: Int[Array, " T"], n: Int[Array, ""],
                *, sampling: Sampling, vocab_size: int, scratch: int,
                ) -> tuple[Int[Array, "K L"], Float[Array, "K L V"], object]:
        K, L = self.K, self.L
        logits, cache, lag, s = self.catch_up(model, state[0], history, n, scratch)
        keys = jax.random.split(key, K * L)  # ModelDrafter's keys: threshold 0 draws the same
        pick = (lambda _, law: jnp.argmax(law).astype(jnp.int32)) if sampling.greedy else sample
        x0, q0 = self.root(keys[:K], sampling(logits), pick)
        value = draft_confidence(jnp.broadcast_to(logits, (K, logits.shape[-1])), x0)
        drafts = jnp.zeros((K, L), jnp.int32).at[:, 0].set(x0)
        q = jnp.zeros((K, L, vocab_size), jnp.float32).at[:, 0].set(q0)
        drafted = jnp.ones((K,), jnp.int32)

        def growing(i, value, drafted):  # drafted up to i - 1 and still confident
            return (drafted == i) & (value >= self.threshold)

        def more(carry):
            i, _, _, _, value, drafted = carry
            return (i < L) & growing(i, value, drafted).any()

        def step(carry):
            i, drafts, q, cache, value, drafted = carry
            lg, cache = self.depth_forward(model, drafts, i, cache, lag, s, n)
            qi = sampling(lg)
            xi = jax.vmap(pick)(jax.lax.dynamic_slice_in_dim(keys, i * K, K), qi)
            grow = growing(i, value, drafted)
            c = draft_confidence(lg, xi)
            value = jnp.where(grow, value * c if self.cumulative else c, value)
            drafts = drafts.at[:, i].set(jnp.where(grow, xi, 0))
            q = q.at[:, i].set(jnp.where(grow[:, None], qi, 0.0))
            return i + 1, drafts, q, cache, value, drafted + grow

        _, drafts, q, cache, _, drafted = jax.lax.while_loop(
            more, step, (jnp.int32(1), drafts, q, cache, value, drafted))
        return drafts, q, (cache, drafted)

    def resync(self, model, state, history, n, *, scratch: int):
        return (self.feed_lag(model, state[0], history, n, scratch), state[1])

    def update(self, model, state, drafts, verdict: Verdict, n, *, scratch: int):
        cache, drafted = state  # only the drafted tokens' slots hold draft KV
        return (self.commit(model, cache, verdict, n, drafted=drafted[verdict.draft_index]),
                drafted)
