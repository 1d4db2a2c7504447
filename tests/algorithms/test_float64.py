"""Every registered verifier traces and runs under a global ``jax_enable_x64`` with int64 drafts
and float64 laws, and matches its exact law by Monte Carlo in float64: a kernel can trace in
float32 yet fail under x64 (a scan carry that starts int32 and comes back int64 from an int64
draft id), and its float64 law is part of the lossless claim. Global, not the ``jax.enable_x64``
context, because that is how a user turns it on; and int64 drafts, because int32 ones (what the
samplers make) hid exactly that carry bug."""

import jax
import jax.numpy as jnp
import pytest
from mutants import correction_is_target

from algorithms.exact import exact_law_of, exact_laws, iteration_law, random_pair
from algorithms.exact.lookup import FIXED_LAWS
from algorithms.exact.monte_carlo import (
    chi_square,
    fixed_inputs,
    fixed_sampler,
    referee_inputs,
    sample_emitted,
    sample_fixed,
    sample_inputs,
)
from algorithms.verifiers import get_verifier, list_verifiers

FPR = 1e-6  # false-positive rate of every Monte Carlo test
N = 30_000
# The float64 harness is the float32 one with float64 tables; that it catches a broken verifier
# is shown on one single-draft and one multi-draft kernel (each run costs a compile).
WITH_MUTANT = {"token", "spectr"}


@pytest.fixture(autouse=True)
def global_x64():
    """x64 for the whole process during one test, then back to what it was, so the rest of the
    suite keeps its 32-bit defaults."""
    before = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", True)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", before)


def int64_drafts(key, q_table, p_table, *, V: int, L: int, K: int):
    """``sample_inputs`` with the drafts cast to int64, as an x64 caller's token ids would be."""
    drafts, q, p = sample_inputs(key, q_table, p_table, V=V, L=L, K=K)
    drafts = drafts.astype(jnp.int64)
    assert drafts.dtype == jnp.int64, "x64 is off: the drafts stayed int32"
    return drafts, q, p


def k_for(verifier) -> int:
    return 1 if verifier.max_drafts == 1 else 3


def float64_fit(verifier, name: str):
    K = k_for(get_verifier(name))
    P, Q = random_pair(3, 5)
    exact = iteration_law(exact_law_of(get_verifier(name)), P, Q, L=2, K=K)
    structure = getattr(verifier, "referee_drafts", "iid")  # engine rules: deterministic drafts
    sampler = int64_drafts if structure == "iid" else fixed_sampler(referee_inputs(
        P, Q, structure, L=2, K=K, dtype=jnp.float64, drafts_dtype=jnp.int64))
    counts = sample_emitted(verifier, P, Q, L=2, K=K, n=N, seed=4, dtype=jnp.float64,
                            sampler=sampler)
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
    assert fixed_inputs(P, drafts, drafts_dtype=jnp.int64)[0].dtype == jnp.int64
    fit = chi_square(sample_fixed(get_verifier(name), P, drafts, n=N, seed=5, dtype=jnp.float64,
                                  drafts_dtype=jnp.int64), FIXED_LAWS[name](P, drafts))
    print(f"{name} float64 lookup MC: {fit}")  # mutants: test_lookup_drafts.py, same harness
    assert fit.passes(FPR)


@pytest.mark.parametrize("name", sorted(list_verifiers()))
def test_every_verifier_traces_with_int64_drafts(name):
    """Every registered verifier, with an exact law or not, traced (``jax.eval_shape``: no
    compile, so it costs little) on int64 drafts and float64 laws: the verdict keeps its int32
    contract and the state comes back with the shapes and dtypes it went in with (the engine's
    loop carries it). The Monte Carlo tests above run the kernels on such inputs."""
    verifier = get_verifier(name)
    K, L, V = k_for(verifier), 3, 5
    state = verifier.init_state(L, V)
    verdict, new_state = jax.eval_shape(
        verifier, jax.random.key(0), jax.ShapeDtypeStruct((K, L), jnp.int64),
        jax.ShapeDtypeStruct((K, L, V), jnp.float64),
        jax.ShapeDtypeStruct((K, L + 1, V), jnp.float64), state)
    assert [(x.shape, x.dtype) for x in verdict] == [((L + 1,), jnp.int32), ((), jnp.int32),
                                                      ((), jnp.int32)]
    assert jax.tree.structure(new_state) == jax.tree.structure(state)
    assert jax.tree.leaves(jax.tree.map(lambda a, b: (a.shape, a.dtype) == (b.shape, b.dtype),
                                        new_state, state)) == [True] * len(jax.tree.leaves(state))
