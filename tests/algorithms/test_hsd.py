"""HSD as released (arXiv 2601.05724): exact bias, hand-derived numbers, Monte Carlo, mutants."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import pytest
from mutants import residual_is_target

from algorithms.exact import (
    example_pair,
    expected_tau,
    iteration_law,
    lossless_tv,
    multi_iteration_law,
    random_pair,
    total_variation,
)
from algorithms.exact.block import block_law
from algorithms.exact.hsd import hsd_law
from algorithms.exact.monte_carlo import chi_square, sample_emitted
from algorithms.exact.token import token_law
from algorithms.verifiers import get_verifier
from algorithms.verifiers.base import emit, sample
from algorithms.verifiers.hsd import VARIANTS, HSDVerifier

FPR = 1e-6  # false-positive rate of every Monte Carlo test


@pytest.mark.parametrize("variant", VARIANTS)
def test_biased_on_the_example_with_the_hand_derived_law(variant):
    """p = (1/3, 2/3), q = (2/3, 1/3), L = 2: the smallest counter-example (V = 2, L = 2).

    By hand: the draft "ba" has joint ratio (2/3 * 1/3) / (1/3 * 2/3) = 1, so HSD accepts it whole
    (2/9); the draft "aa" (4/9) fails its top test with probability 3/4, finds no excess at branch
    "a" (1/2 p - q <= 0) and falls back to the root, whose residual is "b"; the next iteration
    then starts with "a" with probability 1/3. P(first two tokens = "ba") = 2/9 + 4/9 * 3/4 * 1/3
    = 1/3, not p("ba") = 2/9; TV over 2 tokens = 1/9 (the mass moves from "bb": 1/3, not 4/9).
    """
    P, Q = example_pair()
    law = functools.partial(hsd_law, variant=variant)
    first_two = multi_iteration_law(law, P, Q, 2, L=2)
    assert first_two[(1, 0)] == pytest.approx(1 / 3, abs=1e-15)
    assert first_two[(1, 1)] == pytest.approx(1 / 3, abs=1e-15)
    assert lossless_tv(law, P, Q, L=2) == pytest.approx(1 / 9, abs=1e-15)


@pytest.mark.parametrize("variant", VARIANTS)
def test_expected_tau_exceeds_block_verification(variant):
    """By hand: drafts ab, ba, bb have joint ratio >= 1 (tau = 2); aa passes its top test w.p. 1/4
    and otherwise falls to the root: E[tau] = 2 * (5/9 + 4/9 * 1/4) = 4/3 > BV's 11/9."""
    P, Q = example_pair()
    law = functools.partial(hsd_law, variant=variant)
    assert expected_tau(iteration_law(law, P, Q, L=2)) == pytest.approx(4 / 3, abs=1e-15)
    assert expected_tau(iteration_law(block_law, P, Q, L=2)) == pytest.approx(11 / 9, abs=1e-15)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("variant", VARIANTS)
def test_single_token_blocks_are_token_wise_sampling(seed, variant):
    """L = 1: the top test is min(1, p/q) and the residual max(p - q, 0), exactly token SD."""
    P, Q = random_pair(3, seed)
    law = functools.partial(hsd_law, variant=variant)
    assert total_variation(iteration_law(law, P, Q, L=1),
                           iteration_law(token_law, P, Q, L=1)) <= 1e-15


@pytest.mark.parametrize("seed", range(4))
def test_biased_on_random_pairs(seed):
    """Not only on the example: every random V = 3 pair at L = 2 is off the target law."""
    P, Q = random_pair(3, seed)
    assert lossless_tv(hsd_law, P, Q, L=2) > 1e-3


def test_the_class_does_not_claim_losslessness():
    assert HSDVerifier.lossless is False
    with pytest.raises(ValueError, match="variant"):
        HSDVerifier(variant="paper")


@dataclasses.dataclass(frozen=True, kw_only=True)
class NeverStepsBack(HSDVerifier):
    """Mutation: after a rejected top test, stop at branch L-1 (h_t = 1 below the top)."""

    def __call__(self, key, drafts, q, p, state=()):
        L = drafts.shape[1]
        x, q, p = drafts[0], q[0], p[0]
        k_coin, k_extra = jax.random.split(key)
        pos = jnp.arange(L)
        w = jnp.exp(jnp.minimum(jnp.cumsum(jnp.log(p[pos, x]) - jnp.log(q[pos, x])), 0.0))
        full = jax.random.uniform(k_coin) < w[-1]
        tau = jnp.where(full, L, L - 1).astype(jnp.int32)
        w_all = jnp.concatenate([jnp.ones((1,)), w])
        r = jnp.maximum(w_all[L - 1] * p[L - 1] - q[L - 1], 0.0)
        law = jnp.where(full, p[L], jnp.where(r.sum() > 0, r / r.sum(), p[L - 1]))
        return emit(x, tau, sample(k_extra, law), jnp.int32(0)), state


ResidualIsTarget = residual_is_target(HSDVerifier)


@pytest.mark.parametrize("variant", [
    "released", pytest.param("simulation", marks=pytest.mark.slow)])  # same kernel, one branch
def test_monte_carlo_matches_exact_law_and_catches_mutations(variant):
    P, Q = random_pair(3, 4)
    exact = iteration_law(functools.partial(hsd_law, variant=variant), P, Q, L=3)
    fits = {}
    for label, verifier in [("real", get_verifier("hsd", variant=variant)),
                            ("never-steps-back mutant", NeverStepsBack(variant=variant)),
                            ("residual=p mutant", ResidualIsTarget(variant=variant))]:
        counts = sample_emitted(verifier, P, Q, L=3, K=1, n=100_000, seed=1, chunk=100_000)
        fits[label] = chi_square(counts, exact)
        print(f"hsd[{variant}] MC {label}: {fits[label]}")
    assert fits["real"].passes(FPR)
    assert not fits["never-steps-back mutant"].passes(FPR)
    assert not fits["residual=p mutant"].passes(FPR)


@pytest.mark.parametrize("seed", range(3))
def test_released_expected_tau_is_the_single_draft_bound(seed):
    """Why HSD looks better than BV: its E[tau] is exactly sum_t sum_z min(p(z), q(z)), the bound
    that greedy block verification reaches only by carrying state across iterations and that no
    stateless lossless verifier reaches (BV is optimal among them, Sun et al. 2025)."""
    from algorithms.exact import single_draft_bound

    P, Q = random_pair(3, seed)
    for L in (2, 3):
        assert expected_tau(iteration_law(hsd_law, P, Q, L=L)) == pytest.approx(
            single_draft_bound(P, Q, L), abs=1e-12)
