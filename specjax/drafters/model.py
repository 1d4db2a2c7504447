"""Draft-model drafter: K i.i.d. draft blocks from a small model with the target's tokenizer.

Leviathan et al. 2023 (arXiv 2211.17192) §2.3 / Chen et al. 2023 (arXiv 2302.01318) Alg. 2 with
one draft; K > 1 i.i.d. drafts as in SpecTr (Sun et al. 2023) and SpecInfer (Miao et al. 2024).
The K blocks share the committed prefix cache and are sampled in parallel: each of the L draft
forwards runs K nodes, one per branch, in the same tree layout the target uses.

Cache sync. The draft model feeds the pending token and x_0..x_{L-2} of every branch (x_{L-1} is
sampled, never fed). After verification it commits the root + min(τ, L-1) tokens of the accepted
draft; when all L tokens were accepted its cache lags the target by one token, so the next step's
root is a 2-token chunk (the missing x_{L-1}, then the pending token). Scratch layout: slots 0, 1
= catch-up chunk (slot 0 unused when there is no lag), draft k token i at slot 2 + k·L + i.

``draft_vocab=n`` drafts from the first n token ids and the EOS ids only (``vocab_cut``): a
cheaper draft head, and q is still the exact law of what was sampled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from algorithms.verifiers.base import IID, Verdict, sample
from specjax.drafters.base import BlockShape
from specjax.models.loader import check_pair
from specjax.models.passes import prefill
from specjax.models.sampling import Sampling


@dataclass(frozen=True, kw_only=True)
class ModelDrafter(BlockShape):
    # K branches sampled independently from the same q given a shared prefix (keys are split).
    draft_structure: ClassVar[str] = IID
    draft_vocab: int | None = None  # score only the first n ids (+ EOS) with the draft's head

    def module(self, target, draft):
        if draft is None:
            raise ValueError("drafter: ModelDrafter needs a draft model (pass draft=...)")
        try:
            check_pair(target, draft)
        except ValueError as e:
            raise ValueError(f"{type(self).__name__}: {e}") from None
        if self.draft_vocab is None:
            return draft.model
        from specjax.drafters.vocab_cut import VocabCut, kept_ids

        eos = tuple(int(e) for e in (getattr(target, "eos_ids", None) or ()))
        return VocabCut(draft.model, kept_ids(self.draft_vocab, int(draft.vocab_size), eos))

    def scratch(self) -> int:
        return 2 + self.K * self.L

    def calls_per_step(self) -> int:
        return self.L

    def init_state(self, model, prompt, length, *, max_len: int, scratch: int):
        P = prompt.shape[0]  # prefill through a prompt-sized scratch, then decode with a small one
        cache = prefill(model, model.init_cache(max_len, P), prompt, length, P)
        return model.with_scratch(cache, scratch)

    def propose(self, model, key: Array, state, history: Int[Array, " T"], n: Int[Array, ""],
                *, sampling: Sampling, vocab_size: int, scratch: int,
                ) -> tuple[Int[Array, "K L"], Float[Array, "K L V"], object]:
        K, L = self.K, self.L
        logits, cache, lag, s = self.catch_up(model, state, history, n, scratch)
        keys = jax.random.split(key, K * L)
        # A one-hot (greedy) law needs no categorical draw over the vocabulary.
        pick = (lambda _, law: jnp.argmax(law).astype(jnp.int32)) if sampling.greedy else sample
        x0, q0 = self.root(keys[:K], sampling(logits), pick)
        drafts = jnp.zeros((K, L), jnp.int32).at[:, 0].set(x0)
        q = jnp.zeros((K, L, vocab_size), jnp.float32).at[:, 0].set(q0)

        def step(i, carry):
            drafts, q, cache = carry
            logits, cache = self.depth_forward(model, drafts, i, cache, lag, s, n)
            qi = sampling(logits)
            xi = jax.vmap(pick)(jax.lax.dynamic_slice_in_dim(keys, i * K, K), qi)
            return drafts.at[:, i].set(xi), q.at[:, i].set(qi), cache

        drafts, q, cache = jax.lax.fori_loop(1, L, step, (drafts, q, cache))
        return drafts, q, cache

    def resync(self, model, state, history: Int[Array, " T"], n: Int[Array, ""], *, scratch: int):
        """The draft state after reading the tokens autoregressive steps emitted without it."""
        return self.feed_lag(model, state, history, n, scratch)

    @staticmethod
    def feed_lag(model, cache, history, n, scratch: int):
        """Commit ``history`` up to ``n - 2`` into the draft cache, ``scratch`` tokens per
        forward, so that it lags by at most the one token ``catch_up`` takes. After steps that
        all speculated, the lag is already <= 1 and no forward runs."""
        s = jnp.arange(scratch, dtype=jnp.int32)
        causal = s[None, :] <= s[:, None]

        def chunk(cache):
            count = jnp.minimum(n - 2 - cache.length, scratch)
            pos = cache.length + s
            _, cache = model.forward(history[jnp.minimum(pos, history.shape[0] - 1)], pos, s,
                                     causal, cache)
            return model.commit(cache, s, count)

        return jax.lax.while_loop(lambda cache: n - 1 - cache.length > 1, chunk, cache)

    @staticmethod
    def catch_up(model, cache, history, n, scratch: int):
        """The root forward: (logits of the pending token, cache, lag, scratch slot ids).

        lag is 0, or 1 after a fully accepted block. The chunk's slot 0 = history[n-2] (only
        attended when lag == 1), slot 1 = the pending token."""
        lag = (n - 1 - cache.length).astype(jnp.int32)
        s = jnp.arange(scratch)
        idx = jnp.stack([jnp.maximum(n - 2, 0), n - 1])
        mask = jnp.stack([s == 0, (s == 1) | ((s == 0) & (lag == 1))])
        logits, cache = model.forward(history[idx], idx.astype(jnp.int32),
                                      jnp.arange(2, dtype=jnp.int32), mask, cache)
        return logits[1], cache, lag, s

    @staticmethod
    def depth_forward(model, drafts: Int[Array, "K L"], i, cache, lag, s, n):
        """Feed x_{i-1} of every branch (slot 2 + k·L + i - 1): the logits of depth i, [K, V].
        Each branch attends to the catch-up chunk and its own earlier slots only."""
        K, L = drafts.shape
        branch = 2 + jnp.arange(K) * L  # first slot of each branch
        slots = (branch + i - 1).astype(jnp.int32)
        mask = ((s[None, :] == 1) | ((s[None, :] == 0) & (lag == 1))
                | ((s[None, :] >= branch[:, None]) & (s[None, :] <= slots[:, None])))
        positions = jnp.full((K,), n + i - 1, jnp.int32)
        return model.forward(drafts[:, i - 1], positions, slots, mask, cache)

    def root(self, keys: Array, law: Float[Array, " V"], pick
             ) -> tuple[Int[Array, " K"], Float[Array, "K V"]]:
        """The K root tokens and the laws they were drawn from: K i.i.d. draws from q.
        Subclasses that draft the root differently (``GreedyDrafter``) override only this."""
        q0 = jnp.broadcast_to(law, (self.K, law.shape[0]))
        return jax.vmap(pick)(keys, q0), q0

    def update(self, model, state, drafts, verdict: Verdict, n, *, scratch: int):
        return self.commit(model, state, verdict, n, drafted=self.L)

    def commit(self, model, cache, verdict: Verdict, n, *, drafted):
        """Keep the root and the accepted draft's fed tokens: x_0..x_{drafted-2} were fed to the
        draft model (the last drafted token was only sampled), so at most drafted - 1 of them,
        and a fully accepted block leaves a one-token lag for the next ``catch_up``."""
        L = self.L
        lag = (n - 1 - cache.length).astype(jnp.int32)
        tau = verdict.num_emitted - 1
        path = 2 + verdict.draft_index * L + jnp.arange(L - 1, dtype=jnp.int32)
        with_lag = jnp.concatenate([jnp.array([0, 1], jnp.int32), path])
        no_lag = jnp.concatenate([jnp.array([1], jnp.int32), path, jnp.zeros((1,), jnp.int32)])
        slots = jnp.where(lag == 1, with_lag, no_lag)
        return model.commit(cache, slots, lag + 1 + jnp.minimum(tau, drafted - 1))
