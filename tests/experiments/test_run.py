"""specjax-run end to end on the toy pair: records, greedy equivalence, resume, invalid values."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

import specjax
from experiments.run import run_experiment
from experiments.validate import ConfigError
from specjax.eval.results import read_summary, write_results


def _lines(run_dir):
    return [json.loads(x) for x in (run_dir / "results.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def greedy_run(tmp_path_factory):
    """One toy run at T=0 with the AR baseline and the JSONL tracker (shared by several tests)."""
    from hydra import compose, initialize_config_dir

    from experiments.config_tree import config_dir

    run_dir = tmp_path_factory.mktemp("greedy")
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[
            "experiment=toy_smoke", "sampling=greedy", "dataset.n=3", "max_new_tokens=6",
            "logger=jsonl"])
    summary = run_experiment(cfg, run_dir)
    return run_dir, summary


def test_results_file_has_a_line_per_prompt_then_the_summary(greedy_run):
    run_dir, summary = greedy_run
    lines = _lines(run_dir)
    assert [x["type"] for x in lines] == ["prompt"] * 3 + ["summary"]
    assert [x["id"] for x in lines[:3]] == ["toy/0", "toy/1", "toy/2"]
    assert lines[-1]["verifier"] == "token" and lines[-1]["drafter"]["name"] == "model"
    assert lines[-1]["model"] == {"target": "toy-target", "draft": "toy-draft",
                                  "weights": "float32", "draft_weights": "float32",
                                  "prefill_activations": "float32",
                                  "draft_prefill_activations": "float32",
                                  "decode_activations": "float32",
                                  "draft_decode_activations": "float32"}
    assert (run_dir / "config.yaml").exists()
    ar, spec = summary["autoregressive"], summary["speculative"]
    assert ar["num_prompts"] == spec["num_prompts"] == 3
    assert ar["new_tokens"] == spec["new_tokens"] == 3 * 6  # toys never emit EOS
    # Autoregressive decoding: one target call per token, nothing drafted.
    assert ar["target_calls"] == ar["new_tokens"] and ar["block_efficiency"] == 1.0
    assert summary["speedup"] == pytest.approx(spec["tokens_per_s"] / ar["tokens_per_s"])
    for row in lines[:3]:
        assert len(row["tokens"]) == row["speculative"]["new_tokens"] == 6
    parts = lines[-1]["speculative"]["time_breakdown"]  # breakdown=true is the default
    assert {"draft_ms", "tree_ms", "verify_ms", "other_ms", "step_ms"} <= set(parts)


def test_greedy_speculative_output_equals_greedy_autoregressive(greedy_run):
    # At T = 0 every lossless verifier must reproduce greedy decoding token for token.
    for row in _lines(greedy_run[0])[:-1]:
        assert row["output"] == row["autoregressive"]["output"]


def test_tracker_gets_config_prompt_table_and_summary(greedy_run):
    events = [json.loads(x) for x in (greedy_run[0] / "tracker.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["config", "table", "summary"]
    assert events[0]["config"]["drafter"]["L"] == 3
    assert len(events[1]["rows"]) == 3 and "speculative/block_efficiency" in events[1]["rows"][0]
    assert events[2]["metrics"]["speedup"] == greedy_run[1]["speedup"]


def test_resume_skips_a_finished_run(greedy_run, make_cfg, monkeypatch, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(greedy_run[0], run_dir)
    before = (run_dir / "results.jsonl").read_bytes()

    def no_decoding(*args, **kwargs):
        raise AssertionError("a finished run must not decode again")

    monkeypatch.setattr(specjax, "generate", no_decoding)
    monkeypatch.setattr(specjax, "compare", no_decoding)
    cfg = make_cfg("experiment=toy_smoke", "sampling=greedy", "dataset.n=3", "max_new_tokens=6")
    assert run_experiment(cfg, run_dir) == _lines(run_dir)[-1]
    assert (run_dir / "results.jsonl").read_bytes() == before
    with pytest.raises(AssertionError, match="must not decode"):  # resume=false reruns
        run_experiment(make_cfg("experiment=toy_smoke", "resume=false"), run_dir)


def test_a_run_without_summary_line_is_not_finished(tmp_path):
    assert read_summary(tmp_path) is None
    (tmp_path / "results.jsonl").write_text('{"type": "prompt", "index": 0}\n{"type": "sum')
    assert read_summary(tmp_path) is None
    write_results(tmp_path, [{"index": 0}], {"speedup": 1.5})
    assert read_summary(tmp_path) == {"type": "summary", "speedup": 1.5}
    assert not (tmp_path / "results.jsonl.tmp").exists()


INVALID = [
    (["drafter.K=0"], "drafter.K"),
    (["drafter.L=0"], "drafter.L"),
    (["sampling.temperature=-0.5"], "sampling.temperature"),
    (["sampling.top_p=0"], "sampling.top_p"),
    (["sampling.top_p=1.5"], "sampling.top_p"),
    (["sampling.top_k=-1"], "sampling.top_k"),
    (["max_new_tokens=0"], "max_new_tokens"),
    (["dataset.n=0"], "dataset.n"),
    (["drafter.K=3"], "drafter.K"),  # token verifier: max_drafts = 1
    # lookup drafts are not i.i.d.: a verifier not defined for them is refused
    (["drafter=ngram", "drafter.K=3", "verifier=spectr_gbv"], "verifier"),
    (["model.draft=toy-draft-v8"], "model.draft"),  # V=8 draft for a V=4 target
    (["model.target=toy-unknown"], "model.target"),
    (["dataset=humaneval"], "dataset"),  # the toy models read token ids: dataset=toy only
    (["drafter=ngram", "drafter.min_ngram=3", "drafter.max_ngram=2"], "drafter.max_ngram"),
    (["verifier._target_=algorithms.verifiers.nope.Nope"], "verifier"),
    (["model.weights=int4"], "model.weights"),
    (["model.weights=int8"], "model.weights"),  # the toy models are exact float tables
    (["compile_cache=maybe"], "compile_cache"),
    (["+model.draft_weights=int4"], "model.draft_weights"),
    (["+model.draft_weights=int8"], "model.draft_weights"),  # toy draft: exact float table
    (["drafter.draft_vocab=0"], "drafter.draft_vocab"),
    (["model.prefill_activations=int4"], "model.prefill_activations"),
    (["model.prefill_activations=int8"], "model.prefill_activations"),  # float32 weights
    (["model.draft_prefill_activations=int8"], "model.draft_prefill_activations"),
    (["drafter=ngram", "drafter.L=auto"], "drafter.L"),  # L=auto needs a draft model's cost
    (["fallback.break_even=0.5"], "fallback.break_even"),
    (["fallback.break_even=often"], "fallback.break_even"),
    (["fallback.break_even=2", "fallback.max_wait=0"], "fallback.max_wait"),
    (["fallback.break_even=2", "fallback.decay=1"], "fallback.decay"),
    (["fallback.break_even=2", "drafter=medusa"], "fallback.break_even"),  # reads features
]


def test_auto_lookahead_and_cut_vocab_run_end_to_end_and_greedy_equals_ar(make_cfg, tmp_path):
    """drafter.L=auto measures, fixes L, and records what it measured; with a cut draft
    vocabulary too, greedy speculative output still equals autoregressive output."""
    cfg = make_cfg("experiment=toy_smoke", "sampling=greedy", "dataset.n=2", "max_new_tokens=6",
                   "drafter.L=auto", "drafter.draft_vocab=3", "breakdown=false", "logger=none")
    summary = run_experiment(cfg, tmp_path)
    auto = summary["drafter"]["auto_lookahead"]
    assert summary["drafter"]["L"] == auto["L"] >= 1 and 0 <= auto["alpha"] <= 1
    assert summary["regime"] == "latency, batch 1"  # the config's default batch_size
    for row in _lines(tmp_path)[:-1]:
        assert row["output"] == row["autoregressive"]["output"]


def test_fallback_auto_measures_break_even_and_greedy_equals_ar(make_cfg, tmp_path):
    """fallback.break_even=auto times a speculative and an autoregressive probe, runs the loop
    with the ratio and records it; the AR steps it takes keep greedy output equal to AR."""
    cfg = make_cfg("experiment=toy_smoke", "sampling=greedy", "dataset.n=2", "max_new_tokens=8",
                   "fallback.break_even=auto", "breakdown=false", "logger=none")
    summary = run_experiment(cfg, tmp_path)
    fb = summary["fallback"]
    assert fb["break_even"] == fb["auto"]["break_even"] >= 1.0
    assert fb["auto"]["speculative_step_ms"] > 0 and fb["auto"]["ar_step_ms"] > 0
    assert summary["speculative"]["ar_steps"] >= 0
    for row in _lines(tmp_path)[:-1]:
        assert row["output"] == row["autoregressive"]["output"]


@pytest.mark.parametrize("overrides, field", INVALID)
def test_invalid_values_name_the_field_and_touch_nothing(make_cfg, greedy_run, overrides,
                                                         field, monkeypatch):
    run_dir = greedy_run[0]
    before = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    monkeypatch.setattr(specjax, "generate", lambda *a, **k: pytest.fail("decoded"))
    cfg = make_cfg("experiment=toy_smoke", "sampling=greedy", "dataset.n=3",
                   "max_new_tokens=6", "resume=false", *overrides)
    with pytest.raises(ConfigError) as err:
        run_experiment(cfg, run_dir)
    assert err.value.field == field
    assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == before


def _cli(*args, cwd):
    """Run ``main`` exactly as the ``specjax-run`` console script does (imported, not __main__:
    Hydra resolves the config dir differently for the two)."""
    env = {**os.environ, "WANDB_MODE": "offline", "JAX_PLATFORMS": "cpu"}
    code = "import sys; from experiments.run import main; sys.argv[0] = 'specjax-run'; main()"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("args, field", [
    (["drafter.K=0"], "drafter.K"),
    (["verifier=nope"], "verifier"),
    (["-m", "verifier=token,nope"], "verifier"),
    (["sampling.top_p=2"], "sampling.top_p"),
    (["drafter=ngram", "drafter.K=3", "verifier=spectr_gbv"], "verifier"),
])
def test_cli_exits_2_with_one_line_naming_the_field(greedy_run, tmp_path, args, field):
    run_dir = greedy_run[0]
    before = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    proc = _cli("experiment=toy_smoke", f"hydra.run.dir={run_dir}",
                f"hydra.sweep.dir={tmp_path / 'sweep'}", *args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    errors = [x for x in proc.stderr.splitlines() if x.startswith("specjax-run: error:")]
    assert len(errors) == 1 and f"error: {field}:" in errors[0], proc.stderr
    if field == "verifier":  # the allowed list: all names, or those taking lookup drafts
        listed = "specinfer" if "drafter=ngram" in args else "token"
        assert "allowed: " in errors[0] and listed in errors[0]
    assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == before
    assert not (tmp_path / "sweep").exists() or not any((tmp_path / "sweep").rglob("*.jsonl"))


def test_multirun_writes_one_run_per_verifier_and_resumes(tmp_path):
    args = ("-m", "experiment=toy_smoke", "verifier=token,block", "dataset.n=2",
            "max_new_tokens=4", "ar_baseline=false", "breakdown=false",
            f"hydra.sweep.dir={tmp_path / 'sweep'}")
    first = _cli(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    runs = sorted((tmp_path / "sweep").glob("*/results.jsonl"))
    verifiers = sorted(read_summary(p.parent)["verifier"] for p in runs)
    assert verifiers == ["block", "token"]
    before = [p.read_bytes() for p in runs]
    again = _cli(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("skipped") == 2
    assert [p.read_bytes() for p in runs] == before


@pytest.mark.slow
def test_smollm2_self_speculation_through_the_app(make_cfg, tmp_path):
    """Real weights, real chat template, early-exit drafting; greedy so it must equal AR."""
    cfg = make_cfg("experiment=smollm2_early_exit", "dataset.n=2", "max_new_tokens=16",
                   "logger=none")
    summary = run_experiment(cfg, tmp_path)
    lines = _lines(tmp_path)
    from specjax.prompts import load_prompts

    for row, prompt in zip(lines[:-1], load_prompts("gsm8k", n=2), strict=True):
        assert prompt.text in row["prompt"] and row["prompt"] != prompt.text  # chat-formatted
        assert row["output"] == row["autoregressive"]["output"]
    assert summary["speculative"]["block_efficiency"] >= 1.0


@pytest.mark.slow
def test_default_experiment_shrunk(make_cfg, tmp_path):
    """The README's main command on 2 prompts x 16 tokens (downloads the Qwen pair once)."""
    summary = run_experiment(make_cfg("experiment=default", "dataset.n=2", "max_new_tokens=16",
                                      "logger=none"), tmp_path)
    assert {k: summary["model"][k] for k in ("target", "draft")} == {
        "target": "qwen2.5-coder-1.5b-instruct", "draft": "qwen2.5-coder-0.5b-instruct"}
    assert summary["speculative"]["num_prompts"] == 2
    assert summary["speedup"] > 0
