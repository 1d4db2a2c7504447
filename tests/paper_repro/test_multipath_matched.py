"""The matched multi-path comparison: its laws, its winner logic and its optimum guard."""

import numpy as np
import pytest

from paper_repro import multipath_matched as mm


def test_tempered_laws_are_laws_and_temperature_sharpens():
    cold, _ = mm.pair("flat", 0.3, seed=1)
    warm, _ = mm.pair("flat", 1.0, seed=1)
    for m in (cold, warm):
        assert np.isclose(m(()).sum(), 1.0) and (m(()) > 0).all()
    # p_T is proportional to p_1^(1/T): check against that power by hand
    base = warm(())
    assert np.allclose(cold(()), base ** (1 / 0.3) / (base ** (1 / 0.3)).sum())
    assert cold(()).max() > warm(()).max()


def test_the_draft_differs_from_its_target_but_shares_its_base():
    P, Q = mm.pair("peaked", 1.0, seed=2)
    assert not np.allclose(P(()), Q(()))
    P2, _ = mm.pair("peaked", 1.0, seed=2)
    assert np.array_equal(P(()), P2(()))


def test_winner_is_the_highest_mean_fraction_with_ties_named():
    rows = [{"shape": "flat", "T": 1.0, "K": 2, "seed": s, "lp": 2.0,
             "tau": {"a": 1.0, "b": b, "c": 1.0}} for s, b in ((0, 1.2), (1, 0.9))]
    # fractions: a 0.5, b (0.6 + 0.45) / 2 = 0.525, c 0.5
    assert mm.winners(rows, ["a", "b", "c"]) == {("flat", 1.0, 2): "b"}
    rows[1]["tau"]["b"] = 0.8  # b's mean falls to exactly a's and c's
    assert mm.winners(rows, ["a", "b", "c"]) == {("flat", 1.0, 2): "a = b = c"}


def test_a_verifier_above_the_optimum_stops_the_run(monkeypatch):
    """The guard that makes the table trustworthy: shrink the optimum and it must fire."""
    monkeypatch.setattr(mm, "optimal_expected_tau", lambda P, Q, *, L, K: 0.1)
    with pytest.raises(AssertionError, match="> LP"):
        mm.measure(["specinfer"], seeds=range(1), ks=(2,), temperatures=(1.0,),
                   shapes=("flat",))


def test_every_lossless_multidraft_verifier_is_compared_and_none_beats_the_optimum():
    names = mm.verifiers()
    assert {"specinfer", "spectr", "traversal", "multipath_block"} <= set(names)
    assert "spectr_gbv" not in names and "greedy_draft" not in names  # biased / own drafting
    rows = mm.measure(names, seeds=range(1), ks=(2,), temperatures=(0.6,), shapes=("peaked",))
    assert all(0 < r["tau"][n] <= r["lp"] + 1e-9 for r in rows for n in names)
