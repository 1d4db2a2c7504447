"""Two local processes (4 forced CPU devices each) join one 8-device mesh through
``jax.distributed`` and run ``specjax-run`` together: the tokens are those of one device, and
only process 0 writes results and logs."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from experiments.run import _instantiate
from specjax import generate
from specjax.eval.metrics import TIMINGS
from specjax.models.toy import load_toy

ROOT = Path(__file__).resolve().parents[2]
FAST = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}
OVERRIDES = ["experiment=toy_smoke", "mesh=data8", "dataset.n=3", "max_new_tokens=6",
             "batch_size=null", "ar_baseline=false", "breakdown=false", "logger=jsonl"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_share_one_mesh_and_only_process_0_writes(make_cfg, tmp_path):
    port = _free_port()
    procs = []
    for pid in (0, 1):
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        flags = [os.environ.get("SPECJAX_TEST_XLA_FLAGS", ""),
                 "--xla_force_host_platform_device_count=4"]
        env.update(XLA_FLAGS=" ".join(filter(None, flags)), JAX_PLATFORMS="cpu",
                   JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES="2",
                   JAX_PROCESS_ID=str(pid))
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "experiments.run", *OVERRIDES,
             f"hydra.run.dir={tmp_path / f'process{pid}'}"],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=600)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
    assert [p.returncode for p in procs] == [0, 0], "\n".join(logs)[-4000:]

    main, other = tmp_path / "process0", tmp_path / "process1"
    assert sorted(f.name for f in main.iterdir()) == ["config.yaml", "results.jsonl",
                                                       "tracker.jsonl"]
    assert not other.exists() or not any(other.iterdir())  # process 1 wrote nothing
    rows = [json.loads(line) for line in (main / "results.jsonl").read_text().splitlines()]
    summary = rows[-1]
    assert summary["type"] == "summary" and summary["config"]["mesh"]["data"] == 8

    # The same run on this process's single device, straight through the API.
    cfg = make_cfg(*OVERRIDES)
    drafter, verifier, sampling, dataset = _instantiate(cfg)
    target, draft = load_toy(cfg.model.target), load_toy(cfg.model.draft)
    texts = dataset.texts(target, dataset.load())
    one = generate(target, texts, draft=draft, drafter=drafter, verifier=verifier,
                   sampling=sampling, max_new_tokens=cfg.max_new_tokens, seed=cfg.seed,
                   compiler_options=FAST, progress=False)
    prompts = [r for r in rows if r["type"] == "prompt"]
    assert [r["tokens"] for r in prompts] == one.tokens
    for r, p in zip(prompts, one.per_prompt, strict=True):
        assert {k: v for k, v in r["speculative"].items() if k not in TIMINGS} == {
            k: v for k, v in p.items() if k not in TIMINGS}
