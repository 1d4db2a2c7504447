"""The loop's fallback to autoregressive steps (``specjax.decode.fallback``): the rule's states,
the draft's catch-up after steps it did not see, and losslessness by the engine's two checks
(greedy == autoregressive; the sampled law of the first tokens, chi-square at false-positive
rate 1e-6, with the q-lying drafter as the mutant that must fail with the fallback on too).
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest
from exactness import DEC_PROMPTS, FAST, FPR, GREEDY, tiny_decoder, toy_fit, uncached_greedy
from test_engine_losslessness import LyingDrafter

from specjax import generate
from specjax.decode.fallback import Fallback
from specjax.drafters import AdaptiveDrafter, ModelDrafter, NgramDrafter
from specjax.models.passes import prefill
from specjax.models.sampling import Sampling
from specjax.models.toy import ToyLoaded, load_toy

#: Never pays (a step emits at most L + 1 tokens): speculate, 1 AR step, speculate, 2, 4, ...
NEVER = Fallback(break_even=100.0)


def test_rule_backs_off_doubling_and_resets_when_a_step_pays():
    rule = Fallback(break_even=3.0, decay=0.5, max_wait=4)
    st = rule.init()
    assert bool(rule.speculates(st))
    waits = []
    for _ in range(4):  # four speculative steps of one token each, the AR steps between them
        st = rule.after_speculative(st, jnp.int32(1))
        waits.append(int(st.wait))
        while not bool(rule.speculates(st)):
            st = Fallback.after_autoregressive(st)
    assert waits == [1, 2, 4, 4]  # doubled up to max_wait
    assert int(st.ar_steps) == 11
    # starts one above the break-even: 4 -> 2.5 -> 1.75 -> 1.375 -> 1.1875
    assert float(st.mean) == pytest.approx(1.0 + 3.0 / 16)
    st = rule.after_speculative(st, jnp.int32(7))  # mean 4.09 >= 3: speculate again, reset
    assert (int(st.wait), int(st.backoff)) == (0, 1)
    st = rule.after_speculative(st, jnp.int32(2))  # 3.05: still pays
    assert int(st.wait) == 0
    st = rule.after_speculative(st, jnp.int32(1))  # 2.02: one AR step first
    assert (int(st.wait), int(st.backoff)) == (1, 2)
    slow = Fallback(break_even=1.9)  # default decay 0.8: four one-token steps, then AR
    st = slow.init()
    for _ in range(3):  # 2.9 -> 2.52 -> 2.22 -> 1.97
        st = slow.after_speculative(st, jnp.int32(1))
        assert int(st.wait) == 0
    st = slow.after_speculative(st, jnp.int32(1))  # 1.78
    assert (int(st.wait), int(st.backoff)) == (1, 2)


def test_draft_reads_missed_tokens_in_chunks_as_a_prefill_would():
    """feed_lag commits history up to n - 2 in chunks of the scratch size: the next position's
    logits equal those of a cache prefilled with the same tokens (off-by-one fails)."""
    model = tiny_decoder(seed=3)
    history = jnp.asarray(np.random.default_rng(0).integers(0, 60, 40), jnp.int32)
    # The prefill of 3 tokens commits 2 (the last is pending); 22 more reach n - 2: 3 chunks.
    n, scratch = 27, 8
    cache = model.with_scratch(prefill(model, model.init_cache(48, 3), history[:3], 3, 3),
                               scratch)
    fed = ModelDrafter.feed_lag(model, cache, history, jnp.int32(n), scratch)
    assert int(fed.length) == n - 2
    ref = model.with_scratch(prefill(model, model.init_cache(48, 32), history[:32], n - 1, 32),
                             scratch)
    s = jnp.arange(scratch)
    mask = (s == 0)[None]

    def next_logits(c):
        return model.forward(history[n - 2:n - 1], jnp.asarray([n - 2]), jnp.asarray([0]), mask,
                             c)[0]

    np.testing.assert_allclose(next_logits(fed), next_logits(ref), atol=2e-5, rtol=1e-5)
    short = ModelDrafter.feed_lag(model, cache, history, jnp.int32(n - 1), scratch)
    assert not np.allclose(next_logits(short), next_logits(ref), atol=1e-3)  # one token short


@pytest.mark.parametrize("drafter", [ModelDrafter(L=4), AdaptiveDrafter(L=4, threshold=0.2),
                                     NgramDrafter(L=3)], ids=["model", "adaptive", "ngram"])
def test_greedy_equals_autoregressive_with_fallback(drafter):
    target = ToyLoaded(name="tiny-target", model=tiny_decoder(seed=0))
    draft = ToyLoaded(name="tiny-draft", model=tiny_decoder(seed=1))
    res = generate(target, DEC_PROMPTS, draft=draft, drafter=drafter, verifier="token",
                   sampling=GREEDY, max_new_tokens=40, progress=False, compiler_options=FAST,
                   fallback=NEVER, batch_size=1)
    assert res.tokens == uncached_greedy(target.model, DEC_PROMPTS, 40)
    # 40 tokens: the AR stretches of 1, 2, 4, 8, 16 steps were all taken (lag past one chunk)
    assert all(p["ar_steps"] >= 16 for p in res.per_prompt), res.per_prompt


def test_break_even_one_is_plain_speculation_token_for_token():
    """A step emits >= 1 token, so break_even 1 never falls back: the same keys and draws."""
    target, draft = load_toy("toy-target"), load_toy("toy-draft")
    kw = dict(draft=draft, drafter=ModelDrafter(L=3), verifier="token", max_new_tokens=12,
              sampling=Sampling(temperature=1.0), progress=False, compiler_options=FAST)
    prompts = [[1, 2, 3], [0, 1], [3, 3, 2, 1]]
    plain = generate(target, prompts, **kw)
    one = generate(target, prompts, fallback=Fallback(break_even=1.0), **kw)
    assert one.tokens == plain.tokens
    assert one.summary["ar_steps"] == 0
    never = generate(target, prompts, fallback=NEVER, **kw)
    assert never.summary["ar_steps"] > 0 and never.tokens != plain.tokens


def test_sampled_law_with_fallback_and_the_lying_drafter_fails():
    fit, res = toy_fit(ModelDrafter(L=2), fallback=NEVER)
    assert fit.passes(FPR), fit
    # speculative, AR, speculative, AR, AR: the 4 tokens come from both kinds of step
    assert res.summary["ar_steps"] > 0
    bad, _ = toy_fit(LyingDrafter(K=1, L=2), fallback=NEVER)
    assert not bad.passes(FPR), bad


@dataclasses.dataclass(frozen=True, kw_only=True)
class NoResync(NgramDrafter):
    """A drafter whose state cannot follow steps it did not see (as EAGLE's and Medusa's)."""

    resync = None


def test_drafters_that_cannot_skip_steps_and_bad_fields_are_refused():
    target = ToyLoaded(name="tiny-target", model=tiny_decoder(seed=0))
    with pytest.raises(ValueError, match="NoResync decoding cannot fall back.*fallback=null"):
        generate(target, [[1, 2]], drafter=NoResync(L=2), verifier="token", fallback=NEVER,
                 max_new_tokens=2, progress=False)
    with pytest.raises(ValueError, match="fallback.break_even must be a number >= 1"):
        Fallback(break_even=0.5)
    with pytest.raises(ValueError, match="fallback.decay"):
        Fallback(break_even=2.0, decay=1.0)
    with pytest.raises(ValueError, match="fallback.max_wait"):
        Fallback(break_even=2.0, max_wait=0)
