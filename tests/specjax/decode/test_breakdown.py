"""The per-step time breakdown: every part is timed at the run's shapes and the parts add up."""

import pytest

import specjax
from specjax.drafters import ModelDrafter, NgramDrafter

FAST = {"xla_backend_optimization_level": 0}
PARTS = ("draft", "tree", "verify", "other")


@pytest.mark.parametrize("kind", ["ar", "model", "ngram"])
def test_breakdown_parts_add_up(kind):
    kw = {"ar": {}, "model": dict(draft="toy-draft", drafter=ModelDrafter(K=2, L=3),
                                  verifier="specinfer"),
          "ngram": dict(drafter=NgramDrafter(K=1, L=3), verifier="token")}[kind]
    res = specjax.generate("toy-target", ["0 1 2 3", "2 3"], max_new_tokens=6, seed=0,
                           compiler_options=FAST, breakdown=True, progress=False, **kw)
    b = res.summary["time_breakdown"]
    assert all(b[f"{p}_ms"] >= 0 for p in PARTS)
    assert b["tree_ms"] > 0 and b["step_ms"] > 0
    assert sum(b[f"{p}_frac"] for p in PARTS) == pytest.approx(1.0)
    total = sum(b[f"{p}_ms"] for p in PARTS)
    assert total == pytest.approx(max(b["step_ms"], total - b["other_ms"]))
    if kind == "ar":
        assert b["draft_ms"] == 0 and b["verify_ms"] == 0
        assert b["sampling_ms"] == 0 and b["verifier_ms"] == 0
    else:
        assert b["draft_ms"] > 0 and b["verify_ms"] > 0
        # the transform and the verifier, each alone (the sum need not equal verify_ms)
        assert b["sampling_ms"] > 0 and b["verifier_ms"] > 0
    # the loop's own step: the run's decode time (prefill out) over its iterations
    assert b["prefill_ms"] > 0 and b["in_loop_step_ms"] > 0
    assert b["in_loop_ratio"] == pytest.approx(b["in_loop_step_ms"] / b["step_ms"])
    iterations = max(m["target_calls"] for m in res.per_prompt)  # one call: both prompts
    decode_ms = 1e3 * res.summary["wall_time_s"] - b["prefill_ms"]
    assert b["in_loop_step_ms"] == pytest.approx(max(decode_ms, 0) / iterations)


def test_in_loop_step_over_two_calls():
    from specjax.decode.breakdown import in_loop

    got = in_loop({"prefill_ms": 10.0, "step_ms": 5.0}, [0.1, 0.07], [15, 10])
    assert got["in_loop_step_ms"] == pytest.approx((170 - 20) / 25)
    assert got["in_loop_ratio"] == pytest.approx(6.0 / 5.0)


def test_no_breakdown_unless_asked():
    res = specjax.generate("toy-target", ["0 1"], max_new_tokens=2, compiler_options=FAST,
                           progress=False)
    assert "time_breakdown" not in res.summary
