"""benchmarks.drafters: the table from a result, and a smoke run on a tiny decoder."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.drafters import be_ci, main, render, trained_runs


def test_render_lists_every_row_and_the_missing_drafters():
    rows = [dict(drafter=d, suite="gsm8k", sampling=s, block_efficiency=1.5, mean_accepted=0.5,
                 per_position_acceptance=[0.4, 0.1], speedup=1.2, greedy_matches_ar=
                 (True if s == "greedy" else None)) for d in ("eagle", "ngram")
            for s in ("greedy", "t07")]
    text = render(dict(target="t", K=1, L=2, verifier="token", n=2, max_new_tokens=8,
                       batch_size=1, rows=rows, missing=["medusa: no run"], smoke=False))
    assert text.count("| gsm8k |") == 4 and "0.40 / 0.10" in text
    assert "medusa: no run" in text
    rows[0]["block_efficiency_ci"] = (1.25, 1.75)
    text = render(dict(target="t", K=1, L=2, verifier="token", n=2, max_new_tokens=8,
                       batch_size=1, rows=rows, missing=[], smoke=False))
    assert "| 1.50 [1.25, 1.75] |" in text
    trained = [dict(drafter="eagle", run="abc", steps=600, tokens=614400, wall_time_s=2700.0,
                    params=3.5e6, alpha=0.41)]
    text = render(dict(target="t", K=1, L=2, verifier="token", n=2, max_new_tokens=8,
                       batch_size=1, rows=rows, missing=[], smoke=False, trained=trained))
    assert "| eagle | abc | 600 | 614,400 | 45.0 min | 3.50M | 0.410 |" in text
    assert "Partial" not in text
    text = render(dict(target="t", K=1, L=2, verifier="token", n=2, max_new_tokens=8,
                       batch_size=1, rows=rows, missing=[], smoke=False, partial=True))
    assert "**Partial:** the run was stopped (or is still running) after 4 rows." in text


def test_trained_runs_reads_the_latest_eagle_and_every_finished_family_member(tmp_path,
                                                                              monkeypatch):
    import json

    monkeypatch.setenv("SPECJAX_CACHE", str(tmp_path))

    def finish(kind, run, module, latest=True):
        d = tmp_path / "train" / kind / "t" / run
        d.mkdir(parents=True)
        (d / "final.json").write_text(json.dumps(dict(
            step=10, tokens_seen=100, wall_time_s=6.0, params=1000, module=module,
            eval={"alpha": 0.5})))
        if latest:
            (d.parent / "latest").write_text(run + "\n")

    finish("eagle", "old", {})
    finish("eagle", "new", {})  # the latest pointer now names "new"
    finish("family", "f1", {"hidden_size": 64, "num_layers": 1}, latest=False)
    (tmp_path / "train" / "family" / "t" / "unfinished").mkdir()
    runs = trained_runs("t")
    assert [(r["drafter"], r["run"]) for r in runs] == [("eagle", "new"), ("d64-l1", "f1")]


def test_be_ci_brackets_the_ratio_of_sums_and_collapses_when_prompts_agree():
    same = [dict(new_tokens=2 * c, target_calls=c) for c in (3, 5, 8)]
    assert be_ci(same) == pytest.approx((2.0, 2.0))
    # Oracle written out here: 2,000 seeded resamples of whole prompts, ratio of sums (not the
    # mean of per-prompt BEs: the calls differ, so the two would disagree), 2.5/97.5 percentiles.
    new, calls = np.array([10, 30, 20, 60, 14, 11]), np.array([10, 20, 10, 30, 10, 10])
    idx = np.random.default_rng(0).integers(0, 6, size=(2000, 6))
    draws = new[idx].sum(axis=1) / calls[idx].sum(axis=1)
    want = np.quantile(draws, [0.025, 0.975])
    lo, hi = be_ci([dict(new_tokens=int(n), target_calls=int(c)) for n, c in zip(new, calls,
                                                                                  strict=True)])
    assert (lo, hi) == pytest.approx(tuple(want), abs=1e-12)
    assert lo < new.sum() / calls.sum() < hi and hi - lo > 0.1


@pytest.mark.slow
def test_smoke_run_greedy_matches_ar(tmp_path):
    out = tmp_path / "d.md"
    res = main(["--smoke", "--samplings", "greedy", "--drafters", "eagle", "medusa", "--quiet",
                "--max-new-tokens", "4", "--draft-vocab", "16", "--out", str(out)])
    assert {r["drafter"] for r in res["rows"]} == {
        "eagle", "medusa", "eagle (draft vocab 16)", "medusa (draft vocab 16)"}
    assert all(r["greedy_matches_ar"] for r in res["rows"])
    assert out.is_file() and out.with_suffix(".json").is_file()
    assert "Partial" not in out.read_text() and res["partial"] is False


@pytest.mark.slow
def test_full_smoke_run(tmp_path):
    res = main(["--smoke", "--quiet", "--out", str(tmp_path / "d.md")])
    assert len(res["rows"]) == 2 * 7  # eagle, medusa (+ draft vocab), family, early exit, ngram
