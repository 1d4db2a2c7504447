"""Optimal multi-draft acceptance (Hu et al. 2025) and the membership-OT block bound
(docs/verifiers/bounds.md), and the property that no lossless verifier beats the bound."""

import importlib.util
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from algorithms.exact import (
    exact_law_of,
    exact_laws,
    example_pair,
    expected_tau,
    iteration_law,
    random_pair,
    single_draft_bound,
    token_law,
)
from algorithms.exact.bounds import block_bound, optimal_acceptance
from algorithms.exact.specinfer import specinfer_law
from algorithms.exact.spectr import kseq_acceptance
from algorithms.verifiers import get_verifier, list_verifiers


def brute_force_optimum(p, q, K):
    """min over all 2^V subsets T of p(T) + 1 - q(T)^K (the definition, no sorting)."""
    best = np.inf
    for mask in itertools.product((False, True), repeat=len(p)):
        m = np.asarray(mask, bool)
        best = min(best, p[m].sum() + 1.0 - q[m].sum() ** K)
    return best


def law_vector(draw, V):
    """A probability vector over V tokens, sometimes with zeros (so ratios hit 0 and inf)."""
    w = np.asarray(draw(st.lists(st.floats(0.0, 1.0), min_size=V, max_size=V)))
    w = np.where(w < 0.15, 0.0, w)
    if w.sum() <= 0:
        w[draw(st.integers(0, V - 1))] = 1.0
    return w / w.sum()


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.data(), st.integers(2, 8), st.integers(1, 6))
def test_sorted_minimum_equals_brute_force(data, V, K):
    p, q = law_vector(data.draw, V), law_vector(data.draw, V)
    assert optimal_acceptance(p, q, K) == pytest.approx(brute_force_optimum(p, q, K), abs=1e-12)


@pytest.mark.parametrize("seed", range(10))
def test_one_draft_optimum_is_one_minus_tv(seed):
    """K = 1: the maximal coupling accepts sum_x min(p, q) (Leviathan Lemma 3.3)."""
    rng = np.random.default_rng(seed)
    p, q = rng.dirichlet(np.ones(5)), rng.dirichlet(np.ones(5))
    assert optimal_acceptance(p, q, 1) == pytest.approx(np.minimum(p, q).sum(), abs=1e-12)


@pytest.mark.parametrize("K, expected", [(1, 2 / 3), (2, 0.888889), (3, 1.0), (4, 1.0)])
def test_optimum_on_the_example(K, expected):
    """docs/verifiers/bounds.md: alpha* on the running example."""
    P, Q = example_pair()
    assert optimal_acceptance(P(()), Q(()), K) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("seed", range(8))
def test_rrs_and_kseq_within_their_guarantees(seed):
    """Single token: RRS and K-SEQ never exceed alpha*, and K-SEQ reaches at least
    (1 - (1 - 1/K)^K) alpha* (SpecTr's K-SEQ guarantee, docs/verifiers/spectr.md)."""
    P, Q = random_pair(2 + seed % 3, seed)
    p, q = P(()), Q(())
    for K in (2, 3, 4):
        opt = optimal_acceptance(p, q, K)
        kseq = kseq_acceptance(p, q, K)
        rrs = expected_tau(iteration_law(specinfer_law, P, Q, L=1, K=K))
        assert rrs <= opt + 1e-12 and kseq <= opt + 1e-12
        assert kseq >= (1 - (1 - 1 / K) ** K) * opt - 1e-12


@pytest.mark.parametrize("K, expected", [(1, 1.333333), (2, 1.654321), (3, 1.853224),
                                         (4, 1.931260)])
def test_block_bound_on_the_example(K, expected):
    """docs/verifiers/bounds.md: the block bound on the running example (L = 2)."""
    P, Q = example_pair()
    assert block_bound(P, Q, L=2, K=K) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("seed, K, expected", [(0, 2, 1.2788), (1, 3, 0.9216), (3, 4, 1.5402)])
def test_block_bound_on_the_random_pairs_table(seed, K, expected):
    P, Q = random_pair(3, seed)
    assert block_bound(P, Q, L=2, K=K) == pytest.approx(expected, abs=5e-5)


@pytest.mark.parametrize("seed", range(4))
def test_block_bound_with_one_draft_is_the_single_draft_bound(seed):
    P, Q = random_pair(3, seed)
    assert block_bound(P, Q, L=2, K=1) == pytest.approx(single_draft_bound(P, Q, L=2), abs=1e-12)


def lossless_verifiers_with_exact_laws():
    """Lossless verifiers whose exact law draws i.i.d. drafts from Q, the drafts the bound is
    for (engine rules refereed on deterministic top-k trees are left out)."""
    names = []
    for name in list_verifiers():
        module = exact_laws().get(name, "").split(":")[0]
        v = get_verifier(name)
        if (module and importlib.util.find_spec(module) and v.lossless
                and getattr(v, "referee_drafts", "iid") == "iid"):
            names.append(name)
    return names


PAIRS = [(V, L, seed) for seed, (V, L) in enumerate(itertools.product((2, 3), (1, 2)))]


@pytest.mark.parametrize("name", lossless_verifiers_with_exact_laws())
@pytest.mark.parametrize("V, L, seed", PAIRS)
def test_lossless_verifiers_stay_below_the_bound(name, V, L, seed):
    """Every registered lossless verifier: E[tau] <= block_bound at K = 1..3 (single-draft
    verifiers at K = 1), and at K = 1 no worse than token verification, except the engine rules
    (``models``), which copy engines that accept less by design (exact match, truncation)."""
    verifier = get_verifier(name)
    law = exact_law_of(verifier)
    P, Q = random_pair(V, 40 + seed, concentration=0.5 + seed % 2)
    for K in (1, 2, 3) if verifier.max_drafts is None else (1,):
        tau = expected_tau(iteration_law(law, P, Q, L=L, K=K))
        assert tau <= block_bound(P, Q, L=L, K=K) + 1e-12, (name, K)
        if K == 1 and not hasattr(verifier, "models"):
            assert tau >= expected_tau(iteration_law(token_law, P, Q, L=L)) - 1e-12, name


def test_includes_this_issues_verifiers():
    assert {"specinfer", "spectr", "token"} <= set(lossless_verifiers_with_exact_laws())


def test_rejects_bad_inputs():
    p = np.array([0.5, 0.5])
    with pytest.raises(ValueError, match="K must be an integer >= 1"):
        optimal_acceptance(p, p, 0)
    with pytest.raises(ValueError, match="q must be a probability vector"):
        optimal_acceptance(p, np.array([0.5, 0.6]), 2)
    with pytest.raises(ValueError, match="same shape"):
        optimal_acceptance(p, np.array([0.2, 0.3, 0.5]), 2)
    with pytest.raises(ValueError, match="L and K must be >= 1"):
        block_bound(*example_pair(), L=0, K=2)
