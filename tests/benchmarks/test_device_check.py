"""``benchmarks.device_check`` at tiny shapes on the CPU: the same script a GPU runs, end to end
(one-step G-tests, greedy SD == AR on random llama3-RoPE models in bfloat16, the per-call costs
and the ridge), writing a report that names the device."""

from __future__ import annotations

import json

from benchmarks import device_check


def test_device_check_runs_at_tiny_shapes(tmp_path):
    out = tmp_path / "device_check.md"
    report = device_check.main(["--preset", "tiny", "--verifiers", "token,specinfer",
                                "--samples", "3000", "--reps", "1", "--tokens", "1,4,8",
                                "--out", str(out)])
    assert [r["verifier"] for r in report["one_step_laws"]] == ["token", "specinfer"]
    assert all(r["passes"] for r in report["one_step_laws"]), report["one_step_laws"]
    assert report["greedy"]["equal"]
    assert set(report["target_ms"]) == {1, 4, 8} and all(v > 0 for v in
                                                         report["target_ms"].values())
    assert report["ridge"] > 0
    assert report["platform"] == "cpu" and report["weights"] == "bfloat16"
    text = out.read_text()
    assert text.startswith("# Device check: ") and report["device"] in text
    assert "projected from measured per-call costs" in text
    stored = json.loads(out.with_suffix(".json").read_text())
    assert stored["greedy"] == report["greedy"]


def test_the_ridge_is_one_token_over_the_slope():
    # t(n) = max(2, n / 10) ms: the slope is 0.1 ms / token, so the ridge is 20 tokens
    assert device_check.ridge({1: 2.0, 64: 6.4, 128: 12.8}) == 20.0
