"""Block verification (docs/verifiers/block.md): exact losslessness, the numbers, Monte Carlo,
mutants."""

import dataclasses
import itertools
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mutants import residual_is_target

from algorithms.exact import (
    adversarial_pairs,
    enumerate_blocks,
    example_pair,
    expected_tau,
    iteration_law,
    joint,
    lossless_tv,
    random_pair,
)
from algorithms.exact.block import block_law
from algorithms.exact.monte_carlo import chi_square, sample_emitted
from algorithms.verifiers import get_verifier
from algorithms.verifiers.base import emit, sample
from algorithms.verifiers.block import BlockVerifier, block_acceptance, block_weights

FPR = 1e-6  # false-positive rate of every Monte Carlo test
# (V, L) combinations for the random pairs; V=4 with L=3 is left out only to keep enumeration
# (4^5 strings, 64 blocks per context) fast.
SIZES = [(2, 1), (2, 2), (2, 3), (3, 1), (3, 2), (3, 3), (4, 1), (4, 2)]


@pytest.mark.parametrize("seed", range(20))
def test_exactly_lossless_on_random_pairs(seed):
    V, L = SIZES[seed % len(SIZES)]
    P, Q = random_pair(V, seed)
    tv = lossless_tv(block_law, P, Q, L=L)  # N = L + 2 tokens, several iterations
    print(f"block TV random V={V} L={L} seed={seed}: {tv:.3e}")
    assert tv <= 1e-12


@pytest.mark.parametrize("V, L", [(2, 2), (2, 3), (3, 2)])
@pytest.mark.parametrize("name", sorted(adversarial_pairs(3)))
def test_exactly_lossless_on_adversarial_pairs(name, V, L):
    P, Q = adversarial_pairs(V)[name]
    tv = lossless_tv(block_law, P, Q, L=L)
    print(f"block TV adversarial {name} V={V} L={L}: {tv:.3e}")
    assert tv <= 1e-12


@pytest.mark.parametrize("L, expected", [(2, 11 / 9), (3, 1.666667)])
def test_expected_tau_on_the_example(L, expected):
    """The running example (docs/verifiers/block.md)."""
    P, Q = example_pair()
    assert expected_tau(iteration_law(block_law, P, Q, L=L)) == pytest.approx(expected, abs=1e-6)


def _expected_weight_sum(P, Q, L):
    """sum_i E_{X~q}[w_i], with w computed here independently (docs/verifiers/block.md)."""
    total = 0.0
    for x, prob in enumerate_blocks(Q, (), L):
        w = 1.0
        for i in range(L):
            w = min(w * joint(P, x[:i], x[i:i + 1]) / joint(Q, x[:i], x[i:i + 1]), 1.0)
            total += prob * w
    return total


@pytest.mark.parametrize("seed", range(4))
def test_expected_tau_is_the_sum_of_expected_weights(seed):
    P, Q = random_pair(3, seed)
    law = iteration_law(block_law, P, Q, L=3)
    assert expected_tau(law) == pytest.approx(_expected_weight_sum(P, Q, 3), abs=1e-12)


_ratios = st.integers(1, 6).flatmap(lambda L: st.tuples(
    st.lists(st.one_of(st.just(0.0), st.floats(0.001, 1.0)), min_size=L, max_size=L),
    st.lists(st.floats(0.001, 1.0), min_size=L, max_size=L)))


@settings(max_examples=60, deadline=None)
@given(_ratios)
def test_cummax_weights_equal_the_clipped_product(pq):
    """log w_i = S_i - max_{j<=i} S_j (JAX, vectorised) against the sequential clipped product."""
    p_x, q_x = pq
    expected, w = [], 1.0
    for a, b in zip(p_x, q_x, strict=True):
        w = min(w * a / b, 1.0)
        expected.append(w)
    got = np.asarray(block_weights(jnp.asarray(p_x, jnp.float32), jnp.asarray(q_x, jnp.float32)))
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-7)


def test_acceptance_zero_denominator_means_accept():
    """w_i = 1 and p = q at the next position: 0/0, h_i = 1 by the paper's convention."""
    q = jnp.full((2, 3), 1 / 3)
    h = block_acceptance(jnp.ones(2), q, jnp.full((3, 3), 1 / 3))
    np.testing.assert_array_equal(np.asarray(h), [1.0, 1.0])


@dataclasses.dataclass(frozen=True, kw_only=True)
class StopsAtFirstRejection(BlockVerifier):
    """Mutation: tau = (first i with eta_i >= h_i) - 1, token-wise style, instead of the max."""

    lossless: ClassVar[bool] = False

    def __call__(self, key, drafts, q, p, state=()):
        L = drafts.shape[1]
        k_coin, k_extra = jax.random.split(key)
        x, q, p = drafts[0], q[0], p[0]
        pos = jnp.arange(L)
        w = block_weights(p[pos, x], q[pos, x])
        passed = jax.random.uniform(k_coin, (L,)) < block_acceptance(w, q, p)
        tau = jnp.where(passed.all(), L, jnp.argmin(passed)).astype(jnp.int32)
        i = jnp.minimum(tau, L - 1)
        w_tau = jnp.where(tau == 0, 1.0, w[jnp.maximum(tau - 1, 0)])
        r = jnp.maximum(w_tau * p[i] - q[i], 0.0)
        law = jnp.where(tau == L, p[L], jnp.where(r.sum() > 0, r / r.sum(), p[i]))
        return emit(x, tau, sample(k_extra, law), jnp.int32(0)), state


ResidualIsTarget = residual_is_target(BlockVerifier)


def test_monte_carlo_matches_exact_law_and_catches_mutations():
    P, Q = random_pair(3, 4)
    exact = iteration_law(block_law, P, Q, L=3)
    fits = {}
    for label, verifier in [("real", get_verifier("block")),
                            ("first-rejection mutant", StopsAtFirstRejection()),
                            ("residual=p mutant", ResidualIsTarget())]:
        counts = sample_emitted(verifier, P, Q, L=3, K=1, n=100_000, seed=1, chunk=100_000)
        fits[label] = chi_square(counts, exact)
        print(f"block MC {label}: {fits[label]}")
    assert fits["real"].passes(FPR)
    assert not fits["first-rejection mutant"].passes(FPR)
    assert not fits["residual=p mutant"].passes(FPR)


def test_full_acceptance_when_draft_equals_target():
    """p = q everywhere: every w_i = 1 and every h_i = 1, so the whole block plus a bonus."""
    v = get_verifier("block")
    V, L = 3, 4
    rng = np.random.default_rng(0)
    q = rng.dirichlet(np.ones(V), size=(1, L + 1)).astype(np.float32)
    keys = jax.random.split(jax.random.key(0), 64)
    drafts = jnp.asarray(list(itertools.islice(itertools.cycle(range(V)), L)))[None]
    out = jax.vmap(lambda k: v(k, drafts, jnp.asarray(q[:, :L]), jnp.asarray(q), ())[0])(keys)
    assert (np.asarray(out.num_emitted) == L + 1).all()
