"""Table 1's gains table on hand-built cells of 6 prompts: a gain the bootstrap calls significant
but one prompt contradicts is not resolved, an all-agreeing one is, and Holm over the BE column
keeps even an all-agreeing gain unresolved at n = 6 once a second comparison shares the family."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from paper_repro import table1
from paper_repro.stats import significant
from specjax.eval import paired

SETTING = replace(table1.PRESETS["tiny"], datasets=("humaneval",), n=6)
TOKENS = 60


def _cell(calls, seconds, hardware="machine-a"):
    prompts = [dict(new_tokens=TOKENS, target_calls=c, seconds=s, seconds_by_repeat=[s])
               for c, s in zip(calls, seconds, strict=True)]
    return dict(prompts=prompts, hardware=hardware, session="s")


def _cells(with_spectr: bool = False) -> dict:
    # token: BE 2 on every prompt, 1 s each. spectr_gbv: BE 3 on five prompts, 60/31 < 2 on the
    # sixth (per-prompt log ratio log 1.5 five times, log(30/31) once); faster on all six.
    cells = {("humaneval", "ar"): _cell([TOKENS] * 6, [2.0] * 6),
             ("humaneval", "token"): _cell([30] * 6, [1.0] * 6),
             ("humaneval", "spectr_gbv"): _cell([20] * 5 + [31],
                                                [0.8, 0.7, 0.9, 0.75, 0.85, 0.8])}
    if with_spectr:  # BE 2.4, and 60/32 on the sixth: below spectr_gbv on every prompt; timed
        # on another machine, so no SR comparison
        cells["humaneval", "spectr"] = _cell([25] * 5 + [32], [1.0] * 6, hardware="machine-b")
    return cells


def _table(cells):
    rows = table1.gains(cells, SETTING, {m for _, m in cells})
    table1.adjust_gains(rows)
    md = table1.gains_table(rows, SETTING)
    by = {}
    for line in md:
        if line.startswith("| ") and not line.startswith("| SpecTr-GBV vs"):
            cols = [c.strip() for c in line.strip("|").split("|")]
            by[cols[0].split()[0]] = cols
    return {g["vs"]: g["per_dataset"]["pooled"] for g in rows}, by


def check_one_opposite_prompt_is_not_resolved():
    pooled, md = _table(_cells())
    be, sr = pooled["token"]["BE"], pooled["token"]["SR"]
    # BE gain: (360 / 131) / (360 / 180) - 1 = 49 / 131
    assert be[0] == pytest.approx(100 * 49 / 131, rel=1e-12)
    assert significant(be) == "yes"  # the bootstrap alone would call it
    test = pooled["token"]["BE_test"]
    assert test.t[0] > 0  # so would the t interval
    # the observed sum is reached by the identity and by flipping the one negative prompt
    # (which only raises it), and by their mirrors: 4 of 64
    assert test.p == test.p_holm == 4 / 64
    assert md["token"][5] == "no"
    # SR gain: 6 s / 4.8 s - 1 = 25 %, every prompt faster: p = 2/64, resolved
    assert sr[0] == pytest.approx(25.0, rel=1e-12)
    assert pooled["token"]["SR_test"].p == 2 / 64
    assert md["token"][10] == "yes"


def test_one_opposite_prompt_keeps_a_bootstrap_significant_gain_unresolved():
    check_one_opposite_prompt_is_not_resolved()


def test_a_resolved_rule_without_the_sign_flip_p_fails(monkeypatch):
    monkeypatch.setattr(paired.PairedTest, "resolved", property(
        lambda t: (t.boot[0] > 0 and t.t[0] > 0) or (t.boot[1] < 0 and t.t[1] < 0)))
    with pytest.raises(AssertionError):
        check_one_opposite_prompt_is_not_resolved()


def test_holm_runs_over_the_be_column():
    pooled, md = _table(_cells(with_spectr=True))
    spectr, token = pooled["spectr"]["BE_test"], pooled["token"]["BE_test"]
    # spectr: spectr_gbv ahead on every prompt -> p = 2/64, alone resolved; with token
    # (4/64) in the family: sorted 2/64 * 2 = 4/64, then max(4/64, 4/64 * 1) = 4/64
    assert spectr.p == 2 / 64 and token.p == 4 / 64
    assert spectr.p_holm == pytest.approx(4 / 64) and token.p_holm == pytest.approx(4 / 64)
    assert spectr.t[0] > 0 and spectr.boot[0] > 0 and not spectr.resolved
    assert replace(spectr, p_holm=spectr.p).resolved  # Holm alone holds it back
    assert md["spectr"][5] == "no" and md["spectr"][7:] == ["—"] * 4
    assert "SR_test" not in pooled["spectr"]  # another machine: its SR is not compared
    # the SR column is its own family: token's SR alone, still resolved
    assert pooled["token"]["SR_test"].p_holm == 2 / 64 and md["token"][10] == "yes"


def test_per_prompt_log_ratios_pair_prompts_by_index():
    cells = _cells()
    from paper_repro.stats import prompt_log_ratios

    d = prompt_log_ratios(cells, ["humaneval"], "spectr_gbv", "token", "new_tokens",
                          "target_calls")
    assert d == pytest.approx(np.log([1.5] * 5 + [30 / 31]), rel=1e-12)
