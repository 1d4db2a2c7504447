"""``specjax-run`` with a researcher's own checkpoints and prompts: Hugging Face directories
written by ``transformers`` and a JSON-lines prompt file run end to end; each bad input is one
error line naming the field, exit code 2, and no run directory left behind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HF = ROOT / "tests" / "specjax" / "models" / "goldens" / "hf"
CODE = "import sys; from experiments.run import main; sys.argv[0] = 'specjax-run'; main()"
ENV = {**os.environ, "WANDB_MODE": "offline", "JAX_PLATFORMS": "cpu"}
FAST = ["logger=none", "max_new_tokens=5", "breakdown=false", "drafter.L=2"]


def cli(*args, cwd, env=ENV):
    return subprocess.run([sys.executable, "-c", CODE, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=900)


def prompts(tmp_path, rows) -> Path:
    path = tmp_path / "questions.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def one_error(proc, run_dir: Path) -> str:
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [x for x in proc.stderr.splitlines() if x.startswith("specjax-run: error:")]
    assert len(errors) == 1, proc.stderr[-3000:]
    assert not run_dir.exists()  # nothing written
    return errors[0]


def test_hf_directories_and_a_prompt_file_run_end_to_end(tmp_path):
    questions = prompts(tmp_path, [
        {"question_id": 1, "category": "qa", "turns": ["hello world"]},
        {"question_id": 2, "category": "writing", "turns": ["write a short line"]},
        {"question_id": 3, "category": "qa", "turns": ["the cat sat"]}])
    run_dir = tmp_path / "run"
    proc = cli(f"model.target={HF / 'qwen3'}", f"model.draft={HF / 'qwen3'}", "dataset=file",
               f"dataset.path={questions}", "dataset.category=qa", *FAST,
               f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(x) for x in (run_dir / "results.jsonl").read_text().splitlines()]
    assert [x["id"] for x in lines[:-1]] == ["1", "3"]  # the qa prompts, in file order
    assert [x["category"] for x in lines[:-1]] == ["qa", "qa"]
    summary = lines[-1]
    assert summary["model"]["target"] == str(HF / "qwen3")
    assert summary["model"]["weights"] == "float32"  # the CPU's default
    assert summary["speculative"]["new_tokens"] > 0


def test_a_directory_without_config_json(tmp_path):
    (tmp_path / "empty").mkdir()
    proc = cli(f"model.target={tmp_path / 'empty'}", "dataset=file",
               f"dataset.path={prompts(tmp_path, [{'prompt': 'hi'}])}", *FAST,
               f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    error = one_error(proc, tmp_path / "run")
    assert "model.target:" in error and "has no config.json" in error


def test_an_unsupported_architecture(tmp_path):
    gpt2 = tmp_path / "gpt2"
    shutil.copytree(HF / "qwen2", gpt2)
    config = json.loads((gpt2 / "config.json").read_text()) | {"architectures":
                                                                ["GPT2LMHeadModel"]}
    (gpt2 / "config.json").write_text(json.dumps(config))
    proc = cli(f"model.target={gpt2}", "dataset=file",
               f"dataset.path={prompts(tmp_path, [{'prompt': 'hi'}])}", *FAST,
               f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    error = one_error(proc, tmp_path / "run")
    assert "'GPT2LMHeadModel' is not supported; supported: LlamaForCausalLM" in error


def test_a_pair_with_different_tokenizers(tmp_path):
    proc = cli(f"model.target={HF / 'qwen2'}", f"model.draft={HF / 'qwen3'}", "dataset=file",
               f"dataset.path={prompts(tmp_path, [{'prompt': 'hi'}])}", *FAST,
               f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    error = one_error(proc, tmp_path / "run")
    assert "model.draft:" in error and str(HF / "qwen3") in error and str(HF / "qwen2") in error


def test_a_prompt_file_with_a_bad_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "fine"}\n{"prompt": "fine"}\n{"prompt": \n')
    proc = cli("model=toy", "dataset=file", f"dataset.path={path}", "dataset.chat=false", *FAST,
               f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    error = one_error(proc, tmp_path / "run")
    assert "dataset.path:" in error and "bad.jsonl line 3: not valid JSON" in error
    assert "compiling" not in proc.stderr  # refused before any model loaded


@pytest.mark.parametrize("name", ["nobody/no-such-model"])
def test_a_hub_id_not_in_the_cache(tmp_path, name):
    env = {**ENV, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    proc = cli(f"model.target={name}", "dataset=file",
               f"dataset.path={prompts(tmp_path, [{'prompt': 'hi'}])}", *FAST,
               f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path, env=env)
    error = one_error(proc, tmp_path / "run")
    assert f"'{name}' is neither a local directory nor in the local Hugging Face cache" in error
    assert str(tmp_path / "hub") in error


def test_toy_models_read_a_file_of_token_ids(tmp_path):
    path = prompts(tmp_path, [{"prompt": "1 2 3"}, {"prompt": "0 1"}])
    run_dir = tmp_path / "run"
    proc = cli("model=toy", "dataset=file", f"dataset.path={path}", "dataset.chat=false",
               *FAST, f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    assert len(lines) == 3 and json.loads(lines[0])["prompt"] == "1 2 3"
