"""One model registry: the API, the CLI and training resolve a name through ``specjax.registry``.
"""

from __future__ import annotations

import pytest

import specjax
from specjax import registry
from specjax.models.decoder import Decoder
from specjax.models.toy import ToyLM


def test_each_kind_of_name_loads():
    assert isinstance(specjax.load_model("toy-target").model, ToyLM)
    tiny = specjax.load_model("tiny-llama")
    assert isinstance(tiny.model, Decoder) and tiny.name == "tiny-llama"
    assert tiny.vocab_size == tiny.model.config.vocab_size


@pytest.mark.parametrize("name, weights, match", [
    ("gpt-2", "float32", r"unknown model name='gpt-2'.*'toy', 'tiny-', 'family/'"),
    ("tiny-llama", "int8", "applies to the GGUF and Hugging Face models"),
    ("toy-target", "int4", "weights must be one of"),
    ("family/tiny-llama/dx-l1", "float32", "must look like family/<target>"),
])
def test_bad_names_are_clear_errors(name, weights, match):
    with pytest.raises(ValueError, match=match):
        specjax.load_model(name, weights=weights)


def test_api_cli_and_training_all_resolve_names_in_the_registry(monkeypatch):
    """A loader added to the registry is what every entry point gets for its names."""
    from experiments import run
    from specjax import api
    from specjax.training.loop import load_target

    loaded = []

    def fake(name, cache_dir=None):
        loaded.append(name)
        return registry.load_tiny("tiny-llama")

    monkeypatch.setitem(registry.PREFIXES, "fake-", fake)
    assert isinstance(api._resolve_model("fake-api").model, Decoder)
    assert isinstance(run._load("fake-cli").model, Decoder)
    assert isinstance(load_target("fake-train").model, Decoder)
    assert loaded == ["fake-api", "fake-cli", "fake-train"]
