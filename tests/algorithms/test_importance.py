"""Max-ratio importance-sampling selection + SD per node (Khisti et al., arXiv 2410.18234):
exact losslessness, the selection law's closed form, hand-derived numbers, Monte Carlo, mutant."""

import dataclasses

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
    total_variation,
)
from algorithms.exact.importance import importance_law, selection_law_by_enumeration
from algorithms.exact.monte_carlo import chi_square, sample_emitted
from algorithms.exact.token import token_law
from algorithms.verifiers import get_verifier
from algorithms.verifiers.base import safe_ratio, sample
from algorithms.verifiers.importance import (
    ImportanceSamplingVerifier,
    preferred_token,
    selection_law,
)

FPR = 1e-6  # false-positive rate of every Monte Carlo test
SIZES = [(2, 2, 2), (2, 3, 3), (3, 1, 3), (3, 2, 2), (3, 2, 3), (4, 1, 4), (4, 2, 2), (3, 3, 2)]


@pytest.mark.parametrize("seed", range(8))
def test_exactly_lossless_on_random_pairs(seed):
    V, L, K = SIZES[seed]
    P, Q = random_pair(V, seed)
    tv = lossless_tv(importance_law, P, Q, L=L, K=K)
    print(f"importance TV V={V} L={L} K={K}: {tv:.3e}")
    assert tv <= 1e-12


@pytest.mark.parametrize("name", sorted(adversarial_pairs(3)))
def test_exactly_lossless_on_adversarial_pairs(name):
    P, Q = adversarial_pairs(3)[name]
    for L, K in [(1, 3), (2, 2)]:
        assert lossless_tv(importance_law, P, Q, L=L, K=K) <= 1e-12


@pytest.mark.parametrize("seed", range(3))
def test_one_draft_is_token_wise_sampling(seed):
    P, Q = random_pair(3, seed)
    assert total_variation(iteration_law(importance_law, P, Q, L=3, K=1),
                           iteration_law(token_law, P, Q, L=3)) <= 1e-15


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_closed_form_selection_law_matches_enumeration(seed, k):
    """JAX's F^k - F^-k (float32) against crediting every k-tuple's max-ratio token."""
    rng = np.random.default_rng(seed)
    p, q = rng.dirichlet(np.ones(4)), rng.dirichlet(np.ones(4))
    if seed % 2:  # ties in the ratio: the larger token id wins
        q = p.copy()
    got = np.asarray(selection_law(jnp.asarray(p, jnp.float32), jnp.asarray(q, jnp.float32), k)[0])
    np.testing.assert_allclose(got, selection_law_by_enumeration(p, q, k), atol=1e-6)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_integer_sort_key_orders_like_the_float_ratio(dtype):
    """The kernel sorts p/q by its bits as an integer: the order (ties by id) and the preferred
    draft token must be NumPy's stable float argsort, with ties, zeros, -0.0, the smallest normal
    ratios and q = 0 (ratio inf) all present. (Not subnormals: XLA:CPU flushes them to zero before
    either sort sees them.)"""
    with jax.enable_x64(dtype == jnp.float64):
        rng = np.random.default_rng(7)
        V = 64
        np_dtype = np.dtype(jnp.dtype(dtype).name)
        tiny = np.finfo(np_dtype).smallest_normal
        p = rng.integers(0, 3, V).astype(np_dtype)
        q = rng.integers(0, 3, V).astype(np_dtype)
        p[-4:] = [tiny, -0.0, tiny * 3, 0.0]  # at the end: -0.0 must not sort before 0s
        q[-4:] = [1.0, 1.0, 2.0, 0.0]
        ratio = np.where(q > 0, p / np.where(q > 0, q, 1), np.inf)
        ratio = np.where(ratio == 0, 0.0, ratio)  # NumPy's sort puts -0.0 == +0.0 by id
        expect = np.argsort(ratio, kind="stable")
        _, key = selection_law(jnp.asarray(p, dtype), jnp.asarray(q, dtype), 2)
        key = np.asarray(key)
        got = np.lexsort((np.arange(V), key))
        np.testing.assert_array_equal(got, expect)
        rank = np.empty(V, int)
        rank[expect] = np.arange(V)
        for _ in range(50):
            tokens = rng.choice(V, 3)
            live = rng.random(3) < 0.7
            live[rng.integers(3)] = True
            expect_token = tokens[np.argmax(np.where(live, rank[tokens], -1))]
            got_token = preferred_token(jnp.asarray(key), jnp.asarray(tokens, jnp.int32),
                                        jnp.asarray(live))
            assert int(got_token) == expect_token, (tokens, live)


def test_example_reaches_the_two_draft_optimum():
    """By hand, k = 2 on p = (1/3, 2/3), q = (2/3, 1/3): b has the larger ratio, so
    s(b) = 1 - (2/3)^2 = 5/9, s(a) = 4/9; acceptance 1/3 + 5/9 = 8/9 (the OT optimum); the
    residual max(p - s, 0) = (0, 1/9) is all b, a drafted token only when some draft is b."""
    P, Q = example_pair()
    s = selection_law_by_enumeration(P(()), Q(()), 2)
    np.testing.assert_allclose(s, [4 / 9, 5 / 9], atol=1e-15)
    # L = 1. Given (a, a) (4/9): a is accepted w.p. min(1, (1/3)/(4/9)) = 3/4, else the residual
    # b, which no draft holds. Otherwise b is selected and accepted. E[tau] = 4/9 * 3/4 + 5/9.
    assert expected_tau(iteration_law(importance_law, P, Q, L=1, K=2)) == pytest.approx(8 / 9)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SelectsTheFirstDraft(ImportanceSamplingVerifier):
    """Mutation: step (1) takes draft 0's token but step (2) still tests it against s (the law
    of the max-ratio pick), so the test does not match the token's real law."""

    def node(self, key, p, q, tokens, live):
        k_coin, k_res = jax.random.split(key)
        s = selection_law(p, q, live.sum())[0]
        y = tokens[jnp.argmax(live)].astype(jnp.int32)
        accept = jax.random.uniform(k_coin) < safe_ratio(p[y], s[y])
        res = jnp.maximum(p - s, 0.0)
        res = jnp.where(res.sum() > 0, res, p)
        return jnp.where(accept, y, sample(k_res, res))


def test_monte_carlo_matches_exact_law_and_catches_mutations():
    P, Q = random_pair(3, 2)
    L, K = 2, 3
    exact = iteration_law(importance_law, P, Q, L=L, K=K)
    fits = {}
    for label, verifier in [("real", get_verifier("importance")),
                            ("first-draft mutant", SelectsTheFirstDraft())]:
        counts = sample_emitted(verifier, P, Q, L=L, K=K, n=100_000, seed=4, chunk=100_000)
        fits[label] = chi_square(counts, exact)
        print(f"importance MC {label}: {fits[label]}")
    assert fits["real"].passes(FPR)
    assert not fits["first-draft mutant"].passes(FPR)
