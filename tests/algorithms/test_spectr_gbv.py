"""SpecTr-GBV as released: the exact checker's verdict, the documented numbers, Monte Carlo vs
its law.

The verifier is a faithful port of a biased algorithm, so these tests assert the bias AS FOUND by
enumeration (and that the JAX port reproduces its own exact law), not the paper's claims.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from mutants import IgnoresRejected

from algorithms.exact import (
    adversarial_pairs,
    example_pair,
    expected_tau,
    get_exact_law,
    iteration_law,
    lossless_tv,
    random_pair,
    single_draft_bound,
    total_variation,
)
from algorithms.exact.bounds import block_bound
from algorithms.exact.greedy_block import greedy_block_law
from algorithms.exact.monte_carlo import chi_square, sample_emitted
from algorithms.exact.spectr_gbv import first_token_law, spectr_gbv_law
from algorithms.verifiers import get_verifier
from algorithms.verifiers.spectr_gbv import acceptance

FPR = 1e-6  # false-positive rate of every Monte Carlo test
RESIDUALS = ["released", "deficit"]


def law(residual):
    return functools.partial(spectr_gbv_law, residual=residual)


@pytest.mark.parametrize("residual", RESIDUALS)
def test_hand_checkable_first_token_bias(residual):
    """p = (1/3, 2/3), q = (2/3, 1/3), K = 2, L = 1 gives P(first token = a) = 0.3625.

    By hand: h(a) = A(a)/C(a) = (1/3)/(8/9), h(b) = (1/2)/(5/9); a draft passes with mass
    beta = q(a)h(a) + q(b)h(b); both residual readings put no mass on a (r(a) = 1), so
    P(a) = q(a)h(a)(1 + (1 - beta)). Confirmed by enumeration.
    """
    h_a, h_b = (1 / 3) / (8 / 9), (1 / 2) / (5 / 9)
    beta = 2 / 3 * h_a + 1 / 3 * h_b
    by_hand = 2 / 3 * h_a * (2 - beta)
    assert by_hand == pytest.approx(0.3625, abs=1e-12)
    P, Q = example_pair()
    first = first_token_law(spectr_gbv_law(P, Q, (), L=1, K=2, residual=residual), 2)
    assert first[0] == pytest.approx(0.3625, abs=1e-12)
    assert first[0] > 1 / 3 + 0.02  # biased towards a


@pytest.mark.parametrize("residual", RESIDUALS)
@pytest.mark.parametrize("K, L, tau, p_a", [
    (2, 1, 0.7975, 0.3625),
    (2, 2, 1.403435, 0.309499),  # the official code
    (3, 2, 1.4995, 0.3196),  # docs/verifiers/spectr_gbv.md
])
def test_example_numbers(K, L, tau, p_a, residual):
    P, Q = example_pair()
    one = spectr_gbv_law(P, Q, (), L=L, K=K, residual=residual)
    digits = 0.5 * 10.0 ** -(len(str(tau).split(".")[1]))
    assert expected_tau({e: pr for (e, _), pr in one.items()}) == pytest.approx(tau, abs=digits)
    digits = 0.5 * 10.0 ** -(len(str(p_a).split(".")[1]))
    assert first_token_law(one, 2)[0] == pytest.approx(p_a, abs=digits)


def test_expected_tau_is_below_the_papers_claimed_value():
    """The claimed E[tau] = sum_z A(z) is 1.583333 for K = 2, L = 2; the code gets less."""
    P, Q = example_pair()
    assert expected_tau(iteration_law(spectr_gbv_law, P, Q, L=2, K=2)) < 1.583333 - 0.1


@pytest.mark.parametrize("seed", range(4))
def test_k1_first_token_exact_but_later_tokens_biased(seed):
    """K = 1 is GBV without its fix-up: E[tau] = sum_z min(p(z), q(z)), the first emitted
    token is p-distributed, and the first L + 2 tokens are not."""
    V, L = 2 + seed % 2, 2 + seed // 2
    P, Q = random_pair(V, seed)
    assert expected_tau(iteration_law(spectr_gbv_law, P, Q, L=L, K=1)) == pytest.approx(
        single_draft_bound(P, Q, L), abs=1e-12)
    assert total_variation(iteration_law(spectr_gbv_law, P, Q, L=L, K=1),
                           iteration_law(greedy_block_law, P, Q, L=L, K=1)) <= 1e-12
    assert lossless_tv(spectr_gbv_law, P, Q, L=L, K=1, N=1) <= 1e-12
    tv = lossless_tv(spectr_gbv_law, P, Q, L=L, K=1)
    print(f"spectr_gbv K=1 V={V} L={L} seed {seed}: TV over {L + 2} tokens {tv:.4f}")
    assert tv > 1e-3


def test_k1_multi_token_bias_on_the_example():
    """K = 1 is greedy BV without the fix-up: its multi-token bias must equal that of the
    independently written greedy-block law with ``fixup=False``, and be far from rounding; E[tau]
    reaches the per-iteration ideal sum_z min(p(z), q(z))."""
    P, Q = example_pair()
    tv = lossless_tv(spectr_gbv_law, P, Q, L=2, K=1)
    no_fixup = functools.partial(greedy_block_law, fixup=False)
    assert tv == pytest.approx(lossless_tv(no_fixup, P, Q, L=2, K=1), abs=1e-12)
    assert tv > 0.05
    assert expected_tau(iteration_law(spectr_gbv_law, P, Q, L=2, K=1)) == pytest.approx(
        single_draft_bound(P, Q, 2), abs=1e-12)


@pytest.mark.parametrize("residual", RESIDUALS)
@pytest.mark.parametrize("K", [2, 3])
@pytest.mark.parametrize("seed", range(4))
def test_first_token_biased_for_several_drafts(seed, K, residual):
    P, Q = random_pair(3, seed)
    tv = lossless_tv(law(residual), P, Q, L=2, K=K, N=1)
    print(f"spectr_gbv[{residual}] K={K} seed {seed}: first-token TV {tv:.4f}")
    assert tv > 1e-4


def test_lossless_flag_states_the_checkers_verdict():
    assert get_verifier("spectr_gbv").lossless is False
    P, Q = example_pair()
    assert lossless_tv(spectr_gbv_law, P, Q, L=2, K=2) > 0.01


def test_biased_even_when_the_draft_is_the_target():
    """p = q: a perfect drafter's full block passes only with probability p(y)/C(y) < 1 for K >= 2
    (A(y) = p(y), C(y) = 1 - (1 - p(y))^K), and the emitted law moves away from p."""
    P, Q = adversarial_pairs(3)["p_equals_q"]
    assert lossless_tv(spectr_gbv_law, P, Q, L=1, K=1) <= 1e-12
    tv = lossless_tv(spectr_gbv_law, P, Q, L=1, K=2)
    print(f"spectr_gbv p = q, K=2, L=1: TV {tv:.4f}")
    assert tv > 0.01


def test_residual_readings_share_tau_but_not_the_correction():
    """Eq. 4's power on the min vs on (1 - min): same tau law (the residual only draws the
    extra token), different emitted law once V > 2."""
    P, Q = random_pair(3, 0)
    released = iteration_law(law("released"), P, Q, L=2, K=2)
    deficit = iteration_law(law("deficit"), P, Q, L=2, K=2)
    assert expected_tau(released) == pytest.approx(expected_tau(deficit), abs=1e-12)
    assert total_variation(released, deficit) > 0.05


def test_expected_tau_can_exceed_the_lossless_bound():
    """The code is above the membership-OT bound on some seeds: no lossless verifier
    can exceed that bound, so any seed above it (by more than rounding) shows the bias."""
    gaps = []
    for seed in range(4):
        P, Q = random_pair(3, seed)
        tau = expected_tau(iteration_law(spectr_gbv_law, P, Q, L=2, K=2))
        gaps.append(tau - block_bound(P, Q, L=2, K=2))
    print(f"spectr_gbv K=2 L=2: E[tau] - bound per seed {gaps}")
    assert max(gaps) > 1e-9



def test_monte_carlo_matches_its_own_exact_law_and_catches_mutations():
    P, Q = random_pair(3, 2)
    exact = {r: iteration_law(law(r), P, Q, L=2, K=3) for r in RESIDUALS}

    def fit(verifier, residual):
        return chi_square(sample_emitted(verifier, P, Q, L=2, K=3, n=100_000, seed=1),
                          exact[residual])

    real = fit(get_verifier("spectr_gbv"), "released")
    real_deficit = fit(get_verifier("spectr_gbv", residual="deficit"), "deficit")
    mutant = fit(IgnoresRejected(), "released")
    wrong_reading = fit(get_verifier("spectr_gbv", residual="deficit"), "released")
    print(f"spectr_gbv MC: real {real}, deficit {real_deficit}, mutant {mutant}, "
          f"deficit-vs-released {wrong_reading}")
    assert real.passes(FPR) and real_deficit.passes(FPR)
    assert not mutant.passes(FPR)
    assert not wrong_reading.passes(FPR)


def test_verdict_and_bad_inputs():
    v = get_verifier("spectr_gbv")
    q = jnp.full((2, 2, 3), 1 / 3)
    p = jnp.full((2, 3, 3), 1 / 3)
    # p = q one-hot along [0, 2] for both (identical) drafts: A(z) = p(z) = 1 and
    # C(z) = 1 - (1 - 1)^2 = 1, so h = 1 at t = L and the whole block passes for every key; the
    # bonus comes from p(. | 0, 2) = delta_1.
    onehot = jax.nn.one_hot(jnp.array([0, 2, 1]), 3)
    for seed in range(3):
        verdict, _ = jax.jit(v)(jax.random.key(seed), jnp.array([[0, 2], [0, 2]]),
                                jnp.stack([onehot[:2]] * 2), jnp.stack([onehot] * 2), ())
        assert np.asarray(verdict.tokens).tolist() == [0, 2, 1]
        assert int(verdict.num_emitted) == 3
    with pytest.raises(ValueError, match="residual must be one of"):
        get_verifier("spectr_gbv", residual="clipped")
    with pytest.raises(ValueError, match="residual must be one of"):
        get_exact_law("spectr_gbv", residual="clipped")(*example_pair(), (), L=1, K=2)
    with pytest.raises(ValueError, match="drafts must have shape"):
        v(jax.random.key(0), jnp.zeros((2,), jnp.int32), q, p, ())


def test_tiny_probabilities_at_l12_no_nan_no_spurious_one():
    """L = 12, K = 2, p = q = 1e-20 at every drafted token (joints down to 1e-240). Rest of the
    rows: p = (., 1 - c, 0), q = (., (1 - c)/2, (1 - c)/2). Expected h from exact rational
    arithmetic of Eq. 2 (Fractions, no floats): with r(z) = 1 on the path, h_t = n / (K - 1 + n)
    for t < L with n = p(1) (1 - r_1)^K = (1 - c)/4, i.e. ~1/5, and h_L = c^L / C(c^L) ~ 1/2.
    The old cumprod form underflows to h = 1 and NaN here."""
    from fractions import Fraction as F

    from mutants import cumprod_acceptance

    K, L, c = 2, 12, F(1, 10**20)
    P, Q = [c, 1 - c, F(0)], [c, (1 - c) / 2, (1 - c) / 2]

    def A(pz, qz):
        return F(0) if pz == 0 else pz * (1 - (1 - min(F(1), qz / pz)) ** K)

    def h(t):
        pz = qz = c**t
        cover = 1 - (1 - qz) ** K
        if t == L:
            return A(pz, qz) / cover
        children = sum(A(pz * P[x], qz * Q[x]) for x in range(3))
        return (A(pz, qz) - children) / (cover - children)

    expected = np.array([float(h(t)) for t in range(1, L + 1)])
    drafts = jnp.zeros((K, L), jnp.int32)
    q = jnp.broadcast_to(jnp.array([float(x) for x in Q], jnp.float32), (K, L, 3))
    p = jnp.broadcast_to(jnp.array([float(x) for x in P], jnp.float32), (K, L + 1, 3))
    got = np.asarray(acceptance(drafts, q, p)[0])
    print(f"spectr_gbv L=12 tiny p: h {got[0]}, exact {expected}")
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, np.broadcast_to(expected, got.shape), rtol=1e-5)
    old = np.asarray(cumprod_acceptance(drafts, q, p))
    assert not (np.isfinite(old).all() and np.allclose(old, expected, rtol=1e-5))
    # And the verifier itself runs on these inputs: a finite verdict with valid tokens.
    verdict, _ = jax.jit(get_verifier("spectr_gbv"))(jax.random.key(0), drafts, q, p, ())
    tokens = np.asarray(verdict.tokens)[:int(verdict.num_emitted)]
    assert ((tokens >= 0) & (tokens < 3)).all()
