"""Mesh configs and the SLURM launcher compose with every experiment (no cluster needed)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from experiments.config_tree import group_options
from experiments.validate import ConfigError, check_group_overrides

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", group_options("mesh"))
def test_mesh_configs_ask_for_the_devices_they_use(make_cfg, name):
    mesh = make_cfg(f"mesh={name}").mesh
    assert set(mesh) == {"data", "model", "nodes", "gpus_per_node", "tasks_per_node"}
    assert all(isinstance(v, int) for v in mesh.values())
    assert mesh.model >= 1 and (mesh.data >= 1 or mesh.data == -1)
    assert mesh.gpus_per_node % mesh.tasks_per_node == 0  # whole GPUs per JAX process
    if mesh.data != -1:  # -1 = whatever the nodes hold
        assert mesh.data * mesh.model == mesh.nodes * mesh.gpus_per_node


def test_single_mesh_is_the_default(make_cfg):
    assert OmegaConf.to_container(make_cfg().mesh) == dict(
        data=1, model=1, nodes=1, gpus_per_node=1, tasks_per_node=1)


@pytest.mark.parametrize("experiment", group_options("experiment"))
@pytest.mark.parametrize("mesh", ["single", "data8", "nodes2"])
def test_submitit_slurm_composes_with_every_experiment_and_carries_the_mesh(make_cfg, experiment,
                                                                            mesh):
    cfg = make_cfg(f"experiment={experiment}", f"mesh={mesh}", "hydra/launcher=submitit_slurm",
                   hydra=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("submitit_launcher.SlurmLauncher")
    assert (launcher.nodes, launcher.gpus_per_node, launcher.tasks_per_node) == (
        cfg.mesh.nodes, cfg.mesh.gpus_per_node, cfg.mesh.tasks_per_node)
    assert cfg.run_name == make_cfg(f"experiment={experiment}").run_name
    OmegaConf.to_container(cfg.hydra.launcher, resolve=True)  # every interpolation resolves


def test_unknown_mesh_is_refused_before_hydra_composes():
    with pytest.raises(ConfigError, match=r"mesh: unknown mesh 'nope'; allowed: data2_model4"):
        check_group_overrides(["-m", "mesh=single,nope"])


def test_a_mesh_larger_than_the_machine_exits_2_naming_the_field(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "experiments.run", "experiment=toy_smoke",
                           "mesh=data8", f"hydra.run.dir={run_dir}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        "specjax-run: error: mesh.data x mesh.model: 8 x 1 = 8 devices needed, 1 found (on CPU: "
        "XLA_FLAGS=--xla_force_host_platform_device_count=8)")
    assert not run_dir.exists()  # nothing written
