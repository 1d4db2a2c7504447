"""int8 weights (``specjax.models.quant``) and their CPU kernel (``specjax.models.kernels``)
against a float64 reference written in NumPy from the unpacked integers."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import load_model
from specjax.models import kernels, quant
from specjax.models.quant import (
    Int8Weight,
    linear,
    pack,
    pack_float32,
    quantize,
    quantize_rows,
    rows,
)

# (in, out): aligned, odd in both, narrower than one block, a head-like wide one, and one
# with several scale groups and a masked tail
SHAPES = [(96, 40), (37, 13), (5, 3), (64, 1000), (203, 24)]


def numpy_unpack(q: np.ndarray, n_out: int, K: int) -> np.ndarray:
    """The packed layout by its definition: element (o, k) sits at [o // 32, k, o % 32]."""
    o, k = np.meshgrid(np.arange(n_out), np.arange(K), indexing="ij")
    return q[o // 32, k, o % 32]


def reference(x: np.ndarray, w: Int8Weight, K: int) -> np.ndarray:
    """Each (output, column) integer times its group's scale, in float64."""
    n_scales, n_out = w.scale.shape
    q = numpy_unpack(np.asarray(w.q), n_out, K).astype(np.float64)
    group = np.asarray(w.q).shape[1] // n_scales
    scale = np.asarray(w.scale, np.float64).T[:, np.arange(K) // group]
    return x.astype(np.float64) @ (q * scale).T


def test_the_kernel_builds_here():
    """CI runs on x86-64 with g++: a silent fall-back to the slow path would hide a broken
    build, so here the kernel must be there."""
    assert kernels.available()


@pytest.mark.parametrize("group", [5, 16, 64])
def test_pack_follows_its_layout_and_quantize_rounds_within_half_a_step(group):
    rng = np.random.default_rng(1)
    w = rng.standard_normal((37, 13)).astype(np.float32)  # [in, out]
    q = quantize(w, group=group)
    padded_k = -(-37 // group) * group
    assert q.q.dtype == jnp.int8 and q.q.shape == (1, padded_k, 32)  # ceil(13/32) blocks
    assert q.scale.shape == (padded_k // group, 13)
    ints = numpy_unpack(np.asarray(q.q), 13, 37)
    scale = np.asarray(q.scale).T[:, np.arange(37) // group]  # [out, in]
    assert np.all(np.abs(ints * scale - w.T) <= scale / 2 * (1 + 1e-6))
    # absmax scales: every (output, group) has a +-127 (the padding is all zeros)
    for g in range(padded_k // group):
        assert np.all(np.abs(ints[:, g * group:(g + 1) * group]).max(axis=1) == 127)
    dense = np.asarray(q.q).transpose(0, 2, 1).reshape(32, padded_k)
    assert not dense[13:].any() and not dense[:, 37:].any()  # zero padding
    np.testing.assert_array_equal(np.asarray(quant.unpack(q.q, 13, 37)), ints)
    assert pack(ints.T).shape == (1, 37, 32)
    np.testing.assert_array_equal(numpy_unpack(pack(ints.T), 13, 37), ints)
    with pytest.raises(ValueError, match="group must be a positive number of columns"):
        quantize(w, group=0)


@pytest.mark.parametrize("K,n_out", SHAPES)
@pytest.mark.parametrize("n_rows", [1, 2, 3, 9, 14])
@pytest.mark.parametrize("group", [5, 64])
def test_linear_equals_the_float64_reference(K, n_out, n_rows, group):
    rng = np.random.default_rng(K * n_out + n_rows)
    x = rng.standard_normal((n_rows, K)).astype(np.float32)
    w = (rng.standard_normal((K, n_out)) * 0.1).astype(np.float32)
    w[0] *= 50  # an outlier input feature: only its own group shares its scale
    qw = quantize(w, group=group)
    ref = reference(x, qw, K)
    for f in (linear, jax.jit(linear), quant._reference):  # eager, jitted, the jnp fall-back
        got = np.asarray(f(jnp.asarray(x), qw))
        assert got.shape == (n_rows, n_out)
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    # and it is the float product up to rounding: each weight moved by at most half its
    # group's step (a wrong scale, group or layout would not stay inside this bound)
    step = np.asarray(qw.scale, np.float64).T[:, np.arange(K) // group]  # [out, in]
    bound = np.abs(x.astype(np.float64)) @ (step.T / 2)
    assert np.all(np.abs(got - x.astype(np.float64) @ w) <= bound * (1 + 1e-4) + 1e-5)


@pytest.mark.parametrize("K,n_out", SHAPES)
@pytest.mark.parametrize("n_rows", [1, 2, 13, 26])
def test_packed_float32_equals_the_float64_product(K, n_out, n_rows):
    """The float32 kernel (tiles of up to 12 rows: 13 and 26 leave a remainder) against
    x @ w in float64: float32 rounding of one K-long chain of multiply-adds per output."""
    rng = np.random.default_rng(K * n_out + n_rows + 1)
    x = rng.standard_normal((n_rows, K)).astype(np.float32)
    w = rng.standard_normal((K, n_out)).astype(np.float32)
    pw = pack_float32(w)
    assert pw.out == n_out and pw.w.shape == (-(-n_out // 32), K, 32)
    np.testing.assert_array_equal(numpy_unpack(np.asarray(pw.w), n_out, K), w.T)
    ref = x.astype(np.float64) @ w
    bound = 2 * K * np.finfo(np.float32).eps * (np.abs(x).astype(np.float64) @ np.abs(w))
    for f in (linear, jax.jit(linear), quant._reference):  # eager, jitted, the jnp fall-back
        got = np.asarray(f(jnp.asarray(x), pw))
        assert got.shape == (n_rows, n_out)
        assert np.all(np.abs(got - ref) <= bound + 1e-30)


@pytest.mark.parametrize("n_out", [300, 1000])
@pytest.mark.parametrize("kind", ["int8", "float32"])
def test_a_row_does_not_depend_on_the_rows_beside_it(kind, n_out):
    """Each output is one thread's fixed-order sum, so a row alone equals the same row in a
    tree-sized pass bit for bit (the cached/uncached equivalence tests rely on it). 20 rows:
    past the kernel's many-rows threshold (16), where it switches to half-block float32 tiles
    and converts int8 blocks once. 1-7 rows: tiles over 8, 4 or 2 whole blocks side by side
    (``FewRows``; 8 only where a worker's range holds 8, as in 1000 outputs' 32 blocks), the
    zero-padded last block in a tile of its own."""
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((20, 200)).astype(np.float32))
    w = (rng.standard_normal((200, n_out)) * 0.1).astype(np.float32)
    w = quantize(w) if kind == "int8" else pack_float32(w)
    together = np.asarray(linear(x, w))
    for i in range(20):
        np.testing.assert_array_equal(np.asarray(linear(x[i:i + 1], w))[0], together[i])
    for n in (2, 3, 4, 5, 7, 13):
        np.testing.assert_array_equal(np.asarray(linear(x[3:3 + n], w)), together[3:3 + n])


@pytest.mark.parametrize("kind", ["int8", "float32"])
def test_the_avx2_form_gives_the_same_bits(haswell, kind):
    """Machines without AVX-512 build the kernels' AVX2 form (8 lanes; tiles of 1 int8 row or
    3 float32 rows, from 16 rows half blocks). Built here for Haswell and called directly:
    each output is the same chain of fused multiply-adds in both forms, so the results must
    be equal bit for bit."""
    rng = np.random.default_rng(6)
    for K, n_out, n_rows in [(203, 24, 9), (64, 1000, 1), (37, 13, 3), (203, 40, 20)]:
        x = jnp.asarray(rng.standard_normal((20, K)).astype(np.float32))[:n_rows]
        w = (rng.standard_normal((K, n_out)) * 0.1).astype(np.float32)
        out = jax.ShapeDtypeStruct((x.shape[0], n_out), jnp.float32)
        if kind == "int8":
            w = quantize(w)
            avx2 = jax.ffi.ffi_call(haswell[kernels.Q8_TARGET], out)(x, w.q, w.scale)
        else:
            w = pack_float32(w)
            avx2 = jax.ffi.ffi_call(haswell[kernels.F32_TARGET], out)(x, w.w)
        np.testing.assert_array_equal(np.asarray(avx2), np.asarray(linear(x, w)))
        np.testing.assert_allclose(np.asarray(avx2), np.asarray(quant._reference(x, w)),
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["int8", "float32"])
def test_vmap_over_a_batch_reads_the_weights_unbatched(kind):
    rng = np.random.default_rng(2)
    xb = rng.standard_normal((4, 3, 64)).astype(np.float32)
    w = (rng.standard_normal((64, 48)) * 0.1).astype(np.float32)
    w = quantize(w) if kind == "int8" else pack_float32(w)
    got = np.asarray(jax.jit(jax.vmap(linear, in_axes=(0, None)))(jnp.asarray(xb), w))
    for b in range(4):
        np.testing.assert_array_equal(got[b], np.asarray(linear(jnp.asarray(xb[b]), w)))
    np.testing.assert_allclose(got, np.asarray(quant._reference(jnp.asarray(xb), w)),
                               rtol=1e-5, atol=1e-5)


def test_tied_table_rows_round_trip_within_half_a_step():
    rng = np.random.default_rng(3)
    table = rng.standard_normal((13, 37)).astype(np.float32)  # [V, D]
    q = quantize_rows(table)
    ids = np.array([[3, 0], [12, 3]])
    got = np.asarray(rows(q, jnp.asarray(ids), 37))
    assert got.shape == (2, 2, 37)
    scale = np.asarray(q.scale).T[ids][..., np.arange(37) // 64]
    assert np.all(np.abs(got - table[ids]) <= scale / 2 * (1 + 1e-6))
    np.testing.assert_array_equal(np.asarray(rows(jnp.asarray(table), jnp.asarray([5]), 37)),
                                  table[[5]])


def test_bad_weight_format_is_one_clear_error():
    with pytest.raises(ValueError, match=r"weights must be one of \['float32', 'bfloat16', "
                                         r"'float16', 'int8'\]"):
        load_model("smollm2-135m-instruct", weights="int4")
    with pytest.raises(ValueError, match="applies to the GGUF and Hugging Face models"):
        load_model("toy-target", weights="int8")


def test_a_failed_build_warns_and_falls_back(monkeypatch, tmp_path):
    """No compiler: one warning naming the cause, and ``linear`` still returns the product."""
    monkeypatch.setattr(kernels, "_state", {})
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    monkeypatch.setenv("SPECJAX_CACHE", str(tmp_path))
    with pytest.warns(UserWarning, match="CPU kernels unavailable"):
        assert not kernels.available()
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 16)).astype(np.float32)
    w = quantize((rng.standard_normal((16, 8)) * 0.1).astype(np.float32))
    np.testing.assert_allclose(np.asarray(linear(jnp.asarray(x), w)), reference(x, w, 16),
                               rtol=1e-5, atol=1e-6)


def test_the_tail_of_a_row_is_masked():
    """K = 37 is not a multiple of 8: the kernel must not read row 0's last group past column
    37 (into row 1), where an inf would turn 0 x inf into NaN."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 37)).astype(np.float32)
    x[1, :8] = np.inf
    w = quantize((rng.standard_normal((37, 12)) * 0.1).astype(np.float32))
    got = np.asarray(jax.jit(linear)(jnp.asarray(x), w))
    np.testing.assert_allclose(got[0], reference(x[:1], w, 37)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["int8", "float32"])
def test_fused_matmuls_equal_their_parts_bit_for_bit(kind):
    """The decoder concatenates q/k/v and gate/up along the outputs (``layers.FUSED``); each
    output is still summed on its own, so the fused product splits into the parts' bits."""
    rng = np.random.default_rng(7)
    x = jnp.asarray(rng.standard_normal((9, 48)).astype(np.float32))
    parts = [(rng.standard_normal((48, n)) * 0.1).astype(np.float32) for n in (40, 13, 13)]
    convert = quantize if kind == "int8" else pack_float32
    fused = np.asarray(linear(x, convert(np.concatenate(parts, axis=1))))
    np.testing.assert_array_equal(
        fused, np.concatenate([np.asarray(linear(x, convert(p))) for p in parts], axis=1))
