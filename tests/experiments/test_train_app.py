"""specjax-train: every training config composes and validates; bad values exit 2 with one line.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from experiments.train import CONFIG_DIR, group_options
from specjax.training.loop import check_config

ROOT = Path(__file__).resolve().parents[2]


def compose_train(*overrides) -> dict:
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=list(overrides))
    plain = OmegaConf.to_container(cfg, resolve=True)
    plain.pop("logger")
    return plain


@pytest.mark.parametrize("drafter", group_options("drafter"))
def test_every_training_config_composes_and_validates(drafter):
    cfg = compose_train(f"drafter={drafter}")
    assert cfg["kind"] == drafter
    check_config(cfg)


@pytest.mark.parametrize("logger", group_options("logger"))
def test_logger_configs_instantiate(logger):
    from hydra.utils import instantiate

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"logger={logger}"])
    assert hasattr(instantiate(cfg.logger), "log")


def test_family_grid_validates():
    for d in (64, 128, 256):
        for layers in (1, 2, 4):
            check_config(compose_train("drafter=family", f"module.hidden_size={d}",
                                       f"module.num_layers={layers}"))


def _cli(*args, tmp_path):
    code = "from experiments.train import main; main()"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True,
                          text=True, env={**__import__("os").environ,
                                          "SPECJAX_CACHE": str(tmp_path)})


@pytest.mark.parametrize("args, field", [
    (["steps=0"], "steps"),
    (["drafter=lora"], "drafter"),
    pytest.param(["drafter=family", "module.hidden_size=100"], "module.hidden_size",
                 marks=pytest.mark.slow),
])
def test_cli_exits_2_with_one_line_naming_the_field(tmp_path, args, field):
    proc = _cli(*args, "logger=none", tmp_path=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == [lines[0]] and lines[0].startswith(f"specjax-train: error: {field}")
    assert not (tmp_path / "train").exists()  # nothing written
