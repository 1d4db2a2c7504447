"""The decode loop: draft → score tree → verify → commit, one ``lax.while_loop`` per batch.

Leviathan et al. 2023 (arXiv 2211.17192) Algorithm 1 as a device loop: no host round trip per
token. Everything below is written for ONE sequence and ``jax.vmap``ped over the batch, so prompts
of different lengths only differ in their scalar ``n``. The loop object is a frozen dataclass of
static things (graph definitions, drafter, verifier, sampling, shapes) and goes into ``jax.jit``
as a static argument; model weights go in as arrays. ``drafter=None`` is the autoregressive
baseline run through the same machinery (one root node per step).

Per-sequence bookkeeping (``history[:n]`` = prompt + generated, pending token ``history[n-1]``
whose KV is not cached yet) follows ``specjax/models/base.py``. A finished sequence keeps its
state (every field is selected back), so counters stop exactly at EOS / ``max_new_tokens``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx, struct
from jax.sharding import Mesh
from jaxtyping import Array, Bool, Int

from algorithms.verifiers.base import ReadsOut, Verifier
from specjax.decode.fallback import Fallback
from specjax.drafters.base import Drafter
from specjax.models.passes import commit_path, decode, prefill, score_tree, trie
from specjax.models.sampling import Sampling


def per_sequence(f, *args):
    """``jax.vmap(f)(*args)``, except that a batch of one calls ``f`` on its one sequence.

    Why: under ``vmap`` a data-dependent ``lax.cond`` becomes a select that runs both branches,
    and a ``while_loop`` runs until every lane is done. A verifier's branches are written for
    one sequence (SpecTr's per-node rules, its rho search where two drafts survive): vmapped at
    batch 1 they all ran on every call, 46 ms per SpecTr call in the loop against 16 ms alone
    (``benchmarks/verify_cost.py --in-loop``, Xeon family 6 model 167). The shapes are static,
    so the choice is made at trace time; dropping and restoring a unit axis is a bitcast."""
    if all(x.shape[:1] == (1,) for x in jax.tree.leaves(args)):
        return jax.tree.map(lambda x: x[None], f(*jax.tree.map(lambda x: x[0], args)))
    return jax.vmap(f)(*args)


@struct.dataclass
class SeqState:
    history: Int[Array, " T"]  # prompt + generated tokens, zero padded
    n: Int[Array, ""]  # valid tokens in history; history[n-1] is pending
    prompt_len: Int[Array, ""]
    cache: Any  # target KV cache (committed = history[:n-1])
    drafter_state: Any
    verifier_state: Any
    key: Array  # raw key data; step keys are fold_in(key, steps)
    done: Bool[Array, ""]
    steps: Int[Array, ""]  # = target calls (one scoring forward per step)
    drafter_calls: Int[Array, ""]
    new_tokens: Int[Array, ""]
    accepted: Int[Array, ""]  # sum of tau
    accepted_per_position: Int[Array, " L"]  # how often draft position i was accepted (i < tau)
    hit_eos: Bool[Array, ""]
    # 0, or which model's laws held NaN/inf and stopped this sequence (nothing sampled from them):
    # NONFINITE_TARGET or NONFINITE_DRAFT.
    nonfinite: Int[Array, ""]
    fallback: Any = ()  # ``FallbackState`` when the loop has a fallback rule, else ()


#: ``SeqState.nonfinite`` codes (the host turns them into an error naming the prompt).
NONFINITE_TARGET, NONFINITE_DRAFT = 1, 2


def nonfinite_logits(logits: Array) -> Bool[Array, ""]:
    """True iff some row has no usable law: a NaN or +inf entry, or every entry -inf.

    One max over the vocabulary: it propagates NaN, is +inf if any entry is, and is -inf only
    when the whole row is (single -inf entries are legitimate masks and stay accepted).
    """
    return ~jnp.all(jnp.isfinite(jnp.max(logits, axis=-1)))


@dataclass(frozen=True, kw_only=True)
class DecodeLoop:
    """Static description of one compiled decode loop (hashable → jit static argument)."""

    target_graph: nnx.GraphDef
    draft_graph: nnx.GraphDef | None  # None for model-free drafters and autoregressive decoding
    drafter: Drafter | None  # None = autoregressive
    verifier: Verifier | None  # None exactly when drafter is
    sampling: Sampling
    vocab_size: int
    eos_ids: tuple[int, ...]
    max_new_tokens: int
    # The longest padded prompt the loop holds: it sizes the history and the KV caches. Each call
    # prefills its own prompts at their own padded width (``start``), at most this.
    prompt_pad: int
    mesh: Mesh | None = None  # (data, model) axes (``specjax.decode.parallel``); None = one device
    # Every row holds the same prompt (n samples of one prompt: audits, best-of-n): prefill it
    # once and broadcast the state, instead of B identical prefills (``run``).
    shared_prompt: bool = False
    # Autoregressive steps while speculation does not pay (``specjax.decode.fallback``); None =
    # every step speculates.
    fallback: Fallback | None = None

    def __post_init__(self):
        if self.fallback is not None and getattr(self.drafter, "resync", None) is None:
            raise ValueError(
                f"fallback: {type(self.drafter).__name__ if self.drafter else 'autoregressive'}"
                f" decoding cannot fall back to autoregressive steps; the draft-model drafters "
                f"(drafter=model, adaptive, dynamic_tree, early_exit) and drafter=ngram can, "
                f"or set fallback=null")

    @property
    def K(self) -> int:
        return self.drafter.K if self.drafter else 1

    @property
    def L(self) -> int:
        return self.drafter.L if self.drafter else 0

    @property
    def history_len(self) -> int:
        return self.prompt_pad + self.max_new_tokens + self.L + 1

    @property
    def target_scratch(self) -> int:
        # Every step attends over the whole scratch block: size it to the tree, not the prompt
        # (the prompt is prefilled through its own prompt-sized block, see ``init``).
        return 1 + self.K * self.L

    @property
    def draft_scratch(self) -> int:
        return self.drafter.scratch() if self.drafter else 0

    @property
    def target_features(self) -> bool:
        """The drafter reads the target's features (``Drafter.target_features``): prefill and
        the tree pass also return them and ``init_state`` / ``update`` get ``features=``."""
        return self.drafter is not None and self.drafter.target_features

    # --- per sequence -----------------------------------------------------------------------------
    def init(self, target, dmodel, prompt: Int[Array, " P"], length: Int[Array, ""],
             key: Array) -> SeqState:
        T = self.history_len
        n = jnp.maximum(length, 1)  # length 0 marks a padding row: kept done from the start
        P = prompt.shape[0]  # this call's padded width: the prefill costs P rows, not prompt_pad
        if P > self.prompt_pad:
            raise ValueError(f"prompts: padded to {P} tokens, over the loop's prompt_pad "
                             f"{self.prompt_pad}")
        extra = {}
        if self.target_features:
            cache, extra["features"] = prefill(target, target.init_cache(T, P), prompt, n, P,
                                               features=True)
        else:
            cache = prefill(target, target.init_cache(T, P), prompt, n, P)
        cache = target.with_scratch(cache, self.target_scratch)
        ds, vs = (), ()
        if self.drafter is not None:
            ds = self.drafter.init_state(dmodel, prompt, n, max_len=T, scratch=self.draft_scratch,
                                         **extra)
            vs = self.verifier.init_state(self.L, self.vocab_size)
        zero = jnp.int32(0)
        return SeqState(
            history=jnp.zeros((T,), jnp.int32).at[: prompt.shape[0]].set(prompt),
            n=n.astype(jnp.int32), prompt_len=n.astype(jnp.int32), cache=cache,
            drafter_state=ds, verifier_state=vs, key=key,
            done=self.starts_done(length), steps=zero, drafter_calls=zero,
            new_tokens=zero, accepted=zero,
            accepted_per_position=jnp.zeros((self.L,), jnp.int32), hit_eos=jnp.bool_(False),
            nonfinite=zero, fallback=self.fallback.init() if self.fallback else ())

    def starts_done(self, length):
        """A row with nothing to do: a padding row (length 0), or no tokens asked for."""
        return (length < 1) | (self.max_new_tokens < 1)

    @property
    def tree_sizes(self) -> tuple[int, ...]:
        """Static row counts the tree forward is compiled for, smallest first.

        Drafts that share prefixes have fewer distinct nodes (``passes.trie``); each step runs the
        smallest size that holds every sequence's distinct nodes. Sizes hold 1, ~K/2 and K full
        drafts, so compile time grows by at most 3 tree forwards.
        """
        K, L = self.K, self.L
        return tuple(sorted({1 + m * L for m in (1, -(-K // 2), K)}))

    def _keys(self, st: SeqState):
        key = jax.random.fold_in(jax.random.wrap_key_data(st.key), st.steps)
        return jax.random.split(key)

    def step_ar(self, target, st: SeqState) -> SeqState:
        """One autoregressive step: the pending token's logits, one token drawn, its KV kept."""
        _, k_verify = self._keys(st)
        logits, cache = decode(target, st.cache, st.history[st.n - 1], self.target_scratch)
        emitted = self.sampling.draw(k_verify, logits)[None]
        bad = jnp.where(nonfinite_logits(logits), NONFINITE_TARGET, 0)
        return self._advance(st, emitted, jnp.int32(1), jnp.int32(0), cache,
                             st.drafter_state, st.verifier_state, bad, speculative=False)

    def propose(self, dmodel, st: SeqState):
        k_draft, _ = self._keys(st)
        return self.drafter.propose(
            dmodel, k_draft, st.drafter_state, st.history, st.n, sampling=self.sampling,
            vocab_size=self.vocab_size, scratch=self.draft_scratch)

    def score(self, target, st: SeqState, drafts, nodes: int):
        return score_tree(target, st.cache, st.history[st.n - 1], drafts, self.target_scratch,
                          nodes, features=self.target_features)

    def finish(self, target, dmodel, st: SeqState, drafts, q, ds, logits, cache, slot,
               features=None):
        """Verify the scored drafts, commit the accepted path, advance the bookkeeping."""
        _, k_verify = self._keys(st)
        verdict, vs = self.verifier(k_verify, drafts, q, self.sampling(logits),
                                    st.verifier_state)
        tau = verdict.num_emitted - 1
        cache = commit_path(target, cache, slot, verdict.draft_index, tau)
        extra = {} if features is None else {"features": features}
        ds = self.drafter.update(dmodel, ds, drafts, verdict, st.n, scratch=self.draft_scratch,
                                 **extra)
        # q is the drafter's law after the sampling transform: NaN iff its logits were unusable.
        bad = jnp.where(nonfinite_logits(logits), NONFINITE_TARGET,
                        jnp.where(jnp.all(jnp.isfinite(q)), 0, NONFINITE_DRAFT))
        return self._advance(st, verdict.tokens, verdict.num_emitted, tau, cache, ds, vs, bad,
                             speculative=True)

    def _advance(self, st: SeqState, emitted, num, tau, cache, ds, vs, bad, *,
                 speculative: bool) -> SeqState:
        # Truncate at max_new_tokens and after the first EOS (EOS itself is kept). A step whose
        # laws were not finite (``bad`` != 0) emits nothing and stops the sequence.
        idx = jnp.arange(emitted.shape[0])
        count = jnp.where(bad > 0, 0, jnp.minimum(num, self.max_new_tokens - st.new_tokens))
        hit_eos = jnp.bool_(False)
        if self.eos_ids:  # static: no EOS logic at all (and no constant folding) without EOS ids
            is_eos = jnp.isin(emitted, jnp.asarray(self.eos_ids, jnp.int32)) & (idx < count)
            count = jnp.where(is_eos.any(), jnp.argmax(is_eos) + 1, count)
            hit_eos = is_eos.any()
        dest = jnp.where(idx < count, st.n + idx, st.history.shape[0])
        new_tokens = st.new_tokens + count
        fb = st.fallback
        if self.fallback is not None:
            fb = (self.fallback.after_speculative(fb, num) if speculative
                  else self.fallback.after_autoregressive(fb))
        new = st.replace(
            history=st.history.at[dest].set(emitted, mode="drop"), n=st.n + count, cache=cache,
            drafter_state=ds, verifier_state=vs, steps=st.steps + 1,
            drafter_calls=st.drafter_calls + (self.drafter.calls_per_step() if speculative else 0),
            new_tokens=new_tokens, accepted=st.accepted + tau,
            accepted_per_position=st.accepted_per_position + (jnp.arange(self.L) < tau),
            done=hit_eos | (new_tokens >= self.max_new_tokens) | (bad > 0), hit_eos=hit_eos,
            nonfinite=jnp.asarray(bad, jnp.int32), fallback=fb)
        # A finished sequence keeps its state. Its target cache is the exception: nothing reads it
        # again, and selecting it back would rewrite the whole KV cache on every step.
        kept = jax.tree.map(lambda old, nw: jnp.where(st.done, old, nw), st.replace(cache=()),
                            new.replace(cache=()))
        return kept.replace(cache=new.cache)

    def body(self, target, dmodel, st: SeqState) -> SeqState:
        """One loop step for the whole batch (``st`` has a leading batch axis)."""
        if self.drafter is None:
            return jax.vmap(lambda s: self.step_ar(target, s))(st)
        if self.fallback is None:
            return self.speculate(target, dmodel, st)
        # One kind of step for the whole batch: speculative if any running row wants it.
        go = jnp.any(jax.vmap(self.fallback.speculates)(st.fallback) & ~st.done)
        return jax.lax.cond(go, lambda st: self.speculate(target, dmodel, st, resync=True),
                            lambda st: jax.vmap(lambda s: self.step_ar(target, s))(st), st)

    def speculate(self, target, dmodel, st: SeqState, resync: bool = False) -> SeqState:
        """One speculative step for the whole batch; ``resync``: the draft first reads the
        tokens that autoregressive steps emitted without it (``decode.fallback``)."""
        if resync:
            st = st.replace(drafter_state=per_sequence(
                lambda s: self.drafter.resync(dmodel, s.drafter_state, s.history, s.n,
                                              scratch=self.draft_scratch), st))
        # per_sequence: a drafter's own branches (the hybrid's lookup or model draft) run only
        # the branch taken at batch 1
        drafts, q, ds = per_sequence(lambda s: self.propose(dmodel, s), st)

        def scored(nodes):
            return lambda: jax.vmap(lambda s, d: self.score(target, s, d, nodes))(st, drafts)

        sizes = self.tree_sizes
        if len(sizes) == 1:
            scores = scored(sizes[0])()
        else:  # the batch runs the smallest tree that holds all its distinct nodes
            distinct = jax.vmap(lambda d: trie(d)[1])(drafts)
            need = 1 + jnp.max(jnp.where(st.done, 0, distinct))
            which = jnp.sum(need > jnp.asarray(sizes[:-1]))
            scores = jax.lax.switch(which, [scored(n) for n in sizes])
        # (logits, cache, slot), plus the features when the drafter reads them
        return per_sequence(lambda *a: self.finish(target, dmodel, *a), st, drafts, q, ds,
                            *scores)

    def shard(self, st: SeqState) -> SeqState:
        """Pin the batch state's layout on the mesh (a no-op without one): sequences over
        ``data``, and the target's KV blocks ``[B, KV, S, hd]`` also over ``model`` by head, to
        match the q/k/v weights split by head (``layers.TENSOR_PARALLEL``)."""
        if self.mesh is None:
            return st
        from jax.sharding import NamedSharding, PartitionSpec

        def pin(x, *axes):
            return jax.lax.with_sharding_constraint(x, NamedSharding(self.mesh,
                                                                     PartitionSpec(*axes)))

        cache = jax.tree.map(lambda x: pin(x, "data", "model") if x.ndim == 4 else pin(x, "data"),
                             st.cache)
        return jax.tree.map(lambda x: pin(x, "data"), st.replace(cache=())).replace(cache=cache)

    # --- whole batch (jit these with the loop object static) --------------------------------------
    def run(self, target_state, draft_state, prompts: Int[Array, "B P"], lengths: Int[Array, " B"],
            keys: Array) -> dict[str, Array]:
        """``start`` then ``resume``: prefill, then decode to the end, as one program."""
        return self.resume(target_state, draft_state,
                           self.start(target_state, draft_state, prompts, lengths, keys))

    def _models(self, target_state, draft_state):
        target = nnx.merge(self.target_graph, target_state)
        dmodel = None if self.draft_graph is None else nnx.merge(self.draft_graph, draft_state)
        return target, dmodel

    def start(self, target_state, draft_state, prompts: Int[Array, "B P"],
              lengths: Int[Array, " B"], keys: Array) -> SeqState:
        """Prefill (target and drafter) into the batch's loop state. ``P`` may be any width up
        to ``prompt_pad``: a call compiled per padded width costs its own prompts' rows, while
        the loop (``resume``) is compiled once for every width."""
        target, dmodel = self._models(target_state, draft_state)
        if self.shared_prompt:
            # One prefill, then B copies that differ only in their keys; padding rows (length
            # 0) are done from the start as in ``init``.
            one = self.init(target, dmodel, prompts[0], lengths[0], keys[0])
            state = jax.tree.map(lambda x: jnp.broadcast_to(x, (prompts.shape[0],) + x.shape), one)
            state = state.replace(key=keys, done=self.starts_done(lengths))
        else:
            state = jax.vmap(lambda p, n, k: self.init(target, dmodel, p, n, k))(prompts, lengths,
                                                                                  keys)
        return self.shard(state)

    def resume(self, target_state, draft_state, state: SeqState) -> dict[str, Array]:
        """Decode from ``start``'s state until every sequence is done; the counters."""
        target, dmodel = self._models(target_state, draft_state)

        def cond(st):
            return ~jnp.all(st.done)

        st = jax.lax.while_loop(cond, lambda st: self.shard(self.body(target, dmodel, st)), state)
        # A verifier that measures (``ReadsOut``, e.g. ``specjax.eval.root_bound``) adds what it
        # summed in its state to the counters.
        extra = (self.verifier.readout(st.verifier_state) if isinstance(self.verifier, ReadsOut)
                 else {})
        if self.fallback is not None:
            extra["ar_steps"] = st.fallback.ar_steps
        return extra | dict(history=st.history, n=st.n, prompt_len=st.prompt_len,
                            target_calls=st.steps,
                            drafter_calls=st.drafter_calls, new_tokens=st.new_tokens,
                            accepted=st.accepted, accepted_per_position=st.accepted_per_position,
                            hit_eos=st.hit_eos, nonfinite=st.nonfinite)
