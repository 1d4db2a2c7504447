"""Real GGUF models through load_model, against committed goldens.

goldens/model_goldens.json was written by goldens/make_model_goldens.py, which refuses to write
a golden unless an independent float64 NumPy transformer (in that script) agrees with the JAX
decoder (top-5 at every prompt position, the greedy continuation, logits within 2e-3).
SmolLM2-135M runs in the default suite; the Qwen pair (0.5B/1.5B downloads, 2-6 GB float32) is
marked slow.
"""

from __future__ import annotations

import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from specjax import load_model
from specjax.models.loader import LoadedModel
from specjax.models.passes import JittedPasses

GOLDENS = json.loads((Path(__file__).parent / "goldens" / "model_goldens.json").read_text())
SMOL = "smollm2-135m-instruct"
QWEN = ["qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct"]
LOGIT_TOL = 2e-3  # float32 decoder vs the float64 NumPy reference, as in make_model_goldens.py


def prefilled(jp: JittedPasses, ids: list[int], scratch: int):
    """The engine's prefill: all but the last prompt token cached, the last one pending."""
    cache = jp.prefill(jp.init_cache(64, 16), jnp.asarray(ids + [0] * (16 - len(ids)), jnp.int32),
                       len(ids))
    return jp.with_scratch(cache, scratch)


def greedy(model: LoadedModel, ids: list[int], n: int) -> list[int]:
    """Cached greedy decoding: the engine's prefill, then one decode per token."""
    jp = JittedPasses(model.model)
    cache = prefilled(jp, ids, 1)
    token, out = ids[-1], []
    for _ in range(n):
        logits, cache = jp.decode(cache, jnp.int32(token))
        token = int(jnp.argmax(logits))
        out.append(token)
    return out


def check_prompt_top5(model: LoadedModel, golden: dict) -> None:
    ids = model.encode(golden["prompt"])
    assert ids == golden["prompt_ids"]
    logits = model.forward(ids)
    assert logits.shape == (len(ids), model.vocab_size) and logits.dtype == np.float32
    top = np.argsort(-logits, axis=-1, kind="stable")[:, :5]
    assert top.tolist() == golden["top5_ids"]
    got = np.take_along_axis(logits, top, axis=-1)
    assert np.max(np.abs(got - np.asarray(golden["top5_logits"]))) <= LOGIT_TOL


def check_greedy_and_tree(model: LoadedModel, golden: dict) -> None:
    ids = golden["prompt_ids"]
    out = greedy(model, ids, len(golden["greedy_ids"]))
    assert out == golden["greedy_ids"]
    # The same continuation scored as one draft tree (K=1, L=8) in a single forward: every
    # position's argmax is the next greedy token, i.e. greedy verification accepts all 8.
    jp = JittedPasses(model.model)
    cache = prefilled(jp, ids, 9)
    drafts = jnp.asarray([out[:8]], jnp.int32)
    p, _, _ = jp.score_tree(cache, jnp.int32(ids[-1]), drafts)
    assert np.argmax(np.asarray(p[0]), axis=-1).tolist() == out[:9]


@pytest.fixture(scope="module")
def smol() -> LoadedModel:
    return load_model(SMOL)


def test_smollm2_config(smol):
    c = smol.config
    assert (c.arch, c.num_layers, c.hidden_size, c.num_heads, c.num_kv_heads) == (
        "llama",
        30,
        576,
        9,
        3,
    )
    assert c.tie_embeddings and not c.qkv_bias and smol.vocab_size == 49152
    assert 130e6 < c.num_params < 140e6  # "135M"
    # on CPU the goldens below run through the packed float32 kernel (load_model's default)
    assert smol.model.packed and smol.model.packed_head is not None


def test_smollm2_prompt_top5_matches_golden(smol):
    check_prompt_top5(smol, GOLDENS[SMOL])


def test_smollm2_greedy_continuation_and_tree_match_golden(smol):
    check_greedy_and_tree(smol, GOLDENS[SMOL])


def test_smollm2_golden_detects_a_missing_layer(smol):
    """The golden check can fail: dropping the last layer (early exit at 29) must fail it."""
    c = smol.config
    mutant = LoadedModel(SMOL, c, smol.model.early_exit(c.num_layers - 1), smol.tokenizer)
    with pytest.raises(AssertionError):
        check_prompt_top5(mutant, GOLDENS[SMOL])


def test_a_local_gguf_path_loads_like_its_name(smol):
    """A ``.gguf`` file named by its path is the same model as the bundled name."""
    from specjax.platform.assets import fetch

    by_path = load_model(str(fetch(SMOL)))
    ids = smol.encode("def fibonacci(n):")
    np.testing.assert_array_equal(by_path.forward(ids), smol.forward(ids))
    assert by_path.vocabulary() == smol.vocabulary() and by_path.name == str(fetch(SMOL))


def test_load_model_rejects_unknown_names_and_delegates_toys():
    with pytest.raises(ValueError, match="allowed: .*smollm2-135m-instruct"):
        load_model("llama-70b")
    toy = load_model("toy-target")
    assert toy.vocab_size == 4 and toy.forward([0, 1, 2]).shape == (3, 4)


@pytest.mark.slow
@pytest.mark.parametrize("name", QWEN)
def test_qwen_goldens(name):
    model = load_model(name)
    assert model.config.arch == "qwen2" and model.config.qkv_bias
    check_prompt_top5(model, GOLDENS[name])
    check_greedy_and_tree(model, GOLDENS[name])


@pytest.mark.slow
def test_dynamic_policies_greedy_equal_autoregressive_on_the_qwen_pair():
    """The adaptive length and the dynamic tree on the real pair (float32 1.5B target, int8 0.5B
    draft, chat prompts): greedy speculative decoding gives autoregressive decoding's tokens."""
    from specjax import generate
    from specjax.drafters import AdaptiveDrafter, DynamicTreeDrafter
    from specjax.models.sampling import Sampling
    from specjax.prompts import PromptSuite

    target, draft = load_model(QWEN[1]), load_model(QWEN[0], weights="int8")
    suite = PromptSuite(suite="humaneval", n=2, shuffle=False, chat=True)
    prompts = suite.texts(target, suite.load())
    kw = dict(sampling=Sampling(temperature=0), max_new_tokens=48, progress=False)
    ar = generate(target, prompts, **kw)
    for drafter, verifier in ((AdaptiveDrafter(L=8, threshold=0.5), "token"),
                              (DynamicTreeDrafter(K=3, L=8, threshold=0.1), "specinfer")):
        res = generate(target, prompts, draft=draft, drafter=drafter, verifier=verifier, **kw)
        assert res.tokens == ar.tokens, type(drafter).__name__
        assert res.summary["block_efficiency"] > 1.5  # drafting did happen
