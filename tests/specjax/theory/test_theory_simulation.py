"""Leviathan's E[n] against the real token verifier on the constant-acceptance pair.

On V = 2 with p = ((2−α)/2, α/2), q = (α/2, (2−α)/2), Σ min(p, q) = α at every context, so the
i.i.d. assumption behind E[n] = (1 − α^(k+1))/(1 − α) holds exactly (docs/theory.md) and the mean
tokens per iteration of ``get_verifier("token")`` must match it up to sampling error.

False-positive reasoning: n is a capped geometric variable whose variance we compute exactly
from its law (below, independently of ``specjax.theory``). With N = 200,000 iterations the worst
relative standard error over the 9 cells is 0.165 % (α = 0.6, k = 8), so the 1 % tolerance is at
least 6.07σ; the CLT then gives a two-sided per-cell false-positive probability of at most 1.3e-9
and 1.2e-8 for all 9 cells together (Bonferroni), under the stated 1e-6 (which needs only
z = 5.31σ per cell). The test asserts that margin itself, so a change of N that breaks the
reasoning fails loudly. The seed is fixed,
so the outcome is deterministic anyway.

Mutants that must FAIL the same check: a verifier with p and q swapped in the acceptance ratio
(a classic bug), and the off-by-one formula E[τ] = E[n] − 1 (forgetting the correction/bonus).
"""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from algorithms.verifiers import get_verifier
from algorithms.verifiers.token import TokenVerifier
from specjax.theory import expected_tokens
from specjax.theory.simulation import constant_acceptance_pair, simulate_emitted

FPR = 1e-6
ALPHAS = (0.6, 0.8, 0.9)
KS = (2, 4, 8)
N = 200_000
TOLERANCE = 0.01  # relative, from the issue


def capped_geometric_law(alpha: float, k: int) -> np.ndarray:
    """P(n = j), j = 1..k+1: α^(j−1)(1−α) for j <= k, α^k for j = k+1 (Leviathan §3.1)."""
    law = np.array([alpha ** (j - 1) * (1 - alpha) for j in range(1, k + 1)] + [alpha**k])
    assert law.sum() == pytest.approx(1.0, abs=1e-15)
    return law


@dataclasses.dataclass(frozen=True, kw_only=True)
class SwappedRatio(TokenVerifier):
    """Mutation: accept with min(1, q/p) instead of min(1, p/q) (p and q swapped)."""

    lossless: bool = False

    def __call__(self, key, drafts, q, p, state=()):
        L = drafts.shape[1]
        return super().__call__(key, drafts, p[:, :L], jnp.concatenate([q, p[:, L:]], 1), state)


@pytest.fixture(scope="module")
def simulated():
    """Mean tokens per iteration: {(verifier name, α, k): mean} (one compile per k, verifier)."""
    out = {}
    for name, verifier in (("token", get_verifier("token")), ("swapped", SwappedRatio())):
        for k in KS:
            for alpha in ALPHAS:
                out[name, alpha, k] = simulate_emitted(verifier, alpha, k, n=N, seed=2026).mean()
    return out


def test_pair_has_constant_acceptance():
    for alpha in ALPHAS:
        p, q = constant_acceptance_pair(alpha)
        assert np.minimum(p, q).sum() == pytest.approx(alpha, abs=1e-15)


def test_tolerance_is_many_standard_errors():
    z = stats.norm.isf(FPR / (2 * len(ALPHAS) * len(KS)))  # two-sided, Bonferroni over 9 cells
    for alpha in ALPHAS:
        for k in KS:
            law = capped_geometric_law(alpha, k)
            j = np.arange(1, k + 2)
            mean = (j * law).sum()
            sd = np.sqrt(((j - mean) ** 2 * law).sum())
            assert mean == pytest.approx(expected_tokens(alpha, k), rel=1e-13)
            assert TOLERANCE * mean >= z * sd / np.sqrt(N), (alpha, k)


@pytest.mark.parametrize("alpha", ALPHAS)
@pytest.mark.parametrize("k", KS)
def test_token_verifier_matches_expected_tokens(simulated, alpha, k):
    formula = expected_tokens(alpha, k)
    error = simulated["token", alpha, k] / formula - 1
    print(f"alpha={alpha} k={k}: simulated {simulated['token', alpha, k]:.5f}, "
          f"formula {formula:.5f}, relative error {error:+.4%}")
    assert abs(error) < TOLERANCE


@pytest.mark.parametrize("alpha", ALPHAS)
@pytest.mark.parametrize("k", KS)
def test_mutants_fail_the_same_check(simulated, alpha, k):
    formula = expected_tokens(alpha, k)
    assert abs(simulated["swapped", alpha, k] / formula - 1) >= TOLERANCE
    assert abs(simulated["token", alpha, k] / (formula - 1) - 1) >= TOLERANCE  # E[τ], not E[n]


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="alpha must lie in"):
        constant_acceptance_pair(1.5)
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        simulate_emitted(get_verifier("token"), 0.5, 0, n=10, seed=0)
