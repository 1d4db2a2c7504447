"""Contract tests run against every registered verifier (``list_verifiers()``), so a new verifier
file is covered the moment it exists: temperature-0 behaviour (docs/concepts.md), structural
properties of the Verdict on random laws, a fixed-shape state, bad-input errors, and exact
losslessness of the ones that claim it."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from algorithms.exact import exact_law_of, example_pair, lossless_tv, random_pair
from algorithms.verifiers import get_verifier, list_verifiers

NAMES = list_verifiers()
L, V, B = 2, 4, 64  # one shape per K, shared by the tests below so each compiles once


def draft_counts(name):
    """K = 1 for everyone; K = 3 as well for verifiers that take several drafts."""
    md = get_verifier(name).max_drafts
    return [1] + ([3] if md is None or md >= 3 else [])


CASES = [(name, K) for name in NAMES for K in draft_counts(name)]


@functools.cache
def batched(name):
    v = get_verifier(name)
    return v, jax.jit(jax.vmap(v, in_axes=(0, 0, 0, 0, None)))


class Tree:
    """Random context-dependent laws, consistent across drafts that share a prefix (as i.i.d.
    drafting from one model produces), generated lazily per prefix."""

    def __init__(self, rng, *, concentration=1.0, p_zeros=0.0, q_zeros=0.0):
        self.rng, self.c, self.pz, self.qz = rng, concentration, p_zeros, q_zeros
        self.rows: dict = {}

    def _law(self, zeros):
        w = self.rng.dirichlet(np.full(V, self.c))
        w = np.where(self.rng.random(V) < zeros, 0.0, w)
        if w.sum() <= 0:
            w[self.rng.integers(V)] = 1.0
        return w / w.sum()

    def __call__(self, prefix):
        if prefix not in self.rows:
            self.rows[prefix] = (self._law(self.pz), self._law(self.qz))
        return self.rows[prefix]


def draw_inputs(tree, rng, K):
    """K i.i.d. blocks from the tree's draft laws, with q and p gathered along each."""
    drafts, q, p = np.zeros((K, L), np.int32), np.zeros((K, L, V)), np.zeros((K, L + 1, V))
    for k in range(K):
        prefix = ()
        for i in range(L + 1):
            p[k, i], q_row = tree(prefix)
            if i < L:
                q[k, i] = q_row
                drafts[k, i] = rng.choice(V, p=q_row)
                prefix += (int(drafts[k, i]),)
    return drafts, q, p


def run(name, drafts, q, p, seed):
    v, fn = batched(name)
    keys = jax.random.split(jax.random.key(seed), drafts.shape[0])
    verdict, state = fn(keys, jnp.asarray(drafts), jnp.asarray(q, jnp.float32),
                        jnp.asarray(p, jnp.float32), v.init_state(L, V))
    return jax.tree.map(np.asarray, verdict), state


def one_hot(tokens):
    return np.eye(V)[tokens]


# --- temperature 0 -----------------------------------------------------------------------------

def greedy_inputs(rng, K, stochastic_draft):
    """One-hot target p; draft either one-hot too (K identical greedy drafts) or a random law
    consistent per prefix (K different drafts). Returns inputs and the greedy target table."""
    target: dict = {}
    tree = Tree(rng, concentration=0.3)

    def t(prefix):
        if prefix not in target:  # agree with the draft's argmax often, so matches are long
            q_row = tree(prefix)[1]
            target[prefix] = int(np.argmax(q_row)) if rng.random() < 0.7 else int(rng.integers(V))
        return target[prefix]

    drafts, q, _ = draw_inputs(tree, rng, K)
    if not stochastic_draft:
        drafts[:] = drafts[0]
        q = one_hot(drafts)
    p = np.stack([one_hot([t(tuple(drafts[k, :i])) for i in range(L + 1)]) for k in range(K)])
    return drafts, q, p, t


# K = 1 with a sampled draft is covered by the property test.
@pytest.mark.parametrize("name, K, stochastic_draft", [
    pytest.param(n, K, s, id=f"{n}-{K}-{'sampled' if s else 'greedy'}_draft")
    for n, K in CASES for s in ((False, True) if K > 1 else (False,))])
def test_temperature_zero_accepts_the_longest_matching_prefix(name, K, stochastic_draft):
    rng = np.random.default_rng(0)
    cases = [greedy_inputs(rng, K, stochastic_draft) for _ in range(B)]
    drafts, q, p = (np.stack([c[i] for c in cases]) for i in range(3))
    verdict, _ = run(name, drafts, q, p, seed=0)
    for b, (d, _, _, t) in enumerate(cases):
        match = [next((i for i in range(L) if d[k, i] != t(tuple(d[k, :i]))), L) for k in range(K)]
        tau = int(verdict.num_emitted[b]) - 1
        assert tau == max(match), (name, b, d, match, verdict.tokens[b])
        tokens = verdict.tokens[b]
        assert match[int(verdict.draft_index[b])] == tau
        np.testing.assert_array_equal(tokens[:tau], d[int(verdict.draft_index[b]), :tau])
        assert tokens[tau] == t(tuple(tokens[:tau]))


# --- structural properties on random laws ------------------------------------------------------

@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), concentration=st.sampled_from([0.1, 1.0, 10.0]),
       p_zeros=st.sampled_from([0.0, 0.5]), q_zeros=st.sampled_from([0.0, 0.5]))
@pytest.mark.parametrize("name, K", CASES)
def test_verdict_properties_on_random_laws(name, K, seed, concentration, p_zeros, q_zeros):
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(B):
        tree = Tree(rng, concentration=concentration, p_zeros=p_zeros, q_zeros=q_zeros)
        cases.append(draw_inputs(tree, rng, K))
    drafts, q, p = (np.stack([c[i] for c in cases]) for i in range(3))
    verdict, _ = run(name, drafts, q, p, seed=seed)
    n = verdict.num_emitted
    assert ((n >= 1) & (n <= L + 1)).all()
    assert ((verdict.draft_index >= 0) & (verdict.draft_index < K)).all()
    for b in range(B):
        tau, k = int(n[b]) - 1, int(verdict.draft_index[b])
        tokens = verdict.tokens[b]
        assert ((tokens[: tau + 1] >= 0) & (tokens[: tau + 1] < V)).all(), tokens
        assert (tokens[tau + 1:] == -1).all(), tokens
        np.testing.assert_array_equal(tokens[:tau], drafts[b, k, :tau])
        # the extra token has positive target probability where it was emitted
        assert p[b, k, tau, tokens[tau]] > 0, (name, tokens, p[b, k, tau])


@pytest.mark.parametrize("name", NAMES)
def test_state_keeps_a_fixed_shape(name):
    """The engine threads state through lax.while_loop: same tree, shapes and dtypes out as in."""
    v = get_verifier(name)
    state = v.init_state(L, V)
    q = jnp.full((1, L, V), 1 / V)
    args = (jax.random.key(0), jnp.zeros((1, L), jnp.int32), q, jnp.full((1, L + 1, V), 1 / V))
    _, out = jax.eval_shape(v, *args, state)
    shape = lambda t: jax.tree.map(lambda a: (a.shape, a.dtype), t)
    assert jax.tree.structure(out) == jax.tree.structure(state)
    assert shape(out) == shape(state)
    # Run it, stateless or not, in the loop the engine uses: the state must come back with the
    # same shapes after real iterations, and every verdict must be a valid one (the target is
    # one-hot on token 1 at the root, so the first emitted token is 1 whatever was accepted).
    def body(_, carry):
        key, s, ok = carry
        key, sub = jax.random.split(key)
        verdict, s = v(sub, args[1], q, args[3].at[0, 0].set(jnp.eye(V)[1]), s)
        return key, s, ok & (verdict.tokens[0] == 1) & (verdict.num_emitted >= 1)

    _, final, ok = jax.jit(lambda s: jax.lax.fori_loop(0, 4, body, (args[0], s, True)))(state)
    assert shape(final) == shape(state)
    assert bool(ok)


# --- bad input -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_bad_inputs_raise_value_errors(name):
    v = get_verifier(name)
    key, state = jax.random.key(0), v.init_state(L, V)
    d, q, p = jnp.zeros((1, L), jnp.int32), jnp.full((1, L, V), 1 / V), jnp.full((1, L + 1, V),
                                                                                  1 / V)
    if v.max_drafts is not None:
        K = v.max_drafts + 1
        with pytest.raises(ValueError, match="max_drafts"):
            v(key, jnp.zeros((K, L), jnp.int32), jnp.full((K, L, V), 1 / V),
              jnp.full((K, L + 1, V), 1 / V), state)
    with pytest.raises(ValueError, match="q must have shape"):
        v(key, d, q[:, :-1], p, state)
    with pytest.raises(ValueError, match="p must have shape"):
        v(key, d, q, p[:, :-1], state)
    with pytest.raises(ValueError, match="drafts must have shape"):
        v(key, d[0], q, p, state)
    with pytest.raises(ValueError, match="sum to 1"):
        v(key, d, q, p * 1.5, state)
    with pytest.raises(ValueError, match="negative"):
        v(key, d, q.at[0, 0, 0].set(-0.5).at[0, 0, 1].set(1.0), p, state)  # sums to 1


# --- exact losslessness of every verifier that claims it -----------------------------------------

@pytest.mark.parametrize("name, K", [(n, min(K, 2)) for n, K in CASES
                                     if get_verifier(n).lossless])
def test_claimed_losslessness_holds_exactly(name, K):
    v = get_verifier(name)
    law = exact_law_of(v)
    for label, (P, Q) in [("example", example_pair()), ("random", random_pair(2, 1))]:
        tv = lossless_tv(law, P, Q, L=2, K=K, N=4)
        print(f"{name} K={K} exact TV {label} L=2 N=4: {tv:.3e}")
        assert tv <= 1e-12


def test_sample_draws_what_jax_categorical_draws():
    """``base.sample`` writes Gumbel-max's argmax as a max and a min over indices (XLA:CPU's
    argmax is slow): each draw must be the one ``jax.random.categorical`` makes with the same key,
    zeros never drawn, under vmap too. A wrong tie rule or a shifted index would differ."""
    from algorithms.verifiers.base import sample

    rng = np.random.default_rng(0)
    for V in (3, 50, 4099):
        probs = rng.dirichlet(np.full(V, 0.3)).astype(np.float32)
        probs[rng.random(V) < 0.3] = 0.0
        probs = jnp.asarray(probs / probs.sum())
        keys = jax.random.split(jax.random.key(V), 300)
        logits = jnp.where(probs > 0, jnp.log(jnp.where(probs > 0, probs, 1.0)), -jnp.inf)
        want = jax.vmap(jax.random.categorical, in_axes=(0, None))(keys, logits)
        got = jax.jit(jax.vmap(sample, in_axes=(0, None)))(keys, probs)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        assert np.all(np.asarray(probs)[np.asarray(got)] > 0)
    one_hot = jnp.zeros(7).at[4].set(1.0)
    assert int(sample(jax.random.key(1), one_hot)) == 4
