"""Drafter unit tests: prompt lookup finds the right matches; model drafters report the q they
sampled from (checked against float64 laws of the tabular toy LM, not against the code's own
sampling transform); the draft cache stays in sync through full accepts and rejections."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from exactness import np_law  # the float64 law after temperature / top-k

from algorithms.verifiers.base import Verdict
from specjax.drafters import EarlyExitDrafter, ModelDrafter, NgramDrafter, get_drafter
from specjax.models.sampling import Sampling
from specjax.models.toy import ToyLM, ToyLoaded, load_toy, make_tables


def ngram_drafts(history, n, **kw):
    d = NgramDrafter(**kw)
    h = jnp.asarray(history, jnp.int32)
    drafts, q, _ = d.propose(None, jax.random.key(0), (), h, jnp.int32(n), sampling=Sampling(),
                             vocab_size=10, scratch=0)
    return np.asarray(drafts), np.asarray(q)


def test_ngram_takes_latest_match():
    h = [5, 1, 2, 9, 7, 1, 2, 8, 3, 1, 2]
    drafts, _ = ngram_drafts(h, len(h), K=1, L=2, max_ngram=2)
    assert drafts.tolist() == [[8, 3]]


def test_ngram_k_distinct_matches_longest_first():
    h = [5, 1, 2, 9, 7, 1, 2, 8, 2, 4, 3, 1, 2]
    # "1 2" matches at 5 (-> 8 2) and 1 (-> 9 7); then "2" at 8 (-> 4 3); "2" at 6/2 repeat those.
    drafts, _ = ngram_drafts(h, len(h), K=3, L=2, max_ngram=2)
    assert drafts.tolist() == [[8, 2], [9, 7], [4, 3]]


def test_ngram_fewer_matches_than_k_repeats_draft_zero():
    h = [5, 1, 2, 9, 7, 3, 1, 2]
    drafts, _ = ngram_drafts(h, len(h), K=3, L=2, max_ngram=2, min_ngram=2)
    assert drafts.tolist() == [[9, 7]] * 3


def test_ngram_continuation_into_the_present_is_periodic():
    drafts, _ = ngram_drafts([3, 4, 3, 4], 4, K=1, L=3, max_ngram=2)
    assert drafts.tolist() == [[3, 4, 3]]


def test_ngram_ignores_tokens_past_n_and_falls_back_to_pending():
    drafts, _ = ngram_drafts([1, 2, 1, 2, 9, 9, 9], 3, K=1, L=2, max_ngram=1)
    assert drafts.tolist() == [[2, 1]]
    drafts, _ = ngram_drafts([0, 1, 2, 3, 3, 3], 4, K=2, L=3, max_ngram=3, min_ngram=2)
    assert drafts.tolist() == [[3, 3, 3]] * 2


def test_ngram_q_is_one_hot_on_the_drafts():
    h = [5, 1, 2, 9, 7, 1, 2, 8, 2, 4, 3, 1, 2]
    drafts, q = ngram_drafts(h, len(h), K=3, L=2, max_ngram=2)
    assert q.shape == (3, 2, 10)
    np.testing.assert_array_equal(q, np.eye(10)[drafts])


# --- model drafters ---------------------------------------------------------------------------


def check_q_matches_law(model, drafter, history, steps, sampling, seed=0):
    """Propose / fake-verify for several steps; q must equal the float64 law every time."""
    K, L = drafter.K, drafter.L
    T, scratch = 64, 16 + drafter.scratch()
    prompt = jnp.asarray(history + [0] * (16 - len(history)), jnp.int32)
    state = drafter.init_state(model, prompt, jnp.int32(len(history)), max_len=T, scratch=scratch)
    propose = jax.jit(lambda key, state, h, n: drafter.propose(
        model, key, state, h, n, sampling=sampling, vocab_size=model.vocab_size, scratch=scratch))
    update = jax.jit(lambda state, drafts, verdict, n: drafter.update(
        model, state, drafts, verdict, n, scratch=scratch))
    rng = np.random.default_rng(seed)
    for step in range(steps):
        n = len(history)
        h = jnp.asarray(history + [0] * (T - n), jnp.int32)
        drafts, q, state = propose(jax.random.key(step), state, h, jnp.int32(n))
        drafts, q = np.asarray(drafts), np.asarray(q)
        for k in range(K):
            for i in range(L):
                want = np_law(model.law(history + drafts[k, :i].tolist()),
                              sampling.temperature, sampling.top_k)
                np.testing.assert_allclose(q[k, i], want, atol=2e-6)
                assert want[drafts[k, i]] > 0
        # Fake verdicts alternate: everything accepted (lag 1 next), then a rejection.
        d, tau = step % K, (L if step % 2 == 0 else int(rng.integers(0, L)))
        extra = int(rng.integers(0, model.vocab_size))
        tokens = np.full(L + 1, -1)
        tokens[:tau], tokens[tau] = drafts[d, :tau], extra
        verdict = Verdict(jnp.asarray(tokens, jnp.int32), jnp.int32(tau + 1), jnp.int32(d))
        state = update(state, jnp.asarray(drafts), verdict, jnp.int32(n))
        history = history + tokens[: tau + 1].tolist()
        assert int(state.length) in (len(history) - 1, len(history) - 2)


@pytest.mark.parametrize("K, L, sampling", [
    (1, 3, Sampling(temperature=1.0)),
    (3, 2, Sampling(temperature=0.7, top_k=2)),
    (2, 1, Sampling(temperature=0)),
])
def test_model_drafter_q_is_the_transformed_draft_law(K, L, sampling):
    model = ToyLM(make_tables(4, order=3, seed=11), order=3)  # order 3: the cache must be right
    check_q_matches_law(model, ModelDrafter(K=K, L=L), [1, 2, 3], steps=4, sampling=sampling)


def test_early_exit_drafter_uses_the_first_layers():
    target = ToyLoaded(name="t", model=ToyLM(make_tables(4, order=3, seed=5, num_layers=3),
                                             order=3))
    drafter = EarlyExitDrafter(K=2, L=2, num_layers=2)
    module = drafter.module(target, None)
    np.testing.assert_array_equal(module.law([1, 2]), target.model.exact.laws[1][
        (2 + 1 * 5 + 4 * 25)])  # code = last + prev·(V+1) + pad·(V+1)^2
    check_q_matches_law(module, drafter, [1, 2], steps=3, sampling=Sampling(temperature=1.0))


def test_drafter_validation_errors():
    with pytest.raises(ValueError, match="K"):
        ModelDrafter(K=0, L=2)
    with pytest.raises(ValueError, match="L"):
        NgramDrafter(K=1, L=0)
    with pytest.raises(ValueError, match="min_ngram"):
        NgramDrafter(K=1, L=2, max_ngram=1, min_ngram=2)
    target = load_toy("toy-target")
    with pytest.raises(ValueError, match="draft"):
        ModelDrafter(K=1, L=2).module(target, None)
    with pytest.raises(ValueError, match="vocab_size"):
        ModelDrafter(K=1, L=2).module(target, load_toy("toy-draft-v8"))
    with pytest.raises(ValueError, match="num_layers"):
        EarlyExitDrafter(K=1, L=2, num_layers=3).module(target, None)
    with pytest.raises(ValueError, match="allowed"):
        get_drafter("lookahead", K=1, L=2)  # (medusa is registered now)
