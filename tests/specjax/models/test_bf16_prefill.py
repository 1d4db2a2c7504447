"""bfloat16 rows in a float32 model's prefill (``prefill_activations="bfloat16"``,
``quant.bf16_dot``): the products equal the bfloat16-rounded operands' sums, the option changes
the prompt's cache, greedy speculative decoding still equals autoregressive decoding (both
share the prefill), and the bad combinations are refused naming the field."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from exactness import greedy_sd_and_ar, prefill_changes_cache, tiny_decoder

from specjax import load_model
from specjax.drafters import ModelDrafter
from specjax.models import quant
from specjax.models.toy import ToyLoaded


def rounded(a) -> np.ndarray:
    return np.asarray(jnp.asarray(a, jnp.float32).astype(jnp.bfloat16).astype(jnp.float32),
                      np.float64)


@pytest.mark.parametrize("packed", [True, False])
def test_bulk_bf16_products_are_the_rounded_operands_sums(packed):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((40, 96)).astype(np.float32)
    w = rng.standard_normal((96, 70)).astype(np.float32)
    weight = quant.pack_float32(w) if packed else jnp.asarray(w)

    def f(x, weight):
        with quant.bulk_rows("bfloat16"):
            return quant.linear(x, weight)

    got = np.asarray(jax.jit(f)(jnp.asarray(x), weight))
    want = rounded(x) @ rounded(w)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    exact = x.astype(np.float64) @ w.astype(np.float64)
    assert np.abs(got - exact).max() > 1e-3 * np.abs(exact).max()  # the rows were rounded


def test_bad_values_are_refused_naming_the_field():
    with pytest.raises(ValueError, match="prefill_activations='bfloat16' needs float32 weights"):
        quant.check_activations("bfloat16", "int8")
    with pytest.raises(ValueError, match="decode_activations must be one of"):
        quant.check_activations("bfloat16", "float32", "decode_activations",
                                quant.PASS_ACTIVATIONS)
    with pytest.raises(ValueError, match="decode_activations must be one of"):
        load_model("toy-target", decode_activations="bfloat16")


@pytest.fixture(scope="module")
def bf16_target():
    model = tiny_decoder("float32", packed=True, seed=0)
    model.prefill_activations = "bfloat16"
    return ToyLoaded(name="tiny-target", model=model)


def test_bf16_prefill_changes_the_prompts_cache(bf16_target):
    assert prefill_changes_cache(bf16_target.model, tiny_decoder("float32", packed=True, seed=0))


@pytest.mark.parametrize("L", [1, 3])
def test_greedy_speculative_equals_autoregressive_with_a_bf16_prefill(bf16_target, L):
    draft = ToyLoaded(name="tiny-draft", model=tiny_decoder("float32", seed=1))
    sd, ar = greedy_sd_and_ar(bf16_target, draft, ModelDrafter(K=1, L=L))
    assert sd == ar
