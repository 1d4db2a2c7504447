"""paper_repro.sdsl_family: the fit recovers a known plane; the smoke run writes md + figure."""

from __future__ import annotations

import numpy as np
import pytest

from paper_repro.sdsl_family import analyse, main, render


def records(A=-0.02, intercept=0.9):
    ppl = [12.0, 20.0, 30.0, 40.0]
    return [dict(hidden_size=d, num_layers=1, params=p, draft_ppl=x, target_ppl=8.0,
                 alpha=A * x + intercept, tokens_seen=1000, wall_time_s=1.0)
            for d, p, x in zip((256, 128, 64, 32), (2e7, 9e6, 4e6, 2e6), ppl, strict=True)]


def test_fit_recovers_a_known_slope_with_one_target():
    res = analyse(records(), target_params=1.35e8)
    assert res["one_target"]
    assert res["A"] == pytest.approx(-0.02, abs=1e-9)
    assert res["intercept"] == pytest.approx(0.9, abs=1e-9)
    assert res["r2"] == pytest.approx(1.0)
    # the largest, most accepted member is the best here only if its cost is worth it:
    f = np.array(res["f_star"])
    assert res["best"] == int(np.argmax(f)) and f.max() >= 1.0
    text = render("m", res, "fig.png")
    assert "identifiable" in text and "-0.02000" in text and "fig.png" in text
    assert "leaves [0, 1]" not in text  # PPL 12-40 at PPL_target 8: the plane gives 0.6-0.8


def test_report_says_when_the_seed_plane_is_not_a_probability_at_our_perplexities():
    far = [r | {"draft_ppl": 150.0 * (i + 1)} for i, r in enumerate(records())]  # PPL 150-600
    res = analyse(far, target_params=1.35e8)
    text = render("m", res, "fig.png")
    assert "leaves [0, 1] at 4 of our 4 members" in text


def test_a_flat_alpha_gives_zero_slope():
    res = analyse(records(A=0.0, intercept=0.5), target_params=1.35e8)
    assert res["A"] == pytest.approx(0.0, abs=1e-12)


@pytest.mark.slow
def test_smoke_run_writes_report_and_figure(tmp_path):
    out = tmp_path / "sdsl.md"
    res = main(["--smoke", "--out", str(out)])
    assert len(res["records"]) == 3
    assert out.is_file() and out.with_suffix(".png").is_file()
