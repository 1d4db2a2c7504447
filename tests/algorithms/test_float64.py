"""Every registered verifier traces and runs under ``jax_enable_x64`` with float64 laws, and
matches its exact law by Monte Carlo in float64: a kernel can trace in float32 yet fail under
x64 (int32/int64 scan carries), and its float64 law is part of the lossless claim."""

import jax
import jax.numpy as jnp
import pytest
from mutants import correction_is_target

from algorithms.exact import exact_law_of, exact_laws, iteration_law, random_pair
from algorithms.exact.lookup import FIXED_LAWS
from algorithms.exact.monte_carlo import chi_square, sample_emitted, sample_fixed
from algorithms.verifiers import get_verifier, list_verifiers

FPR = 1e-6  # false-positive rate of every Monte Carlo test
N = 30_000
# The float64 harness is the float32 one with float64 tables; that it catches a broken verifier
# is shown on one single-draft and one multi-draft kernel (each run costs a compile).
WITH_MUTANT = {"token", "spectr"}


def k_for(verifier) -> int:
    return 1 if verifier.max_drafts == 1 else 3


def float64_fit(verifier, name: str):
    K = k_for(get_verifier(name))
    P, Q = random_pair(3, 5)
    exact = iteration_law(exact_law_of(get_verifier(name)), P, Q, L=2, K=K)
    with jax.enable_x64(True):
        counts = sample_emitted(verifier, P, Q, L=2, K=K, n=N, seed=4, dtype=jnp.float64)
    return chi_square(counts, exact)


@pytest.mark.parametrize("name", sorted(set(list_verifiers()) & set(exact_laws())))
def test_float64_monte_carlo_matches_exact_law(name):
    fit = float64_fit(get_verifier(name), name)
    print(f"{name} float64 MC: {fit}")
    assert fit.passes(FPR)


@pytest.mark.parametrize("name", sorted(WITH_MUTANT))
def test_float64_harness_catches_a_broken_correction(name):
    fit = float64_fit(correction_is_target(type(get_verifier(name)))(), name)
    print(f"{name} float64 mutant MC: {fit}")
    assert not fit.passes(FPR)


@pytest.mark.parametrize("name", sorted(FIXED_LAWS))
def test_float64_lookup_drafts(name):
    """Both of SpecTr's node rules (K-SEQ for agreeing survivors, RRS otherwise) in float64."""
    P, _ = random_pair(3, 6)
    drafts = ((0, 1), (0, 2), (2, 2))
    with jax.enable_x64(True):
        fit = chi_square(sample_fixed(get_verifier(name), P, drafts, n=N, seed=5,
                                      dtype=jnp.float64), FIXED_LAWS[name](P, drafts))
    print(f"{name} float64 lookup MC: {fit}")  # mutants: test_lookup_drafts.py, same harness
    assert fit.passes(FPR)
