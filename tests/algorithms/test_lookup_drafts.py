"""Lookup (deterministic, non-i.i.d.) drafts: exact losslessness of every multi-draft verifier
that lists DETERMINISTIC in its draft structures, Monte Carlo of the JAX kernels on a fixed draft
set, and the mutants both checks must reject."""

import pytest
from mutants import KSEQEverywhere, lead_law_for_all, spectr_kseq_everywhere_fixed

from algorithms.exact import lossless_tv, random_pair
from algorithms.exact.lookup import (
    FIXED_LAWS,
    LookupDrafts,
    lookup_lossless_tv,
    spectr_fixed,
)
from algorithms.exact.models import ConstantModel
from algorithms.exact.monte_carlo import chi_square, sample_fixed
from algorithms.verifiers import DETERMINISTIC, get_verifier, list_verifiers

FPR = 1e-6  # false-positive rate of every Monte Carlo test

# (V, K, L, duplicates): distinct blocks with shared prefixes, duplicates of draft 0, L = 3.
CELLS = [(3, 2, 2, 0), (3, 3, 2, 0), (2, 3, 2, 0), (3, 3, 2, 1), (3, 4, 2, 2), (3, 3, 3, 0)]


def test_every_verifier_claiming_lookup_drafts_has_a_fixed_draft_law():
    claims = {n for n in list_verifiers()
              if get_verifier(n).lossless and DETERMINISTIC in get_verifier(n).draft_structures
              and get_verifier(n).max_drafts is None}
    assert claims == set(FIXED_LAWS), claims ^ set(FIXED_LAWS)


@pytest.mark.parametrize("name", sorted(FIXED_LAWS))
@pytest.mark.parametrize("V, K, L, dup", CELLS)
@pytest.mark.parametrize("seed", [0, 1])
def test_exactly_lossless_on_lookup_drafts(name, V, K, L, dup, seed):
    P, _ = random_pair(V, seed)
    tv = lookup_lossless_tv(FIXED_LAWS[name], P, LookupDrafts(V, K, L, seed, dup))
    assert tv <= 1e-12


def test_exact_checker_rejects_kseq_on_lookup_drafts():
    """The pre-fix SpecTr rule: two fixed drafts [0], [1], p = (1/2, 1/2, 0). K-SEQ with q = δ_0
    and k = 2: rho* solves 1 - (1 - 1/(2 rho))^2 = 1/2 (beta = p(0)/rho), i.e.
    rho* = 1 / (2 - sqrt 2); draft 0 passes w.p. 1/(2 rho*) = 1 - 1/sqrt 2, and then draft 1
    (own q(1) = 1) w.p. min(1, p(1)/rho*) = 1 - 1/sqrt 2. So P(0) = 1 - 1/sqrt 2 = 0.2929 != 1/2."""
    P = ConstantModel(3, probs=(0.5, 0.5, 0.0))
    first = {}
    for e, pr in spectr_kseq_everywhere_fixed(P, ((0,), (1,))).items():
        first[e[0]] = first.get(e[0], 0.0) + pr
    assert abs(first[0] - (1 - 2**-0.5)) <= 1e-12
    fixed = {}
    for e, pr in spectr_fixed(P, ((0,), (1,))).items():
        fixed[e[0]] = fixed.get(e[0], 0.0) + pr
    assert abs(fixed[0] - 0.5) <= 1e-12
    # And over several iterations on random lookup drafts the bias is far above rounding.
    P, _ = random_pair(3, 0)
    assert lookup_lossless_tv(spectr_kseq_everywhere_fixed, P, LookupDrafts(3, 3, 2, 0)) > 1e-2


@pytest.mark.parametrize("name", ["token", "block", "greedy_block", "specinfer", "spectr",
                                  "traversal", "multipath_block"])
def test_one_lookup_draft_is_lossless_with_the_iid_laws(name):
    """K = 1: one draw from a one-hot law, so the i.i.d. exact laws apply with Q = draft 0."""
    from algorithms.exact import exact_law_of

    P, _ = random_pair(3, 2)
    Q = LookupDrafts(3, 2, 2, seed=2).first_draft_model()
    assert lossless_tv(exact_law_of(get_verifier(name)), P, Q, L=2, K=1) <= 1e-12


MC_CASES = [("specinfer", None), ("spectr", KSEQEverywhere), ("traversal", None),
            ("multipath_block", None)]


@pytest.mark.parametrize("name, mutant", MC_CASES)
def test_monte_carlo_on_a_lookup_draft_set_and_catches_mutants(name, mutant):
    """JAX kernel vs its fixed-draft exact law; a mutant that verifies every draft against draft
    0's q (lookup drafts treated as i.i.d.) must fail, and for SpecTr so must the pre-fix rule."""
    P, _ = random_pair(3, 1)
    drafts = ((0, 1), (1, 2), (0, 2), (0, 1))  # shared prefix, distinct blocks, a duplicate
    exact = FIXED_LAWS[name](P, drafts)
    verifier = get_verifier(name)
    real = chi_square(sample_fixed(verifier, P, drafts, n=60_000, seed=3), exact)
    mutants = [lead_law_for_all(type(verifier))()] + ([mutant()] if mutant else [])
    fits = [chi_square(sample_fixed(m, P, drafts, n=60_000, seed=3), exact) for m in mutants]
    print(f"{name} lookup MC: real {real}, mutants {fits}")
    assert real.passes(FPR)
    assert not any(f.passes(FPR) for f in fits)
