"""The cached decoder's attention as one CPU kernel call (``layers.attend_cached(kernel=True)``,
``specjax/models/kernels/attention.cc``) against a float64 reference written here in NumPy from the
definition: softmax over the visible committed slots and the scratch slots a row's mask allows,
and a row that sees nothing averaging every slot (what the ``jnp`` form's softmax gives)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.models import kernels
from specjax.models.layers import attend_cached

pytestmark = pytest.mark.skipif(not kernels.available(), reason="CPU kernels not built here")

# (N, H, KV, hd, M, S, length): one-row decode (GQA); a 9-row tree with hd = 128 and the whole
# committed block visible; plain multi-head with hd not a multiple of the vector width and
# nothing committed; M = 0 with one KV head; a committed block longer than length.
SHAPES = [(1, 9, 3, 64, 40, 4, 17), (9, 12, 2, 128, 30, 16, 30), (5, 4, 4, 20, 12, 8, 0),
          (13, 6, 1, 8, 0, 16, 0), (7, 8, 2, 32, 64, 9, 50)]


def case(N, H, KV, hd, M, S, length, seed, blind_row=True):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((N, H, hd)).astype(np.float32)
    k, v = (rng.standard_normal((2, KV, M, hd)) * 2).astype(np.float32)
    ks, vs = (rng.standard_normal((2, KV, S, hd)) * 2).astype(np.float32)
    mask = rng.random((N, S)) < 0.5
    if blind_row and length == 0:
        mask[N // 2] = False  # sees nothing at all
    return q, k, v, ks, vs, np.int32(length), mask


def reference(q, k, v, ks, vs, length, mask):
    N, H, hd = q.shape
    KV, M, _ = k.shape
    keys = np.concatenate([k, ks], axis=1).astype(np.float64)
    values = np.concatenate([v, vs], axis=1).astype(np.float64)
    out = np.zeros((N, H, hd))
    for n in range(N):
        seen = np.concatenate([np.arange(M) < length, mask[n]])
        for h in range(H):
            kv = h // (H // KV)
            if not seen.any():
                out[n, h] = values[kv].mean(axis=0)
                continue
            s = keys[kv, seen] @ q[n, h].astype(np.float64) / np.sqrt(hd)
            p = np.exp(s - s.max())
            out[n, h] = (p / p.sum()) @ values[kv, seen]
    return out.reshape(N, H * hd)


def run(args, kernel=True):
    return np.asarray(attend_cached(*map(jnp.asarray, args), kernel=kernel))


@pytest.mark.parametrize("shape", SHAPES)
def test_kernel_and_jnp_forms_equal_the_float64_definition(shape):
    args = case(*shape, seed=sum(shape))
    ref = reference(*args)
    for kernel in (True, False):
        np.testing.assert_allclose(run(args, kernel), ref, rtol=2e-5, atol=2e-5)


def test_a_row_does_not_depend_on_the_rows_beside_it():
    """Each (row, head) is its own fixed-order computation, so a row alone equals the same row
    in a tree-sized call bit for bit (tree scoring vs one-row decode of the same prefix)."""
    q, k, v, ks, vs, length, mask = case(9, 12, 2, 64, 30, 16, 21, seed=3)
    together = run((q, k, v, ks, vs, length, mask))
    for i in range(9):
        alone = run((q[i:i + 1], k, v, ks, vs, length, mask[i:i + 1]))
        np.testing.assert_array_equal(alone[0], together[i])


def test_vmap_batches_caches_and_lengths_and_shares_the_mask():
    """The engine vmaps the passes: q, caches and length carry the batch, the mask does not."""
    N, H, KV, hd, M, S = 3, 4, 2, 16, 10, 6
    parts = [case(N, H, KV, hd, M, S, length, seed=10 + b)
             for b, length in enumerate([0, 4, 10])]
    mask = parts[0][6]
    stacked = [np.stack([p[j] for p in parts]) for j in range(6)]
    f = jax.jit(jax.vmap(lambda q, k, v, ks, vs, n, m: attend_cached(q, k, v, ks, vs, n, m,
                                                                      kernel=True),
                         in_axes=(0, 0, 0, 0, 0, 0, None)))
    got = np.asarray(f(*map(jnp.asarray, stacked), jnp.asarray(mask)))
    for b, p in enumerate(parts):
        np.testing.assert_array_equal(got[b], run((*p[:6], mask)))
        np.testing.assert_allclose(got[b], reference(*p[:6], mask), rtol=2e-5, atol=2e-5)


def test_the_avx2_form_equals_the_float64_definition(haswell):
    """Machines without AVX-512 build the AVX2 form (8 lanes): a different order of the dot's
    lanes, so equal to the definition up to float32 rounding rather than bit for bit."""
    for shape in SHAPES:
        q, k, v, ks, vs, length, mask = args = case(*shape, seed=sum(shape) + 1)
        N, H, hd = q.shape
        out = jax.ShapeDtypeStruct((N, H * hd), jnp.float32)
        got = jax.ffi.ffi_call(haswell[kernels.ATTENTION_TARGET], out)(*map(jnp.asarray, args))
        np.testing.assert_allclose(np.asarray(got), reference(*args), rtol=2e-5, atol=2e-5)


def test_disagreeing_shapes_are_one_clear_error():
    q, k, v, ks, vs, length, mask = case(2, 4, 2, 16, 8, 4, 3, seed=0)
    with pytest.raises(Exception, match="do not agree"):
        run((q, k, v, ks, vs, length, mask[:, :3]))


def test_causal_prefill_reads_only_the_slots_its_tile_sees():
    """A prefill's mask is causal: a tile of rows stops at the last slot any of them sees. The
    rows still equal the definition, and a non-finite value in a slot past every seen one (a
    padded prompt position) cannot reach any row; in a seen-by-nobody slot inside the range it
    would (0 x NaN), which is why only the tail is skipped."""
    N, H, KV, hd = 40, 4, 2, 32
    q, k, v, ks, vs, length, _ = case(N, H, KV, hd, 0, N, 0, seed=5)
    mask = np.tril(np.ones((N, N), bool))
    mask[N - 9:] = False  # the last 9 nodes are padding: they see only themselves
    mask[np.arange(N - 9, N), np.arange(N - 9, N)] = True
    args = (q, k, v, ks, vs, length, mask)
    np.testing.assert_allclose(run(args), reference(*args), rtol=2e-5, atol=2e-5)
    poisoned = vs.copy()
    poisoned[:, N - 1] = np.nan  # seen by row N - 1 only
    out = run((q, k, v, ks, poisoned, length, mask))
    assert np.isfinite(out[:N - 8]).all()  # rows 0..N-9 are in tiles that end before it
    np.testing.assert_array_equal(out[:N - 8], run(args)[:N - 8])
