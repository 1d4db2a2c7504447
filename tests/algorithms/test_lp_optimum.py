"""The LP optimum over stateless lossless verifiers: BV at K = 1, monotone in K, above every
lossless verifier, below the OT bound; HSD's E[tau] is above it, so HSD cannot be lossless."""

import numpy as np
import pytest

from algorithms.exact import (
    ConstantModel,
    enumerate_drafts,
    example_pair,
    expected_tau,
    get_exact_law,
    iteration_law,
    random_pair,
)
from algorithms.exact.bounds import block_bound, optimal_acceptance
from algorithms.exact.engine_drafts import topk_paths
from algorithms.exact.lp_optimum import (
    optimal_expected_tau,
    optimal_expected_tau_for,
    optimal_expected_tau_given,
)


@pytest.mark.parametrize("pair, L", [("example", 2), ("example", 3), (0, 2), (1, 2), (2, 3)])
def test_one_draft_optimum_is_block_verification(pair, L):
    """Sun et al. (ICLR 2025) / Thomas & Pal: BV is the best single-draft lossless verifier."""
    P, Q = example_pair() if pair == "example" else random_pair(3, pair)
    bv = expected_tau(iteration_law(get_exact_law("block"), P, Q, L=L))
    assert optimal_expected_tau(P, Q, L=L, K=1) == pytest.approx(bv, abs=1e-9)


def test_example_optimum_is_monotone_and_dominates():
    P, Q = example_pair()
    L = 2
    best = [optimal_expected_tau(P, Q, L=L, K=K) for K in (1, 2, 3)]
    assert best[0] <= best[1] + 1e-9 <= best[2] + 2e-9
    for K, opt in zip((1, 2, 3), best, strict=True):
        assert opt <= block_bound(P, Q, L=L, K=K) + 1e-9
        for name in ("spectr", "traversal", "multipath_block", "importance"):
            e = expected_tau(iteration_law(get_exact_law(name), P, Q, L=L, K=K))
            assert e <= opt + 1e-9, (name, K)


def test_hsd_exceeds_what_any_lossless_verifier_can_reach():
    """Example, L = 2: HSD's 4/3 > the LP optimum 11/9, so no lossless rule emits that."""
    P, Q = example_pair()
    assert optimal_expected_tau(P, Q, L=2, K=1) == pytest.approx(11 / 9, abs=1e-9)
    assert expected_tau(iteration_law(get_exact_law("hsd"), P, Q, L=2)) > 11 / 9 + 0.1


@pytest.mark.parametrize("concentration", [0.05, 0.1])
def test_peaked_laws_solve_and_one_draft_is_still_block_verification(concentration):
    """Peaked laws put products of probabilities near 1e-28 into the LP; in the old variables
    HiGHS rounded them to zero and called the feasible LP infeasible. BV's E[tau], from its own
    exact law, is the K = 1 answer; K = 2, 3 must solve and stay above the lossless verifiers."""
    P, Q = random_pair(3, 7, concentration)
    bv = expected_tau(iteration_law(get_exact_law("block"), P, Q, L=2))
    assert optimal_expected_tau(P, Q, L=2, K=1) == pytest.approx(bv, abs=1e-8)
    for K in (2, 3):
        opt = optimal_expected_tau(P, Q, L=2, K=K)
        for name in ("specinfer", "multipath_block"):
            assert expected_tau(iteration_law(get_exact_law(name), P, Q, L=2, K=K)) <= opt + 1e-8


# --- The structures an engine rule sees (issue 45): one fixed draft set, and alpha* at L = 1 ---

P3, Q3 = (1 / 2, 1 / 4, 1 / 4), (1 / 4, 1 / 4, 1 / 2)


def _const(probs):
    return ConstantModel(len(probs), probs)


@pytest.mark.parametrize("K, expected", [(1, 3 / 4), (2, 15 / 16), (3, 1.0)])
def test_iid_optimum_at_one_token_is_hu_et_al_alpha_star_by_hand(K, expected):
    """p = (1/2, 1/4, 1/4), q = (1/4, 1/4, 1/2). K = 1: sum_x min(p, q) = 1/4 + 1/4 + 1/4. K >= 2:
    only token 0 is short: a draft carries it w.p. 1 - (3/4)^K (7/16 < 1/2 at K = 2, 37/64 >= 1/2
    at K = 3), tokens 1 and 2 are carried w.p. >= 1/4; so 1 - (1/2 - 7/16) = 15/16, then 1."""
    P, Q = _const(P3), _const(Q3)
    assert optimal_expected_tau(P, Q, L=1, K=K) == pytest.approx(expected, abs=1e-9)
    assert optimal_acceptance(np.array(P3), np.array(Q3), K) == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("K", [1, 2, 3])
@pytest.mark.parametrize("pair", ["example", 0, 1, "peaked"])
def test_iid_optimum_at_one_token_equals_optimal_acceptance(pair, K):
    """Two independent computations, an LP over every draft set and Hu et al.'s min-cut over
    the V + 1 sorted prefix sets, agree to 1e-9 (the running example: 2/3, 8/9, 1)."""
    P, Q = (example_pair() if pair == "example" else random_pair(3, 5, 0.1) if pair == "peaked"
            else random_pair(3, pair))
    lp = optimal_expected_tau(P, Q, L=1, K=K)
    assert lp == pytest.approx(optimal_acceptance(P(()), Q(()), K), abs=1e-9)
    if pair == "example":
        assert lp == pytest.approx({1: 2 / 3, 2: 8 / 9, 3: 1.0}[K], abs=1e-9)


@pytest.mark.parametrize("roots, p_S", [(((0,),), 1 / 2), (((1,), (2,)), 1 / 2),
                                        (((0,), (1,)), 3 / 4), (((0,), (1,), (2,)), 1.0)])
def test_fixed_root_set_optimum_is_the_target_mass_on_it(roots, p_S):
    """One deterministic draft set of distinct root tokens S, L = 1: accept the target's own
    sample when it lies in S, so p(S), and no lossless rule accepts more."""
    assert optimal_expected_tau_given(_const(P3), [(roots, 1.0)], L=1) == pytest.approx(
        p_S, abs=1e-9)


def test_engine_structures_by_hand_on_the_running_example():
    """p = (1/3, 2/3), q = (2/3, 1/3) at every context, L = 2. Argmax chain aa: p(a) + p(aa) =
    1/3 + 1/9. Top-2 paths aa, ba: every root, then p(aa) + p(ba) = 1/9 + 2/9. Top-1 = argmax."""
    P, Q = example_pair()
    assert optimal_expected_tau_for(P, Q, L=2, K=1, structure="argmax") == pytest.approx(
        4 / 9, abs=1e-9)
    assert optimal_expected_tau_for(P, Q, L=2, K=1, structure="topk") == pytest.approx(
        4 / 9, abs=1e-9)
    assert optimal_expected_tau_for(P, Q, L=2, K=2, structure="topk") == pytest.approx(
        4 / 3, abs=1e-9)
    # L = 1: the argmax root a carries p(a) = 1/3, both roots carry 1
    assert optimal_expected_tau_for(P, Q, L=1, K=1, structure="argmax") == pytest.approx(
        1 / 3, abs=1e-9)
    assert optimal_expected_tau_for(P, Q, L=1, K=2, structure="topk") == pytest.approx(
        1.0, abs=1e-9)


@pytest.mark.parametrize("seed, L, K", [(0, 2, 2), (1, 3, 3), (2, 2, 1)])
def test_fixed_tree_optimum_is_the_target_mass_of_its_nodes(seed, L, K):
    """For one fixed draft set the optimum is sum over the tree's nodes z (|z| >= 1) of p(z)
    (module docstring). The node sum is written out here from the target's laws alone."""
    P, Q = random_pair(3, seed)
    drafts = topk_paths(Q, (), L, K)
    nodes = {d[:t] for d in drafts for t in range(1, L + 1)}
    mass = 0.0
    for z in nodes:
        pz = 1.0
        for i, x in enumerate(z):
            pz *= P(z[:i])[x]
        mass += pz
    lp = optimal_expected_tau_for(P, Q, L=L, K=K, structure="topk")
    assert lp == pytest.approx(mass, abs=1e-9)


def test_fixed_set_optimum_sees_q_only_through_the_drafts():
    """Two drafts laws with the same argmax chain give the same optimum; one with another chain
    changes it (p = (1/2, 1/4, 1/4): chain 00 -> 1/2 + 1/4, chain 22 -> 1/4 + 1/16)."""
    P = _const(P3)
    same = [optimal_expected_tau_for(P, _const(q), L=2, K=1, structure="argmax")
            for q in ((0.5, 0.3, 0.2), (0.9, 0.05, 0.05))]
    assert same == pytest.approx([3 / 4, 3 / 4], abs=1e-9)
    assert optimal_expected_tau_for(P, _const(Q3), L=2, K=1, structure="argmax") == pytest.approx(
        1 / 4 + 1 / 16, abs=1e-9)


def test_iid_route_through_the_general_lp_is_unchanged():
    """optimal_expected_tau is the general LP fed every i.i.d. draft set: the example's 11/9."""
    P, Q = example_pair()
    sets = list(enumerate_drafts(Q, (), 2, 1))
    assert optimal_expected_tau_given(P, sets, L=2) == pytest.approx(11 / 9, abs=1e-9)
    assert optimal_expected_tau_for(P, Q, L=2, K=1) == pytest.approx(11 / 9, abs=1e-9)
