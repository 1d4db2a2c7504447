"""End-to-end losslessness of the decode engine: drafter × verifier × sampling.

Greedy (temperature 0): every lossless verifier must reproduce autoregressive greedy decoding
token for token, for every drafter. Sampled: the empirical law of the first N generated tokens
over 50,000 seeds must match the target's exact law (float64 enumeration of the tabular toy LM
after temperature/top-k, computed here with NumPy, independently of ``specjax.models.sampling``),
with a chi-square test at false-positive rate 1e-6; a drafter that reports a q other than the one it
sampled from must FAIL the same test.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter

import numpy as np
import pytest
from exactness import (
    DEC_PROMPTS,
    FAST,
    FPR,
    GREEDY,
    N_NEW,
    PROMPT,
    SEEDS,
    exact_first_tokens,
    np_law,
    uncached_greedy,
)

from algorithms.exact.monte_carlo import chi_square
from algorithms.verifiers import get_verifier, list_verifiers
from specjax import generate
from specjax.drafters import EarlyExitDrafter, GreedyDrafter, ModelDrafter, NgramDrafter
from specjax.models.sampling import Sampling
from specjax.models.toy import load_toy

MULTI = ("specinfer", "spectr", "spectr_gbv", "multipath_block", "traversal")


def lossless_verifiers() -> list[str]:
    return [n for n in list_verifiers() if get_verifier(n).lossless]


@dataclasses.dataclass(frozen=True, kw_only=True)
class LyingDrafter(ModelDrafter):
    """Mutation: samples from q but reports q flattened halfway to uniform."""

    def propose(self, model, key, state, history, n, *, sampling, vocab_size, scratch):
        drafts, q, state = super().propose(model, key, state, history, n, sampling=sampling,
                                           vocab_size=vocab_size, scratch=scratch)
        return drafts, 0.5 * q + 0.5 / vocab_size, state


def engine_fit(verifier, drafter, temperature, top_k=0, seed=0):
    target, draft = load_toy("toy-target"), load_toy("toy-draft")
    res = generate(target, [PROMPT] * SEEDS, draft=draft, drafter=drafter, verifier=verifier,
                   sampling=Sampling(temperature=temperature, top_k=top_k),
                   max_new_tokens=N_NEW, seed=seed, progress=False, compiler_options=FAST)
    counts = Counter(tuple(t) for t in res.tokens)
    return chi_square(counts, exact_first_tokens(target, PROMPT, N_NEW, temperature, top_k))


SAMPLED_DEFAULT = [  # (verifier, drafter, temperature, top_k, top_p): every lossless verifier
    ("token", ModelDrafter(K=1, L=3), 1.0, 0, 1.0),
    ("block", ModelDrafter(K=1, L=2), 1.0, 0, 0.8),  # the top-p path
    ("greedy_block", ModelDrafter(K=1, L=2), 0.7, 2, 1.0),  # the top-k path
    ("traversal", ModelDrafter(K=3, L=2), 1.0, 0, 1.0),
    ("specinfer", EarlyExitDrafter(K=3, L=3, num_layers=1), 0.7, 0, 1.0),
    ("spectr", ModelDrafter(K=3, L=2), 1.0, 0, 1.0),
    ("multipath_block", EarlyExitDrafter(K=3, L=2, num_layers=1), 1.0, 0, 1.0),
    ("importance", ModelDrafter(K=3, L=2), 1.0, 0, 1.0),
    ("greedy_draft", GreedyDrafter(K=3, L=2), 0.7, 0, 1.0),  # Hu et al.'s pair, as registered
    ("ordered_rrs", ModelDrafter(K=3, L=2), 1.0, 0, 1.0),
    # engine rules (docs/verifiers/engine_rules.md) that are lossless on the engine's drafts
    ("vllm_prob", ModelDrafter(K=1, L=2), 1.0, 0, 1.0),
    ("llamacpp_exact_match", ModelDrafter(K=1, L=3), 0.7, 0, 1.0),
    ("dspark_truncation", ModelDrafter(K=1, L=3), 1.0, 0, 1.0),
    ("sglang_topk_target_only", ModelDrafter(K=3, L=2), 1.0, 0, 1.0),
]
# Prompt lookup at T > 0 for every multi-draft verifier that takes lookup drafts: a repetitive
# prompt so that K = 3 finds distinct continuations (and duplicates once it runs out).
LOOKUP_PROMPT = [1, 2, 3, 1, 2, 0, 1, 2]
SAMPLED_LOOKUP = [n for n in MULTI if n in ("specinfer", "spectr", "traversal", "multipath_block")]


def engine_fit_top_p(verifier, drafter, temperature, top_p, prompt=PROMPT, seed=0):
    """engine_fit with nucleus sampling; the exact law applies top-p in float64 NumPy."""
    target, draft = load_toy("toy-target"), load_toy("toy-draft")
    res = generate(target, [prompt] * SEEDS, draft=draft, drafter=drafter, verifier=verifier,
                   sampling=Sampling(temperature=temperature, top_p=top_p),
                   max_new_tokens=N_NEW, seed=seed, progress=False, compiler_options=FAST)
    counts = Counter(tuple(t) for t in res.tokens)
    return chi_square(counts, target.sequence_law(prompt, N_NEW,
                                                  lambda p: np_top_p(p, temperature, top_p)))


def np_top_p(p: np.ndarray, temperature: float, top_p: float) -> np.ndarray:
    """Keep the most likely tokens until their mass reaches top_p (the token that crosses it is
    kept), after temperature; ties in probability kept in id order."""
    w = np_law(p, temperature, 0)
    order = sorted(range(len(w)), key=lambda i: (-w[i], i))
    keep, mass = np.zeros(len(w), bool), 0.0
    for i in order:
        if mass >= top_p:
            break
        keep[i] = True
        mass += w[i]
    w = np.where(keep, w, 0.0)
    return w / w.sum()


def test_every_lossless_verifier_is_sampled_by_default():
    assert set(lossless_verifiers()) <= {case[0] for case in SAMPLED_DEFAULT}


@pytest.mark.parametrize("name, drafter, temperature, top_k, top_p", SAMPLED_DEFAULT)
def test_sampled_law_matches_target(name, drafter, temperature, top_k, top_p):
    if top_p < 1.0:
        fit = engine_fit_top_p(name, drafter, temperature, top_p)
    else:
        fit = engine_fit(name, drafter, temperature, top_k)
    assert fit.passes(FPR), fit


def test_drafter_lying_about_q_fails():
    fit = engine_fit("token", LyingDrafter(K=1, L=2), 1.0)
    assert not fit.passes(FPR), fit


def test_top_p_law_is_checked_against_nucleus_not_the_full_law():
    """The top-p test can fail: the same run compared with the untruncated law does."""
    target, draft = load_toy("toy-target"), load_toy("toy-draft")
    res = generate(target, [PROMPT] * SEEDS, draft=draft, drafter=ModelDrafter(K=1, L=2),
                   verifier="block", sampling=Sampling(temperature=1.0, top_p=0.8),
                   max_new_tokens=N_NEW, progress=False, compiler_options=FAST)
    counts = Counter(tuple(t) for t in res.tokens)
    assert not chi_square(counts, exact_first_tokens(target, PROMPT, N_NEW, 1.0, 0)).passes(FPR)


@pytest.mark.parametrize("name", SAMPLED_LOOKUP)
def test_sampled_lookup_drafts_match_target(name):
    fit = engine_fit_top_p(name, NgramDrafter(K=3, L=2, max_ngram=2), 1.0, 1.0,
                           prompt=LOOKUP_PROMPT)
    assert fit.passes(FPR), fit


def test_sampled_lookup_drafts_catch_kseq_on_lookup():
    """SpecTr's pre-fix rule (K-SEQ with the lead draft's q on distinct lookup drafts) must fail
    the same end-to-end test (it measured chi-square p ~ 3e-102)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[2] / "algorithms"))
    from mutants import KSEQEverywhere

    fit = engine_fit_top_p(KSEQEverywhere(), NgramDrafter(K=3, L=2, max_ngram=2), 1.0, 1.0,
                           prompt=LOOKUP_PROMPT)
    assert not fit.passes(FPR), fit


def _grid():
    for name in lossless_verifiers():
        Ks = (1, 3) if name in MULTI else (1,)
        for K, L, T in itertools.product(Ks, (2, 3), (0.7, 1.0)):
            yield name, K, L, T, 0
        if name not in MULTI:
            yield name, 1, 2, 1.0, 2


@pytest.mark.slow
@pytest.mark.parametrize("name, K, L, temperature, top_k", list(_grid()))
def test_sampled_law_full_grid(name, K, L, temperature, top_k):
    fit = engine_fit(name, ModelDrafter(K=K, L=L), temperature, top_k)
    assert fit.passes(FPR), fit


# --- greedy: token-for-token equality with autoregressive greedy decoding -------------------------

TOY_PROMPTS = [[1, 2, 3, 1, 2, 3, 1], [0], [3, 1, 2, 0, 0, 2]]


def toy_greedy_reference(model, prompts, n):
    out = []
    for p in prompts:
        ids = list(p)
        for _ in range(n):
            ids.append(int(np.argmax(model.law(ids))))
        out.append(ids[len(p):])
    return out


def make_drafter(kind: str, K: int, L: int):
    if kind == "model":
        return ModelDrafter(K=K, L=L)
    if kind == "ngram":
        return NgramDrafter(K=K, L=L, max_ngram=2)
    return EarlyExitDrafter(K=K, L=L, num_layers=1)


def greedy_case(name: str, kind: str, target, draft, prompts, reference, n_new):
    K = 2 if name in MULTI else 1
    res = generate(target, prompts, draft=draft, drafter=make_drafter(kind, K, 3), verifier=name,
                   sampling=GREEDY, max_new_tokens=n_new, progress=False,
                   compiler_options=FAST)
    assert res.tokens == reference
    # Block efficiency = emitted tokens / target calls, so it must agree with the per-prompt
    # counters (not just be >= 1, which every run satisfies).
    calls = sum(m["target_calls"] for m in res.per_prompt)
    assert res.summary["block_efficiency"] == pytest.approx(
        sum(len(t) for t in res.tokens) / calls)


KINDS = ("model", "ngram", "early_exit")


def _rotation():
    return [(name, KINDS[i % 3]) for i, name in enumerate(lossless_verifiers())]


@pytest.mark.parametrize("name, kind", _rotation())
def test_greedy_equals_autoregressive_toy(name, kind):
    target, draft = load_toy("toy-target-v8"), load_toy("toy-draft-v8")
    ref = toy_greedy_reference(target, TOY_PROMPTS, 10)
    greedy_case(name, kind, target, draft, TOY_PROMPTS, ref, 10)


def test_greedy_drafting_equals_autoregressive_toy():
    """Hu et al.'s greedy drafter (K - 1 fixed top tokens) with its verifier at T = 0."""
    target, draft = load_toy("toy-target-v8"), load_toy("toy-draft-v8")
    res = generate(target, TOY_PROMPTS, draft=draft, drafter=GreedyDrafter(K=3, L=3),
                   verifier="greedy_draft", sampling=GREEDY, max_new_tokens=10, progress=False,
                   compiler_options=FAST)
    assert res.tokens == toy_greedy_reference(target, TOY_PROMPTS, 10)


# Prompt lookup gives K DISTINCT one-hot drafts that the greedy target often rejects at once: the
# zero-probability corner (p(x) = 0 for a drafted x) that i.i.d. model drafts at T=0 never reach.
LOOKUP_PROMPTS = [[1, 2, 3, 1, 2, 4, 1, 2, 5, 1, 2], [6, 7, 6, 0, 6, 5, 6], [3, 1, 2, 0, 0, 2]]


@pytest.mark.parametrize("name", [n for n in MULTI if n in lossless_verifiers()])
def test_greedy_multi_draft_distinct_lookup_drafts(name):
    target = load_toy("toy-target-v8")
    res = generate(target, LOOKUP_PROMPTS, drafter=NgramDrafter(K=3, L=3, max_ngram=2),
                   verifier=name, sampling=GREEDY, max_new_tokens=10, progress=False,
                   compiler_options=FAST)
    assert res.tokens == toy_greedy_reference(target, LOOKUP_PROMPTS, 10)


@pytest.mark.slow
@pytest.mark.parametrize("name, kind", list(itertools.product(lossless_verifiers(), KINDS)))
def test_greedy_equals_autoregressive_toy_all(name, kind):
    target, draft = load_toy("toy-target-v8"), load_toy("toy-draft-v8")
    greedy_case(name, kind, target, draft, TOY_PROMPTS,
                toy_greedy_reference(target, TOY_PROMPTS, 10), 10)


# On tiny random decoders (same code path as the real models).
def tiny_decoders():
    from specjax.models.config import tiny_config
    from specjax.models.decoder import Decoder
    from specjax.models.toy import ToyLoaded

    cfg = tiny_config("llama")
    return (ToyLoaded(name="tiny-target", model=Decoder.random(cfg, seed=0)),
            ToyLoaded(name="tiny-draft", model=Decoder.random(cfg, seed=1)))


@pytest.fixture(scope="module")
def decoders():
    target, draft = tiny_decoders()
    return target, draft, uncached_greedy(target.model, DEC_PROMPTS, 8)


@pytest.mark.parametrize("name, kind", [("traversal", "early_exit"), ("block", "ngram")])
def test_greedy_equals_autoregressive_decoder(decoders, name, kind):
    target, draft, ref = decoders
    greedy_case(name, kind, target, draft, DEC_PROMPTS, ref, 8)


def test_early_exit_with_all_layers_accepts_every_greedy_draft(decoders):
    """The full-depth 'early exit' IS the target: at T=0 every draft token must be accepted, so
    each target call emits L + 1 tokens (fewer only at the max_new_tokens cut)."""
    target, _, ref = decoders
    L, n_new = 3, 8
    depth = target.model.config.num_layers
    res = generate(target, DEC_PROMPTS, drafter=EarlyExitDrafter(K=1, L=L, num_layers=depth),
                   verifier="token", sampling=GREEDY, max_new_tokens=n_new, progress=False,
                   compiler_options=FAST)
    assert res.tokens == ref
    assert all(p["target_calls"] == -(-n_new // (L + 1)) for p in res.per_prompt)
    assert res.summary["per_position_acceptance"] == [1.0] * L


@pytest.mark.slow
@pytest.mark.parametrize("name, kind", list(itertools.product(lossless_verifiers(), KINDS)))
def test_greedy_equals_autoregressive_decoder_all(decoders, name, kind):
    target, draft, ref = decoders
    greedy_case(name, kind, target, draft, DEC_PROMPTS, ref, 8)


# --- real model: SmolLM2-135M self-drafting (slow: ~10 CPU-minutes) ----------------------------


@pytest.mark.slow
def test_greedy_lossless_on_smollm2_self_drafting():
    from specjax import load_model
    from specjax.prompts import load_prompts

    model = load_model("smollm2-135m-instruct")
    prompts = [p.text for p in load_prompts("humaneval", n=8)]
    kw = dict(sampling=GREEDY, max_new_tokens=24, chat=True, progress=False)
    ar = generate(model, prompts, **kw)
    assert sum(len(t) for t in ar.tokens) > 8 * 12
    for drafter, verifier in [(NgramDrafter(K=1, L=4), "token"),
                              (EarlyExitDrafter(K=1, L=4, num_layers=15), "block"),
                              (NgramDrafter(K=3, L=4), "specinfer")]:
        res = generate(model, prompts, drafter=drafter, verifier=verifier, **kw)
        assert res.tokens == ar.tokens, (drafter, verifier)
