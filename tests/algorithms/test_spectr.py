"""SpecTr (K-SEQ): exact losslessness, K=1 reduction, the numbers, bisection, Monte Carlo."""

import dataclasses
import functools
import itertools
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from algorithms.exact import (
    adversarial_pairs,
    example_pair,
    expected_tau,
    iteration_law,
    lossless_tv,
    random_pair,
    token_law,
    total_variation,
)
from algorithms.exact.monte_carlo import chi_square, sample_emitted
from algorithms.exact.spectr import kseq_acceptance, kseq_beta, kseq_gap, kseq_rho, spectr_law
from algorithms.verifiers import get_verifier
from algorithms.verifiers import spectr as spectr_module
from algorithms.verifiers.spectr import SpecTrVerifier
from algorithms.verifiers.spectr import kseq_rho as jax_kseq_rho

FPR = 1e-6  # false-positive rate of every Monte Carlo test
COMBOS = list(itertools.product((2, 3), (1, 2, 3), (1, 2)))  # (V, K, L)
CASES = [(*COMBOS[s % len(COMBOS)], s) for s in range(24)]  # every combination, two seeds
EXAMPLE_P, EXAMPLE_Q = np.array([1 / 3, 2 / 3]), np.array([2 / 3, 1 / 3])
# docs/verifiers/spectr.md K-SEQ table: K -> (rho*, beta, acceptance)
KSEQ_TABLE = {2: (1.434259, 0.565741, 0.811420), 3: (1.689729, 0.530604, 0.896576),
              4: (1.834110, 0.515075, 0.944703)}


@pytest.mark.parametrize("V, K, L, seed", CASES)
def test_exactly_lossless_on_random_pairs(V, K, L, seed):
    P, Q = random_pair(V, seed)
    assert lossless_tv(spectr_law, P, Q, L=L, K=K) <= 1e-12


@pytest.mark.parametrize("V, K", [(2, 3), (3, 2)])
@pytest.mark.parametrize("name", sorted(adversarial_pairs(3)))
def test_exactly_lossless_on_adversarial_pairs(name, V, K):
    P, Q = adversarial_pairs(V)[name]
    assert lossless_tv(spectr_law, P, Q, L=2, K=K) <= 1e-12


@pytest.mark.parametrize("V, L, seed", [(2, 1, 0), (3, 2, 1), (3, 3, 2), (2, 3, 3)])
def test_one_draft_is_token_verification(V, L, seed):
    P, Q = random_pair(V, seed)
    ours = iteration_law(spectr_law, P, Q, L=L, K=1)
    assert total_variation(ours, iteration_law(token_law, P, Q, L=L)) <= 1e-12


@pytest.mark.parametrize("K", sorted(KSEQ_TABLE))
def test_kseq_numbers_on_the_example(K):
    rho, beta, acceptance = KSEQ_TABLE[K]
    assert kseq_rho(EXAMPLE_P, EXAMPLE_Q, K) == pytest.approx(rho, abs=1e-6)
    assert kseq_beta(EXAMPLE_P, EXAMPLE_Q, kseq_rho(EXAMPLE_P, EXAMPLE_Q, K)) == pytest.approx(
        beta, abs=1e-6)
    assert kseq_acceptance(EXAMPLE_P, EXAMPLE_Q, K) == pytest.approx(acceptance, abs=1e-6)
    # The one-token SpecTr law has the same acceptance (L = 1: E[tau] = P(accept)).
    P, Q = example_pair()
    assert expected_tau(iteration_law(spectr_law, P, Q, L=1, K=K)) == pytest.approx(
        acceptance, abs=1e-6)


@pytest.mark.parametrize("K", sorted(KSEQ_TABLE))
def test_jax_search_finds_rho_star(K):
    """The Newton search lands within a few ulps of Brent's root, on the valid side, in
    float64; in float32 it still matches the K-SEQ table to 1e-6."""
    exact = kseq_rho(EXAMPLE_P, EXAMPLE_Q, K)
    with jax.enable_x64(True):
        rho = float(jax_kseq_rho(jnp.asarray(EXAMPLE_P), jnp.asarray(EXAMPLE_Q), K, 40))
    assert exact <= rho <= exact + 1e-13
    assert kseq_gap(EXAMPLE_P, EXAMPLE_Q, K, rho) <= 0
    rho32 = float(jax_kseq_rho(jnp.asarray(EXAMPLE_P, jnp.float32),
                               jnp.asarray(EXAMPLE_Q, jnp.float32), K, 40))
    assert rho32 == pytest.approx(KSEQ_TABLE[K][0], abs=1e-6)


@pytest.mark.parametrize("seed", range(5))
def test_jax_search_on_random_laws(seed):
    rng = np.random.default_rng(seed)
    p, q = rng.dirichlet(np.ones(6)), rng.dirichlet(np.ones(6))
    for K in (1, 2, 5, 8):
        exact = kseq_rho(p, q, K)
        with jax.enable_x64(True):
            rho = float(jax_kseq_rho(jnp.asarray(p), jnp.asarray(q), K, 60))
        assert rho == pytest.approx(exact, abs=1e-12)


def bisection_rho(p, q, k, steps=40):
    """The verifier's former search, kept as the reference: ``steps`` halvings of [1, k],
    keeping the valid upper end."""
    def step(_, bracket):
        lo, hi = bracket
        mid = 0.5 * (lo + hi)
        beta = jnp.minimum(q, p / mid).sum()
        valid = -jnp.expm1(k * jnp.log1p(-jnp.minimum(beta, 1.0))) - mid * beta <= 0.0
        return jnp.where(valid, lo, mid), jnp.where(valid, mid, hi)

    return jax.lax.fori_loop(0, steps, step, (jnp.float32(1), jnp.float32(k)))[1]


def qwen_sized_law(kind, seed, V=151_936):
    """float32 (p, q) at the Qwen2 vocabulary: random (acceptance far from 0 and 1), peaked
    (one token near all the mass at T = 0.4) and agree (peaked with p close to q, like the
    laws of code drafts the target accepts whole)."""
    k_q, k_p = jax.random.split(jax.random.key(seed))
    q_logits = 2.0 * jax.random.normal(k_q, (V,))
    noise = jax.random.normal(k_p, (V,))
    if kind == "random":
        return jax.nn.softmax(q_logits + noise), jax.nn.softmax(q_logits)
    spike, scale = {"peaked": (15.0, 2.0), "agree": (12.0, 0.3)}[kind]
    q_logits = q_logits.at[5].add(spike)
    return (jax.nn.softmax((q_logits + scale * noise) / 0.4),
            jax.nn.softmax(q_logits / 0.4))


@pytest.mark.parametrize("kind", ["random", "peaked", "agree"])
def test_search_matches_bisection_at_qwen_vocabulary(kind):
    """At V = 151,936 in float32 the search's rho is valid (computed gap <= 0, as the kernel
    checks it) and loses at most 1e-6 of acceptance against Brent's rho* on the float64 laws,
    as the 40-step bisection does. rho itself may differ from the bisection's: on peaked laws
    f is flat near its root, so float32 fixes rho only to ~1e-3 there, but acceptance is just
    as flat. A search cut to 3 passes (a mutant) loses > 1e-6 on every kind."""
    search = jax.jit(jax_kseq_rho, static_argnums=(2, 3))
    bisect = jax.jit(bisection_rho, static_argnums=(2,))
    gap = jax.jit(lambda p, q, rho, k: spectr_module.kseq_gap_slope(p, q, rho, k)[0])
    mutant_losses = []
    for seed, K in itertools.product(range(2), (2, 3, 8)):
        p, q = qwen_sized_law(kind, seed)
        p64, q64 = np.asarray(p, np.float64), np.asarray(q, np.float64)
        p64, q64 = p64 / p64.sum(), q64 / q64.sum()
        best = 1.0 - (1.0 - kseq_beta(p64, q64, kseq_rho(p64, q64, K))) ** K

        def loss(rho, p64=p64, q64=q64, K=K, best=best):
            return best - (1.0 - (1.0 - kseq_beta(p64, q64, float(rho))) ** K)

        rho = search(p, q, K, 40)
        assert float(gap(p, q, rho, jnp.float32(K))) <= 0.0
        assert loss(rho) <= 1e-6, (seed, K, float(rho))
        assert loss(bisect(p, q, K)) <= 1e-6  # the reference meets the same bound
        mutant_losses.append(loss(search(p, q, K, 3)))
    assert min(mutant_losses) > 1e-6, mutant_losses


@pytest.mark.parametrize("K, L, expected", [(2, 2, 1.405487), (3, 2, 1.593306),
                                            (4, 2, 1.712385), (2, 3, 1.821025)])
def test_expected_tau_on_the_example(K, L, expected):
    """docs/verifiers/spectr.md, running example."""
    P, Q = example_pair()
    assert expected_tau(iteration_law(spectr_law, P, Q, L=L, K=K)) == pytest.approx(
        expected, abs=1e-6)


@pytest.mark.parametrize("seed, K, expected", [(0, 2, 1.1442), (1, 3, 0.8846), (2, 4, 1.5357),
                                               (3, 3, 1.1351)])
def test_expected_tau_on_the_random_pairs_table(seed, K, expected):
    """docs/verifiers/spectr.md, random pairs (V = 3, L = 2)."""
    P, Q = random_pair(3, seed)
    assert expected_tau(iteration_law(spectr_law, P, Q, L=2, K=K)) == pytest.approx(
        expected, abs=5e-5)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RhoFixedAtOne(SpecTrVerifier):
    """Mutation: K-SEQ with rho = 1 (accept with min(1, p/q) per draft); invalid for k >= 2."""

    lossless: ClassVar[bool] = False

    def rho(self, p, q, k):
        return jnp.ones((), p.dtype)


def test_monte_carlo_matches_exact_law_and_catches_rho_mutation():
    P, Q = random_pair(3, 3)
    exact = iteration_law(spectr_law, P, Q, L=2, K=3)
    run = functools.partial(sample_emitted, P=P, Q=Q, L=2, K=3, n=100_000, seed=1)
    real = chi_square(run(get_verifier("spectr")), exact)
    mutant = chi_square(run(RhoFixedAtOne()), exact)
    print(f"spectr MC: real {real}, mutant {mutant}")
    assert real.passes(FPR)
    assert not mutant.passes(FPR)


def test_walk_follows_the_surviving_draft():
    """One-hot target along draft 1: draft 0's token has no target mass and is rejected, draft
    1's is accepted, the walk continues along draft 1 only and ends with the bonus."""
    V = 3
    drafts = jnp.array([[0, 0], [2, 1]], jnp.int32)
    q = jnp.full((2, 2, V), 1 / V)
    p = jnp.stack([jax.nn.one_hot(jnp.array([2, 1, 0]), V)] * 2)
    verdict, _ = jax.jit(get_verifier("spectr"))(jax.random.key(3), drafts, q, p, ())
    assert np.asarray(verdict.tokens).tolist() == [2, 1, 0]
    assert int(verdict.draft_index) == 1


def test_greedy_with_distinct_one_hot_drafts():
    """T = 0 with K different deterministic drafts (each q one-hot at its own token): the
    output is the longest target-argmax prefix, then the argmax (docs/concepts.md). Reading the
    shared root q at other drafts' tokens would accept a token the target gives probability 0
    (0/0 rule)."""
    V = 5
    verify = jax.jit(get_verifier("spectr"))
    drafts = jnp.array([[3, 2], [1, 3], [1, 4]], jnp.int32)  # no draft starts with the argmax 2
    p = jnp.stack([jax.nn.one_hot(jnp.array([2, 0, 0]), V)] * 3)
    for seed in range(5):
        verdict, _ = verify(jax.random.key(seed), drafts, jax.nn.one_hot(drafts, V), p, ())
        assert np.asarray(verdict.tokens).tolist() == [2, -1, -1]
    drafts = jnp.array([[1, 4], [2, 0], [2, 3]], jnp.int32)  # draft 1 follows the argmax path
    p = jnp.stack([jax.nn.one_hot(jnp.array(row), V) for row in ([2, 1, 1], [2, 0, 4], [2, 0, 4])])
    for seed in range(5):
        verdict, _ = verify(jax.random.key(seed), drafts, jax.nn.one_hot(drafts, V), p, ())
        assert np.asarray(verdict.tokens).tolist() == [2, 0, 4]
        assert int(verdict.draft_index) == 1


def test_rejects_bad_inputs():
    with pytest.raises(ValueError, match="bisection_steps must be an integer >= 1"):
        get_verifier("spectr", bisection_steps=0)
    with pytest.raises(ValueError, match="bisection_steps must be an integer >= 1"):
        spectr_law(*example_pair(), (), L=1, K=2, bisection_steps=2.5)
    v = get_verifier("spectr")
    with pytest.raises(ValueError, match="q must have shape"):
        v(jax.random.key(0), jnp.zeros((2, 3), jnp.int32), jnp.full((2, 2, 4), 0.25),
          jnp.full((2, 4, 4), 0.25), ())
