"""One verify step of every registered verifier, jitted, against its own exact one-step law,
for every case of ``algorithms.exact.one_step`` (its docstring lists the cases, shapes and the
G-test's pooling): N verify steps per case in one vmapped batch, the emitted strings against
the float64 exact law of one iteration.

False-positive rate: each G-test rejects a correct verifier with probability ALPHA = 1e-4 (up to
the chi-square approximation), so across the module's len(FITS) G-tests on correct verifiers (46
with the 12 verifiers registered today) and ordered_rrs's ratio-order case, 47 in all, the
family-wise rate is at most 47 x 1e-4 = 0.47 % (Bonferroni). Seeds are fixed, so a run is
reproducible: the same code gives the same verdict every time. The mutant tests at the end show
every kind of case rejects a broken verifier at that ALPHA.
"""

from __future__ import annotations

import pytest
from mutants import DropsLowerBandMass, OrderedRRSPlainQ, correction_is_target

from algorithms.exact import exact_law_of, iteration_law, total_variation
from algorithms.exact.lookup import FIXED_LAWS
from algorithms.exact.one_step import LOOKUPS, MODELS, fit, g_test, kinds, models, shape
from algorithms.verifiers import get_verifier, list_verifiers

# --- every registered verifier ------------------------------------------------------------------

NAMES = list_verifiers()


FITS = [(name, kind) for name in NAMES for kind in kinds(name)]


@pytest.mark.parametrize("name, kind", FITS)
def test_one_step_law_matches_exact_law(name, kind):
    v = get_verifier(name)
    result = fit(v, kind)
    print(f"{name} {kind} (K, L) = {shape(v)}: {result}")
    assert result.passes(), result


def test_every_lookup_case_has_a_fixed_draft_law():
    """A multi-draft verifier that takes lookup drafts needs a fixed-draft exact law."""
    assert {n for n, k in FITS if k in LOOKUPS} == set(FIXED_LAWS)


# --- the test can fail ---------------------------------------------------------------------------

def test_g_test_rejects_probability_zero_outcomes_and_accepts_exact_counts():
    exact = {(0,): 0.5, (1,): 0.3, (2, 0): 0.2 - 1e-6, (2, 1): 1e-6}
    exact_counts = {(0,): 5000, (1,): 3000, (2, 0): 2000}
    assert g_test(exact_counts, exact).passes()
    assert not g_test({**exact_counts, (2, 2): 1}, exact).passes()  # one impossible sample
    assert not g_test({(0,): 5200, (1,): 2800, (2, 0): 2000}, exact).passes()  # 4 sigma off


# One instance for every case: correction_is_target builds a new class per call, i.e. a compile.
SPECINFER_RESIDUAL_DROPPED = correction_is_target(type(get_verifier("specinfer")))()


@pytest.mark.parametrize("kind", MODELS + LOOKUPS)
def test_one_step_test_rejects_a_residual_dropped(kind):
    """After a rejection the extra token comes from p, not the residual: every kind of case,
    i.i.d. and lookup, catches it (shown on one kernel: each mutant costs a compile)."""
    result = fit(SPECINFER_RESIDUAL_DROPPED, kind, exact_of=get_verifier("specinfer"))
    print(f"specinfer residual-dropped mutant, {kind}: {result}")
    assert not result.passes()


@pytest.mark.parametrize("kind", ["random", "constant_q"])
def test_one_step_test_rejects_the_band_kernel_against_the_ratio_law(kind):
    """The mismatch an outside check reported: the default kernel (order="band") against the law
    of the reconstruction's example order (ascending p/q, docs/verifiers/multipath_block.md).
    Both are lossless, but the selected draft, hence q^Γ and the residuals, differ; on one-hot q
    (one block) the two laws coincide."""
    band, ratio = get_verifier("multipath_block"), get_verifier("multipath_block", order="ratio")
    P, Q = models(kind)
    K, L = shape(band)
    laws = [iteration_law(exact_law_of(v), P, Q, L=L, K=K) for v in (band, ratio)]
    assert total_variation(*laws) > 0.01  # this case tells the two orders apart
    result = fit(band, kind, exact_of=ratio)
    print(f"band kernel vs ratio law, {kind}: {result}")
    assert not result.passes()


@pytest.mark.parametrize("kind", ["random", "constant_q"])
def test_one_step_test_rejects_multipath_with_band_zero_mass_dropped(kind):
    """The select form of the band order's F_< without band 0's mass under band 1's tokens:
    q^Γ is wrong, and so is the law of (tau, tokens)."""
    result = fit(DropsLowerBandMass(), kind, exact_of=get_verifier("multipath_block"))
    print(f"multipath band-0-mass-dropped mutant, {kind}: {result}")
    assert not result.passes()


@pytest.mark.parametrize("kind", ["random", "constant_q", "lookup_distinct", "lookup_duplicate"])
def test_one_step_test_rejects_ordered_rrs_tested_against_plain_q(kind):
    """Ordered RRS's candidates tested against q instead of their order-statistic law Q_j: biased on
    every case but one-hot i.i.d. drafts (all survivors carry the same point mass, Q_j = q)."""
    result = fit(OrderedRRSPlainQ(), kind, exact_of=get_verifier("ordered_rrs"))
    print(f"ordered_rrs plain-q mutant, {kind}: {result}")
    assert not result.passes()


def test_ordered_rrs_ratio_order_matches_its_exact_law():
    """The exact-ratio order (a sort per level) against its own law; the default "band" order is
    covered by the registered cases above (on lookup drafts every order has the same law)."""
    result = fit(get_verifier("ordered_rrs", order="ratio"), "random")
    print(f"ordered_rrs order=ratio random: {result}")
    assert result.passes(), result
