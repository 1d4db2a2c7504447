"""Cheaper drafting that stays exact: an int8 draft beside a float32 target, a draft vocabulary
cut to the first n ids (+ EOS), and ``L=auto``.

Each option is checked the two ways the engine's losslessness is: greedy speculative decoding
equals autoregressive decoding token for token, and the empirical law of the first generated
tokens over many seeds matches the target's exact law (Pearson chi-square, small cells pooled,
false-positive rate 1e-6 per test, fixed seeds). A drafter that samples from the cut law but
reports a q with mass on the cut tokens must fail the same test (the mutation).
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import jax.numpy as jnp
import numpy as np
import pytest
from exactness import (
    DEC_PROMPTS,
    FAST,
    FPR,
    GREEDY,
    PROMPT,
    SEEDS,
    decoder_law,
    tiny_decoder,
    toy_fit,
    uncached_greedy,
)

from algorithms.exact.monte_carlo import chi_square
from specjax import generate
from specjax.drafters import ModelDrafter
from specjax.drafters.vocab_cut import VocabCut, kept_ids
from specjax.models.sampling import Sampling
from specjax.models.toy import ToyLoaded, load_toy
from specjax.theory import optimal_k
from specjax.tuning.lookahead import alpha_from, choose_lookahead, lookahead_for


@dataclasses.dataclass(frozen=True, kw_only=True)
class LeakyCutDrafter(ModelDrafter):
    """Mutation: drafts from the cut law but reports q with 30 % of its mass spread over the
    tokens the cut removed (as if the cut were forgotten when reporting q)."""

    def propose(self, model, key, state, history, n, *, sampling, vocab_size, scratch):
        drafts, q, state = super().propose(model, key, state, history, n, sampling=sampling,
                                           vocab_size=vocab_size, scratch=scratch)
        cut = (q == 0).astype(q.dtype)
        leak = cut / jnp.maximum(cut.sum(-1, keepdims=True), 1.0)
        return drafts, jnp.where(cut.sum(-1, keepdims=True) > 0, 0.7 * q + 0.3 * leak, q), state


# --- the vocabulary cut --------------------------------------------------------------------------
def test_kept_ids_are_the_first_n_and_eos_and_bad_values_are_refused():
    assert kept_ids(3, 10, (8, 1)).tolist() == [0, 1, 2, 8]
    with pytest.raises(ValueError, match="draft_vocab"):
        kept_ids(0, 10)
    with pytest.raises(ValueError, match="draft_vocab"):
        kept_ids(11, 10)
    with pytest.raises(ValueError, match="outside"):
        kept_ids(3, 10, (10,))


@pytest.mark.parametrize("weight_format, packed", [("float32", False), ("float32", None),
                                                   ("int8", False)])
def test_cut_head_gives_the_decoders_logits_on_the_kept_ids_and_minus_inf_elsewhere(
        weight_format, packed):
    dec = tiny_decoder(weight_format, packed)
    ids = kept_ids(20, dec.vocab_size, (60,))
    cut = VocabCut(dec, ids)
    assert cut.fast
    tokens = jnp.asarray([5, 9, 11, 3], jnp.int32)
    pos = jnp.arange(4, dtype=jnp.int32)
    mask = jnp.tril(jnp.ones((4, 4), bool))
    full, _ = dec.forward(tokens, pos, pos, mask, dec.init_cache(16, 4))
    got, _ = cut.forward(tokens, pos, pos, mask, dec.init_cache(16, 4))
    full, got = np.asarray(full), np.asarray(got)
    outside = np.setdiff1d(np.arange(dec.vocab_size), ids)
    assert np.all(np.isneginf(got[:, outside]))
    np.testing.assert_allclose(got[:, ids], full[:, ids], rtol=2e-5, atol=2e-5)


def test_draft_vocab_sampled_law_matches_target():
    fit, res = toy_fit(ModelDrafter(K=1, L=3, draft_vocab=2))
    assert fit.passes(FPR), fit
    assert res.summary["block_efficiency"] > 1.0  # the cut draft still gets tokens accepted


def test_draft_vocab_multi_draft_sampled_law_matches_target():
    fit, _ = toy_fit(ModelDrafter(K=3, L=2, draft_vocab=3), verifier="spectr")
    assert fit.passes(FPR), fit


def test_leaky_cut_q_fails():
    fit, _ = toy_fit(LeakyCutDrafter(K=1, L=3, draft_vocab=2))
    assert not fit.passes(FPR), fit


# --- greedy SD == AR on the real decoder code path (int8 draft, cut head) ------------------------
@pytest.fixture(scope="module")
def tiny_pair():
    target = ToyLoaded(name="tiny-target", model=tiny_decoder(seed=0))
    return target, uncached_greedy(target.model, DEC_PROMPTS, 8)


@pytest.mark.parametrize("weight_format, draft_vocab", [("int8", None), ("float32", 24),
                                                        ("int8", 24)])
def test_greedy_equals_autoregressive_with_cheap_drafts(tiny_pair, weight_format, draft_vocab):
    target, ref = tiny_pair
    draft = ToyLoaded(name="tiny-draft", model=tiny_decoder(weight_format, seed=1))
    res = generate(target, DEC_PROMPTS, draft=draft,
                   drafter=ModelDrafter(K=1, L=3, draft_vocab=draft_vocab), verifier="token",
                   sampling=GREEDY, max_new_tokens=8, progress=False, compiler_options=FAST)
    assert res.tokens == ref


@pytest.mark.slow  # ~50 s on 2 cores; the default suite keeps the cut law (toy pair) and int8
def test_int8_cut_draft_beside_float32_target_sampled_law_matches(tiny_pair):  # greedy == AR
    """Two tokens (one block of L = 2 per step: the accept and the reject paths) from a float32
    target drafted by an int8 decoder with a cut head."""
    target, _ = tiny_pair
    draft = ToyLoaded(name="tiny-draft", model=tiny_decoder("int8", seed=1))
    prompt = DEC_PROMPTS[1]
    res = generate(target, [prompt] * SEEDS, draft=draft,
                   drafter=ModelDrafter(K=1, L=2, draft_vocab=24), verifier="token",
                   sampling=Sampling(temperature=1.0), max_new_tokens=2, seed=3, progress=False,
                   compiler_options=FAST)
    fit = chi_square(Counter(tuple(t) for t in res.tokens), decoder_law(target.model, prompt, 2))
    assert fit.passes(FPR), fit
    assert fit.df > 20  # enough cells that the test has power


# --- L=auto --------------------------------------------------------------------------------------
def test_alpha_is_the_truncated_geometric_mle():
    # Two steps at L = 4: tau = 4 (no rejection) and tau = 1 (one rejection): 5 accepted,
    # 1 rejected.
    per_prompt = [dict(accepted=5, target_calls=2, accepted_per_position=[2, 1, 1, 1])]
    assert alpha_from(per_prompt, 4) == pytest.approx(5 / 6)


@pytest.mark.parametrize("alpha, c", [(0.8, 0.1), (0.6, 0.3), (0.3, 0.5), (0.95, 0.05)])
def test_lookahead_is_the_theorys_optimum(alpha, c):
    k, _ = optimal_k(alpha, c, k_max=12)
    assert lookahead_for(alpha, c, 12) == max(k, 1)


def test_auto_lookahead_on_the_toy_pair_is_exact():
    """choose_lookahead measures, picks L in [1, L_max] by the theory, and decoding with that L
    has the target's law (its lossless argument: L is fixed before the measured run)."""
    target, draft = load_toy("toy-target"), load_toy("toy-draft")
    L, info = choose_lookahead(target, draft, ModelDrafter(K=1, L=1), [PROMPT],
                               sampling=Sampling(temperature=1.0), probe_tokens=16, L_max=6,
                               compiler_options=FAST)
    assert info["L"] == L and L in range(1, 7)
    assert 0.0 < info["alpha"] < 1.0 and info["c"] > 0.0
    assert L == lookahead_for(info["alpha"], info["c"], 6)
    fit, _ = toy_fit(ModelDrafter(K=1, L=L))
    assert fit.passes(FPR), fit
