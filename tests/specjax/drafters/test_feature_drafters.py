"""EAGLE and Medusa drafters through the engine: greedy SD == AR, sampled losslessness against
the exact law of a tiny decoder (V = 8, enumerated in float64 from uncached forwards), a mutant
that reports a flattened q and must fail, and the EAGLE cache sync against an uncached
reference (the reported q is the head's law on the true target features)."""

from __future__ import annotations

import dataclasses
from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from exactness import uncached_greedy  # the uncached greedy reference

from algorithms.exact.monte_carlo import chi_square
from algorithms.verifiers.base import Verdict
from specjax import generate
from specjax.drafters import EagleDrafter, MedusaDrafter
from specjax.models.config import tiny_config
from specjax.models.decoder import Decoder
from specjax.models.sampling import Sampling
from specjax.models.toy import ToyLoaded

FAST = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}
FPR = 1e-6
SEEDS = 10_000  # the flattened-q mutant scores chi-square ~6,000 on 184 df at this size
N_NEW = 3
PROMPT = [1, 2, 3]
GREEDY = Sampling(temperature=0)
DEC_PROMPTS = [[5, 9, 11, 5, 9, 11, 5, 9], [7], [3, 3, 2, 1, 0, 1, 2, 60, 61, 3, 3, 2]]


def tiny(vocab: int | None = None, seed: int = 0) -> ToyLoaded:
    cfg = tiny_config("llama") if vocab is None else tiny_config("llama", vocab_size=vocab)
    return ToyLoaded(name="tiny-llama", model=Decoder.random(cfg, seed=seed))


@pytest.fixture(scope="module")
def greedy_ref():
    target = tiny()
    return target, uncached_greedy(target.model, DEC_PROMPTS, 8)


@pytest.mark.parametrize("drafter, verifier", [
    (EagleDrafter(K=1, L=3, checkpoint="random"), "token"),
    pytest.param(EagleDrafter(K=2, L=3, checkpoint="random:1"), "traversal",
                 marks=pytest.mark.slow),
    (MedusaDrafter(K=2, L=3, checkpoint="random"), "specinfer"),
])
def test_greedy_equals_autoregressive(greedy_ref, drafter, verifier):
    target, ref = greedy_ref
    res = generate(target, DEC_PROMPTS, drafter=drafter, verifier=verifier, sampling=GREEDY,
                   max_new_tokens=8, progress=False, compiler_options=FAST)
    assert res.tokens == ref
    calls = sum(m["target_calls"] for m in res.per_prompt)
    assert res.summary["block_efficiency"] == pytest.approx(
        sum(len(t) for t in res.tokens) / calls)


# --- sampled: the law of the first N tokens vs the exact law ---------------------------------


def exact_law(model: Decoder, prompt, n: int) -> dict[tuple, float]:
    """Float64 law of the first n generated tokens, from uncached forwards (T = 1)."""
    logits = jax.jit(model.logits)
    V = model.vocab_size
    law = {(): 1.0}
    for _ in range(n):
        nxt = {}
        for seq, pr in law.items():
            ids = list(prompt) + list(seq)
            row = np.asarray(logits(jnp.asarray(ids, jnp.int32)), np.float64)[-1]
            p = np.exp(row - row.max())
            p /= p.sum()
            nxt.update({seq + (x,): pr * p[x] for x in range(V)})
        law = nxt
    return law


@pytest.fixture(scope="module")
def small_vocab():
    # A random-weight head on a V = 8 tiny decoder: its laws overlap the target's partly, so
    # drafts are accepted and rejected often (both branches of every verifier run).
    target = tiny(vocab=8)
    return target, exact_law(target.model, PROMPT, N_NEW)


@dataclasses.dataclass(frozen=True, kw_only=True)
class FlatEagle(EagleDrafter):
    """Mutation: samples from q but reports q flattened halfway to uniform."""

    def propose(self, model, key, state, history, n, **kw):
        drafts, q, state = super().propose(model, key, state, history, n, **kw)
        return drafts, 0.5 * q + 0.5 / kw["vocab_size"], state


@dataclasses.dataclass(frozen=True, kw_only=True)
class FlatMedusa(MedusaDrafter):
    def propose(self, model, key, state, history, n, **kw):
        drafts, q, state = super().propose(model, key, state, history, n, **kw)
        return drafts, 0.5 * q + 0.5 / kw["vocab_size"], state


def fit(target, law, drafter, verifier):
    res = generate(target, [PROMPT] * SEEDS, drafter=drafter, verifier=verifier,
                   sampling=Sampling(temperature=1.0), max_new_tokens=N_NEW, seed=0,
                   progress=False, compiler_options=FAST)
    return chi_square(Counter(tuple(t) for t in res.tokens), law), res.summary


@pytest.mark.parametrize("drafter, verifier", [
    (EagleDrafter(K=1, L=2, checkpoint="random:3"), "token"),
    pytest.param(MedusaDrafter(K=2, L=2, checkpoint="random:3"), "specinfer",
                 marks=pytest.mark.slow),
    # a draft vocabulary of 5 of the 8 tokens: q is 0 on the rest, the verifier must cope
    pytest.param(EagleDrafter(K=1, L=2, checkpoint="random:3", draft_vocab=5), "block",
                 marks=pytest.mark.slow),
])
def test_sampled_law_matches_target(small_vocab, drafter, verifier):
    target, law = small_vocab
    result, summary = fit(target, law, drafter, verifier)
    assert summary["acceptance_rate"] > 0.1  # drafts are really accepted, not all rejected
    assert result.passes(FPR), result


@pytest.mark.parametrize("drafter, verifier", [
    (FlatEagle(K=1, L=2, checkpoint="random:3"), "token"),
    pytest.param(FlatMedusa(K=1, L=2, checkpoint="random:3"), "token",
                 marks=pytest.mark.slow),
])
def test_flattened_q_fails(small_vocab, drafter, verifier):
    target, law = small_vocab
    result, _ = fit(target, law, drafter, verifier)
    assert not result.passes(FPR), result


# --- EAGLE cache sync: the reported q is the head's law on the true features -----------------


def test_eagle_q_matches_uncached_head_through_accepts_and_rejects():
    """Propose / update with the target's true features over several steps (τ = 0, partial,
    full); every reported q row must equal the uncached head's law on the pair sequence
    (target features for committed pairs, the head's own features along the draft)."""
    from flax import nnx

    target = tiny(seed=0).model
    drafter = EagleDrafter(K=2, L=3, checkpoint="random:2")
    module = drafter.module(ToyLoaded(name="tiny-llama", model=target), None)
    sampling = Sampling(temperature=1.0)
    V, L, K = target.vocab_size, drafter.L, drafter.K
    P, T, W = 8, 64, 32  # prompt pad, history length, padded width of the uncached reference
    scratch = drafter.scratch()

    @nnx.jit
    def features(target, ids):  # [W] padded ids -> target features (causal: padding is inert)
        return target.features_of(target.hidden(ids))

    @nnx.jit
    def head_law(module, emb, feats, last):  # the head's law after pair ``last``
        f_hat = module.head.sequence(emb, feats)
        return sampling(module.readout(f_hat[last][None]))[0], f_hat[last]

    def pad(ids):
        return jnp.asarray(list(ids) + [0] * (W - len(ids)), jnp.int32)

    def reference_laws(ids, draft):
        """Laws of draft positions 0..L-1 for one branch, uncached."""
        n = len(ids)
        f = features(target, pad(ids))
        feats = jnp.concatenate([jnp.zeros_like(f[:1]), f[:-1]])  # pair j = (f_{j-1}, x_j)
        toks = pad(list(ids) + list(draft))
        laws = []
        for i in range(L):
            law, f_hat = head_law(module, module.readout.embed_tokens(toks), feats, n - 1 + i)
            laws.append(np.asarray(law))
            feats = feats.at[n + i].set(f_hat)
        return np.stack(laws)

    propose = nnx.jit(lambda m, k, st, h, n: drafter.propose(
        m, k, st, h, n, sampling=sampling, vocab_size=V, scratch=scratch))
    update = nnx.jit(lambda m, st, d, v, n, f: drafter.update(m, st, d, v, n, scratch=scratch,
                                                              features=f))
    prompt = [5, 9, 11, 5, 9]
    padded = jnp.asarray(prompt + [0] * (P - len(prompt)), jnp.int32)
    state = drafter.init_state(module, padded, jnp.int32(len(prompt)), max_len=T,
                               scratch=scratch, features=features(target, pad(prompt))[:P])
    ids = list(prompt)
    for step, tau in enumerate([0, 1, 3, 2]):
        n = len(ids)
        history = jnp.asarray(ids + [0] * (T - n), jnp.int32)
        drafts, q, state = propose(module, jax.random.key(step), state, history, jnp.int32(n))
        drafts = np.asarray(drafts)
        for k in range(K):
            np.testing.assert_allclose(np.asarray(q[k]), reference_laws(ids, drafts[k]),
                                       atol=2e-5)
        # Verdict: tau tokens of draft 1 accepted, then an extra token; the target's features
        # at the root and the draft's nodes, as the scoring pass gives them.
        d, extra = 1, (step * 7 + 3) % V
        emitted = [int(x) for x in drafts[d, :tau]] + [extra]
        tokens = jnp.asarray(emitted + [-1] * (L + 1 - len(emitted)), jnp.int32)
        verdict = Verdict(tokens, jnp.int32(tau + 1), jnp.int32(d))
        f = features(target, pad(ids + [int(x) for x in drafts[d]]))[n - 1:n + L]
        state = update(module, state, jnp.asarray(drafts), verdict, jnp.int32(n),
                       jnp.broadcast_to(f, (K, L + 1, f.shape[-1])))
        ids += emitted


@pytest.mark.slow
def test_eagle_on_an_untied_qwen2_target():
    """The Qwen2 path (separate lm_head, qkv bias): greedy SD == AR and a finite train step."""
    import copy
    import sys
    from pathlib import Path

    from specjax.training.loop import Trainer, load_target

    target = load_target("tiny-qwen2")
    ref = uncached_greedy(target.model, DEC_PROMPTS[:2], 6)
    res = generate(target, DEC_PROMPTS[:2], drafter=EagleDrafter(K=2, L=3, checkpoint="random"),
                   verifier="specinfer", sampling=GREEDY, max_new_tokens=6, progress=False,
                   compiler_options=FAST)
    assert res.tokens == ref
    sys.path.insert(0, str(Path(__file__).parents[1] / "training"))
    from test_training import cfg_for

    cfg = copy.deepcopy(cfg_for("eagle", **{"optim.warmup_steps": 0, "optim.lr": 1e-3}))
    trainer = Trainer(cfg, target)
    x = np.random.default_rng(0).integers(0, target.vocab_size, size=(2, 16)).astype(np.int32)
    losses = [float(trainer.train_step(x)["loss"]) for _ in range(6)]
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0], losses


def test_draft_vocab_restricts_the_readout_exactly():
    """FR-Spec subset: the restricted read-out equals the full one on the subset, -inf
    elsewhere, so the law drafted from is the full law renormalised on the subset."""
    target = tiny()
    module = EagleDrafter(K=1, L=2, checkpoint="random", draft_vocab=10).module(target, None)
    full = EagleDrafter(K=1, L=2, checkpoint="random").module(target, None)
    h = jax.random.normal(jax.random.key(0), (3, target.model.config.hidden_size))
    sub, ref = np.asarray(module.readout(h)), np.asarray(full.readout(h))
    ids = np.asarray(module.readout.subset[...])
    assert ids.tolist() == list(range(10))  # random heads: ids 0..n-1 (trained: most frequent)
    np.testing.assert_allclose(sub[:, ids], ref[:, ids], rtol=1e-5, atol=1e-5)
    assert np.all(np.isneginf(np.delete(sub, ids, axis=1)))
    with pytest.raises(ValueError, match="draft_vocab"):
        EagleDrafter(K=1, L=2, checkpoint="random", draft_vocab=0).module(target, None)
