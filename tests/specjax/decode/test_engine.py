"""Decode-loop behaviour: determinism, EOS and max_new_tokens, counters/metrics, validation.

References are independent of the engine: greedy continuations come from the toy LM's float64
law (argmax chain), not from another engine run.
"""

from __future__ import annotations

import numpy as np
import pytest

from specjax import generate
from specjax.drafters import ModelDrafter, NgramDrafter
from specjax.eval.metrics import speedup
from specjax.models.sampling import Sampling
from specjax.models.toy import load_toy

FAST = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}
PROMPTS = [[1, 2, 3, 1, 2, 3, 1], [0], [3, 1, 2, 0, 0, 2], [5, 6]]
GREEDY = Sampling(temperature=0)


def greedy_reference(model, prompts, n, eos=()):
    out = []
    for p in prompts:
        ids = list(p)
        while len(ids) - len(p) < n and not (len(ids) > len(p) and ids[-1] in eos):
            ids.append(int(np.argmax(model.law(ids))))
        out.append(ids[len(p):])
    return out


def test_autoregressive_greedy_and_counters():
    target = load_toy("toy-target-v8")
    res = generate(target, PROMPTS, sampling=GREEDY, max_new_tokens=9, compiler_options=FAST,
                   progress=False)
    assert res.tokens == greedy_reference(target, PROMPTS, 9)
    assert res.texts[1] == " ".join(map(str, res.tokens[1]))
    assert all(p["target_calls"] == p["new_tokens"] == 9 for p in res.per_prompt)
    s = res.summary
    assert s["block_efficiency"] == 1.0 and s["new_tokens"] == 36 and s["num_prompts"] == 4
    assert s["compile_time_s"] > 0 and s["wall_time_s"] > 0


def test_seeds_reproduce_and_batching_does_not_matter():
    target = load_toy("toy-target-v8")
    kw = dict(sampling=Sampling(temperature=1.0), max_new_tokens=12, compiler_options=FAST,
              progress=False)
    a = generate(target, PROMPTS, seed=3, **kw)
    b = generate(target, PROMPTS, seed=3, **kw)
    c = generate(target, PROMPTS, seed=4, **kw)
    assert b.summary["compile_time_s"] == 0.0  # compiled once per shape, reused
    assert a.tokens == b.tokens
    assert a.tokens != c.tokens
    d = generate(target, PROMPTS, seed=3, batch_size=3, **kw)  # 2 batches, last one padded
    assert d.tokens == a.tokens


@pytest.mark.parametrize("model", ["toy", "tiny-decoder"])
def test_shared_prompt_prefill_gives_the_per_row_tokens(model):
    """One broadcast prefill must hand every row the state B separate prefills would: same
    tokens for the same keys, with a drafter (its state is broadcast too) and padding rows."""
    from specjax.drafters import EarlyExitDrafter
    from specjax.models.config import tiny_config
    from specjax.models.decoder import Decoder
    from specjax.models.toy import ToyLoaded

    if model == "toy":
        target, kw = load_toy("toy-target"), dict(draft=load_toy("toy-draft"),
                                                  drafter=ModelDrafter(K=2, L=2))
        prompt = [1, 2, 3, 1]
    else:
        target = ToyLoaded(name="tiny", model=Decoder.random(tiny_config("llama"), seed=0))
        kw, prompt = dict(drafter=EarlyExitDrafter(K=2, L=2, num_layers=1)), [5, 9, 11, 5, 9]
    kw |= dict(verifier="specinfer", sampling=Sampling(temperature=1.0), max_new_tokens=5,
               seed=7, batch_size=3, compiler_options=FAST, progress=False)
    per_row = generate(target, [prompt] * 8, **kw)
    shared = generate(target, [prompt] * 8, shared_prompt=True, **kw)
    assert shared.tokens == per_row.tokens
    assert len(set(map(tuple, shared.tokens))) > 1  # the rows really drew different samples
    with pytest.raises(ValueError, match="shared_prompt: .*prompt 1 differs"):
        generate(target, [prompt, prompt[:-1]], shared_prompt=True, **kw)


@pytest.mark.parametrize("drafter", [None, ModelDrafter(K=1, L=3)])
def test_eos_stops_and_max_new_tokens_is_respected(drafter):
    eos = 4
    target = load_toy("toy-target-v8", eos_ids=(eos,))
    draft = load_toy("toy-draft-v8")
    ref = greedy_reference(target, PROMPTS, 7, eos=(eos,))
    assert any(r[-1] == eos and len(r) < 7 for r in ref)  # the case is exercised
    assert any(eos not in r for r in ref)
    res = generate(target, PROMPTS, draft=draft, drafter=drafter, sampling=GREEDY,
                   max_new_tokens=7, compiler_options=FAST, progress=False)
    assert res.tokens == ref
    for toks, text, p in zip(res.tokens, res.texts, res.per_prompt, strict=True):
        assert p["new_tokens"] == len(toks) <= 7
        assert p["stop"] == ("eos" if toks[-1] == eos else "length")
        assert text == " ".join(map(str, toks[:-1] if toks[-1] == eos else toks))


def test_speculative_metrics_are_consistent():
    target, draft = load_toy("toy-target-v8"), load_toy("toy-draft-v8")
    L = 3
    kw = dict(sampling=Sampling(temperature=1.0), max_new_tokens=16, compiler_options=FAST,
              progress=False)
    spec = generate(target, PROMPTS, draft=draft, drafter=ModelDrafter(K=1, L=L),
                    verifier="token", **kw)
    s = spec.summary
    assert all(len(t) == 16 for t in spec.tokens)
    assert s["new_tokens"] == sum(len(t) for t in spec.tokens)
    assert s["drafter_calls"] == L * s["target_calls"]
    assert s["target_calls"] < s["new_tokens"]  # some drafts were accepted
    assert s["block_efficiency"] == pytest.approx(s["new_tokens"] / s["target_calls"])
    assert s["acceptance_rate"] == pytest.approx(s["mean_accepted"] / L)
    app = s["per_position_acceptance"]
    assert len(app) == L and all(a >= b for a, b in zip(app, app[1:], strict=False))
    assert s["mean_accepted"] == pytest.approx(sum(app))  # E[tau] = sum_i P(tau > i)
    ar = generate(target, PROMPTS, **kw)
    assert speedup(spec, ar) == pytest.approx(s["tokens_per_s"] / ar.summary["tokens_per_s"])
    with pytest.raises(ValueError, match="num_prompts"):
        speedup(spec, generate(target, PROMPTS[:2], **kw))


def test_ngram_on_a_repetitive_prompt_accepts_drafts():
    target = load_toy("toy-target-v8")
    res = generate(target, PROMPTS, drafter=NgramDrafter(K=1, L=3), sampling=GREEDY,
                   max_new_tokens=12, compiler_options=FAST, progress=False)
    assert res.tokens == greedy_reference(target, PROMPTS, 12)
    assert res.summary["drafter_calls"] == 0
    assert res.summary["block_efficiency"] > 1.0  # greedy toy outputs cycle: lookup pays off


def test_validation_errors_name_the_field():
    target, draft = load_toy("toy-target"), load_toy("toy-draft")
    with pytest.raises(ValueError, match="max_drafts"):
        generate(target, [[1]], draft=draft, drafter=ModelDrafter(K=2, L=2), verifier="token")
    with pytest.raises(ValueError, match="verifier"):
        generate(target, [[1]], draft=draft, drafter=ModelDrafter(K=2, L=2))
    with pytest.raises(ValueError, match="verifier"):
        generate(target, [[1]], draft=draft, drafter=ModelDrafter(K=1, L=2), verifier="nope")
    with pytest.raises(ValueError, match="vocab_size"):
        generate(target, [[1]], draft="toy-draft-v8", drafter=ModelDrafter(K=1, L=2))
    with pytest.raises(ValueError, match="draft"):
        generate(target, [[1]], drafter=ModelDrafter(K=1, L=2))
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate(target, [[1]], max_new_tokens=0)
    with pytest.raises(ValueError, match="prompts"):
        generate(target, [[1], []])
    with pytest.raises(ValueError, match="prompts"):
        generate(target, [[1, 9]])
    with pytest.raises(ValueError, match="batch_size"):
        generate(target, [[1]], batch_size=0)
