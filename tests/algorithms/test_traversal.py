"""Traversal verification, rule B: exact losslessness, reductions, the numbers, Monte Carlo."""


import jax
import jax.numpy as jnp
import numpy as np
import pytest
from mutants import SkipsDuplicates

from algorithms.exact import (
    adversarial_pairs,
    example_pair,
    expected_tau,
    iteration_law,
    lossless_tv,
    random_pair,
    total_variation,
)
from algorithms.exact.block import block_law
from algorithms.exact.monte_carlo import chi_square, sample_emitted
from algorithms.exact.specinfer import specinfer_law
from algorithms.exact.traversal import traversal_law, traversal_law_skipping_duplicates
from algorithms.verifiers import get_verifier
from algorithms.verifiers.traversal import merge_prefixes, post_order

FPR = 1e-6  # false-positive rate of every Monte Carlo test


def case(seed):
    """20 (V, K, L) combinations covering V in {2,3}, K in {1,2,3}, L in {1,2}."""
    return 2 + seed % 2, 1 + seed % 3, 1 + (seed // 6) % 2


@pytest.mark.parametrize("seed", range(20))
def test_exactly_lossless_on_random_pairs(seed):
    V, K, L = case(seed)
    P, Q = random_pair(V, seed)
    assert lossless_tv(traversal_law, P, Q, L=L, K=K) <= 1e-12


@pytest.mark.parametrize("V", [2, 3])
@pytest.mark.parametrize("name", sorted(adversarial_pairs(3)))
def test_exactly_lossless_on_adversarial_pairs(name, V):
    P, Q = adversarial_pairs(V)[name]
    assert lossless_tv(traversal_law, P, Q, L=2, K=2) <= 1e-12


@pytest.mark.parametrize("seed", range(6))
def test_k1_is_block_verification_and_l1_is_specinfer(seed):
    V, L = 2 + seed % 2, 1 + seed % 3
    P, Q = random_pair(V, seed)
    assert total_variation(iteration_law(traversal_law, P, Q, L=L, K=1),
                           iteration_law(block_law, P, Q, L=L, K=1)) <= 1e-12
    K = 1 + seed % 4
    assert total_variation(iteration_law(traversal_law, P, Q, L=1, K=K),
                           iteration_law(specinfer_law, P, Q, L=1, K=K)) <= 1e-12


@pytest.mark.parametrize("L, row", [
    (1, [0.666667, 0.777778, 0.851852, 0.901235]),
    (2, [1.222222, 1.419753, 1.558299, 1.656760]),
    (3, [1.666667, 1.941015, 2.137784, 2.281504]),
])
def test_expected_tau_on_the_example(L, row):
    """docs/verifiers/traversal.md table (K = 1..4); L = 1, K = 1 is token verification's 2/3."""
    P, Q = example_pair()
    got = [expected_tau(iteration_law(traversal_law, P, Q, L=L, K=K)) for K in (1, 2, 3, 4)]
    assert got == pytest.approx(row, abs=1e-6)


@pytest.mark.parametrize("seed, row", [  # random pairs: BV (K=1), then rule B K=2..4
    (0, [0.7961, 1.1388, 1.3654, 1.3823]),
    (1, [0.8706, 0.8997, 0.9017, 0.9037]),
    (2, [1.1885, 1.3401, 1.4222, 1.4875]),
    (3, [0.6932, 0.9528, 1.1497, 1.2996]),
    (4, [0.3799, 0.5919, 0.7671, 0.9122]),
])
def test_expected_tau_on_the_random_pairs_table(seed, row):
    P, Q = random_pair(3, seed)
    got = [expected_tau(iteration_law(traversal_law, P, Q, L=2, K=K)) for K in (1, 2, 3, 4)]
    assert got == pytest.approx(row, abs=5e-5)


def test_skipping_duplicate_updates_is_biased():
    """The merged tree without duplicate updates is biased (doc: TV up to 0.18)."""
    P, Q = random_pair(3, 0)
    tv = lossless_tv(traversal_law_skipping_duplicates, P, Q, L=2, K=3)
    print(f"traversal without duplicate updates: TV {tv:.4f}")
    assert tv > 0.01


def test_schedule_is_post_order_with_duplicates_in_draft_order():
    """The paper's tree: root -> X1 (X3, X4), X2 (X5); tested X3, X4, X1, X5, X2.

    As drafts of length 2: [X1 X3], [X1 X4], [X2 X5]; trial ids are k*L + depth-1, and draft 1's
    depth-1 trial (a duplicate of X1) comes right after X1's test.
    """
    drafts = jnp.array([[0, 0], [0, 1], [1, 2]])
    canon = merge_prefixes(drafts)
    assert canon.tolist() == [[0, 0, 0], [0, 0, 1], [0, 2, 2]]
    assert post_order(canon).tolist() == [1, 3, 0, 2, 5, 4]



def test_monte_carlo_matches_exact_law_and_catches_mutation():
    P, Q = random_pair(3, 0)  # the skipped updates move this law by TV 0.14
    exact = iteration_law(traversal_law, P, Q, L=2, K=3)
    real = chi_square(sample_emitted(get_verifier("traversal"), P, Q, L=2, K=3, n=100_000,
                                     seed=1), exact)
    mutant = chi_square(sample_emitted(SkipsDuplicates(), P, Q, L=2, K=3, n=100_000, seed=1),
                        exact)
    print(f"traversal MC: real {real}, mutant {mutant}")
    assert real.passes(FPR)
    assert not mutant.passes(FPR)


def test_verdict_and_bad_inputs():
    v = get_verifier("traversal")
    q = jnp.full((3, 2, 4), 0.25)
    verdict, _ = jax.jit(v)(jax.random.key(0), jnp.array([[1, 2], [1, 3], [0, 0]]), q,
                            jnp.full((3, 3, 4), 0.25), ())
    # p == q: the first leaf (draft 0's block) has weight 1 and is accepted.
    assert np.asarray(verdict.tokens)[:2].tolist() == [1, 2]
    assert int(verdict.num_emitted) == 3 and int(verdict.draft_index) == 0
    with pytest.raises(ValueError, match="p must have shape"):
        v(jax.random.key(0), jnp.zeros((3, 2), jnp.int32), q, jnp.full((3, 2, 4), 0.25), ())
    with pytest.raises(ValueError, match="sum to 1"):
        v(jax.random.key(0), jnp.zeros((3, 2), jnp.int32), q * 2, jnp.full((3, 3, 4), 0.25), ())


def test_distinct_one_hot_drafts_never_accept_a_zero_probability_token():
    """Regression (found by the engine's prompt-lookup test): non-i.i.d. one-hot drafts.

    Each draft's q is one-hot at its own token, so testing draft 1's token against draft 0's law
    gave ratio 0/0 -> 1 and accepted a token the target gives probability 0.
    """
    import jax
    import jax.numpy as jnp

    from algorithms.verifiers import get_verifier

    V, L = 10, 4
    drafts = jnp.array([[2, 5, 1, 6], [7, 4, 5, 6], [8, 4, 5, 6]], jnp.int32)
    q = jax.nn.one_hot(drafts, V)
    target = jnp.array([3, 4, 7, 8, 9])
    p = jnp.broadcast_to(jax.nn.one_hot(target, V), (3, L + 1, V))
    verifier = get_verifier("traversal")
    keys = jax.random.split(jax.random.key(0), 64)
    verdicts, _ = jax.jit(jax.vmap(verifier, in_axes=(0, None, None, None, None)))(
        keys, drafts, q, p, ())
    assert (verdicts.num_emitted == 1).all() and (verdicts.tokens[:, 0] == 3).all()
