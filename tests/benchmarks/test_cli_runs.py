"""benchmarks.cli_runs renders the runs' own numbers (nothing re-timed) and refuses an "alone"
pairing whose first prompts differ."""

import json

import pytest
from omegaconf import OmegaConf

from benchmarks import cli_runs


def fake_run(path, prompt_id, ar_s, sd_s):
    path.mkdir(parents=True)
    side = dict(tokens_per_s=10.0, mean_prefill_s=2.0, decode_tokens_per_s=15.0,
                block_efficiency=1.0, acceptance_rate=0.0, num_prompts=1)
    summary = dict(type="summary", model=dict(weights="int8", prefill_activations="int8",
                                               decode_activations="float32", draft=None),
                   drafter=dict(name="ngram", L=6),
                   speculative={**side, "tokens_per_s": 12.5, "block_efficiency": 2.5,
                                "time_breakdown": dict(draft_ms=1.0, tree_ms=100.0,
                                                       verify_ms=2.0, step_ms=103.0,
                                                       in_loop_step_ms=110.0)},
                   autoregressive=side, speedup=1.25, decode_speedup=1.5,
                   speedup_interval=[1.1, 1.4], decode_speedup_interval=[1.2, 1.8],
                   speedup_sign_flip_p=0.0078125, timing_repeats=2)
    prompt = dict(type="prompt", id=prompt_id, autoregressive=dict(wall_time_s=ar_s),
                  speculative=dict(wall_time_s=sd_s))
    (path / "results.jsonl").write_text(json.dumps(prompt) + "\n" + json.dumps(summary) + "\n")
    OmegaConf.save(OmegaConf.create(dict(sampling=dict(temperature=0.0))), path / "config.yaml")


def test_the_table_holds_the_runs_numbers(tmp_path):
    fake_run(tmp_path / "a", "p/1", 6.0, 5.0)
    fake_run(tmp_path / "b", "p/1", 5.0, 4.0)
    out = tmp_path / "t.md"
    cli_runs.main(["--title", "T", "--command", "specjax-run x", "--commit", "abc",
                   "--runs", f"a={tmp_path / 'a'}", f"b={tmp_path / 'b'}", "--alone", "a=b",
                   "--out", str(out)])
    text = out.read_text()
    assert ("| a | int8 target (int8 rows: prefill); ngram L=6; T=0.0; n=1; 2 repeats | 10.0 | "
            "12.5 |") in text
    assert "1.25x [1.10, 1.40] | 1.50x [1.20, 1.80] | 0.00781 | 2.50 |" in text
    assert "| a | p/1 | 6.00 | 5.00 | 1.200 | 5.00 | 4.00 | 1.250 |" in text
    assert "| a | 1.0 | 100.0 | 2.0 | 103.0 | 110.0 | 66.7 | 1.65 | 2.50 |" in text


def test_an_alone_run_of_another_prompt_is_refused(tmp_path):
    fake_run(tmp_path / "a", "p/1", 6.0, 5.0)
    fake_run(tmp_path / "b", "p/2", 5.0, 4.0)
    with pytest.raises(SystemExit, match="first prompts differ"):
        cli_runs.main(["--title", "T", "--command", "c", "--commit", "abc", "--runs",
                       f"a={tmp_path / 'a'}", f"b={tmp_path / 'b'}", "--alone", "a=b",
                       "--out", str(tmp_path / "t.md")])
