"""Forward equivalence of the cached decoder: the uncached full forward is the reference.

The passes are the engine's (``specjax.models.passes``, jitted one at a time by ``JittedPasses``):
full-sequence logits == prefill + step-by-step cached decode == score_tree logits of every
drafted prefix (shared and diverging drafts); after committing an accepted path, decoding goes on
as if the path had been decoded token by token. Random tiny models (llama-like tied GQA,
qwen2-like with qkv bias and a separate head, plain multi-head) run the real code path.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from specjax.models.config import ModelConfig, tiny_config
from specjax.models.decoder import Decoder
from specjax.models.layers import weight_shapes
from specjax.models.passes import JittedPasses, decode, prefill, score_tree

TOL = 1e-5  # float32 max abs error on logits of order 1 (brief: <= 1e-5)
PAD = 32  # every reference sequence is padded to this length
MAX_LEN, SCRATCH, PROMPT = 24, 16, 16  # one cache/prompt shape so each pass compiles once

CONFIGS = {
    "llama_tied_gqa": tiny_config("llama"),
    "qwen2_bias_head_gqa": tiny_config("qwen2"),
    "llama_mha": tiny_config("llama", num_kv_heads=6, num_layers=2),  # plain multi-head
}


@pytest.fixture(scope="module", params=["llama_tied_gqa", "qwen2_bias_head_gqa",
                                        "qwen2_bias_head_gqa/xla", "llama_tied_gqa/int8",
                                        "qwen2_bias_head_gqa/int8"])
def jp(request):
    """Each equivalence test runs on float32 weights (packed for the CPU kernel, and in XLA's
    layout as on other backends) and on int8 weights: the cached paths must reproduce the
    uncached forward of the same model (the kernel sums each output in a fixed order, so a
    row's result does not depend on which rows share its pass)."""
    name, _, fmt = request.param.partition("/")
    model = Decoder.random(CONFIGS[name], seed=7, weight_format="int8" if fmt == "int8"
                           else "float32", packed=fmt == "")
    assert model.packed == (fmt == ""), "the float32 fixtures must run the packed kernel here"
    return JittedPasses(model)


def tokens(V, n, seed):
    return jnp.asarray(np.random.default_rng(seed).integers(0, V, n), jnp.int32)


def full_logits(jp, seq):
    """Uncached reference logits; padded to one length so each model compiles it once (causal:
    the padding cannot change earlier rows)."""
    n = seq.shape[0]
    return jp.logits(jnp.pad(seq, (0, PAD - n)))[:n]


def maxerr(a, b):
    return float(jnp.max(jnp.abs(jnp.asarray(a) - jnp.asarray(b))))


@pytest.mark.parametrize("name", ["llama_tied_gqa", "qwen2_bias_head_gqa"])
def test_packed_float32_gives_the_logits_of_xla_layout(name):
    """The same weights packed for the CPU kernel (layers and head) and in XLA's layout: the
    same logits up to float32 rounding."""
    packed = JittedPasses(Decoder.random(CONFIGS[name], seed=7, packed=True))
    plain = JittedPasses(Decoder.random(CONFIGS[name], seed=7))
    assert packed.model.packed_head is not None and plain.model.packed_head is None
    seq = tokens(CONFIGS[name].vocab_size, PAD, 3)
    assert maxerr(packed.logits(seq), plain.logits(seq)) <= TOL


def test_prefill_then_decode_equals_full_forward(jp):
    check_prefill_then_decode(jp)


def test_multi_head_prefill_then_decode_equals_full_forward():
    check_prefill_then_decode(JittedPasses(Decoder.random(CONFIGS["llama_mha"], 7)))


def prefilled(jp, ctx, scratch=SCRATCH):
    """The engine's prefill of a padded prompt: all but its last token cached, the last one
    pending; then the step's scratch block."""
    n = ctx.shape[0]
    cache = jp.prefill(jp.init_cache(MAX_LEN, PROMPT), jnp.pad(ctx, (0, PROMPT - n)), n)
    assert int(cache.length) == n - 1
    return jp.with_scratch(cache, scratch)


def check_prefill_then_decode(jp):
    V = jp.model.vocab_size
    seq = tokens(V, 20, seed=1)
    full = full_logits(jp, seq)
    cache = prefilled(jp, seq[:11], scratch=1)  # the autoregressive loop's scratch
    for t in range(10, 20):  # the pending prompt token, then one generated token at a time
        logits, cache = jp.decode(cache, seq[t])
        assert maxerr(logits, full[t]) <= TOL
    assert int(cache.length) == 20


def drafts_with_shared_and_diverging_prefixes(V, seed):
    d = np.array(tokens(V, 12, seed)).reshape(3, 4)
    d[1, :2] = d[0, :2]  # drafts 0 and 1 share a 2-token prefix, then diverge
    d[1, 2] = (d[0, 2] + 1) % V
    d[2, 0] = (d[0, 0] + 1) % V  # draft 2 diverges at its first token
    return jnp.asarray(d)


def score_after_prompt(jp, ctx, root, drafts):
    """The tree after prompt ``ctx``: root = the pending token (the prompt's last)."""
    cache = prefilled(jp, jnp.concatenate([ctx, root]))
    return jp.score_tree(cache, root[0], drafts)


def test_score_tree_equals_full_forward_of_every_drafted_prefix(jp):
    V = jp.model.vocab_size
    ctx, root = tokens(V, 9, seed=2), tokens(V, 1, seed=3)
    drafts = drafts_with_shared_and_diverging_prefixes(V, seed=4)
    p, cache, _ = score_after_prompt(jp, ctx, root, drafts)
    assert p.shape == (3, 5, V)
    assert int(cache.length) == 9  # scoring commits nothing
    for k in range(3):
        full = full_logits(jp, jnp.concatenate([ctx, root, drafts[k]]))
        assert maxerr(p[k], full[9:]) <= TOL  # p[k, j] = target logits after drafts[k, :j]


@pytest.mark.parametrize("jp", ["llama_tied_gqa"], indirect=True)
def test_tree_mask_leak_is_detected(jp):
    """Mutant: every node sees every scratch slot. The equivalence check above must catch it."""
    V = jp.model.vocab_size
    ctx, root = tokens(V, 9, seed=2), tokens(V, 1, seed=3)
    drafts = drafts_with_shared_and_diverging_prefixes(V, seed=4)
    cache = prefilled(jp, jnp.concatenate([ctx, root]))
    N = 1 + drafts.size
    positions = cache.length + jnp.asarray([0] + [1, 2, 3, 4] * 3)
    leaky = jnp.asarray(np.ones((N, SCRATCH), bool))
    tokens_ = jnp.concatenate([root, drafts.reshape(-1)])
    logits, _ = jp.model.forward(tokens_, positions, jnp.arange(N), leaky, cache)
    full = full_logits(jp, jnp.concatenate([ctx, root, drafts[2]]))
    assert maxerr(logits[9:13], full[10:14]) > 100 * TOL


@pytest.mark.parametrize("d, tau", [(1, 2), (0, 0), (2, 4)])
def test_commit_path_then_decode_equals_full_forward(jp, d, tau):
    V = jp.model.vocab_size
    ctx, root = tokens(V, 9, seed=5), tokens(V, 1, seed=6)
    drafts = drafts_with_shared_and_diverging_prefixes(V, seed=7)
    _, cache, slot = score_after_prompt(jp, ctx, root, drafts)
    cache = jp.commit_path(cache, slot, jnp.int32(d), jnp.int32(tau))
    assert int(cache.length) == 9 + 1 + tau
    rest = tokens(V, 4, seed=8)  # the bonus token and what follows
    full = full_logits(jp, jnp.concatenate([ctx, root, drafts[d, :tau], rest]))
    for i in range(4):
        logits, cache = jp.decode(cache, rest[i])
        assert maxerr(logits, full[10 + tau + i]) <= TOL
    # a second tree on top of the committed path agrees with the full forward as well
    more = drafts_with_shared_and_diverging_prefixes(V, seed=9)
    root2 = tokens(V, 1, seed=10)
    p, _, _ = jp.score_tree(cache, root2[0], more)
    for k in range(3):
        seq = jnp.concatenate([ctx, root, drafts[d, :tau], rest, root2, more[k]])
        full = full_logits(jp, seq)
        assert maxerr(p[k], full[14 + tau :]) <= TOL


def test_vmapped_batch_with_different_prompt_lengths_equals_per_sequence():
    """The engine's use: jax.vmap of the per-sequence passes over prompts of their own lengths."""
    jp = JittedPasses(Decoder.random(CONFIGS["qwen2_bias_head_gqa"], seed=3))
    model, V = jp.model, jp.model.vocab_size
    lengths = jnp.asarray([5, 12, 9])
    prompts = jnp.stack([tokens(V, PROMPT, seed=20 + b) for b in range(3)])
    roots = tokens(V, 3, seed=30)
    drafts = jnp.stack([drafts_with_shared_and_diverging_prefixes(V, 40 + b) for b in range(3)])
    cache = jax.vmap(lambda _: model.init_cache(MAX_LEN, PROMPT))(jnp.arange(3))

    @jax.jit
    def batch(prompts, lengths, roots, drafts, cache):
        cache = jax.vmap(lambda c, t, n: prefill(model, c, t, n, PROMPT))(cache, prompts, lengths)
        cache = jax.vmap(lambda c: model.with_scratch(c, SCRATCH))(cache)
        pending = jax.vmap(lambda t, n: t[n - 1])(prompts, lengths)
        step, cache = jax.vmap(lambda c, t: decode(model, c, t, SCRATCH))(cache, pending)
        p, cache, _ = jax.vmap(lambda c, r, d: score_tree(model, c, r, d, SCRATCH))(
            cache, roots, drafts)
        return step, p, cache

    step, p, cache = batch(prompts, lengths, roots, drafts, cache)
    assert [int(x) for x in cache.length] == [5, 12, 9]
    for b in range(3):
        n = int(lengths[b])
        seq = jnp.concatenate([prompts[b, :n], roots[b : b + 1]])
        assert maxerr(step[b], full_logits(jp, seq[:n])[n - 1]) <= TOL
        for k in range(3):
            full = full_logits(jp, jnp.concatenate([seq, drafts[b, k]]))
            assert maxerr(p[b, k], full[n:]) <= TOL


def random_weights(config: ModelConfig, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {
        name: (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)
        + (1.0 if name.endswith("norm") else 0.0)
        for name, shape in weight_shapes(config).items()
    }


def test_early_exit_equals_a_model_built_with_fewer_layers():
    config = tiny_config("llama", num_layers=4)
    weights = random_weights(config, seed=11)
    per_layer = set(weight_shapes(config)) - {"embed", "lm_head", "final_norm"}
    sliced = {k: (w[:2] if k in per_layer else w) for k, w in weights.items()}
    small = JittedPasses(Decoder.from_weights(config.replace(num_layers=2), sliced))
    big = Decoder.from_weights(config, weights)
    exit2 = JittedPasses(big.early_exit(2))
    assert exit2.model.layers[0].wq is big.layers[0].wq  # shares the weights, no copy
    seq = tokens(config.vocab_size, 10, seed=12)
    assert maxerr(full_logits(exit2, seq), full_logits(small, seq)) <= TOL
    # the check can fail: the full-depth model differs
    assert maxerr(full_logits(exit2, seq), JittedPasses(big).logits(seq)) > 100 * TOL
    c1, c2 = exit2.init_cache(MAX_LEN, SCRATCH), small.init_cache(MAX_LEN, SCRATCH)
    assert len(c1.k) == len(c2.k) == 2  # one committed KV block per active layer
    assert c1.k[0].shape == c2.k[0].shape == (config.num_kv_heads, MAX_LEN, config.head_dim)
    c1 = exit2.prefill(exit2.init_cache(MAX_LEN, PROMPT), jnp.pad(seq[:7], (0, PROMPT - 7)), 7)
    c2 = small.prefill(small.init_cache(MAX_LEN, PROMPT), jnp.pad(seq[:7], (0, PROMPT - 7)), 7)
    assert maxerr(exit2.decode(c1, seq[6])[0], small.decode(c2, seq[6])[0]) <= TOL


def test_prompt_longer_than_cache_is_a_clear_error():
    jp = JittedPasses(Decoder.random(tiny_config("llama"), seed=0))
    with pytest.raises(ValueError, match="prompt of 9 tokens does not fit the cache"):
        jp.prefill(jp.init_cache(8, 9), tokens(67, 9, seed=0), 9)  # over max_len
    with pytest.raises(ValueError, match="prompt of 9 tokens does not fit the cache"):
        prefill(jp.model, jp.init_cache(16, 4), tokens(67, 9, seed=0), 9, 4)  # over scratch
    jp.prefill(jp.init_cache(9, 9), tokens(67, 9, seed=0), 9)  # (the check can pass)


def test_tree_larger_than_scratch_is_a_clear_error():
    jp = JittedPasses(Decoder.random(tiny_config("llama"), seed=0))
    cache = jp.init_cache(8, 8)
    with pytest.raises(ValueError, match="9 tree nodes need scratch >= 9"):
        jp.score_tree(cache, jnp.int32(1), jnp.ones((4, 2), jnp.int32))
    jp.score_tree(cache, jnp.int32(1), jnp.ones((1, 7), jnp.int32))  # 8 nodes fit


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(arch="mamba"), "config.arch must be one of"),
        (dict(num_kv_heads=4), "must be a multiple of"),
        (dict(head_dim=7), "head_dim must be even"),
        (dict(num_layers=0), "num_layers must be an integer >= 1"),
    ],
)
def test_bad_config_is_a_clear_error(change, match):
    with pytest.raises(ValueError, match=match):
        tiny_config("llama", **change)


def test_bad_weights_and_unimplemented_arch_are_clear_errors():
    config = tiny_config("qwen2")
    weights = random_weights(config, 0)
    del weights["bq"]
    with pytest.raises(ValueError, match=r"missing keys \['bq'\]"):
        Decoder.from_weights(config, weights)
    weights = random_weights(config, 0)
    weights["wo"] = weights["wo"][:1]
    with pytest.raises(ValueError, match=r"weights\['wo'\] must have shape"):
        Decoder.from_weights(config, weights)
    with pytest.raises(ValueError, match="not implemented by the decoder"):
        Decoder.random(config.replace(arch="gemma3"))


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("preset", ["llama", "qwen2"])
def test_streamed_params_counts_every_array_a_token_multiplies(preset, tied):
    """The roofline's weight count, checked against the arrays a Decoder actually holds: all of
    them, except an untied embedding table (a token only indexes one row of it). In XLA's
    layout: packed float32 pads a tiny model's outputs to blocks of 32 (the real models' dims
    are multiples of 32, so their packed arrays hold exactly these counts)."""
    model = Decoder.random(tiny_config(preset, tie_embeddings=tied))
    sizes = {"/".join(map(str, path)): leaf.size
             for path, leaf in jax.tree_util.tree_leaves_with_path(nnx.state(model, nnx.Param))}
    embed = sum(v for k, v in sizes.items() if "embed" in k)
    held = sum(sizes.values())
    assert model.config.num_params == held
    assert model.config.streamed_params == held - (0 if tied else embed)
