"""int8 rows times int8 weights (W8A8, ``quant.w8a8``), the prefill option
``prefill_activations="int8"``: the VNNI kernel and the ``jnp`` form against the integer sums
computed in NumPy (int64, then float64), and the engine's exactness with it (greedy
speculative decoding equals autoregressive decoding when both prefill with int8 rows)."""

from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from exactness import (
    DEC_PROMPTS,
    FAST,
    FPR,
    SEEDS,
    decoder_law,
    greedy_sd_and_ar,
    prefill_changes_cache,
    tiny_decoder,
)

from algorithms.exact.monte_carlo import chi_square
from specjax import generate, load_model
from specjax.drafters import ModelDrafter
from specjax.models import kernels, quant
from specjax.models.passes import JittedPasses
from specjax.models.sampling import Sampling
from specjax.models.toy import ToyLoaded

# (rows, in, out): one row, odd sizes with a padded group and a partial block, a tile remainder
# (13 = 6 + 7 rows), and a prefill-like wide one
SHAPES = [(1, 64, 32), (7, 100, 45), (13, 200, 70), (40, 256, 300)]
needs_vnni = pytest.mark.skipif(not kernels.vnni(), reason="no AVX-512 VNNI on this CPU")
needs_amx = pytest.mark.skipif(not kernels.amx(), reason="no AMX-INT8 on this CPU")


def exact(u: np.ndarray, sx: np.ndarray, w: quant.Int8Weight) -> np.ndarray:
    """sx[r] * sum_g scale[g, o] * sum_{k in g} xq[r, k] q[o, k], the sums in int64."""
    groups, out = w.scale.shape
    kp = w.q.shape[-2]
    o, k = np.meshgrid(np.arange(out), np.arange(kp), indexing="ij")
    q = np.asarray(w.q)[o // 32, k, o % 32].astype(np.int64)  # the packed layout's definition
    xq = u.reshape(len(u), groups, -1).astype(np.int64) - 128
    ints = np.einsum("ngk,ogk->gno", xq, q.reshape(out, groups, -1))
    return (ints * np.asarray(w.scale, np.float64)[:, None, :]).sum(0) * sx[:, None]


def case(rows, K, out, seed=0):
    rng = np.random.default_rng(seed)
    w = quant.quantize(rng.standard_normal((K, out)).astype(np.float32))
    x = rng.standard_normal((rows, K)).astype(np.float32) * rng.uniform(0.1, 10, (rows, 1))
    u, sx = quant.quantize_activations(jnp.asarray(x, jnp.float32), w.q.shape[-2])
    return x, w, u, sx


@needs_vnni
def test_the_kernel_quantizes_its_rows_to_the_same_bytes_as_jnp():
    """The kernel takes float32 rows and rounds them itself; the same bytes as
    ``quantize_activations`` show as sums equal bit for bit to the ``jnp`` form's on integer
    data (every scale a power of two: no float rounding anywhere but the rows' own)."""
    rng = np.random.default_rng(5)
    K, out = 192, 40
    q = rng.integers(-127, 128, (K, out)).astype(np.float32)
    q[::quant.GROUP] = 127  # each (group, output)'s absmax is 127: scale 1
    w = quant.quantize(q)
    assert np.all(np.asarray(w.scale) == 1)
    for rows in (1, 9, 40):  # the few-row form, and AMX / VNNI tiles
        x = rng.standard_normal((rows, K)).astype(np.float32)
        x[:, 0] = 127.0 * 2.0 ** rng.integers(-3, 4, rows)  # each row's absmax: scale 2^e
        x[1 % rows, 1:] = rng.integers(-3, 4, K - 1) * (x[1 % rows, 0] / 254)  # exact halves
        got = np.asarray(jax.jit(quant._w8a8_kernel)(jnp.asarray(x), w))
        np.testing.assert_array_equal(got, np.asarray(jax.jit(quant._w8a8_jnp)(jnp.asarray(x), w)))


def test_rows_are_rounded_per_row_within_half_a_step():
    x, w, u, sx = case(5, 100, 8)
    u, sx = np.asarray(u), np.asarray(sx)
    assert u.dtype == np.uint8 and u.shape == (5, w.q.shape[-2])
    assert np.all(u[:, 100:] == 128)  # padding is a zero row entry
    back = (u[:, :100].astype(np.float64) - 128) * sx[:, None]
    assert np.all(np.abs(back - x) <= 0.5 * sx[:, None] * (1 + 1e-6))
    assert np.all(np.abs(u.astype(int) - 128).max(axis=1) == 127)  # absmax maps to 127


@pytest.mark.parametrize("form", ["jnp", pytest.param("vnni", marks=needs_vnni)])
@pytest.mark.parametrize("rows, K, out", SHAPES)
def test_each_form_gives_the_integer_sums(form, rows, K, out):
    x, w, u, sx = case(rows, K, out)
    f = quant._w8a8_jnp if form == "jnp" else quant._w8a8_kernel
    got = np.asarray(jax.jit(f)(jnp.asarray(x), w))
    want = exact(np.asarray(u), np.asarray(sx, np.float64), w)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6 * np.abs(want).max())


# 16+ rows take AMX tiles where the CPU has them: a panel of 32, a short last panel of 17 and
# of 31 rows (one and two row tiles), a partial last block (45, 200 outputs), many groups. Up to
# 11 rows (a decode step, a tree pass) read the stored block directly, permuted in registers:
# one row (4 blocks side by side), 2-3 rows (2 blocks), 9 and 11 rows (one block).
FORM_CASES = [
    *(pytest.param("amx", *shape, marks=needs_amx) for shape in
      [(16, 64, 32), (17, 100, 45), (63, 256, 300), (70, 1536, 200)]),
    *(pytest.param("few_rows", *shape, marks=needs_vnni) for shape in
      [(1, 64, 32), (1, 256, 300), (3, 192, 130), (9, 100, 45), (11, 1536, 70)]),
]


@pytest.mark.parametrize("form, rows, K, out", FORM_CASES)
def test_each_kernel_form_gives_the_integer_sums_and_its_fallbacks_bits(form, rows, K, out):
    """AMX tiles against the VNNI tiles, the stored block read directly against the
    rearranged copy: the same integer sums folded by the same float32 chain, so the same bits,
    and a row's logits do not depend on which form the CPU takes."""
    x, w, u, sx = case(rows, K, out, seed=rows)

    def kernel(on):
        with kernels.w8a8_forms(**{form: on}):  # a new function: jit caches by function
            return np.asarray(jax.jit(lambda *a: quant._w8a8_kernel(*a))(x, w))

    got, fallback = kernel(True), kernel(False)
    want = exact(np.asarray(u), np.asarray(sx, np.float64), w)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6 * np.abs(want).max())
    np.testing.assert_array_equal(got, fallback)


@needs_vnni
def test_vnni_kernel_under_vmap_takes_every_row():
    x, w, u, sx = case(12, 128, 40)
    f = jax.vmap(quant._w8a8_kernel, in_axes=(0, None))
    got = np.asarray(f(jnp.asarray(x).reshape(3, 4, -1), w)).reshape(12, 40)
    want = exact(np.asarray(u), np.asarray(sx, np.float64), w)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6 * np.abs(want).max())


def test_linear_takes_int8_rows_only_inside_a_prefill_that_asks():
    x, w, _, _ = case(9, 128, 40)
    x = jnp.asarray(x)
    plain = np.asarray(jax.jit(lambda x, w: quant.linear(x, w))(x, w))

    def bulk(activations):  # a new function each time: jit caches a trace by function
        with quant.bulk_rows(activations):
            return np.asarray(jax.jit(lambda x, w: quant.linear(x, w))(x, w))

    if kernels.prefill_dot() == "kernel":  # float32 rows keep the kernel's bits
        np.testing.assert_array_equal(bulk("float32"), plain)
    else:  # XLA's dot on the unpacked weights
        np.testing.assert_allclose(bulk("float32"), plain, rtol=1e-5, atol=1e-4)
    w8a8 = bulk("int8")
    assert not np.array_equal(w8a8, plain)  # the rows were rounded
    np.testing.assert_allclose(w8a8, plain, rtol=0, atol=0.03 * np.abs(plain).max())


def test_bad_values_are_refused_naming_the_field():
    with pytest.raises(ValueError, match="prefill_activations must be one of"):
        quant.check_activations("int4", "int8")
    with pytest.raises(ValueError, match="needs int8 weights"):
        load_model("toy-target", prefill_activations="int8")


@pytest.fixture(scope="module")
def w8a8_target():
    model = tiny_decoder("int8", seed=0)
    model.prefill_activations = "int8"
    return ToyLoaded(name="tiny-target", model=model)


def test_prefill_with_int8_rows_changes_the_prompts_cache(w8a8_target):
    assert prefill_changes_cache(w8a8_target.model, tiny_decoder("int8", seed=0))


@pytest.mark.parametrize("L", [1, 3])
def test_greedy_speculative_equals_autoregressive_with_int8_rows(w8a8_target, L):
    draft = ToyLoaded(name="tiny-draft", model=tiny_decoder("int8", seed=1))
    sd, ar = greedy_sd_and_ar(w8a8_target, draft, ModelDrafter(K=1, L=L))
    assert sd == ar


def test_decode_rows_are_refused_naming_their_field():
    with pytest.raises(ValueError, match="decode_activations must be one of"):
        quant.check_activations("int4", "int8", "decode_activations",
                                quant.PASS_ACTIVATIONS)
    with pytest.raises(ValueError, match="decode_activations='int8' needs int8 weights"):
        load_model("toy-target", decode_activations="int8")


def test_pass_rows_take_int8_rows_outside_a_prefill_and_a_prefill_keeps_its_own():
    x, w, _, _ = case(9, 128, 40)
    x = jnp.asarray(x)

    def traced(prefill, passes):
        def f(x, w):
            with quant.pass_rows(passes):
                if prefill is None:
                    return quant.linear(x, w)
                with quant.bulk_rows(prefill):
                    return quant.linear(x, w)
        return np.asarray(jax.jit(f)(x, w))

    u, sx = quant.quantize_activations(x, w.q.shape[-2])
    w8a8 = np.asarray(jax.jit(quant.w8a8)(x, w))
    np.testing.assert_array_equal(traced(None, "int8"), w8a8)
    assert not np.array_equal(traced(None, "float32"), w8a8)
    if kernels.prefill_dot() == "kernel":
        np.testing.assert_array_equal(traced("float32", "int8"), traced(None, "float32"))
    np.testing.assert_array_equal(traced("int8", "float32"), w8a8)


@pytest.fixture(scope="module")
def w8a8_passes_target():
    model = tiny_decoder("int8", seed=0)
    model.decode_activations = "int8"
    return ToyLoaded(name="tiny-target", model=model)


def test_a_tree_pass_gives_each_node_the_decode_steps_bits(w8a8_passes_target):
    """Every pass of the model takes the same int8 rows, so the logits of a token do not
    depend on whether one decode step or a tree of several scored it (what keeps greedy
    speculative decoding equal to autoregressive)."""
    jp = JittedPasses(w8a8_passes_target.model, FAST)
    prompt = jnp.asarray(DEC_PROMPTS[1], jnp.int32)
    n = len(DEC_PROMPTS[1])
    drafts = jnp.asarray([[5, 9, 2, 7]], jnp.int32)
    cache = jp.prefill(jp.init_cache(64, 16), jnp.pad(prompt, (0, 16 - n)), n)
    tree, _, _ = jp.score_tree(jax.tree.map(jnp.copy, cache), prompt[-1], drafts)
    steps, c, root = [], cache, prompt[-1]
    for token in [*np.asarray(drafts[0]), None]:
        logits, c = jp.decode(c, root)
        steps.append(np.asarray(logits))
        root = token
    np.testing.assert_array_equal(np.asarray(tree[0]), np.stack(steps))
    plain = JittedPasses(tiny_decoder("int8", seed=0), FAST)
    other, _ = plain.decode(plain.prefill(plain.init_cache(64, 16),
                                          jnp.pad(prompt, (0, 16 - n)), n), prompt[-1])
    assert not np.array_equal(np.asarray(other), steps[0])  # the rows were rounded


@pytest.mark.parametrize("L", [1, 3])
def test_greedy_speculative_equals_autoregressive_with_int8_rows_in_every_pass(
        w8a8_passes_target, L):
    draft_model = tiny_decoder("int8", seed=1)
    draft_model.decode_activations = "int8"
    draft = ToyLoaded(name="tiny-draft", model=draft_model)
    sd, ar = greedy_sd_and_ar(w8a8_passes_target, draft, ModelDrafter(K=1, L=L))
    assert sd == ar


@pytest.mark.slow  # ~50 s on 2 cores; the default suite keeps the greedy and bit-equality tests
def test_sampled_law_with_int8_rows_in_every_pass_matches_the_target(w8a8_passes_target):
    """Two tokens (one block of L = 2 per step: the accept and the reject paths) from the W8A8
    target, drafted by a W8A8 draft, against the target's exact law by enumeration over its
    uncached reference (which takes the same rows); chi-square at false-positive rate FPR."""
    draft_model = tiny_decoder("int8", seed=1)
    draft_model.decode_activations = "int8"
    prompt = DEC_PROMPTS[1]
    res = generate(w8a8_passes_target, [prompt] * SEEDS,
                   draft=ToyLoaded(name="tiny-draft", model=draft_model),
                   drafter=ModelDrafter(K=1, L=2), verifier="token",
                   sampling=Sampling(temperature=1.0), max_new_tokens=2, seed=3, progress=False,
                   compiler_options=FAST)
    law = decoder_law(w8a8_passes_target.model, prompt, 2)
    fit = chi_square(Counter(tuple(t) for t in res.tokens), law)
    assert fit.passes(FPR), fit
    assert fit.df > 20  # enough cells that the test has power
