"""The LP optimum over stateless lossless verifiers: BV at K = 1, monotone in K, above every
lossless verifier, below the OT bound; HSD's E[tau] is above it, so HSD cannot be lossless."""

import pytest

from algorithms.exact import example_pair, expected_tau, get_exact_law, iteration_law, random_pair
from algorithms.exact.bounds import block_bound
from algorithms.exact.lp_optimum import optimal_expected_tau


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
