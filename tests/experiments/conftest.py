"""Compose helpers for the config and app tests (Hydra's compose API, no CLI)."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from experiments.config_tree import config_dir


@pytest.fixture
def make_cfg():
    """``make_cfg(*overrides, hydra=False)`` -> the composed config."""

    def _compose(*overrides, hydra=False):
        with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
            return compose(config_name="config", overrides=list(overrides),
                           return_hydra_config=hydra)

    return _compose


@pytest.fixture
def toy():
    """Overrides that shrink any experiment to seconds on the tabular toy pair (V=4, 2 layers)."""
    return ["model=toy", "dataset=toy", "dataset.n=2", "max_new_tokens=4", "logger=none",
            "breakdown=false"]
