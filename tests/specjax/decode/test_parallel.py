"""Decoding on a device mesh gives the tokens and counters of one device
(``specjax.decode.parallel``).

The mesh runs happen in a subprocess (``parallel_check.py``) because the number of forced CPU
devices is fixed when JAX starts; this process has one device and checks the comparisons and
the small helpers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specjax.decode.parallel import check_tensor_parallel, distributed_env, make_mesh
from specjax.models.config import tiny_config

ROOT = Path(__file__).resolve().parents[3]


def _mesh_runs(mode: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    proc = subprocess.run([sys.executable, str(Path(__file__).with_name("parallel_check.py")),
                           mode], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def _assert_identical(out: dict, expected_cases: int) -> None:
    assert out["devices"] == 8
    cases = {k: v for k, v in out.items() if isinstance(v, dict) and "one" in v}
    assert len(cases) == expected_cases, (sorted(cases), out["skipped"])
    for name, runs in cases.items():
        assert runs["mesh"]["tokens"] == runs["one"]["tokens"], name
        assert runs["mesh"]["counters"] == runs["one"]["counters"], name
        assert all(len(t) == 8 for t in runs["one"]["tokens"]), name  # 8 new tokens, no EOS


def test_data_and_tensor_parallel_decoding_is_identical_to_one_device():
    out = _mesh_runs("quick")
    _assert_identical(out, expected_cases=6)
    tp = out["tp_weights"]
    # wq [D, H*hd] = [32, 128] split by heads over the 4 devices of the model axis.
    assert tp["wq_shape"] == [32, 128] and tp["wq_shard_shapes"] == [[32, 32]]
    # Split contractions (wo, w_down) are summed across devices: float rounding only.
    assert tp["logits_max_abs_diff"] <= 1e-5 < tp["logits_max_abs"]
    # The loop's KV cache [B, KV, T, hd] = [4, 4, T, 16]: 2 sequences and 1 head per device.
    cache = out["tp_cache"]
    assert cache["k_shape"][:2] == [4, 4] and len(cache["k_shard_shapes"]) == 1
    assert cache["k_shard_shapes"][0][:2] == [2, 1]
    assert [shape[0] for shape in cache["history_shard_shapes"]] == [2]  # [B, T] over data


@pytest.mark.slow
def test_every_verifier_on_a_data_mesh_is_identical_to_one_device():
    out = _mesh_runs("full")
    from algorithms.verifiers import list_verifiers

    # AR and every verifier, greedy and T=1, on the toy pair; plus the 2 tiny-decoder cases.
    assert len(out["skipped"]) <= 2, out["skipped"]  # only a pairing the engine refuses
    _assert_identical(out, expected_cases=2 * (1 + len(list_verifiers())) + 2
                      - len(out["skipped"]))


def test_one_device_is_no_mesh_and_bad_meshes_name_the_field():
    assert make_mesh(1, 1) is None
    assert make_mesh(-1, 1) is None  # "all devices" of this one-device process
    with pytest.raises(ValueError, match=r"mesh\.data x mesh\.model: 8 x 1 = 8 devices needed.*"
                       r"xla_force_host_platform_device_count=8"):
        make_mesh(8, 1)
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match=r"mesh\.data: must be an integer"):
            make_mesh(bad, 1)
    with pytest.raises(ValueError, match=r"mesh\.model: must be an integer >= 1"):
        make_mesh(1, -1)


def test_tensor_parallel_needs_whole_heads_per_device():
    check_tensor_parallel(tiny_config("qwen2", num_heads=8, num_kv_heads=4), 4)
    check_tensor_parallel(tiny_config("llama"), 1)  # no model axis: anything goes
    with pytest.raises(ValueError, match=r"mesh\.model: 4 must divide the target's num_heads"):
        check_tensor_parallel(tiny_config("llama"), 4)  # 6 heads
    with pytest.raises(ValueError, match=r"num_kv_heads \(2\)"):
        check_tensor_parallel(tiny_config("qwen2", num_heads=8), 4)


def test_distributed_environment_detection(monkeypatch):
    for k in list(os.environ):
        if k.startswith(("SLURM_", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")):
            monkeypatch.delenv(k)
    assert distributed_env() is None
    monkeypatch.setenv("JAX_NUM_PROCESSES", "2")
    with pytest.raises(ValueError, match="JAX_PROCESS_ID"):
        distributed_env()
    monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "127.0.0.1:1234")
    monkeypatch.setenv("JAX_PROCESS_ID", "1")
    assert distributed_env() == dict(coordinator_address="127.0.0.1:1234", num_processes=2,
                                     process_id=1)
    monkeypatch.delenv("JAX_NUM_PROCESSES")
    slurm = dict(SLURM_JOB_ID="7", SLURM_STEP_NODELIST="node[1-2]", SLURM_PROCID="0",
                 SLURM_LOCALID="0", SLURM_NTASKS="1")
    for k, v in slurm.items():
        monkeypatch.setenv(k, v)
    assert distributed_env() is None  # one task: a single process
    monkeypatch.setenv("SLURM_NTASKS", "2")
    assert distributed_env() == {}  # JAX reads coordinator, count and id from SLURM itself
    monkeypatch.setenv("SLURM_GPUS_ON_NODE", "8")
    monkeypatch.setenv("SLURM_STEP_TASKS_PER_NODE", "8(x2)")
    assert distributed_env() == {}  # one task per GPU: JAX's own SLURM default
    monkeypatch.setenv("SLURM_STEP_TASKS_PER_NODE", "1(x2)")
    assert distributed_env() == {"local_device_ids": list(range(8))}  # one task drives 8 GPUs
    monkeypatch.delenv("SLURM_STEP_NODELIST")  # sbatch's shell, not an srun task
    assert distributed_env() is None
