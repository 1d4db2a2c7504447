"""GreedyDrafter (Hu et al., arXiv 2502.18779) reports each draft token's true law: one-hot rows at
the K-1 top tokens of the transformed draft law, q restricted to the rest for the sampled root,
the draft model's law below the root (float64 reference from the tabular toy LM)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.drafters.greedy import GreedyDrafter, greedy_root
from specjax.models.sampling import Sampling
from specjax.models.toy import ToyLM, make_tables


@pytest.mark.parametrize("K", [1, 2, 3, 5])
def test_greedy_root_laws(K):
    law = jnp.asarray([0.1, 0.4, 0.2, 0.3])
    tokens, laws = greedy_root(jax.random.key(0), law, K)
    tokens, laws = np.asarray(tokens), np.asarray(laws)
    top = [1, 3, 2, 0, 1][:K - 1]
    assert tokens[:K - 1].tolist() == top
    np.testing.assert_allclose(laws[:K - 1], np.eye(4)[top])
    rest = np.asarray(law).copy()
    rest[top] = 0.0
    want = rest / rest.sum() if rest.sum() > 0 else np.asarray(law)
    np.testing.assert_allclose(laws[K - 1], want, atol=1e-7)
    assert want[tokens[K - 1]] > 0


def test_propose_reports_the_laws_it_drafted_from():
    model = ToyLM(make_tables(5, order=3, seed=11), order=3)
    drafter, sampling = GreedyDrafter(K=3, L=3), Sampling(temperature=1.0)
    T, scratch, history = 64, 16 + drafter.scratch(), [1, 2, 3]
    prompt = jnp.asarray(history + [0] * 13, jnp.int32)
    state = drafter.init_state(model, prompt, jnp.int32(3), max_len=T, scratch=scratch)
    h = jnp.asarray(history + [0] * (T - 3), jnp.int32)
    drafts, q, _ = jax.jit(lambda key, state: drafter.propose(
        model, key, state, h, jnp.int32(3), sampling=sampling, vocab_size=5,
        scratch=scratch))(jax.random.key(1), state)
    drafts, q = np.asarray(drafts), np.asarray(q)
    root = np.asarray(model.law(history))
    order = np.lexsort((np.arange(5), -root))
    assert drafts[:2, 0].tolist() == order[:2].tolist()
    np.testing.assert_allclose(q[:2, 0], np.eye(5)[order[:2]], atol=1e-6)
    rest = root.copy()
    rest[order[:2]] = 0.0
    np.testing.assert_allclose(q[2, 0], rest / rest.sum(), atol=2e-6)
    for k in range(3):
        for i in range(1, 3):
            want = np.asarray(model.law(history + drafts[k, :i].tolist()))
            np.testing.assert_allclose(q[k, i], want, atol=2e-6)
            assert want[drafts[k, i]] > 0
