"""The trie over K drafts: each distinct prefix is scored once, and nothing else changes.

Reference: the uncached forward of every draft (what ``test_decoder.py`` checks the full-size
tree against). The trie must give the same [K, L+1, V] laws from fewer rows, and committing
through its slots must leave the cache exactly as decoding the accepted path token by token
would.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.models.config import tiny_config
from specjax.models.decoder import Decoder
from specjax.models.passes import JittedPasses, commit_path, score_tree, trie

TOL = 1e-5
MAX_LEN, PROMPT = 24, 16


def brute_force_distinct(drafts: np.ndarray) -> int:
    K, L = drafts.shape
    return len({tuple(drafts[k, : j + 1]) for k in range(K) for j in range(L)})


@pytest.mark.parametrize("seed", range(6))
def test_trie_slots_match_brute_force(seed):
    rng = np.random.default_rng(seed)
    drafts = rng.integers(0, 2, (4, 3))  # tiny alphabet: many shared prefixes
    slot, count = trie(jnp.asarray(drafts))
    slot = np.asarray(slot)
    assert int(count) == brute_force_distinct(drafts)
    K, L = drafts.shape
    prefixes = {}
    for k in range(K):
        for j in range(L):
            key = tuple(drafts[k, : j + 1])
            prefixes.setdefault(key, set()).add(int(slot[k, j]))
    assert all(len(s) == 1 for s in prefixes.values())  # one slot per distinct prefix
    assert sorted(s.pop() for s in prefixes.values()) == list(range(1, int(count) + 1))


def test_distinct_drafts_keep_the_full_tree_layout():
    drafts = jnp.asarray([[1, 2, 3], [4, 5, 6]])
    slot, count = trie(drafts)
    assert int(count) == 6
    assert np.asarray(slot).tolist() == [[1, 2, 3], [4, 5, 6]]


@pytest.fixture(scope="module")
def model():
    return Decoder.random(tiny_config("qwen2"), seed=5)


@pytest.fixture(scope="module")
def jp(model):
    return JittedPasses(model)


def prefilled(jp, ctx, root):
    """The engine's state before a step: ``ctx`` cached, ``root`` pending, a 13-slot scratch."""
    n = ctx.shape[0] + 1
    prompt = jnp.pad(jnp.concatenate([ctx, root[None]]), (0, PROMPT - n))
    return jp.with_scratch(jp.prefill(jp.init_cache(MAX_LEN, PROMPT), prompt, n), 13)


def drafts_with_duplicates(V):
    d = np.random.default_rng(3).integers(0, V, (4, 3))
    d[1] = d[0]  # a full duplicate
    d[2, :2] = d[0, :2]  # shares two tokens, then diverges
    d[2, 2] = (d[0, 2] + 1) % V
    return jnp.asarray(d)  # distinct nodes: 3 + 1 + 3 = 7 of 12


@pytest.mark.parametrize("d, tau", [(0, 3), (1, 2), (2, 3), (3, 1)])
def test_trie_scores_equal_the_full_tree_and_commit_equals_decoding(model, jp, d, tau):
    V = model.vocab_size
    ctx = jnp.asarray(np.random.default_rng(1).integers(0, V, 9), jnp.int32)
    root = jnp.int32(5)
    drafts = drafts_with_duplicates(V)
    cache = prefilled(jp, ctx, root)
    p_full = jnp.stack([jp.logits(jnp.concatenate([ctx, root[None], drafts[k]]))[9:]
                        for k in range(4)])
    _, count = trie(drafts)
    assert int(count) == 7
    p, tcache, slot = jax.jit(lambda c: score_tree(model, c, root, drafts, 13, nodes=8))(cache)
    assert float(jnp.max(jnp.abs(p - p_full))) <= TOL
    committed = commit_path(model, tcache, slot, jnp.int32(d), jnp.int32(tau))
    assert int(committed.length) == 9 + 1 + tau
    # Reference: the accepted path decoded token by token on the plain cache.
    ref = cache
    for t in [root, *drafts[d, :tau]]:
        _, ref = jp.decode(ref, t)
    nxt = jnp.int32(11)
    got = jp.decode(committed, nxt)[0]
    want = jp.decode(ref, nxt)[0]
    assert float(jnp.max(jnp.abs(got - want))) <= TOL


def test_wrong_slot_is_detected(model, jp):
    """Mutant: commit through the full-tree slots although the trie compacted them."""
    V = model.vocab_size
    ctx = jnp.asarray(np.random.default_rng(1).integers(0, V, 9), jnp.int32)
    drafts = drafts_with_duplicates(V)
    cache = prefilled(jp, ctx, jnp.int32(5))
    _, tcache, _ = score_tree(model, cache, jnp.int32(5), drafts, 13, nodes=8)
    full_slots = 1 + 3 * jnp.arange(4)[:, None] + jnp.arange(3)[None, :]
    wrong = commit_path(model, tcache, full_slots, jnp.int32(2), jnp.int32(3))
    ref = cache
    for t in [jnp.int32(5), *drafts[2]]:
        _, ref = jp.decode(ref, t)
    got = jp.decode(wrong, jnp.int32(11))[0]
    want = jp.decode(ref, jnp.int32(11))[0]
    assert float(jnp.max(jnp.abs(got - want))) > 100 * TOL
