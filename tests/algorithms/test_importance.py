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
from algorithms.exact.importance import ratio_key as exact_ratio_key
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
@pytest.mark.parametrize("V", [64, (1 << 18) + 3])  # packed uint32 sort; (key, id) pair sort
def test_sort_key_and_order(dtype, V):
    """The kernel's ranking key and sort order against a NumPy re-derivation, with ratio ties,
    zeros, -0.0, subnormal and smallest-normal ratios, and q = 0 (ratio inf) all present, and
    the preferred draft token against the rank that order gives."""
    with jax.enable_x64(dtype == jnp.float64):
        rng = np.random.default_rng(7)
        np_dtype = np.dtype(jnp.dtype(dtype).name)
        tiny = np.finfo(np.float32).smallest_normal
        p = rng.integers(0, 3, V).astype(np_dtype) * rng.choice([1.0, 1.01, 1.1], V)
        q = rng.integers(0, 3, V).astype(np_dtype)
        p, q = p / p.sum(), q / q.sum()  # laws (scaling keeps every tie a tie)
        # At the end (-0.0 must not sort before the other zeros): ratios 2 tiny, -0.0, 3 tiny,
        # inf (q = 0), tiny / 2 (subnormal: 0), and 1 + 2^-12 (ties with an exact 1).
        p[-6:] = [tiny, -0.0, tiny * 3, 0.0, tiny / 4, 0.05]
        q[-6:] = [0.5, 0.5, 1.0, 0.0, 0.5, 0.05 / (1 + 2.0 ** -12)]
        q[0] = p[0] = 0.01  # an exact 1
        key_np = exact_ratio_key(p, q)  # the exact checker's NumPy re-derivation
        expect = np.lexsort((np.arange(V), key_np))  # by (key, id)
        s, key = selection_law(jnp.asarray(p, dtype), jnp.asarray(q, dtype), 2)
        key = np.asarray(key)
        np.testing.assert_array_equal(key, key_np)
        F = np.cumsum(q[expect])
        s_np = np.zeros(V)
        s_np[expect] = np.where(q[expect] > 0, np.maximum(F**2 - (F - q[expect]) ** 2, 0), 0)
        # Tight at V = 64; at 2^18 tokens a float32 cumsum drifts by ~3e-4 relative (the order
        # there is checked exactly, through the key above and the preferred tokens below).
        tol = dict(atol=1e-6) if V < 1000 else dict(rtol=2e-3, atol=1e-6)
        np.testing.assert_allclose(np.asarray(s), s_np, **tol)
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


@pytest.mark.parametrize("seed", range(4))
def test_selected_mass_is_the_sorted_laws_value_at_every_token(seed):
    """The sort-free s(y) (the coin's) equals selection_law's s at every token, ties and q = 0
    tokens included, so the coin and the residual read one law."""
    import jax

    from algorithms.verifiers.importance import selected_mass, selection_law

    kp, kq, kz = jax.random.split(jax.random.key(seed), 3)
    V = 300
    p = jax.nn.softmax(2 * jax.random.normal(kp, (V,)))
    q = jax.nn.softmax(2 * jax.random.normal(kq, (V,)))
    q = jnp.where(jax.random.uniform(kz, (V,)) < 0.1, 0.0, q)  # some tokens q cannot draw
    q = q.at[:40].set(q[0]).at[:40].multiply(p[:40] / p[0])  # equal ratios: ties in the key
    q = q / q.sum()
    for k in (2, 3, 5):
        s, key = selection_law(p, q, k)
        got = jax.vmap(lambda y, k=k, key=key: selected_mass(q, key, y, k))(jnp.arange(V))
        np.testing.assert_allclose(np.asarray(got), np.asarray(s), rtol=2e-5, atol=1e-7)
