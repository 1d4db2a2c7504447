"""specjax-run input guards: one error line and exit code 2, and a sweep that
survives SIGKILL: rerun, it finishes with every run's lines exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from specjax.eval.results import RESULTS_FILE, read_summary

CODE = "import sys; from experiments.run import main; sys.argv[0] = 'specjax-run'; main()"
ENV = {**os.environ, "WANDB_MODE": "offline", "JAX_PLATFORMS": "cpu"}


def _cli(*args, cwd):
    """``specjax-run`` as the console script runs it (see tests/experiments/test_run.py)."""
    return subprocess.run([sys.executable, "-c", CODE, *args], cwd=cwd, env=ENV,
                          capture_output=True, text=True, timeout=600)


def _one_error(proc) -> str:
    assert proc.returncode == 2, proc.stderr
    errors = [x for x in proc.stderr.splitlines() if x.startswith("specjax-run: error:")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


def test_prompt_over_the_context_exits_2_before_compiling(tmp_path):
    # Toy prompts have 2..9 tokens and the toys a 1024-token context.
    proc = _cli("experiment=toy_smoke", "max_new_tokens=1024", "logger=none",
                f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    error = _one_error(proc)
    assert "error: prompts: prompt 0 has" in error and "1024-token context" in error
    assert "max_new_tokens" in error
    assert "compiling" not in proc.stderr
    assert not (tmp_path / "run").exists()  # no config.yaml, no results: nothing left behind


def test_toy_model_with_a_text_dataset_names_the_toy_datasets(tmp_path):
    proc = _cli("model=toy", "dataset=humaneval", "logger=none",
                f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    error = _one_error(proc)
    assert error.startswith("specjax-run: error: dataset: ") and "dataset=toy" in error
    assert "invalid literal" not in proc.stderr
    assert not (tmp_path / "run").exists()


def _finished(sweep):
    return {p.parent.name: p.read_bytes() for p in sweep.glob(f"*/{RESULTS_FILE}")
            if read_summary(p.parent) is not None}


def test_killed_sweep_resumes_without_lost_or_duplicated_lines(tmp_path):
    """SIGKILL the sweep as soon as its first results.jsonl lands (the next run is loading or
    compiling), rerun the same command, then every run holds prompts 0, 1 and one summary."""
    sweep = tmp_path / "sweep"
    verifiers = ("token", "block")
    args = ["-m", "experiment=toy_smoke", f"verifier={','.join(verifiers)}", "drafter=ngram",
            "dataset.n=2", "max_new_tokens=3", "ar_baseline=false", "breakdown=false",
            "logger=none", f"hydra.sweep.dir={sweep}"]
    proc = subprocess.Popen([sys.executable, "-c", CODE, *args], cwd=tmp_path, env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not any(sweep.glob(f"*/{RESULTS_FILE}")) and proc.poll() is None:
            assert time.monotonic() < deadline, "no run finished in 300 s"
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the sweep ended before it could be killed"
    before = _finished(sweep)
    # The kill landed between the two runs: exactly the first one finished (if the poll missed
    # the window and both finished, or none did, the resume below would test nothing).
    assert len(before) == 1, sorted(before)

    again = _cli(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("skipped") == len(before)
    after = _finished(sweep)
    assert sorted(read_summary(sweep / d)["verifier"] for d in after) == sorted(verifiers)
    for name, data in after.items():
        lines = [json.loads(x) for x in data.decode().splitlines()]
        assert [(x["type"], x.get("index")) for x in lines] == [
            ("prompt", 0), ("prompt", 1), ("summary", None)], name
        assert all(len(x["tokens"]) == 3 for x in lines[:2])
        if name in before:
            assert data == before[name]  # a finished run is never rewritten
    assert not list(sweep.glob("*/*.tmp"))
