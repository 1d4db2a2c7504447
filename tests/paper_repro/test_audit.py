"""Reduced real-model audit (``paper_repro.audit``) on the tiny random decoder: a lossless
multi-draft row passes, a drafter that misreports q fails, a forbidden pair is refused."""

import numpy as np
import pytest

from paper_repro.audit import ALPHA, ExactLaw, audit, render, rows
from specjax.models.config import tiny_config
from specjax.models.decoder import Decoder
from specjax.models.toy import ToyLoaded

PROMPT = [5, 9, 11, 5, 9, 11, 5, 9]


@pytest.fixture(scope="module")
def tiny():
    return ToyLoaded(name="tiny-target", model=Decoder.random(tiny_config("llama"), seed=0))


def test_exact_law_is_the_models_softmax(tiny):
    law = ExactLaw(tiny, PROMPT)
    logits = np.asarray(tiny.model.logits(np.asarray(PROMPT + [3], np.int32)), np.float64)
    want = np.exp(logits[-1] - logits[-1].max())
    # float32 logits, jitted (ExactLaw) vs eager (here): they differ by ~1e-6 relative.
    np.testing.assert_allclose(law.p2(3), want / want.sum(), rtol=1e-5)
    assert abs(law.p1.sum() - 1) < 1e-12


def test_forbidden_pair_is_listed_as_refused():
    listed = {(kind, name, K): refused for kind, _, name, K, refused in
              rows(["spectr_gbv", "specinfer"], ["ngram"], [3], L=2, exit_layers=1,
                   mutant_rows=())}
    assert listed[("ngram", "spectr_gbv", 3)].startswith("pairing:")
    assert listed[("ngram", "specinfer", 3)] is None


def test_lossless_row_passes_and_misreporting_drafter_fails(tiny):
    """False-positive rate ALPHA per row; the misreporting drafter moves the law by TV ~0.3."""
    results = audit(tiny, [PROMPT], verifiers=["specinfer"], drafters=("early_exit",), Ks=(3,),
                    samples=1000, exit_layers=1, batch=1000, mutant_rows=(("specinfer", 3),),
                    self_rows=(), log=lambda *_: None)
    bad, real = results  # the first misreporting row runs first (``rows``)
    assert real["drafter"] == "early_exit" and real["fit"].passes(ALPHA), real
    assert bad["drafter"].endswith("misreports q") and not bad["fit"].passes(ALPHA), bad
    table = render(results, model="tiny", prompts=["ids"], command="test")
    assert "| early_exit | specinfer | 3 | yes | 1000 |" in table and "FAIL" in table


def test_a_killed_audit_resumes_from_its_stored_rows(tiny, tmp_path):
    """Finished rows are stored as they finish; a new run (a new store object, as after a kill)
    reuses them instead of sampling again; a row's seed comes from its identity, so measuring
    it again (an empty store) draws the same samples."""
    from paper_repro.cells import CellStore

    path = tmp_path / "rows.jsonl"
    kw = dict(verifiers=["token"], drafters=("early_exit",), Ks=(1,), samples=200,
              exit_layers=1, batch=200, mutant_rows=(), log=lambda *_: None)
    first = audit(tiny, [PROMPT], store=CellStore(path), **kw)[0]
    assert len(path.read_text().splitlines()) == 1 and "resumed" not in first
    again = audit(tiny, [PROMPT], store=CellStore(path), **kw)[0]
    assert again["resumed"] and again["fit"] == first["fit"]
    fresh = audit(tiny, [PROMPT], store=CellStore(tmp_path / "other.jsonl"), **kw)[0]
    assert "resumed" not in fresh and fresh["fit"] == first["fit"]


def test_stored_only_renders_the_stored_rows_and_measures_nothing(tiny, tmp_path):
    """``measure=False`` (``--stored-only``) renders every stored row, even one that comes after
    a row not stored (block runs before token here), and hands the table, with the rows not
    stored listed as pending, to ``on_row``."""
    from paper_repro.cells import CellStore

    path = tmp_path / "rows.jsonl"
    kw = dict(drafters=("early_exit",), Ks=(1,), samples=200, exit_layers=1, batch=200,
              mutant_rows=(), log=lambda *_: None)
    audit(tiny, [PROMPT], verifiers=["token"], store=CellStore(path), **kw)
    seen = []
    out = audit(tiny, [PROMPT], verifiers=["block", "token"], store=CellStore(path),
                measure=False, on_row=lambda rows, pending: seen.append((rows, pending)), **kw)
    assert [r["verifier"] for r in out] == ["token"]
    assert all(r.get("resumed") for r in out)
    assert len(path.read_text().splitlines()) == 1  # nothing new was sampled
    (rows_seen, pending), = seen
    assert rows_seen == out and pending == ["early_exit / block / K = 1"]


def test_a_declared_lossy_row_is_never_called_a_pass():
    from paper_repro.audit import Fit

    row = dict(drafter="early_exit", verifier="hsd", K=1, lossless=False, samples=100,
               seconds=1.0)
    calm = render([row | dict(fit=Fit(10.0, 10, 0.5, 0.01, 0))], model="m", prompts=["p"],
                  command="c")
    loud = render([row | dict(fit=Fit(99.0, 10, 1e-9, 0.2, 0))], model="m", prompts=["p"],
                  command="c")
    assert "bias not resolved" in calm and "| pass |" not in calm
    assert "bias detected" in loud and "FAIL" not in loud


def test_the_self_drafted_row_drafts_with_every_layer_of_the_target(tiny):
    """The high-acceptance row (q = p) runs right after the first misreporting row, with the
    early-exit drafter at all of the target's layers, and only when its verifier is asked for."""
    from paper_repro.audit import SELF

    layers = tiny.model.config.num_layers
    plan = list(rows(["token", "spectr_gbv"], ["early_exit"], [1, 3], L=2, exit_layers=1,
                     self_rows=(("spectr_gbv", 3),), target_layers=layers))
    assert plan[0][0].endswith("misreports q")
    kind, drafter, name, K, refused = plan[1]
    assert (kind, name, K, refused) == (SELF, "spectr_gbv", 3, None)
    assert drafter.num_layers == layers and drafter.K == 3 and drafter.L == 2
    only_token = rows(["token"], ["early_exit"], [1], L=2, exit_layers=1,
                      self_rows=(("spectr_gbv", 3),), target_layers=layers)
    assert SELF not in {r[0] for r in only_token}


def test_a_row_keeps_its_acceptance_per_position_and_the_power_inside_accepted_branches(
        tiny, tmp_path):
    """The self-drafted row (q = p: every draft token accepted) stores acceptance 1 at both
    positions, a stored row brings it back, and the accepted-branch power is the row's
    detectable TV over P(accept) at position 1 (1 here; 4x the TV at 0.25)."""
    from paper_repro.audit import Fit, detectable_tv
    from paper_repro.cells import CellStore

    layers = tiny.model.config.num_layers
    kw = dict(verifiers=["token"], drafters=("early_exit",), Ks=(1,), samples=200,
              exit_layers=layers, batch=200, mutant_rows=(), log=lambda *_: None)
    row = audit(tiny, [PROMPT], store=CellStore(tmp_path / "rows.jsonl"), **kw)[0]
    assert row["acceptance"] == pytest.approx([1.0, 1.0])
    again = audit(tiny, [PROMPT], store=CellStore(tmp_path / "rows.jsonl"), **kw)[0]
    assert again["resumed"] and again["acceptance"] == row["acceptance"]
    fit = Fit(10.0, 10, 0.5, 0.01, 0)
    base = dict(drafter="early_exit", verifier="block", K=1, lossless=True, samples=1000,
                seconds=1.0, fit=fit)
    power = detectable_tv(1000, 10)
    table = render([base | dict(acceptance=[0.25, 0.1])], model="m", prompts=["p"], command="c")
    assert f"| {power:.4f} | 0.250 / 0.100 | {4 * power:.3f} | pass |" in table
    old = render([base], model="m", prompts=["p"], command="c")  # a row stored before the column
    assert f"| {power:.4f} | – | – | pass |" in old


def test_largest_k_only_leaves_out_the_smaller_k():
    plan = rows(["specinfer", "block"], ["early_exit"], [1, 3], L=2, exit_layers=1,
                mutant_rows=(), largest_k_only=True)
    assert sorted((name, K) for _, _, name, K, _ in plan) == [("block", 1), ("specinfer", 3)]
