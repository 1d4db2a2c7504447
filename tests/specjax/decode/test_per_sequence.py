"""``per_sequence``: a batch of one runs its branches for real, and gives what vmap gives."""

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np

from algorithms.verifiers import get_verifier
from specjax.decode.engine import per_sequence


def branchy(x, y):
    return jax.lax.cond(x.sum() > 0, lambda: x * 2.0, lambda: -y), x.sum()


def primitives(fn, *args) -> set[str]:
    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            yield eqn.primitive.name
            for sub in jax.extend.core.jaxprs_in_params(eqn.params):
                yield from walk(sub)
    return set(walk(jax.make_jaxpr(fn)(*args).jaxpr))


def test_a_batch_of_one_keeps_its_cond_and_matches_vmap():
    x, y = jnp.arange(3.0)[None], jnp.ones(3)[None]
    assert "cond" in primitives(lambda a, b: per_sequence(branchy, a, b), x, y)
    assert "cond" not in primitives(jax.vmap(branchy), x, y)  # vmap turns it into a select
    for xs in (x, -x - 1):
        got, want = per_sequence(branchy, xs, y), jax.vmap(branchy)(xs, y)
        assert jax.tree.map(lambda a, b: a.shape == b.shape and bool(jnp.all(a == b)),
                            got, want) == (True, True)


def test_larger_batches_are_vmapped():
    x, y = jnp.stack([jnp.arange(3.0), -jnp.arange(3.0) - 1]), jnp.ones((2, 3))
    assert "cond" not in primitives(lambda a, b: per_sequence(branchy, a, b), x, y)
    np.testing.assert_array_equal(per_sequence(branchy, x, y)[0], jax.vmap(branchy)(x, y)[0])


def test_a_verifier_called_per_sequence_emits_what_it_emits_under_vmap():
    """Same key, same inputs: the same verdict (SpecTr, whose node rules are conds)."""
    v = get_verifier("spectr")
    K, L, V = 3, 2, 5
    key = jax.random.key(3)
    q = jax.nn.softmax(jax.random.normal(key, (K, L, V)), -1).at[:, 0].set(
        jax.nn.softmax(jnp.arange(V, dtype=jnp.float32)))
    p = jax.nn.softmax(jax.random.normal(jax.random.key(4), (K, L + 1, V)), -1)
    p = p.at[:, 0].set(p[0, 0])
    q, p = q.at[1, 1].set(q[0, 1]), p.at[1, 1].set(p[0, 1])  # drafts 0 and 1 share prefix (4,)
    drafts = jnp.array([[4, 1], [4, 2], [3, 0]], jnp.int32)
    state = jax.tree.map(lambda s: s[None], v.init_state(L, V))
    for k in jax.random.split(jax.random.key(5), 8):
        args = (k[None], drafts[None], q[None], p[None], state)
        got, want = per_sequence(v, *args)[0], jax.vmap(v)(*args)[0]
        assert all(bool(jnp.all(a == b)) for a, b in zip(got, want, strict=True))
