"""Training data: streams from the machine, cached per target; self-distillation from the
target's own generations; held-out tails; batches depend only on (seed, step)."""

from __future__ import annotations

import numpy as np
import pytest

from specjax.training.data import build_corpus, distill_prompts, text_stream
from specjax.training.loop import load_target

DATA = {"sources": ["stdlib"], "max_tokens": 3000, "eval_fraction": 0.1, "distill_prompts": 0,
        "distill_new_tokens": 4, "distill_temperature": 0.7, "distill_batch": 3,
        "weights": {}}


@pytest.fixture(scope="module")
def target():
    return load_target("tiny-llama")


def test_stdlib_stream_is_capped_cached_and_in_vocabulary(target, tmp_path):
    a = text_stream(target, "stdlib", 3000, tmp_path)
    assert a.size == 3000 and a.max() < target.vocab_size
    files = list((tmp_path / "train_data" / "tiny-llama").glob("stdlib-*.npy"))
    assert len(files) == 1
    np.testing.assert_array_equal(text_stream(target, "stdlib", 3000, tmp_path), a)


def test_evaluation_suites_are_refused_as_training_text(target, tmp_path):
    with pytest.raises(ValueError, match="data.sources: unknown source 'humaneval'"):
        build_corpus(target, {**DATA, "sources": ["humaneval"]}, seq_len=16, seed=0,
                     cache_dir=tmp_path)


def test_distill_prompts_avoid_the_evaluation_suites():
    from specjax.prompts import load_prompts

    prompts = set(distill_prompts(300))
    assert len(prompts) == 300
    for suite in ("humaneval", "gsm8k", "mt_bench"):
        assert not prompts & {p.text for p in load_prompts(suite)}


def test_self_distillation_stream_holds_the_targets_generations(target, tmp_path):
    import specjax
    from specjax.models.sampling import Sampling
    from specjax.training.data import tokenizer_of

    data = {**DATA, "distill_prompts": 3, "distill_temperature": 0.0}
    corpus = build_corpus(target, data, seq_len=16, seed=0, cache_dir=tmp_path, progress=False)
    stream = np.concatenate([corpus.train["distill"], corpus.eval["distill"]])
    tok = tokenizer_of(target)
    prompts = [tok.encode(t) for t in distill_prompts(3)]
    ref = specjax.generate(target, prompts, sampling=Sampling(temperature=0), max_new_tokens=4,
                           progress=False)
    eos = target.eos_ids[0]
    expected = np.concatenate([[*p, *g, eos] for p, g in zip(prompts, ref.tokens, strict=True)])
    np.testing.assert_array_equal(stream, expected)
    counts = corpus.counts()
    assert counts["distill"]["train"] + counts["distill"]["eval"] == expected.size
    # held-out tail: eval windows never overlap the train part of a stream
    assert counts["stdlib"]["eval"] >= 17


def test_batches_depend_only_on_seed_and_step(target, tmp_path):
    corpus = build_corpus(target, DATA, seq_len=16, seed=0, cache_dir=tmp_path)
    a, b = corpus.train_batch(0, 7, 4, 16), corpus.train_batch(0, 7, 4, 16)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, corpus.train_batch(0, 8, 4, 16))
