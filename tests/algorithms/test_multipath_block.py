"""Multi-path block verification (the reconstruction): q^Γ, losslessness, numbers, Monte Carlo."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from mutants import VerifiesAgainstQ

from algorithms.exact import (
    adversarial_pairs,
    example_pair,
    expected_tau,
    get_exact_law,
    iteration_law,
    lossless_tv,
    random_pair,
    total_variation,
)
from algorithms.exact.block import block_law
from algorithms.exact.monte_carlo import chi_square, sample_emitted
from algorithms.exact.multipath_block import (
    multipath_block_law,
    selected_path_law,
    selected_path_law_bruteforce,
)
from algorithms.verifiers import get_verifier
from algorithms.verifiers.multipath_block import select_largest

FPR = 1e-6  # false-positive rate of every Monte Carlo test
ORDERS = ["band", "ratio", "target"]


def case(seed):
    """20 (V, K, L) combinations covering V in {2,3}, K in {1,2,3}, L in {1,2}."""
    return 2 + seed % 2, 1 + seed % 3, 1 + (seed // 6) % 2


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("V, K, L, seed", [(2, 2, 2, 0), (3, 2, 2, 1), (3, 3, 2, 2),
                                           (2, 3, 3, 3), (3, 4, 1, 4)])
def test_closed_form_q_gamma_matches_brute_force(V, K, L, seed, order):
    """The closed-form q^Γ against selecting the largest of every enumerated set of K drafts."""
    P, Q = random_pair(V, seed)
    closed = selected_path_law(P, Q, (), L, K, order)
    brute = selected_path_law_bruteforce(P, Q, (), L, K, order)
    assert total_variation(closed, brute) <= 1e-12


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("seed", range(20))
def test_exactly_lossless_on_random_pairs(seed, order):
    V, K, L = case(seed)
    P, Q = random_pair(V, seed)
    law = get_exact_law("multipath_block", order=order)
    assert lossless_tv(law, P, Q, L=L, K=K) <= 1e-12


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("V", [2, 3])
@pytest.mark.parametrize("name", sorted(adversarial_pairs(3)))
def test_exactly_lossless_on_adversarial_pairs(name, V, order):
    P, Q = adversarial_pairs(V)[name]
    law = functools.partial(multipath_block_law, order=order)
    assert lossless_tv(law, P, Q, L=2, K=3) <= 1e-12


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("seed", range(4))
def test_k1_is_block_verification(seed, order):
    V, L = 2 + seed % 2, 1 + seed % 3
    P, Q = random_pair(V, seed)
    law = functools.partial(multipath_block_law, order=order)
    assert total_variation(iteration_law(law, P, Q, L=L, K=1),
                           iteration_law(block_law, P, Q, L=L, K=1)) <= 1e-12


@pytest.mark.parametrize("K, L, expected", [
    (2, 1, 8 / 9),  # equals the single-token OT optimum 0.888889
    (2, 2, 1.617284), (3, 2, 1.768176), (4, 2, 1.632830),  # docs/verifiers/multipath_block.md
])
def test_expected_tau_on_the_example(K, L, expected):
    P, Q = example_pair()
    assert expected_tau(iteration_law(multipath_block_law, P, Q, L=L, K=K)) == pytest.approx(
        expected, abs=1e-6)


@pytest.mark.parametrize("seed, row", [  # random pairs, K = 2..4
    (0, [1.2011, 1.4363, 1.4599]),
    (1, [0.9077, 0.8991, 0.8933]),
    (2, [1.4632, 1.3545, 1.2611]),
    (3, [1.0157, 1.2495, 1.3913]),
    (4, [0.6077, 0.7972, 0.9547]),
])
def test_expected_tau_on_the_random_pairs_table(seed, row):
    P, Q = random_pair(3, seed)
    law = functools.partial(multipath_block_law, order="ratio")  # the table is for "ratio"
    got = [expected_tau(iteration_law(law, P, Q, L=2, K=K)) for K in (2, 3, 4)]
    assert got == pytest.approx(row, abs=5e-5)


def test_select_largest_is_lexicographic():
    ranks = jnp.array([[1, 2, 0], [2, 0, 0], [2, 1, 5], [2, 1, 5]])
    assert int(select_largest(ranks)) == 2



@pytest.mark.parametrize("order", ORDERS)
def test_monte_carlo_matches_exact_law_and_catches_mutation(order):
    P, Q = random_pair(3, 0)
    exact = iteration_law(functools.partial(multipath_block_law, order=order), P, Q, L=2, K=3)
    verifier = get_verifier("multipath_block", order=order)
    real = chi_square(sample_emitted(verifier, P, Q, L=2, K=3, n=100_000, seed=1), exact)
    mutant = chi_square(sample_emitted(VerifiesAgainstQ(order=order), P, Q, L=2, K=3,
                                       n=100_000, seed=1), exact)
    print(f"multipath_block[{order}] MC: real {real}, mutant {mutant}")
    assert real.passes(FPR)
    assert not mutant.passes(FPR)


def test_verdict_and_bad_inputs():
    v = get_verifier("multipath_block")
    q = jnp.full((2, 2, 3), 1 / 3)
    p = jnp.full((2, 3, 3), 1 / 3)
    # p == q: every ratio ties, so the order is by token id and draft 1 ([2, 1]) is the largest.
    # q^Γ(2) = 1 - (2/3)^2 > p(2) = 1/3, so tau may be short, but any accepted prefix is draft 1's.
    verdict, _ = jax.jit(v)(jax.random.key(0), jnp.array([[0, 2], [2, 1]]), q, p, ())
    tau = int(verdict.num_emitted) - 1
    assert np.asarray(verdict.tokens)[:tau].tolist() == [2, 1][:tau]
    with pytest.raises(ValueError, match="order must be one of"):
        get_verifier("multipath_block", order="random")
    with pytest.raises(ValueError, match="order must be one of"):
        get_exact_law("multipath_block", order="random")(*example_pair(), (), L=1, K=2)
    with pytest.raises(ValueError, match="q must have shape"):
        v(jax.random.key(0), jnp.zeros((2, 2), jnp.int32), q[:, :1], p, ())
