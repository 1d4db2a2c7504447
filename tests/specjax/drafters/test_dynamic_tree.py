"""The dynamic draft tree (``specjax.drafters.dynamic_tree``): lossless by the engine's two checks
(greedy speculative == autoregressive; the sampled law of the first tokens matches the target's
exact law, chi-square at false-positive rate 1e-6), with a mutant verifier that fails.

The mutant is SpecInfer without its "q(x) = 0 = not drafted" guard: the convention
min(1, r/0) = 1 then accepts the filler token of a position a path never drafted, so the
emitted law is no longer the target's.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import pytest
from exactness import DEC_PROMPTS, FAST, FPR, GREEDY, tiny_decoder, toy_fit, uncached_greedy

from algorithms.verifiers.specinfer import SpecInferVerifier
from specjax import generate
from specjax.drafters import DynamicTreeDrafter, ModelDrafter
from specjax.models.sampling import Sampling
from specjax.models.toy import ToyLoaded, load_toy


@dataclasses.dataclass(frozen=True, kw_only=True)
class UnguardedSpecInfer(SpecInferVerifier):
    """Mutation: RRS that takes every position as drafted, zero q rows included."""

    @staticmethod
    def filled(drafts, q):
        return jnp.ones(drafts.shape, bool)


def test_greedy_equals_autoregressive_on_a_decoder_pair():
    target = ToyLoaded(name="tiny-target", model=tiny_decoder(seed=0))
    draft = ToyLoaded(name="tiny-draft", model=tiny_decoder(seed=1))
    ref = uncached_greedy(target.model, DEC_PROMPTS, 8)
    # 0 is the fixed tree token for token, 1 stops every path after a token (tested below)
    for threshold in (0.05,):
        res = generate(target, DEC_PROMPTS, draft=draft,
                       drafter=DynamicTreeDrafter(K=3, L=4, threshold=threshold),
                       verifier="specinfer", sampling=GREEDY, max_new_tokens=8, progress=False,
                       compiler_options=FAST)
        assert res.tokens == ref, threshold


def test_threshold_zero_is_the_fixed_tree_and_one_stops_every_path_after_a_token():
    """threshold 0 never stops: ModelDrafter's keys and draws, token for token (T = 1).
    threshold 1 stops every path after its first token: BE <= 2, positions 2+ never drafted."""
    target, draft = load_toy("toy-target"), load_toy("toy-draft")
    kw = dict(draft=draft, verifier="specinfer", sampling=Sampling(temperature=1.0),
              max_new_tokens=12, progress=False, compiler_options=FAST)
    prompts = [[1, 2, 3], [0, 1], [3, 3, 2, 1]]
    fixed = generate(target, prompts, drafter=ModelDrafter(K=3, L=4), **kw)
    never = generate(target, prompts, drafter=DynamicTreeDrafter(K=3, L=4, threshold=0.0), **kw)
    assert never.tokens == fixed.tokens
    assert never.summary["target_calls"] == fixed.summary["target_calls"]
    always = generate(target, prompts, drafter=DynamicTreeDrafter(K=3, L=4, threshold=1.0), **kw)
    assert fixed.summary["block_efficiency"] > 2.0
    # Fails if threshold 1 leaves paths unstopped (BE as the fixed drafter's, > 2 above, same
    # prompts and keys) or if it stops before the first token (nothing drafted: BE = 1).
    assert 1.0 < always.summary["block_efficiency"] <= 2.0
    assert sum(always.summary["per_position_acceptance"][1:]) == 0


def test_sampled_law_matches_target_and_the_unguarded_verifier_fails():
    tree = DynamicTreeDrafter(K=3, L=3, threshold=0.3)
    fit, _ = toy_fit(tree, verifier="specinfer")
    assert fit.passes(FPR), fit
    # The mutant differs from the guarded verifier only at undrafted positions, so its failure
    # also shows that the rule did stop paths (else this would test the fixed tree).
    bad, _ = toy_fit(tree, verifier=UnguardedSpecInfer())
    assert not bad.passes(FPR), bad


def test_verifiers_without_stopped_and_bad_fields_are_refused_by_name():
    target, draft = load_toy("toy-target"), load_toy("toy-draft")
    with pytest.raises(ValueError, match="'specinfer'"):
        generate(target, [[1, 2]], draft=draft, drafter=DynamicTreeDrafter(K=2, L=3),
                 verifier="traversal", max_new_tokens=2, progress=False)
    with pytest.raises(ValueError, match="drafter.threshold"):
        DynamicTreeDrafter(K=2, L=3, threshold=-0.1)
    with pytest.raises(ValueError, match="drafter.draft_vocab"):
        DynamicTreeDrafter(K=2, L=3, draft_vocab=8)
