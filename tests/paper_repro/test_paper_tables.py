"""The paper tables on the toy pair: Table 1 end to end (tiny preset), resume, CIs, the
lossless column, the gap to the optimum; the repo table and ablations on synthetic cells (the real
tiny runs are marked slow); preset resolution for the Qwen pair without loading it."""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest

from paper_repro import ablations, cells, table1, table_repo
from specjax.eval import bootstrap
from specjax.prompts import load_prompts

TABLE1_ROWS = ["ar", "token", "greedy_block", "block", "specinfer", "spectr", "spectr_gbv",
               "multipath_block", "traversal", "ordered_rrs"]


def test_table1_tiny_end_to_end(tmp_path, monkeypatch):
    """The whole Table 1 pipeline once on the toy pair (one test, so that pytest-xdist runs its
    ~10 loop compiles once), then each check below on the result."""
    tiny = (tmp_path, table1.main(["--preset", "tiny", "--out", str(tmp_path)]))
    check_table1_has_every_row_dataset_and_column(tiny)
    check_cis_contain_their_point_estimates(tiny)
    check_lossless_rows_and_the_checker_verdict(tiny)
    check_gap_to_optimum_is_at_most_one_for_lossless_stateless_rows(tiny)
    check_every_method_saw_the_same_prompts(tiny)
    check_resume_reuses_cells_and_reruns_only_missing_ones(tiny, monkeypatch)


def _ci_triples(obj):
    """Every (point, lo, hi) triple in a result tree, with its path."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k in ("BE", "SR", "gap") and isinstance(v, list | tuple):
                yield k, v
            else:
                yield from _ci_triples(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _ci_triples(v)


def check_table1_has_every_row_dataset_and_column(tiny):
    out, res = tiny
    assert [r["method"] for r in res["rows"]] == TABLE1_ROWS
    assert [r["K"] for r in res["rows"]] == [1, 1, 1, 1, 3, 3, 3, 3, 3, 3]
    for r in res["rows"]:
        assert list(r["datasets"]) == ["humaneval", "gsm8k", "alpaca"]
        for c in r["datasets"].values():
            assert {"BE", "SR"} <= set(c)
            assert ("gap" in c) == (r["method"] != "ar")
    md = (out / "table1_tiny.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| method | K |"))
    assert header.count("BE") == 3 and header.count("SR") == 3 and "lossless" in header
    body = md.split(header, 1)[1].split("\n\n", 1)[0].strip().splitlines()[1:]
    assert len(body) == 10 and all(line.count("|") == 10 for line in body)
    for needed in ("**Hardware:**", "8 prompts per dataset", "24 new tokens per prompt",
                   "**Wall time:**", "bootstrap", "## Gap to the optimum",
                   "## SpecTr-GBV's relative gains, ours beside the paper's", "+12.4", "+29.3"):
        assert needed in md
    assert json.loads((out / "table1_tiny.json").read_text())["rows"] == json.loads(
        json.dumps(res["rows"]))


def check_cis_contain_their_point_estimates(tiny):
    _, res = tiny
    triples = list(_ci_triples(res["rows"])) + list(_ci_triples(res["gains"]))
    assert len(triples) > 9 * 3 * 2
    for name, (point, lo, hi) in triples:
        assert lo - 1e-9 <= point <= hi + 1e-9, (name, point, lo, hi)
    # Not degenerate: prompts differ, so some BE intervals have width
    assert any(hi - lo > 0.05 for name, (_, lo, hi) in triples if name == "BE")


def check_lossless_rows_and_the_checker_verdict(tiny):
    _, res = tiny
    by = {r["method"]: r for r in res["rows"]}
    assert by["spectr_gbv"]["lossless"] is False and by["spectr_gbv"]["checker_tv"] > 1e-3
    assert "**NO**" in by["spectr_gbv"]["lossless_text"]
    for name in TABLE1_ROWS:
        if name != "spectr_gbv":
            assert by[name]["lossless"], name
    for r in res["rows"]:
        if r["lossless"]:
            for c in r["datasets"].values():
                assert c["BE"][0] >= 1.0
    assert all(c["BE"][0] == 1.0 for c in by["ar"]["datasets"].values())


def check_gap_to_optimum_is_at_most_one_for_lossless_stateless_rows(tiny):
    # sum 1{tau>=1} <= sum alpha* in expectation; pooled over 24 prompts a wrong bound (wrong K,
    # wrong position) would show as a fraction far above 1.
    out, res = tiny
    rows = [json.loads(x) for x in
            (out / "runs" / "table1_tiny" / "cells.jsonl").read_text().splitlines()]
    for name in ("token", "block", "specinfer", "spectr", "multipath_block", "traversal",
                 "ordered_rrs"):
        ps = [p for r in rows if r["method"] == name for p in r["prompts"]]
        acc = sum(p["root_accepted"] for p in ps)
        bound = sum(p["root_bound"] for p in ps)
        steps = sum(p["target_calls"] for p in ps)
        assert 0 < bound <= steps + 1e-3
        assert acc <= bound + 2.0 * np.sqrt(bound), name


def check_every_method_saw_the_same_prompts(tiny):
    out, _ = tiny
    rows = [json.loads(x) for x in
            (out / "runs" / "table1_tiny" / "cells.jsonl").read_text().splitlines()]
    assert len(rows) == 30
    for d in ("humaneval", "gsm8k", "alpaca"):
        ids = {tuple(r["prompt_ids"]) for r in rows if r["dataset"] == d}
        assert len(ids) == 1 and len(next(iter(ids))) == 8
    slices = {r["dataset"]: r["prompt_ids"][0] for r in rows}
    assert slices == {"humaneval": "toy/0", "gsm8k": "toy/8", "alpaca": "toy/16"}


def check_resume_reuses_cells_and_reruns_only_missing_ones(tiny, monkeypatch):
    out, res = tiny
    store = out / "runs" / "table1_tiny" / "cells.jsonl"
    lines = store.read_text().splitlines()
    # A run killed before its last cell: that cell alone is decoded again.
    store.write_text("\n".join(line for line in lines
                               if json.loads(line)["method"] != "traversal"
                               or json.loads(line)["dataset"] != "alpaca") + "\n")
    real, calls = cells.run_cell, []

    def counting(setting, method, texts, target, draft, **kw):
        calls.append(method.name)
        return real(setting, method, texts, target, draft, **kw)

    monkeypatch.setattr(cells, "run_cell", counting)
    again = table1.main(["--preset", "tiny", "--out", str(out)])
    assert calls == ["traversal"] * table1.PRESETS["tiny"].repeats  # each timing repeat
    assert len(store.read_text().splitlines()) == 30
    for a, b in zip(res["rows"], again["rows"], strict=True):
        if a["method"] != "traversal":
            assert a["datasets"] == b["datasets"]


def _fake_cell(setting, method, texts, target, draft, **kw):
    """Deterministic synthetic counters: BE grows with K and L, AR is slower per token."""
    rng = np.random.default_rng(len(texts) + 7 * method.K + setting.L)
    prompts = []
    for _ in texts:
        calls = setting.max_new_tokens if method.verifier is None else int(
            setting.max_new_tokens / (1 + 0.3 * method.K * np.log(setting.L) * rng.uniform(0.5, 1)))
        calls = max(calls, 1)
        seconds = 0.01 * calls * (1 if method.verifier is None else 1.5)
        L = 1 if method.verifier is None else setting.L
        prompts.append(dict(new_tokens=setting.max_new_tokens, target_calls=calls,
                            accepted=setting.max_new_tokens - calls,
                            accepted_per_position=[int(0.6 * calls)] * L,
                            root_accepted=int(0.6 * calls), root_bound=0.8 * calls,
                            min_calls=cells.min_calls(setting.max_new_tokens, L),
                            seconds=seconds, seconds_by_repeat=[seconds], stop="length"))
    return dict(prompts=prompts, wall_time_s=sum(p["seconds"] for p in prompts),
                compile_time_s=0.0, elapsed_s=0.1, block_efficiency=0.0, tokens_per_s=0.0,
                tokens=[[] for _ in texts])


def _fake_cell_with_costs(setting, method, texts, target, draft, breakdown=False, **kw):
    """``_fake_cell`` with a fake time breakdown of 20 ms per step (no prefill) when asked."""
    out = _fake_cell(setting, method, texts, target, draft)
    if breakdown:
        out["time_breakdown"] = dict(step_ms=20.0, prefill_ms=0.0, draft_ms=10.0,
                                     tree_ms=9.0, verify_ms=1.0, other_ms=0.0)
    return out


@pytest.fixture
def fake_runs(monkeypatch):
    monkeypatch.setattr(cells, "run_cell", _fake_cell)
    monkeypatch.setattr(cells, "load_pair", lambda setting: (None, None))
    monkeypatch.setattr(cells, "prompt_texts",
                        lambda setting, d, target: ([f"{d}/{i}" for i in range(setting.n)],
                                                    ["x"] * setting.n))


def _tables(md: str) -> list[list[str]]:
    """The rows of each Markdown table in ``md`` (separator rows dropped), in order."""
    tables, current = [], []
    for line in md.splitlines() + [""]:
        if line.startswith("|"):
            current += [line] if line.startswith("| ") else []
        elif current:
            tables, current = tables + [current], []
    return tables


@pytest.mark.parametrize("which", ["K", "L", "T"])
def test_ablation_tables_and_figures(which, fake_runs, tmp_path):
    res = ablations.main(["--preset", "tiny", "--which", which, "--out", str(tmp_path)])
    grid = ablations.GRIDS[which]
    n_methods = {"K": 5, "L": 5, "T": 8}[which]
    assert len(res["rows"]) == n_methods * len(grid)
    assert all(("SR" in r) == (which != "T") for r in res["rows"])
    md = (tmp_path / f"ablation_{which}_tiny.md").read_text()
    table, gains = _tables(md)
    assert len(table) == 1 + n_methods and table[0].count("|") == len(grid) + 2
    assert len(gains) == 1 + n_methods * (len(grid) - 1) == 1 + len(res["gains"])
    png = (tmp_path / f"ablation_{which}_tiny.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    for _, (p, lo, hi) in _ci_triples(res["rows"]):
        assert lo - 1e-9 <= p <= hi + 1e-9
    if which == "K":  # the synthetic BE grows with K: the table must carry that through
        be = {r["value"]: r["BE"][0] for r in res["rows"] if r["method"] == "traversal"}
        assert be[7] > be[1]


def test_ablation_repeats_interleave_across_the_swept_values(fake_runs, tmp_path, monkeypatch):
    """Repeat 1 of AR and of every swept value runs before repeat 2 of any, as within a table:
    drift over a long run then falls on every value alike instead of on the last ones."""
    order = []

    def recording(setting, method, *args, **kw):
        order.append((method.name, method.K))
        return _fake_cell(setting, method, *args, **kw)

    monkeypatch.setattr(cells, "run_cell", recording)
    ablations.main(["--preset", "tiny", "--which", "K", "--values", "2,3", "--methods",
                    "traversal", "--repeats", "2", "--out", str(tmp_path)])
    once = [("ar", 1), ("traversal", 2), ("traversal", 3)]
    assert order == once + once


def test_ablation_marks_sr_cells_from_another_session(fake_runs, tmp_path, monkeypatch):
    """A resumed ablation reuses AR and K = 1 from the first session; the K = 2 cells measured
    after it divide by that AR, so their SR is marked, and only theirs."""
    ablations.main(["--preset", "tiny", "--which", "K", "--values", "1", "--out", str(tmp_path)])
    monkeypatch.setattr(cells, "SESSION", "a-later-session")
    res = ablations.main(["--preset", "tiny", "--which", "K", "--values", "1,2",
                          "--out", str(tmp_path)])
    assert {r["value"] for r in res["rows"] if r["other_session"]} == {2}
    table = [line for line in _tables((tmp_path / "ablation_K_tiny.md").read_text())[0]
             if "K = 1" not in line]
    assert all(row.split(" | ")[1].count("†") == 0 and row.split(" | ")[2].count("†") == 1
               for row in table), table


def test_a_cell_from_another_machine_is_neither_extended_nor_divided(fake_runs, tmp_path,
                                                                      monkeypatch):
    """Seconds of two machines never meet: a stored cell gets no timing repeat on another
    machine (refused before anything runs or is rewritten), and a cell timed on another machine
    than its AR cell keeps its BE but gets no SR. ``--render-only`` measures nothing."""
    base = ["--preset", "tiny", "--which", "K", "--out", str(tmp_path)]
    ablations.main(base + ["--values", "1", "--repeats", "2"])
    store = tmp_path / "runs" / "ablation_K_tiny" / "cells.jsonl"
    killed = [json.loads(line) for line in store.read_text().splitlines()]  # after repeat 1
    store.write_text("".join(json.dumps(dict(r, repeats_done=1)) + "\n" for r in killed))
    before = store.read_text()
    monkeypatch.setattr(cells, "SESSION", "a-later-session")
    monkeypatch.setattr(cells.hardware, "describe", lambda: "CPU: another machine")
    with pytest.raises(SystemExit, match="timed on .* this machine is CPU: another machine"):
        ablations.main(base + ["--values", "1", "--repeats", "2"])
    assert store.read_text() == before
    ablations.main(base + ["--values", "1", "--repeats", "1"])  # measured on the new machine
    monkeypatch.setattr(cells.hardware, "describe", lambda: "CPU: a third machine")
    res = ablations.main(base + ["--values", "1,2", "--repeats", "1"])
    assert {r["value"] for r in res["rows"] if "SR" in r} == {1}
    table = [line for line in _tables((tmp_path / "ablation_K_tiny.md").read_text())[0]
             if "K = 1" not in line]
    assert all("SR — ‡" in row.split(" | ")[2] and "‡" not in row.split(" | ")[1]
               for row in table), table
    monkeypatch.setattr(cells, "run_cell", lambda *a, **k: pytest.fail("render-only ran a cell"))
    again = ablations.main(base + ["--values", "1,2", "--repeats", "1", "--render-only"])
    assert again["rows"] == res["rows"]
    with pytest.raises(SystemExit, match="no stored cell for humaneval / specinfer"):
        ablations.main(base + ["--values", "3", "--repeats", "1", "--render-only"])


def test_table1_reports_no_sr_for_a_cell_timed_on_another_machine(fake_runs, tmp_path,
                                                                   monkeypatch):
    base = ["--preset", "tiny", "--out", str(tmp_path), "--datasets", "humaneval"]
    table1.main(base + ["--methods", "ar,spectr"])
    monkeypatch.setattr(cells.hardware, "describe", lambda: "CPU: another machine")
    res = table1.main(base + ["--methods", "ar,spectr,spectr_gbv"])
    sr = {r["method"]: r["datasets"]["humaneval"]["SR"] for r in res["rows"]}
    assert sr["spectr"] is not None and sr["spectr_gbv"] is None
    assert all("SR" not in g["per_dataset"]["pooled"] for g in res["gains"])
    md = (tmp_path / "table1_tiny.md").read_text()
    assert "— ‡" in md and "timed on different machines" in md


def test_repo_table_uses_the_repository_setting(fake_runs, tmp_path):
    res = table_repo.main(["--preset", "full", "--out", str(tmp_path)])
    s = res["setting"]
    assert (s["K"], s["L"], s["temperature"], s["max_new_tokens"], s["n"]) == (7, 6, 0.7, 64, 32)
    assert s["datasets"] == ("humaneval",) or s["datasets"] == ["humaneval"]
    assert [r["K"] for r in res["rows"]][-1] == 7
    md = (tmp_path / "table_repo_full.md").read_text()
    assert "32 prompts per dataset" in md and "+12.4" not in md  # no paper gains at K = 7


def test_presets_resolve_to_the_qwen_pair_without_loading_it():
    from specjax.models.loader import MODEL_NAMES

    for presets in (table1.PRESETS, table_repo.PRESETS, ablations.PRESETS):
        for name in ("cpu", "full"):
            target, draft = cells.model_names(presets[name].models)
            assert (target, draft) == ("qwen2.5-coder-1.5b-instruct",
                                       "qwen2.5-coder-0.5b-instruct")
            assert {target, draft} <= set(MODEL_NAMES)
        assert cells.model_names(presets["tiny"].models) == ("toy-target", "toy-draft")
    cpu, full = table1.PRESETS["cpu"], table1.PRESETS["full"]
    assert (cpu.K, cpu.L, cpu.temperature) == (3, 8, 0.4)
    assert cpu.n >= 16 and cpu.max_new_tokens >= 64  # issue 44: BE on >= 16 prompts
    assert table1.SPLITS["cpu"].timed_n >= 6 and table1.SPLITS["cpu"].repeats >= 3
    assert (full.n, full.max_new_tokens) == (80, 128)


def test_real_prompts_are_the_first_n_of_each_suite_in_the_chat_template():
    class Target:  # the tokenizer-free part of a loaded model that prompt_texts touches
        def apply_chat_template(self, messages, add_generation_prompt=True):
            return "<user>" + messages[0]["content"] + "<assistant>"

    setting = table1.PRESETS["cpu"]
    for d in setting.datasets:
        ids, texts = cells.prompt_texts(setting, d, Target())
        suite = load_prompts(d)
        assert ids == [p.id for p in suite[:setting.n]]
        assert texts == [f"<user>{p.text}<assistant>" for p in suite[:setting.n]]


def test_bootstrap_is_seeded_paired_and_covers_the_ratio():
    num = np.array([10.0, 20, 30, 40])
    den = np.array([5.0, 5, 10, 10])
    a = bootstrap.estimate(bootstrap.ratio(num, den), 4)
    b = bootstrap.estimate(bootstrap.ratio(num, den), 4)
    assert a == b and a[0] == pytest.approx(100 / 30)
    assert a[1] < a[0] < a[2]
    same = bootstrap.estimate(bootstrap.ratio(np.full(5, 3.0), np.ones(5)), 5)
    assert same == pytest.approx((3.0, 3.0, 3.0))


@pytest.mark.slow
@pytest.mark.parametrize("which", ["K", "L", "T"])
def test_ablation_tiny_for_real(which, tmp_path):
    values = {"K": "1,2", "L": "2,4", "T": "0.1,0.7"}[which]
    methods = "token,traversal" if which == "L" else "spectr_gbv,traversal"
    res = ablations.main(["--preset", "tiny", "--which", which, "--values", values,
                          "--methods", methods, "--out", str(tmp_path)])
    assert len(res["rows"]) == 4
    assert (tmp_path / f"ablation_{which}_tiny.png").exists()


@pytest.mark.slow
def test_repo_table_tiny_for_real(tmp_path):
    res = table_repo.main(["--preset", "tiny", "--out", str(tmp_path)])
    assert [r["method"] for r in res["rows"]] == TABLE1_ROWS


def test_paired_gains_compare_the_same_prompts_and_drop_those_at_the_ceiling():
    """The gain is BE(value) / BE(first) - 1 over the same prompts; the second column keeps
    only the prompts that made more than the fewest calls under both values."""
    def cell(calls, min_calls, tokens):
        return {"K": 5, "hardware": "m", "session": "s", "prompts": [
            dict(new_tokens=t, target_calls=c, min_calls=m, seconds=1.0)
            for c, m, t in zip(calls, min_calls, tokens, strict=True)]}

    tokens = [100, 100, 100, 100]
    a = {("humaneval", "traversal"): cell([10, 20, 25, 7], [7, 7, 7, 7], tokens)}
    b = {("humaneval", "traversal"): cell([7, 16, 20, 7], [7, 7, 7, 7], tokens)}
    base = ablations.PRESETS["tiny"]
    (g,) = ablations.paired_gains("K", base, {5: a, 7: b})
    assert (g["value"], g["base"], g["n"], g["n_below"]) == (7, 5, 4, 2)
    assert g["all"][0] == pytest.approx(100 * ((400 / 50) / (400 / 62) - 1))
    assert g["below"][0] == pytest.approx(100 * ((200 / 36) / (200 / 45) - 1))
    assert g["below"][1] <= g["below"][0] <= g["below"][2]


def test_a_committed_table_refuses_cells_of_uncommitted_code(fake_runs, tmp_path, monkeypatch):
    """Into the repository's results folder (here a stand-in for it), a dirty checkout may
    neither measure cells nor render stored +dirty ones; elsewhere (--out) both work."""
    monkeypatch.setattr(cells, "RESULTS", tmp_path / "committed")
    base = ["--preset", "tiny", "--datasets", "humaneval", "--methods", "ar,token"]
    monkeypatch.setattr(cells.provenance, "commit", lambda: "abc123+dirty")
    with pytest.raises(SystemExit, match="uncommitted edits"):
        table1.main(base + ["--out", str(tmp_path / "committed")])
    assert not (tmp_path / "committed" / "runs").exists()  # refused before measuring
    table1.main(base + ["--out", str(tmp_path / "elsewhere")])  # a scratch folder is fine
    # +dirty cells stored in the committed folder are refused at render, naming them
    scratch = tmp_path / "elsewhere" / "runs"
    (tmp_path / "committed").mkdir()
    shutil.copytree(scratch, tmp_path / "committed" / "runs")
    monkeypatch.setattr(cells.provenance, "commit", lambda: "abc123")
    with pytest.raises(SystemExit, match=r"humaneval / token \(abc123\+dirty\)"):
        table1.main(base + ["--out", str(tmp_path / "committed")])
    # measured again from clean code (a new session), the table renders into the committed folder
    monkeypatch.setattr(cells, "SESSION", "another-session")
    table1.main(base + ["--out", str(tmp_path / "committed"), "--no-resume"])
    md = (tmp_path / "committed" / "table1_tiny.md").read_text()
    assert "**Commit(s):** abc123 (none `+dirty`;" in md
    # the scratch table, of +dirty cells, says what the mark means
    assert "abc123+dirty (`+dirty`: the checkout had uncommitted edits" in (
        tmp_path / "elsewhere" / "table1_tiny.md").read_text()


def test_split_table1_takes_be_from_all_prompts_and_sr_from_the_timed_run(fake_runs, tmp_path,
                                                                        monkeypatch):
    """The split layout: BE of every row on the BE run's n prompts (no AR cell there), SR only
    for the timed rows on timed_n prompts, and a projected SR for every row from per-call costs
    (here a fake breakdown of 20 ms per step, no prefill; AR's fake cells cost 10 ms per token,
    so the projection is exactly BE * 10 / 20)."""
    monkeypatch.setattr(cells, "run_cell", _fake_cell_with_costs)
    split = table1.SPLITS["tiny_split"]
    res = table1.main(["--preset", "tiny_split", "--out", str(tmp_path)])
    stored = [json.loads(line) for line in
              (tmp_path / "runs" / "table1_tiny_split" / "cells.jsonl").read_text().splitlines()]
    be_n = table1.PRESETS["tiny_split"].n
    assert not [c for c in stored if c["method"] == "ar" and len(c["prompts"]) == be_n]
    rows = {r["method"]: r for r in res["rows"]}
    assert next(iter(rows)) == "ar" and rows["ar"]["datasets"]["humaneval"]["SR"][0] == 1.0
    for name, r in rows.items():
        for d, c in r["datasets"].items():
            if name == "ar":
                continue
            assert ("SR" in c) == (name in split.timed), (name, d)
            assert c["SR_projected"] == pytest.approx(c["BE"][0] * 10 / 20, rel=1e-12)
            if name in split.timed:
                assert c["timed_prompts"] == split.timed_n
                assert c["projection_error"] == pytest.approx(
                    c["SR_projected"] / c["SR"][0] - 1, rel=1e-12)
    other = res["split"]["other_L"]["L4"]
    assert set(other) == {"humaneval"} and "ar" not in other["humaneval"]
    md = (tmp_path / "table1_tiny_split.md").read_text()
    assert "projected from measured per-call costs" in md and "HumanEval L = 4" in md
    assert "![BE per dataset](table1_tiny_split_be.png)" in md
    assert (tmp_path / "table1_tiny_split_be.png").stat().st_size > 0


def test_split_table1_measures_one_part_at_a_time_with_the_timed_part_at_batch_1(
        fake_runs, tmp_path, monkeypatch):
    """``--measure PART`` measures that part alone and renders nothing; the BE cells keep the
    preset's batching while the timed and cost cells run at batch 1 (a latency speed-up), and
    a part the preset does not have is refused by name."""
    batches = []

    def spy(setting, method, texts, *a, **kw):
        batches.append((setting.batch_size, setting.n, method.name))
        return _fake_cell_with_costs(setting, method, texts, *a, **kw)

    monkeypatch.setattr(cells, "run_cell", spy)
    base = ["--preset", "tiny_split", "--out", str(tmp_path), "--batch-size", "4"]
    assert table1.main(base + ["--measure", "be"]) == {}
    assert batches and {b for b, _, _ in batches} == {4}
    assert "ar" not in {m for _, _, m in batches}
    assert not (tmp_path / "table1_tiny_split.md").exists()
    batches.clear()
    table1.main(base + ["--measure", "timed"])
    split = table1.SPLITS["tiny_split"]
    assert {b for b, _, _ in batches} == {1} and {n for _, n, _ in batches} == {split.timed_n}
    assert {m for _, _, m in batches} == set(split.timed)
    with pytest.raises(SystemExit, match=r"--measure: got 'L99'.*allowed .*be, timed, costs, L4"):
        table1.main(base + ["--measure", "L99"])
    # Rendered now, the costs and L4 parts are pending: named in the header, no projected SR
    # without costs for the untimed rows, and 'pending' in every other-L cell.
    res = table1.main(base + ["--render-only"])
    md = (tmp_path / "table1_tiny_split.md").read_text()
    assert "Pending (not measured yet): costs, L4" in md
    assert res["split"]["pending"] == ["costs", "L4"]
    rows = {r["method"]: r for r in res["rows"]}
    assert rows["ar"]["datasets"]["humaneval"]["SR"][0] == 1.0  # the timed part is complete
    assert rows["block"]["datasets"]["humaneval"]["SR_projected"] is None
    assert rows["token"]["datasets"]["humaneval"]["SR_projected"] is not None
    other_l = md.split("## BE at other draft lengths")[1].split("\n\n## ")[0]
    assert other_l.count("pending") == len([m for m in table1.methods(
        table1.PRESETS["tiny_split"]) if m.verifier is not None])
    assert "## Ordering by BE at L = 4" not in md  # not before its cells are there
    table1.main(base + ["--measure", "L4"])
    table1.main(base + ["--render-only"])
    md = (tmp_path / "table1_tiny_split.md").read_text()
    at_4 = md.split("## Ordering by BE at L = 4")[1].split("\n\n## ")[0]
    assert "- Ours, HumanEval:" in at_4 and "pooled" not in at_4  # one dataset at L = 4
    assert "| SpecTr-GBV > SpecTr |" in at_4
    # One dataset's cells serve a run restricted to that dataset (keys hold no dataset list).
    batches.clear()
    table1.main(base + ["--measure", "be", "--datasets", "humaneval"])
    assert batches == []


def test_split_table1_renders_the_SR_of_each_dataset_whose_timed_run_is_complete(
        fake_runs, tmp_path, monkeypatch):
    """Timed runs land one dataset (one machine) at a time: a render shows SR for the datasets
    timed in full and names the rest pending, with no pooled SR gain (it would read as over
    every dataset); a dataset where one timed row lacks a repeat counts as not timed."""
    monkeypatch.setattr(cells, "run_cell", _fake_cell_with_costs)
    base = ["--preset", "tiny_split", "--out", str(tmp_path)]
    table1.main(base + ["--measure", "be"])
    table1.main(base + ["--measure", "timed", "--datasets", "humaneval"])
    table1.main(base + ["--measure", "costs", "--datasets", "humaneval"])
    res = table1.main(base + ["--render-only"])
    assert res["split"]["pending"] == ["timed (gsm8k, alpaca)", "L4"]
    rows = {r["method"]: r for r in res["rows"]}
    assert rows["spectr"]["datasets"]["humaneval"]["SR"] is not None
    assert rows["spectr"]["datasets"]["gsm8k"].get("SR") is None
    # the untimed row's costs come from its HumanEval cost cell, AR's from each timed dataset
    assert rows["block"]["datasets"]["humaneval"]["SR_projected"] is not None
    assert rows["block"]["datasets"]["gsm8k"]["SR_projected"] is None
    gain = next(g for g in res["gains"] if g["vs"] == "spectr")["per_dataset"]
    assert "SR" in gain["humaneval"] and "SR" not in gain["pooled"]
    assert "SR" not in gain["gsm8k"]
    md = (tmp_path / "table1_tiny_split.md").read_text()
    assert "Pending (not measured yet): timed (gsm8k, alpaca), L4" in md
    assert "pooled over HumanEval, 95 %" in md
    # GSM8K timed on another machine: its timed rows project from their own breakdowns there,
    # and HumanEval keeps its projections (each dataset's costs come from the machine that
    # timed it; the untimed rows have no cost cell on the other machine).
    monkeypatch.setattr(cells.hardware, "describe", lambda: "another machine")
    table1.main(base + ["--measure", "timed", "--datasets", "gsm8k"])
    rows = {r["method"]: r for r in table1.main(base + ["--render-only"])["rows"]}
    assert rows["spectr"]["datasets"]["gsm8k"]["SR_projected"] is not None
    assert rows["block"]["datasets"]["gsm8k"]["SR_projected"] is None
    assert rows["block"]["datasets"]["humaneval"]["SR_projected"] is not None
    # One repeat short on one timed row: HumanEval is not timed in full either.
    store = tmp_path / "runs" / "table1_tiny_split" / "cells.jsonl"
    stored = [json.loads(line) for line in store.read_text().splitlines()]
    cut = next(c for c in stored if c["method"] == "spectr" and c["dataset"] == "humaneval"
               and c["repeats_done"] == table1.SPLITS["tiny_split"].repeats)
    cut["repeats_done"] = 1
    store.write_text("".join(json.dumps(c) + "\n" for c in stored))
    res = table1.main(base + ["--render-only"])
    assert res["split"]["pending"][0] == "timed (humaneval, alpaca)"
    assert all(r["datasets"]["humaneval"].get("SR") is None for r in res["rows"])
    assert next(r for r in res["rows"] if r["method"] == "spectr")["datasets"]["gsm8k"]["SR"]


def test_cell_keys_do_not_depend_on_the_dataset_list(tmp_path):
    """A store written with the dataset list in its keys is read back under the new keys."""
    m = cells.Method("token", 1)
    s3 = table1.PRESETS["tiny"]
    s1 = cells.with_overrides(s3, datasets=("humaneval",))
    assert cells.cell_key("t", "humaneval", m, s1) == cells.cell_key("t", "humaneval", m, s3)
    old = json.dumps({"table": "t", "dataset": "humaneval", "method": "token", "K": 1,
                      "setting": cells.asdict(s3)}, sort_keys=True)
    path = tmp_path / "cells.jsonl"
    path.write_text(json.dumps(dict(key=old, session="s", x=1)) + "\n")
    assert cells.CellStore(path).get(cells.cell_key("t", "humaneval", m, s1))["x"] == 1


def test_ordering_tests_each_step_of_the_papers_order_per_dataset_and_pooled():
    """A dataset where SD beats GBV on every one of 16 prompts reads 'same order: no' there,
    and that step is resolved against the paper (negative gain, exact sign-flip p = 2 / 2^16,
    still below 0.05 after Holm over the 12 tests); steps with mixed-sign prompts are not."""
    calls = {"spectr_gbv": 10, "spectr": 10, "greedy_block": 12, "token": 12}
    cells_ = {}
    for d in table1.TRIO:
        for name, c in calls.items():
            swap = d == "gsm8k" and name in ("greedy_block", "token")
            prompts = []
            for i in range(16):
                shift = (i + 1) % 3 if name == "token" else i % 3  # mixed-sign differences
                n_calls = (9 if name == "token" else 13) if swap else c + shift
                prompts.append(dict(new_tokens=100, target_calls=n_calls, seconds=1.0))
            cells_[d, name] = dict(prompts=prompts, hardware="h")
    rows = [dict(method=n) for n in calls]
    setting = cells.with_overrides(table1.PRESETS["cpu"], n=16)
    md = "\n".join(table1.ordering(rows, cells_, setting))
    assert "Ours, GSM8K:" in md and md.count("same order as the paper: no") >= 1
    gsm_line = next(line for line in md.splitlines() if line.startswith("- Ours, GSM8K"))
    assert gsm_line.endswith("no")
    table = [line for line in md.splitlines() if line.startswith("| GBV > SD")][0]
    cols = [c.strip() for c in table.split("|")[2:-1]]  # pooled, HumanEval, GSM8K, Alpaca
    assert len(cols) == 4
    assert cols[2].startswith("-") and cols[2].endswith("resolved: yes")
    assert cols[1].endswith("resolved: no")


def test_ceiling_note_says_per_dataset_whether_more_tokens_would_help():
    """A prompt at the ceiling that ended at EOS cannot move with more tokens; one that ran the
    whole budget can: the note tells the two apart per dataset, against the 15 % aim."""
    s = dataclasses.replace(table1.PRESETS["tiny"], datasets=("humaneval", "gsm8k", "alpaca"),
                max_new_tokens=24)
    L = s.L

    def prompt(tokens, calls):
        return dict(new_tokens=tokens, target_calls=calls, min_calls=-(-tokens // (L + 1)))

    at_full, at_eos, below = prompt(24, 3), prompt(10, 2), prompt(24, 7)
    store = {("humaneval", "token"): {"prompts": [at_full] + [below] * 3},  # 25 %, full budget
             ("gsm8k", "token"): {"prompts": [at_eos] + [below] * 9},  # 10 %
             ("alpaca", "token"): {"prompts": [at_eos] + [below] * 2}}  # 33 %, all at EOS
    text = "\n".join(table1.ceiling_note(store, s, [cells.Method(None), cells.Method("token", 1)]))
    he, gsm, alp = (next(x for x in text.splitlines() if x.startswith(f"- {n}:"))
                    for n in ("HumanEval", "GSM8K", "Alpaca"))
    assert "up to 25 % (token)" in he and "**over the aim**; more tokens per prompt could" in he
    assert "up to 10 %" in gsm and "under the aim" in gsm
    assert "up to 33 %" in alp and "1 ended at EOS, 0 ran" in alp and "cannot lower it" in alp


def test_specbench_reads_each_task_and_keeps_old_stores_keys():
    """The Spec-Bench table's datasets are the vendored tasks (the first n of each, in the chat
    template), its int8 preset changes only the target's weights, and the new target_weights
    field at its default leaves the keys of stores written before it unchanged."""
    from paper_repro import specbench

    class Target:
        def apply_chat_template(self, messages, add_generation_prompt=True):
            return "<user>" + messages[0]["content"] + "<assistant>"

    setting = specbench.PRESETS["cpu"]
    for d in setting.datasets:
        ids, texts = cells.prompt_texts(setting, d, Target())
        suite, _, task = d.partition("/")
        prompts = load_prompts(suite, category=task or None)[:setting.n]
        assert len(ids) == setting.n == 8 and ids == [p.id for p in prompts]
        assert texts == [f"<user>{p.text}<assistant>" for p in prompts]
        assert d in cells.DATASETS
    int8 = specbench.PRESETS["cpu_int8"]
    assert dataclasses.replace(int8, target_weights="float32") == setting
    method = cells.Method("token")
    key = cells.cell_key("t", "humaneval", method, setting)
    old = json.loads(key)
    assert "target_weights" not in old["setting"]
    assert cells.cell_key("t", "humaneval", method, int8) != key
