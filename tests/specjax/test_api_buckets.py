"""Each prompt is prefilled at its own padded width (``api.prompt_bucket``), not at the run's
longest, and the prefill is timed apart from the decoding."""

import numpy as np
import pytest

import specjax
from specjax.api import prompt_bucket

FAST = {"xla_backend_optimization_level": 0}


def test_buckets_hold_the_prompt_waste_at_most_a_quarter_and_are_few():
    widths = [prompt_bucket(n) for n in range(1, 4097)]
    assert all(w >= n for n, w in enumerate(widths, start=1))
    assert all(w % 32 == 0 for w in widths)
    assert widths == sorted(widths)  # a longer prompt never gets less
    assert all(w <= max(256, 1.25 * n) for n, w in enumerate(widths, start=1))
    # Few compiled prefills: 8 widths up to 256, then 4 per doubling.
    assert len(set(widths)) == 8 + 4 * 4
    assert [prompt_bucket(n) for n in (1, 32, 33, 256, 257, 320, 321, 569, 1500)] == [
        32, 32, 64, 256, 320, 320, 384, 640, 1536]


def _ids(n, seed):
    return " ".join(map(str, np.random.default_rng(seed).integers(0, 4, n)))


@pytest.mark.parametrize("drafter", [None, "ngram"])
def test_a_prompt_runs_the_same_alone_and_beside_a_longer_one(drafter):
    """Its width, its tokens and its counters do not depend on the other prompts of the run;
    the run's longest only sizes the loop's history."""
    from specjax.drafters import NgramDrafter

    short, long = _ids(5, 0), _ids(300, 1)
    kw = dict(max_new_tokens=6, seed=3, batch_size=1, progress=False, compiler_options=FAST,
              sampling=specjax.Sampling(temperature=1.0))
    if drafter:
        kw |= dict(drafter=NgramDrafter(K=1, L=3, max_ngram=2), verifier="llamacpp_exact_match")
    alone = specjax.generate("toy-target", [short], **kw)
    both = specjax.generate("toy-target", [short, long], **kw)
    assert alone.per_prompt[0]["prompt_width"] == both.per_prompt[0]["prompt_width"] == 32
    assert both.per_prompt[1]["prompt_width"] == prompt_bucket(300) == 320
    assert alone.tokens[0] == both.tokens[0]
    for key in ("target_calls", "new_tokens", "accepted"):
        assert alone.per_prompt[0][key] == both.per_prompt[0][key]


def test_prefill_is_timed_apart_and_the_decode_rate_leaves_it_out():
    res = specjax.generate("toy-target", [_ids(40, 2), _ids(9, 3)], max_new_tokens=8,
                           batch_size=1, progress=False, compiler_options=FAST)
    s = res.summary
    assert all(0 < p["prefill_s"] < p["wall_time_s"] for p in res.per_prompt)
    assert s["prefill_s"] == pytest.approx(sum(p["prefill_s"] for p in res.per_prompt))
    assert s["decode_s"] == pytest.approx(s["wall_time_s"] - s["prefill_s"])
    assert s["decode_tokens_per_s"] == pytest.approx(s["new_tokens"] / s["decode_s"])
    assert s["decode_tokens_per_s"] > s["tokens_per_s"]


def test_compare_interleaves_the_modes_and_matches_separate_runs():
    """``compare`` decodes exactly what ``generate`` does in each mode (same prompts, seed and
    programs), times every prompt in every repeat, and brackets its speed-up."""
    from specjax.drafters import NgramDrafter

    prompts = [_ids(12, 4), _ids(40, 5), _ids(7, 6)]
    kw = dict(max_new_tokens=8, seed=1, batch_size=1, progress=False, compiler_options=FAST,
              sampling=specjax.Sampling(temperature=1.0))
    spec_kw = dict(drafter=NgramDrafter(K=1, L=3, max_ngram=2), verifier="llamacpp_exact_match")
    cmp = specjax.compare("toy-target", prompts, repeats=3, **kw, **spec_kw)
    assert cmp.speculative.tokens == specjax.generate("toy-target", prompts, **kw,
                                                      **spec_kw).tokens
    assert cmp.autoregressive.tokens == specjax.generate("toy-target", prompts, **kw).tokens
    for mode in ("speculative", "autoregressive"):
        assert cmp.seconds[mode].shape == (3, 3) and (cmp.seconds[mode] > 0).all()
        assert (cmp.prefill_seconds[mode] < cmp.seconds[mode]).all()
    point, lo, hi = cmp.speedup
    assert lo <= point <= hi
    rates = {m: sum(p["new_tokens"] for p in getattr(cmp, m).per_prompt)
             / cmp.seconds[m].mean(axis=1).sum() for m in cmp.seconds}
    assert point == pytest.approx(rates["speculative"] / rates["autoregressive"])
    assert 0 < cmp.sign_flip_p <= 1
    with pytest.raises(ValueError, match="repeats must be an integer >= 1"):
        specjax.compare("toy-target", prompts, repeats=0, **kw, **spec_kw)
