"""The throughput benchmark's theory side on made-up numbers (fast), and a smoke run (slow)."""

from __future__ import annotations

import json

import pytest

from benchmarks.throughput import compare, fit_alpha, main, predict, render
from specjax.theory import expected_tokens


@pytest.mark.parametrize("be", [1.0, 1.7, 3.2, 4.999, 5.0])
def test_alpha_fit_reproduces_the_block_efficiency(be):
    a = fit_alpha(be, L=4)
    assert 0 <= a <= 1 and expected_tokens(a, 4) == pytest.approx(be, abs=1e-9)


def test_model_switches_speculation_off_past_the_ridge():
    p = predict([1, 2, 4, 8, 16], alpha=0.8, c=0.05, ridge=8.0, L=4, t1=0.1)
    assert p[1]["speedup"] > 1 and p[1]["k_star"] >= 1  # memory bound: SD pays
    assert p[16]["speedup"] < 1 and p[16]["k_star"] == 0  # B >= n*: no k helps
    assert [p[b]["speedup"] for b in (1, 2, 4, 8, 16)] == sorted(
        (p[b]["speedup"] for b in (1, 2, 4, 8, 16)), reverse=True)
    assert p[4]["ar_tokens_per_s"] == pytest.approx(40.0)  # B / t1 below the ridge
    assert p[16]["ar_tokens_per_s"] == pytest.approx(80.0)  # capped at n* / t1 past it


def _row(ar, sd, be=2.0):
    return {"ar": {"tokens_per_s": ar, "tokens_per_s_with_prefill": ar / 2, "tokens": [[1]]},
            "sd": {"tokens_per_s": sd, "tokens_per_s_with_prefill": sd / 4,
                   "block_efficiency": be, "tokens": [[1]]}}


def test_comparison_and_table_say_what_the_numbers_say():
    measured = {1: _row(10.0, 20.0), 4: _row(40.0, 30.0)}
    predicted = predict([1, 4], alpha=0.7, c=0.1, ridge=3.0, L=4, t1=0.1)
    lines = compare(measured, predicted)
    assert "2.00x at B=1 -> 0.75x at B=4" in lines[0] and "advantage shrinks" in lines[0]
    assert "switches off from B = 4" in lines[1]
    assert lines[2] == "- Measured: SD is slower than AR from B = 4."
    header = dict(machine="2-core CPU", argv="", target="t", draft="d", target_params=2e6,
                  draft_params=1e6, c=0.5, tokens=8, prompt_tokens=8, L=4, temperature=0.0,
                  bandwidth=3e10, flops=1e11, ridge=3.0, alpha=0.7, alpha_batch=4, t1=0.1,
                  t1_batch=1, block_efficiency=2.0, mesh_batch=4)
    mesh = {"devices": 8, "one": _row(40.0, 30.0), "mesh": _row(20.0, 15.0)}
    md = render(dict(header=header, measured=measured, predicted=predicted, comparison=lines,
                     mesh=mesh))
    assert "| 4 | 40.0 |" in md and "| 2.00 | 0.38 |" in md  # B=4 row, with prefill 7.5 / 20
    assert "| AR | 40.0 | 40.0 | 20.0 | 0.50 | True |" in md
    # A mesh part on another pair: named, and its 'plain' column is not borrowed from the sweep.
    other = render(dict(header=header | dict(mesh_target="small", mesh_draft="small"),
                        measured=measured, predicted=predicted, comparison=lines, mesh=mesh))
    assert "Models: small (target) and small (draft), not the pair above" in other
    assert "| AR | nan | 40.0 | 20.0 | 0.50 | True |" in other
    failed = render(dict(header=header, measured=measured, predicted=predicted,
                         comparison=lines, mesh={"error": "mesh worker failed: exit 1"}))
    assert "Not measured: mesh worker failed: exit 1." in failed and "| 4 | 40.0 |" in failed


@pytest.mark.slow
def test_smoke_run_writes_table_figure_and_json(tmp_path):
    report = main(["--smoke", "--out", str(tmp_path / "throughput.md")])
    for ext in (".md", ".json", ".png"):
        assert (tmp_path / f"throughput{ext}").stat().st_size > 0
    data = json.loads((tmp_path / "throughput.json").read_text())
    assert sorted(data["measured"]) == ["1", "2"] and data["mesh"]["devices"] == 2
    assert report["mesh"]["mesh"]["sd"]["tokens"] == report["mesh"]["one"]["sd"]["tokens"]
