"""Greedy block verification + fix-up (docs/verifiers/greedy_block.md): exact losslessness with
state, the biased fixup=False variant, the documented numbers, and Monte Carlo of the stateful
JAX kernel."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from algorithms.exact import (
    adversarial_pairs,
    cumulative_emitted,
    exact_law_of,
    example_pair,
    expected_tau,
    iteration_law,
    lossless_tv,
    random_pair,
    single_draft_bound,
    target_law,
    token_law,
)
from algorithms.exact.block import block_law
from algorithms.exact.greedy_block import greedy_block_law
from algorithms.exact.monte_carlo import chi_square, sample_emitted, sample_inputs, tabulate
from algorithms.verifiers import get_verifier
from algorithms.verifiers.base import sample
from algorithms.verifiers.greedy_block import GreedyBlockState, GreedyBlockVerifier

FPR = 1e-6  # false-positive rate of every Monte Carlo test
SIZES = [(2, 1), (2, 2), (2, 3), (3, 1), (3, 2), (3, 3), (4, 1), (4, 2)]  # as in test_block.py
no_fixup = functools.partial(greedy_block_law, fixup=False)


@pytest.mark.parametrize("seed", range(20))
def test_exactly_lossless_on_random_pairs(seed):
    V, L = SIZES[seed % len(SIZES)]
    P, Q = random_pair(V, seed)
    tv = lossless_tv(greedy_block_law, P, Q, L=L)  # N = L + 2: fix-ups cross iterations
    print(f"greedy_block TV random V={V} L={L} seed={seed}: {tv:.3e}")
    assert tv <= 1e-12


@pytest.mark.parametrize("V, L", [(2, 2), (2, 3), (3, 2)])
@pytest.mark.parametrize("name", sorted(adversarial_pairs(3)))
def test_exactly_lossless_on_adversarial_pairs(name, V, L):
    P, Q = adversarial_pairs(V)[name]
    tv = lossless_tv(greedy_block_law, P, Q, L=L)
    print(f"greedy_block TV adversarial {name} V={V} L={L}: {tv:.3e}")
    assert tv <= 1e-12


def test_nested_fixups_stay_lossless_over_long_horizons():
    """L=3 over 7 tokens: modifications stack (two live at once) and expire."""
    P, Q = random_pair(2, 3)
    assert lossless_tv(greedy_block_law, P, Q, L=3, N=7) <= 1e-12


def test_without_fixup_is_biased():
    P, Q = example_pair()
    tv = lossless_tv(no_fixup, P, Q, L=2, N=5)
    print(f"greedy_block fixup=False TV example L=2 N=5: {tv:.6f}")
    assert tv > 1e-3
    # ... yet the first token alone is exactly p-distributed (docs/verifiers/spectr_gbv.md, K=1).
    assert lossless_tv(no_fixup, P, Q, L=2, N=1) <= 1e-12
    assert GreedyBlockVerifier(fixup=False).lossless is False
    assert GreedyBlockVerifier().lossless is True


def halve_pushed_weight(law):
    """Exact-law mutation: the newest modification's weight is Q(v)/(2 T(v))."""
    def mutant(P, Q, ctx, state=(), *, L, K=1):
        out = {}
        for (e, s), pr in law(P, Q, ctx, state, L=L, K=K).items():
            if len(e) < L:
                s = s[:-1] + ((s[-1][0], s[-1][1] / 2),)
            out[(e, s)] = out.get((e, s), 0.0) + pr
        return out
    return mutant


def test_exact_check_catches_a_wrong_fixup_weight():
    P, Q = example_pair()
    tv = lossless_tv(halve_pushed_weight(greedy_block_law), P, Q, L=2, N=5)
    print(f"greedy_block halved-weight exact TV example L=2 N=5: {tv:.6f}")
    assert tv > 1e-3


@pytest.mark.parametrize("L, token, block, greedy", [
    (2, 10 / 9, 11 / 9, 12 / 9),
    (3, 1.407407, 1.666667, 1.851852),
])
def test_expected_tau_on_the_example(L, token, block, greedy):
    """The running example, docs/verifiers/index.md (token < BV < greedy)."""
    P, Q = example_pair()
    for law, expected in [(token_law, token), (block_law, block), (greedy_block_law, greedy)]:
        got = expected_tau(iteration_law(law, P, Q, L=L))
        print(f"E[tau] L={L} {law.__name__}: {got:.6f}")
        assert got == pytest.approx(expected, abs=1e-6)


def test_cumulative_emitted_table():
    """docs/verifiers/greedy_block.md: GBV wins the first iteration, BV wins from the third."""
    P, Q = example_pair()
    table = {greedy_block_law: (2.3333, 4.4444, 6.5556), block_law: (2.2222, 4.4444, 6.6667),
             token_law: (2.1111, 4.2222, 6.3333)}
    for law, expected in table.items():
        got = [cumulative_emitted(law, P, Q, it, L=2) for it in (1, 2, 3)]
        print(f"cumulative emitted L=2 {law.__name__}: {[round(g, 4) for g in got]}")
        assert got == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize("V, L, seed", [(2, 3, 0), (3, 2, 1), (3, 3, 2), (4, 2, 3)])
def test_first_iteration_reaches_the_single_draft_bound(V, L, seed):
    P, Q = random_pair(V, seed)
    got = expected_tau(iteration_law(greedy_block_law, P, Q, L=L))
    assert got == pytest.approx(single_draft_bound(P, Q, L), abs=1e-12)


def test_exact_law_of_passes_the_option():
    P, Q = example_pair()
    law = exact_law_of(GreedyBlockVerifier(fixup=False))
    assert lossless_tv(law, P, Q, L=2, N=5) == pytest.approx(lossless_tv(no_fixup, P, Q, L=2, N=5))


# --- JAX kernel ----------------------------------------------------------------------------------

def to_jax(mods, L) -> GreedyBlockState:
    pad = L - len(mods)
    return GreedyBlockState(jnp.asarray([w for _, w in mods] + [0.0] * pad, jnp.float32),
                            jnp.asarray([r for r, _ in mods] + [0] * pad, jnp.int32))


def to_exact(omega, remaining) -> tuple:
    return tuple((int(r), float(w)) for w, r in zip(omega, remaining, strict=True) if r > 0)


MC_L = 3
MC_PAIR = random_pair(3, 4)


def nontrivial_states():
    """(ctx, exact state) after one correction, and after a second one stacked on it."""
    P, Q = MC_PAIR
    first = greedy_block_law(P, Q, (), (), L=MC_L)
    (e1, s1) = max((k for k in first if len(k[1]) == 1), key=first.get)
    second = greedy_block_law(P, Q, e1, s1, L=MC_L)
    (e2, s2) = max((k for k in second if len(k[1]) == 2), key=second.get)
    return [(e1, s1), (e1 + e2, s2)]


@dataclasses.dataclass(frozen=True, kw_only=True)
class HalvedWeight(GreedyBlockVerifier):
    """Mutation: applies the fix-up with half the stored weight."""

    def __call__(self, key, drafts, q, p, state):
        return super().__call__(key, drafts, q, p, state._replace(omega=state.omega / 2))


def test_monte_carlo_from_the_initial_state():
    P, Q = MC_PAIR
    exact = iteration_law(greedy_block_law, P, Q, L=MC_L)
    fit = chi_square(sample_emitted(get_verifier("greedy_block"), P, Q, L=MC_L, K=1, n=100_000,
                                    seed=1, chunk=100_000), exact)
    print(f"greedy_block MC initial state: {fit}")
    assert fit.passes(FPR)


@pytest.mark.parametrize("which", [0, 1], ids=["one_modification", "two_modifications"])
def test_monte_carlo_from_a_state_after_corrections(which):
    P, Q = MC_PAIR
    ctx, mods = nontrivial_states()[which]
    exact = iteration_law(greedy_block_law, P, Q, L=MC_L, ctx=ctx, state=mods)
    counts = sample_emitted(get_verifier("greedy_block"), P, Q, L=MC_L, K=1, n=100_000, seed=2,
                            ctx=ctx, state=to_jax(mods, MC_L), chunk=100_000)
    fit = chi_square(counts, exact)
    print(f"greedy_block MC ctx={ctx} state={mods}: {fit}")
    assert fit.passes(FPR)


def test_monte_carlo_from_a_state_catches_a_halved_weight():
    """The same test from the two-modification state (both state slots live) fails on a kernel
    that halves the fix-up weight."""
    P, Q = MC_PAIR
    ctx, mods = nontrivial_states()[1]
    exact = iteration_law(greedy_block_law, P, Q, L=MC_L, ctx=ctx, state=mods)
    counts = sample_emitted(HalvedWeight(), P, Q, L=MC_L, K=1, n=100_000, seed=2, ctx=ctx,
                            state=to_jax(mods, MC_L), chunk=100_000)
    fit = chi_square(counts, exact)
    print(f"greedy_block MC halved-weight mutant ctx={ctx} state={mods}: {fit}")
    assert not fit.passes(FPR)


def test_jax_state_update_matches_the_exact_state():
    """Every (emitted, new state) the kernel returns is the exact law's, weights to float32."""
    P, Q = MC_PAIR
    ctx, mods = nontrivial_states()[1]
    exact = {e: s for (e, s), _ in greedy_block_law(P, Q, ctx, mods, L=MC_L).items()}
    q_table = jnp.asarray(tabulate(Q, MC_L, ctx), jnp.float32)
    p_table = jnp.asarray(tabulate(P, MC_L, ctx), jnp.float32)
    v = get_verifier("greedy_block")

    def one(key):
        k_draft, k_verify = jax.random.split(key)
        drafts, q, p = sample_inputs(k_draft, q_table, p_table, V=P.V, L=MC_L, K=1)
        return v(k_verify, drafts, q, p, to_jax(mods, MC_L))

    verdicts, states = jax.jit(jax.vmap(one))(jax.random.split(jax.random.key(3), 2000))
    seen = set()
    for tokens, omega, remaining in zip(np.asarray(verdicts.tokens), np.asarray(states.omega),
                                        np.asarray(states.remaining), strict=True):
        emitted = tuple(int(t) for t in tokens if t >= 0)
        got, want = to_exact(omega, remaining), exact[emitted]
        assert [r for r, _ in got] == [r for r, _ in want], (emitted, got, want)
        np.testing.assert_allclose([w for _, w in got], [w for _, w in want], rtol=1e-4)
        seen.add(len(want))
    assert seen >= {1, 2}  # both aged-only and stacked states were exercised


def sample_sequences(verifier, P, Q, *, L, N, n, seed) -> dict[tuple, int]:
    """Counts of the first N tokens of n sequences decoded by ``verifier`` with its state threaded
    through a ``lax.fori_loop``, as the engine does (context-dependent toy models, float32)."""
    V, depth = P.V, N - 1 + L
    q_table = jnp.asarray(tabulate(Q, depth), jnp.float32)
    p_table = jnp.asarray(tabulate(P, depth), jnp.float32)
    offsets = jnp.asarray([(V**t - 1) // (V - 1) for t in range(depth + 1)], jnp.int32)

    def one(key):
        def iteration(_, carry):
            key, buf, length, code, state = carry
            key, k_draft, k_verify = jax.random.split(key, 3)
            draft_keys = jax.random.split(k_draft, L)
            c, toks, qs, ps = code, [], [], []
            for i in range(L):
                row = offsets[length + i] + c
                qs.append(q_table[row])
                ps.append(p_table[row])
                toks.append(sample(draft_keys[i], q_table[row]))
                c = c * V + toks[-1]
            ps.append(p_table[offsets[length + L] + c])
            verdict, new_state = verifier(k_verify, jnp.stack(toks)[None], jnp.stack(qs)[None],
                                          jnp.stack(ps)[None], state)
            live = length < N
            num = jnp.where(live, verdict.num_emitted, 0)
            for t in range(L + 1):
                buf = buf.at[length + t].set(jnp.where(t < num, verdict.tokens[t],
                                                       buf[length + t]))
                code = jnp.where(t < num, code * V + verdict.tokens[t], code)
            state = jax.tree.map(lambda a, b: jnp.where(live, a, b), new_state, state)
            return key, buf, length + num, code, state

        init = (key, jnp.zeros(N + 2 * L + 1, jnp.int32), jnp.int32(0), jnp.int32(0),
                verifier.init_state(L, V))
        return jax.lax.fori_loop(0, N, iteration, init)[1][:N]

    rows = np.asarray(jax.jit(jax.vmap(one))(jax.random.split(jax.random.key(seed), n)))
    uniq, counts = np.unique(rows, axis=0, return_counts=True)
    return {tuple(int(t) for t in row): int(c) for row, c in zip(uniq, counts, strict=True)}


def test_decoding_many_iterations_matches_the_target():
    """End to end: JAX GBV over N = 5 tokens (several iterations, state threaded) has the
    target's law; without the fix-up it does not. (A wrong pushed weight is caught by the
    state-update test above and by the exact mutant test.)"""
    P, Q = MC_PAIR
    exact = target_law(P, 5)
    fits = {}
    for label, v in [("real", get_verifier("greedy_block")),
                     ("fixup=False", get_verifier("greedy_block", fixup=False))]:
        fits[label] = chi_square(sample_sequences(v, P, Q, L=MC_L, N=5, n=100_000, seed=4), exact)
        print(f"greedy_block MC 5 tokens vs target, {label}: {fits[label]}")
    assert fits["real"].passes(FPR)
    assert not fits["fixup=False"].passes(FPR)
