"""The hybrid drafter (prompt lookup where the context has a match, the draft model otherwise):
greedy decoding equals autoregressive decoding, and sampled output follows the target's exact
law (chi-square, false-positive rate FPR, fixed seeds), with both kinds of step taken; a mutant
that misreports the lookup steps' q must fail that test. The draft cache (which moves only the
acceptance, never the law) is checked directly: after a lookup step the model drafts what it
drafts from a fresh prefill of the same history, and a mutant that commits the never-computed
scratch after a lookup step does not."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from exactness import FPR, GREEDY, PROMPT, greedy_sd_and_ar, tiny_decoder, toy_fit

from algorithms.verifiers.base import Verdict
from specjax.drafters import HybridDrafter
from specjax.models.toy import ToyLoaded


@dataclasses.dataclass(frozen=True, kw_only=True)
class LyingLookup(HybridDrafter):
    """Mutation: on lookup steps reports the one-hot q flattened halfway to uniform."""

    def propose(self, model, key, state, history, n, *, sampling, vocab_size, scratch):
        drafts, q, state = super().propose(model, key, state, history, n, sampling=sampling,
                                           vocab_size=vocab_size, scratch=scratch)
        return drafts, jnp.where(state[1], 0.5 * q + 0.5 / vocab_size, q), state


@dataclasses.dataclass(frozen=True, kw_only=True)
class UnsyncedHybrid(HybridDrafter):
    """Mutation: commits the draft cache's scratch after every step, lookup steps included."""

    def update(self, model, state, drafts, verdict, n, *, scratch):
        cache, looked_up = state
        return self.commit(model, cache, verdict, n, drafted=self.L), looked_up


def test_bad_values_are_refused_naming_the_field():
    with pytest.raises(ValueError, match="K=1"):
        HybridDrafter(K=2, L=3)
    with pytest.raises(ValueError, match="min_ngram"):
        HybridDrafter(L=3, min_ngram=4, max_ngram=3)
    with pytest.raises(ValueError, match="draft_vocab"):
        HybridDrafter(L=3, draft_vocab=16)


def test_both_kinds_of_step_occur_on_the_toy_prompt():
    """The sampled-law test below has power over both branches: on the toy pair's prompt some
    steps find a 2-gram match and some do not."""
    d = HybridDrafter(L=3)
    rng = np.random.default_rng(0)
    found = []
    for _ in range(200):
        history = jnp.asarray(PROMPT + list(rng.integers(0, 4, 6)), jnp.int32)
        n = int(rng.integers(len(PROMPT), 9))
        prio, _ = d.lookup().candidates(history, jnp.int32(n))
        found.append(bool(jnp.any(prio >= 0)))
    assert 0.1 < np.mean(found) < 0.9


@pytest.mark.parametrize("L", [2, 3])
def test_sampled_law_matches_target(L):
    fit, _ = toy_fit(HybridDrafter(L=L))
    assert fit.passes(FPR), fit


def test_misreporting_the_lookup_q_fails():
    fit, _ = toy_fit(LyingLookup(L=3))
    assert not fit.passes(FPR), fit


def model_drafts_after_a_lookup_step(drafter):
    """Prompt with a match -> a lookup step, two of its tokens accepted -> no match -> the
    model's greedy drafts, and the drafts a fresh prefill of the same history gives."""
    model = tiny_decoder("float32", seed=1)
    L, scratch = drafter.L, drafter.scratch()
    prompt = [5, 9, 11, 5, 9]  # "5 9" matched: a lookup step proposes 11 5 9 ...
    history = jnp.zeros(64, jnp.int32).at[:5].set(jnp.asarray(prompt))
    P = len(prompt)
    state = drafter.init_state(model, jnp.asarray(prompt, jnp.int32), jnp.int32(P), max_len=64,
                               scratch=scratch)
    kw = dict(sampling=GREEDY, vocab_size=model.vocab_size, scratch=scratch)
    drafts, _, state = drafter.propose(model, jax.random.key(0), state, history, jnp.int32(P), **kw)
    assert bool(state[1]) and list(np.asarray(drafts[0, :2])) == [11, 5]
    verdict = Verdict(tokens=jnp.asarray([11, 5, 60, -1, -1][:L + 1], jnp.int32),
                      num_emitted=jnp.int32(3), draft_index=jnp.int32(0))
    state = drafter.update(model, state, drafts, verdict, jnp.int32(P), scratch=scratch)
    history = history.at[P:P + 3].set(jnp.asarray([11, 5, 60]))  # 60: no earlier match
    n = jnp.int32(P + 3)
    got, _, state = drafter.propose(model, jax.random.key(1), state, history, n, **kw)
    assert not bool(state[1])
    fresh = HybridDrafter(L=L).init_state(model, history[:P + 2], jnp.int32(P + 2), max_len=64,
                                          scratch=scratch)
    want, _, _ = HybridDrafter(L=L).propose(model, jax.random.key(1), fresh, history, n, **kw)
    return np.asarray(got), np.asarray(want)


def test_the_draft_cache_catches_up_after_a_lookup_step():
    got, want = model_drafts_after_a_lookup_step(HybridDrafter(L=4))
    np.testing.assert_array_equal(got, want)
    got, want = model_drafts_after_a_lookup_step(UnsyncedHybrid(L=4))
    assert not np.array_equal(got, want)  # the check has power: a stale cache drafts otherwise


@pytest.mark.parametrize("L", [1, 4])
def test_greedy_speculative_equals_autoregressive(L):
    target = ToyLoaded(name="tiny-target", model=tiny_decoder("float32", seed=0))
    draft = ToyLoaded(name="tiny-draft", model=tiny_decoder("float32", seed=1))
    sd, ar = greedy_sd_and_ar(target, draft, HybridDrafter(L=L), max_new_tokens=10)
    assert sd == ar
    assert jax.tree.leaves(sd)  # something was generated
