"""Token-wise speculative sampling: exact losslessness, the numbers, Monte Carlo, mutation."""


import jax
import jax.numpy as jnp
import pytest
from mutants import residual_is_target

from algorithms.exact import (
    adversarial_pairs,
    example_pair,
    expected_tau,
    iteration_law,
    lossless_tv,
    random_pair,
    token_law,
)
from algorithms.exact.monte_carlo import chi_square, sample_emitted
from algorithms.verifiers import get_verifier
from algorithms.verifiers.base import Verdict
from algorithms.verifiers.token import TokenVerifier

FPR = 1e-6  # false-positive rate of every Monte Carlo test


@pytest.mark.parametrize("seed", range(20))
def test_exactly_lossless_on_random_pairs(seed):
    V, L = 2 + seed % 3, 1 + seed % 3
    P, Q = random_pair(V, seed)
    assert lossless_tv(token_law, P, Q, L=L) <= 1e-12


@pytest.mark.parametrize("V", [2, 3])
@pytest.mark.parametrize("name", sorted(adversarial_pairs(3)))
def test_exactly_lossless_on_adversarial_pairs(name, V):
    P, Q = adversarial_pairs(V)[name]
    assert lossless_tv(token_law, P, Q, L=2) <= 1e-12


@pytest.mark.parametrize("L, expected", [(2, 10 / 9), (3, 1.407407)])
def test_expected_tau_on_the_example(L, expected):
    P, Q = example_pair()
    assert expected_tau(iteration_law(token_law, P, Q, L=L)) == pytest.approx(expected, abs=1e-6)


ResidualIsTarget = residual_is_target(TokenVerifier)


def test_monte_carlo_matches_exact_law_and_catches_mutation():
    P, Q = random_pair(3, 4)
    exact = iteration_law(token_law, P, Q, L=3)
    real = chi_square(sample_emitted(get_verifier("token"), P, Q, L=3, K=1, n=200_000, seed=1),
                      exact)
    mutant = chi_square(sample_emitted(ResidualIsTarget(), P, Q, L=3, K=1, n=200_000, seed=1),
                        exact)
    print(f"token MC: real {real}, mutant {mutant}")
    assert real.passes(FPR)
    assert not mutant.passes(FPR)


def test_rejects_bad_inputs():
    v = get_verifier("token")
    q = jnp.full((2, 3, 4), 0.25)
    p = jnp.full((2, 4, 4), 0.25)
    with pytest.raises(ValueError, match="max_drafts=1"):
        v(jax.random.key(0), jnp.zeros((2, 3), jnp.int32), q, p, ())
    with pytest.raises(ValueError, match="p must have shape"):
        v(jax.random.key(0), jnp.zeros((1, 3), jnp.int32), q[:1], p[:1, :3], ())
    with pytest.raises(ValueError, match="sum to 1"):
        v(jax.random.key(0), jnp.zeros((1, 3), jnp.int32), q[:1] * 2, p[:1], ())
    with pytest.raises(ValueError, match="unknown name 'nope'"):
        get_verifier("nope")


def test_verdict_fields():
    v = get_verifier("token")
    q = jnp.full((1, 2, 3), 1 / 3)
    verdict, state = jax.jit(v)(jax.random.key(0), jnp.zeros((1, 2), jnp.int32), q,
                                jnp.full((1, 3, 3), 1 / 3), v.init_state(2, 3))
    assert isinstance(verdict, Verdict) and state == ()
    # p == q: every draft token is accepted, so tau == L.
    assert int(verdict.num_emitted) == 3 and int(verdict.draft_index) == 0
