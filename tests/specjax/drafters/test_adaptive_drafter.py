"""The adaptive draft length (``specjax.drafters.adaptive``): lossless by the engine's two checks
(greedy speculative == autoregressive; the sampled law of the first tokens matches the target's
exact law, chi-square at false-positive rate 1e-6), with a mutant verifier that fails.

The mutant is the token verifier without its "q row all zero = not drafted" guard: block
verification's convention min(1, p/0) = 1 then accepts the filler token of a position that was
never drafted, so the emitted law is no longer the target's.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import pytest
from exactness import DEC_PROMPTS, FAST, FPR, GREEDY, tiny_decoder, toy_fit, uncached_greedy

from algorithms.verifiers.base import emit, residual, safe_ratio, sample
from algorithms.verifiers.token import TokenVerifier
from specjax import generate
from specjax.drafters import AdaptiveDrafter, ModelDrafter
from specjax.models.sampling import Sampling
from specjax.models.toy import ToyLoaded, load_toy


@dataclasses.dataclass(frozen=True, kw_only=True)
class UnguardedToken(TokenVerifier):
    """Mutation: token-wise verification that accepts a position whose q row is zero."""

    def __call__(self, key, drafts, q, p, state=()):
        x, q, p = drafts[0], q[0], p[0]
        L = x.shape[0]
        k_coin, k_extra = jax.random.split(key)
        pos = jnp.arange(L)
        accept = jax.random.uniform(k_coin, (L,)) < safe_ratio(p[pos, x], q[pos, x])
        tau = jnp.where(accept.all(), L, jnp.argmin(accept)).astype(jnp.int32)
        i = jnp.minimum(tau, L - 1)
        law = jnp.where(tau == L, p[L], residual(p[i], q[i], fallback=p[i]))
        return emit(x, tau, sample(k_extra, law), jnp.int32(0)), state


def test_greedy_equals_autoregressive_on_a_decoder_pair():
    target = ToyLoaded(name="tiny-target", model=tiny_decoder(seed=0))
    draft = ToyLoaded(name="tiny-draft", model=tiny_decoder(seed=1))
    ref = uncached_greedy(target.model, DEC_PROMPTS, 8)
    # 0 is the fixed drafter token for token, 1 stops after one token (both tested below)
    for threshold in (0.2,):
        res = generate(target, DEC_PROMPTS, draft=draft,
                       drafter=AdaptiveDrafter(L=4, threshold=threshold), verifier="token",
                       sampling=GREEDY, max_new_tokens=8, progress=False, compiler_options=FAST)
        assert res.tokens == ref, threshold


def test_threshold_zero_is_the_fixed_length_drafter_and_one_stops_after_a_token():
    """threshold 0 never stops: the same keys and draws as ModelDrafter, token for token (T = 1).
    threshold 1 stops after every first token (a draft probability below 1): BE <= 2."""
    target, draft = load_toy("toy-target"), load_toy("toy-draft")
    kw = dict(draft=draft, verifier="token", sampling=Sampling(temperature=1.0),
              max_new_tokens=12, progress=False, compiler_options=FAST)
    prompts = [[1, 2, 3], [0, 1], [3, 3, 2, 1]]
    fixed = generate(target, prompts, drafter=ModelDrafter(K=1, L=4), **kw)
    never = generate(target, prompts, drafter=AdaptiveDrafter(L=4, threshold=0.0), **kw)
    assert never.tokens == fixed.tokens
    assert never.summary["target_calls"] == fixed.summary["target_calls"]
    always = generate(target, prompts, drafter=AdaptiveDrafter(L=4, threshold=1.0), **kw)
    # one drafted token + at most one more per step: BE <= 2, where the fixed L = 4 exceeds it
    assert fixed.summary["block_efficiency"] > 2.0
    # Fails if threshold 1 leaves paths unstopped (BE as the fixed drafter's, > 2 above, same
    # prompts and keys) or if it stops before the first token (nothing drafted: BE = 1).
    assert 1.0 < always.summary["block_efficiency"] <= 2.0
    assert sum(always.summary["per_position_acceptance"][1:]) == 0  # positions 2+ never drafted


def test_sampled_law_matches_target_and_the_unguarded_verifier_fails():
    adaptive = AdaptiveDrafter(L=3, threshold=0.5)
    fit, _ = toy_fit(adaptive)
    assert fit.passes(FPR), fit
    # The mutant differs from the guarded verifier only at undrafted positions, so its failure
    # also shows that the rule did stop blocks early (else this would test the fixed drafter).
    bad, _ = toy_fit(adaptive, verifier=UnguardedToken())
    assert not bad.passes(FPR), bad


def test_other_verifiers_and_bad_fields_are_refused_by_name():
    target, draft = load_toy("toy-target"), load_toy("toy-draft")
    with pytest.raises(ValueError, match="use verifier 'token'"):
        generate(target, [[1, 2]], draft=draft, drafter=AdaptiveDrafter(L=3), verifier="block",
                 max_new_tokens=2, progress=False)
    with pytest.raises(ValueError, match="drafter.K"):
        AdaptiveDrafter(K=2, L=3)
    with pytest.raises(ValueError, match="drafter.threshold"):
        AdaptiveDrafter(L=3, threshold=1.5)
