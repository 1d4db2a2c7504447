"""Every (drafter, verifier) pair: lossless with exact coverage for its draft structure, a
declared lossy port, or refused before compiling."""

import pytest

import specjax
from algorithms.exact import exact_laws
from algorithms.exact.lookup import FIXED_LAWS
from algorithms.verifiers import (
    DETERMINISTIC,
    GREEDY,
    IID,
    STOPPED,
    check_pairing,
    get_verifier,
    list_verifiers,
)
from specjax.drafters import DRAFTERS

PAIRS = [(d, v, K) for d in sorted(DRAFTERS) for v in list_verifiers() for K in (1, 3)]


def verdict(drafter_name: str, verifier_name: str, K: int) -> str:
    drafter_cls, verifier = DRAFTERS[drafter_name], get_verifier(verifier_name)
    try:
        check_pairing(verifier, drafter_cls.draft_structure, K, drafter_name=drafter_name)
    except ValueError:
        return "refused"
    return "lossless" if verifier.lossless else "declared lossy"


# verifier -> the engine test of its sampled law on stopped drafts (each with a failing mutant)
STOPPED_SAMPLED = {"token": "test_adaptive_drafter.py", "specinfer": "test_dynamic_tree.py"}


def test_drafters_declare_their_structure():
    assert {n: c.draft_structure for n, c in DRAFTERS.items()} == {
        "model": IID, "early_exit": IID, "ngram": DETERMINISTIC, "greedy": GREEDY,
        "eagle": IID, "medusa": IID, "adaptive": STOPPED,
        "dynamic_tree": STOPPED, "hybrid": DETERMINISTIC}


@pytest.mark.parametrize("drafter_name, verifier_name, K", PAIRS)
def test_every_accepted_lossless_pair_has_an_exact_check(drafter_name, verifier_name, K):
    """A pair is accepted as lossless only when an exact law covers its structure: the i.i.d.
    laws (K = 1 lookup or greedy drafts are one draw from the reported law, so these cover them
    too), the fixed-draft laws of ``algorithms.exact.lookup`` for K > 1 lookup drafts, or the
    greedy-drafting law (``greedy_draft_law(drafting="greedy")``) for K > 1 greedy drafts.
    Stopped drafts have no exact law; each verifier that takes them has the engine's sampled-law
    test with a mutant that fails (``STOPPED_SAMPLED``)."""
    v = verdict(drafter_name, verifier_name, K)
    print(f"{drafter_name:>10} x {verifier_name:<16} K={K}: {v}")
    if v != "lossless":
        return
    structure = DRAFTERS[drafter_name].draft_structure
    if structure == DETERMINISTIC and K > 1:
        assert verifier_name in FIXED_LAWS
    elif structure == STOPPED:
        assert verifier_name in STOPPED_SAMPLED
    elif structure == GREEDY and K > 1:
        assert verifier_name == "greedy_draft"  # the only law enumerating greedy drafting
    else:
        assert verifier_name in exact_laws()


def test_known_verdicts():
    assert verdict("ngram", "spectr", 3) == "lossless"  # per-draft RRS fallback
    assert verdict("ngram", "spectr_gbv", 3) == "refused"
    assert verdict("ngram", "spectr_gbv", 1) == "declared lossy"
    assert verdict("model", "spectr_gbv", 3) == "declared lossy"
    assert verdict("ngram", "token", 3) == "refused"  # max_drafts = 1
    assert verdict("greedy", "greedy_draft", 3) == "lossless"
    assert verdict("greedy", "specinfer", 3) == "refused"  # built for i.i.d. / lookup drafts
    assert verdict("greedy", "token", 1) == "lossless"  # K = 1: one draw from q


def test_api_refuses_a_forbidden_pair_before_compiling(monkeypatch):
    import specjax.api as api

    monkeypatch.setattr(api.jax, "jit", lambda *a, **k: pytest.fail("compiled"))
    with pytest.raises(ValueError, match=r"pairing: NgramDrafter \(deterministic drafts, K=3\) "
                                         r"with SpecTrGBVVerifier is refused"):
        specjax.generate("toy-target", [[1, 2, 3]], drafter=specjax.drafters.NgramDrafter(K=3),
                         verifier="spectr_gbv", max_new_tokens=4)


def test_claims_are_class_level():
    with pytest.raises(ValueError, match="bad options"):
        get_verifier("spectr_gbv", lossless=True)
    with pytest.raises(ValueError, match="bad options"):
        get_verifier("specinfer", max_drafts=1)
