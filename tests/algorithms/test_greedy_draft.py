"""Greedy multi-drafting + its verifier (Hu et al., arXiv 2502.18779): exact losslessness of the
pair, the root acceptance against the closed form, Monte Carlo with a mutant verifier and a
drafter that misreports its law."""

import dataclasses
import functools

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
)
from algorithms.exact.greedy_draft import greedy_draft_law
from algorithms.exact.monte_carlo import chi_square, prefix_offset, sample_emitted
from algorithms.verifiers import get_verifier
from algorithms.verifiers.base import emit, sample
from algorithms.verifiers.greedy_draft import GreedyDraftVerifier

greedy_law = functools.partial(greedy_draft_law, drafting="greedy")

FPR = 1e-6  # false-positive rate of every Monte Carlo test
SIZES = [(2, 1, 1), (2, 2, 2), (3, 1, 2), (3, 2, 2), (3, 2, 3), (3, 3, 2), (4, 1, 3), (4, 2, 2)]


@pytest.mark.parametrize("drafting", ["greedy", "iid"])
@pytest.mark.parametrize("seed", range(8))
def test_exactly_lossless_on_random_pairs(seed, drafting):
    V, L, K = SIZES[seed]
    P, Q = random_pair(V, seed)
    law = functools.partial(greedy_draft_law, drafting=drafting)
    tv = lossless_tv(law, P, Q, L=L, K=K)
    print(f"greedy_draft[{drafting}] TV V={V} L={L} K={K}: {tv:.3e}")
    assert tv <= 1e-12


@pytest.mark.parametrize("name", sorted(adversarial_pairs(3)))
def test_exactly_lossless_on_adversarial_pairs(name):
    P, Q = adversarial_pairs(3)[name]
    for L, K in [(1, 2), (2, 2), (2, 3)]:
        assert lossless_tv(greedy_law, P, Q, L=L, K=K) <= 1e-12
        assert lossless_tv(greedy_draft_law, P, Q, L=L, K=K) <= 1e-12


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("K", [2, 3])
def test_root_acceptance_is_the_greedy_optimum(seed, K):
    """L = 1: E[tau] = p(top) + sum_{x not in top} min(p(x), q(x)/(1 - q(top))) (Hu et al.),
    computed here from a sort of q, independently of the exact law's drafting code."""
    P, Q = random_pair(4, seed)
    p, q = P(()), Q(())
    top = np.argsort(-q, kind="stable")[:K - 1]
    rest = np.setdiff1d(np.arange(4), top)
    alpha = p[top].sum() + np.minimum(p[rest], q[rest] / q[rest].sum()).sum()
    got = expected_tau(iteration_law(greedy_law, P, Q, L=1, K=K))
    assert got == pytest.approx(alpha, abs=1e-14)


def test_covering_the_vocabulary_accepts_the_first_token_always():
    """V = 2, K = 2: the fixed draft and the sampled one are both tokens, so tau >= 1."""
    P, Q = example_pair()
    law = iteration_law(greedy_law, P, Q, L=2, K=2)
    assert sum(pr for e, pr in law.items() if len(e) == 1) == pytest.approx(0.0, abs=1e-15)


def greedy_sample_inputs(key, q_table, p_table, *, V, L, K, report_restricted=True):
    """Hu et al.'s greedy drafting on a tabulated toy draft: K-1 fixed top tokens, one token from
    q restricted to the rest, then q-sampling below the root; q rows are each token's true law
    (``report_restricted=False`` is the misreporting mutant: the plain q row for the sample)."""
    q0 = q_table[0]
    top = jnp.argsort(-q0, stable=True)[jnp.arange(K - 1) % V]
    rest = q0.at[top].set(0.0)
    rest = rest / rest.sum()
    k_root, k_rest = jax.random.split(key)
    y = jax.random.categorical(k_root, jnp.where(rest > 0, jnp.log(rest), -jnp.inf))
    first = jnp.concatenate([top, y[None]]).astype(jnp.int32)
    first_law = jnp.concatenate([jax.nn.one_hot(top, V), (rest if report_restricted else q0)[None]])

    def continue_draft(k, x0, law0):
        code, tokens, q_rows, p_rows = x0, [x0], [law0], [p_table[0]]
        for i in range(1, L):
            idx = prefix_offset(i, V) + code
            q_rows.append(q_table[idx])
            p_rows.append(p_table[idx])
            x = jax.random.categorical(jax.random.fold_in(k, i), jnp.log(q_table[idx]))
            tokens.append(x.astype(jnp.int32))
            code = code * V + x
        p_rows.append(p_table[prefix_offset(L, V) + code])
        return jnp.stack(tokens), jnp.stack(q_rows), jnp.stack(p_rows)

    return jax.vmap(continue_draft)(jax.random.split(k_rest, K), first, first_law)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RootResidualIsTarget(GreedyDraftVerifier):
    """Mutation: when every root trial fails, the correction comes from p, not the residual."""

    def __call__(self, key, drafts, q, p, state=()):
        verdict, state = super().__call__(key, drafts, q, p, state)
        redraw = sample(jax.random.fold_in(key, 7), p[0, 0])
        extra = jnp.where(verdict.num_emitted == 1, redraw, verdict.tokens[0])
        alone = emit(drafts[0], jnp.int32(0), extra, jnp.int32(0)).tokens
        tokens = jnp.where(verdict.num_emitted == 1, alone, verdict.tokens)
        return verdict._replace(tokens=tokens), state


def test_monte_carlo_matches_exact_law_and_catches_mutations():
    P, Q = random_pair(4, 3)
    L, K = 2, 2
    exact = iteration_law(greedy_law, P, Q, L=L, K=K)
    misreport = functools.partial(greedy_sample_inputs, report_restricted=False)
    fits = {}
    for label, verifier, sampler in [
            ("real", get_verifier("greedy_draft"), greedy_sample_inputs),
            ("root residual=p mutant", RootResidualIsTarget(), greedy_sample_inputs),
            ("drafter reports q, not q_rest", GreedyDraftVerifier(), misreport)]:
        counts = sample_emitted(verifier, P, Q, L=L, K=K, n=100_000, seed=2, chunk=100_000,
                                sampler=sampler)
        fits[label] = chi_square(counts, exact)
        print(f"greedy_draft MC {label}: {fits[label]}")
    assert fits["real"].passes(FPR)
    assert not fits["root residual=p mutant"].passes(FPR)
    assert not fits["drafter reports q, not q_rest"].passes(FPR)


def test_monte_carlo_on_iid_drafts_with_shared_root_tokens():
    """K = 3 i.i.d. drafts over V = 3 often share the accepted root token, so the SpecInfer walk
    below the root runs; the JAX kernel must match the exact law there too."""
    P, Q = random_pair(3, 5)
    L, K = 3, 3
    exact = iteration_law(functools.partial(greedy_draft_law, drafting="iid"), P, Q, L=L, K=K)
    fits = {}
    for label, verifier in [("real", GreedyDraftVerifier()),
                            ("root residual=p mutant", RootResidualIsTarget())]:
        counts = sample_emitted(verifier, P, Q, L=L, K=K, n=100_000, seed=3, chunk=100_000)
        fits[label] = chi_square(counts, exact)
        print(f"greedy_draft iid MC {label}: {fits[label]}")
    assert fits["real"].passes(FPR)
    assert not fits["root residual=p mutant"].passes(FPR)
