"""W8A8 matmuls (``specjax.models.quant``) against an integer reference written in NumPy."""

import jax.numpy as jnp
import numpy as np
import pytest

from specjax.models.loader import load_model
from specjax.models.quant import Int8Weight, linear, quantize, quantize_rows, rows


def reference_w8a8(x, w):
    """Absmax per row of x and per column of w, scales and rounding (half to even) in float32
    as the kernel does them, then exact integer products and a float64 rescale."""
    xs = np.abs(x).max(axis=1, keepdims=True) / np.float32(127)
    ws = np.abs(w).max(axis=0) / np.float32(127)
    xq = np.round(x / xs).astype(np.int64)
    wq = np.round(w / ws).astype(np.int64)
    return (xq @ wq) * xs.astype(np.float64) * ws.astype(np.float64)


@pytest.mark.parametrize("n_rows", [1, 2, 5])
def test_linear_equals_the_integer_reference(n_rows):
    rng = np.random.default_rng(n_rows)
    x = rng.standard_normal((n_rows, 96)).astype(np.float32)
    w = (rng.standard_normal((96, 40)) * 0.1).astype(np.float32)
    got = np.asarray(linear(jnp.asarray(x), quantize(w)))
    ref = reference_w8a8(x, w)
    assert got.shape == (n_rows, 40)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    # and it is an approximation of the float product, not something else
    assert np.max(np.abs(got - x @ w)) < 0.05 * np.max(np.abs(x @ w))


def test_a_row_does_not_depend_on_the_rows_beside_it():
    """Per-row activation scales: one row alone (padded to two) == the same row among others."""
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((4, 64)).astype(np.float32))
    w = quantize((rng.standard_normal((64, 32)) * 0.1).astype(np.float32))
    together = np.asarray(linear(x, w))
    for i in range(4):
        np.testing.assert_array_equal(np.asarray(linear(x[i:i + 1], w))[0], together[i])


def test_quantized_tables_round_trip_within_half_a_step():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((48, 24)).astype(np.float32)
    q = quantize(w)
    assert q.q.dtype == jnp.int8 and q.q.shape == (24, 48)  # stored [out, in]
    back = np.asarray(q.q, np.float32).T * np.asarray(q.scale)
    assert np.all(np.abs(back - w) <= np.asarray(q.scale) / 2 * (1 + 1e-6))
    table = quantize_rows(w)  # a tied embedding: one scale per row
    got = np.asarray(rows(table, jnp.asarray([3, 0, 3])))
    assert np.all(np.abs(got - w[[3, 0, 3]]) <= np.asarray(table.scale)[[3, 0, 3], None] / 2
                  * (1 + 1e-6))
    np.testing.assert_array_equal(np.asarray(rows(jnp.asarray(w), jnp.asarray([5]))), w[[5]])
    assert isinstance(table, Int8Weight)


def test_bad_weight_format_is_one_clear_error():
    with pytest.raises(ValueError, match=r"weights must be one of \['float32', 'int8'\]"):
        load_model("smollm2-135m-instruct", weights="int4")
    with pytest.raises(ValueError, match="applies to the GGUF models"):
        load_model("toy-target", weights="int8")
