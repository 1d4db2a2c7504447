"""SpecInfer RRS and RRSw: exact losslessness, K=1 reduction, the numbers, Monte Carlo, mutants."""

import dataclasses
import functools
import itertools
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from algorithms.exact import (
    adversarial_pairs,
    example_pair,
    expected_tau,
    iteration_law,
    lossless_tv,
    random_pair,
    token_law,
    total_variation,
)
from algorithms.exact.monte_carlo import chi_square, prefix_offset, sample_emitted
from algorithms.exact.specinfer import specinfer_law
from algorithms.verifiers import get_verifier
from algorithms.verifiers.specinfer import SpecInferVerifier

FPR = 1e-6  # false-positive rate of every Monte Carlo test
COMBOS = list(itertools.product((2, 3), (1, 2, 3), (1, 2)))  # (V, K, L)
CASES = [(*COMBOS[s % len(COMBOS)], s) for s in range(24)]  # every combination, two seeds


def law(replacement: bool):
    return functools.partial(specinfer_law, replacement=replacement)


@pytest.mark.parametrize("replacement", [True, False])
@pytest.mark.parametrize("V, K, L, seed", CASES)
def test_exactly_lossless_on_random_pairs(V, K, L, seed, replacement):
    P, Q = random_pair(V, seed)
    assert lossless_tv(law(replacement), P, Q, L=L, K=K) <= 1e-12


@pytest.mark.parametrize("replacement", [True, False])
@pytest.mark.parametrize("V, K", [(2, 3), (3, 2)])
@pytest.mark.parametrize("name", sorted(adversarial_pairs(3)))
def test_exactly_lossless_on_adversarial_pairs(name, V, K, replacement):
    P, Q = adversarial_pairs(V)[name]
    assert lossless_tv(law(replacement), P, Q, L=2, K=K) <= 1e-12


@pytest.mark.parametrize("replacement", [True, False])
@pytest.mark.parametrize("V, L, seed", [(2, 1, 0), (3, 2, 1), (3, 3, 2), (2, 3, 3)])
def test_one_draft_is_token_verification(V, L, seed, replacement):
    P, Q = random_pair(V, seed)
    ours = iteration_law(law(replacement), P, Q, L=L, K=1)
    assert total_variation(ours, iteration_law(token_law, P, Q, L=L)) <= 1e-12


@pytest.mark.parametrize("K, L, expected", [(2, 1, 0.777778), (3, 1, 0.851852), (2, 2, 1.333333),
                                            (3, 2, 1.491084), (4, 2, 1.604481)])
def test_expected_tau_on_the_example(K, L, expected):
    """docs/verifiers/specinfer.md, running example."""
    P, Q = example_pair()
    assert expected_tau(iteration_law(specinfer_law, P, Q, L=L, K=K)) == pytest.approx(
        expected, abs=1e-6)


@pytest.mark.parametrize("seed, K, expected", [(0, 2, 1.1160), (0, 3, 1.3383), (2, 4, 1.4578),
                                               (4, 3, 0.7642)])
def test_expected_tau_on_the_random_pairs_table(seed, K, expected):
    """docs/verifiers/specinfer.md, random pairs (V = 3, L = 2)."""
    P, Q = random_pair(3, seed)
    assert expected_tau(iteration_law(specinfer_law, P, Q, L=2, K=K)) == pytest.approx(
        expected, abs=5e-5)


def test_without_replacement_beats_with_replacement_on_the_example():
    """Distinct candidates cannot waste trials on a duplicate (Jeon et al.)."""
    P, Q = example_pair()
    for K, L in [(2, 1), (2, 2), (3, 2)]:
        wr = expected_tau(iteration_law(law(True), P, Q, L=L, K=K))
        wor = expected_tau(iteration_law(law(False), P, Q, L=L, K=K))
        assert wor > wr + 1e-3


def sample_without_replacement(key, q_table, p_table, *, V, L, K, hand_over_sequential=True):
    """RRSw drafting: within each prefix group, in draft-index order, exclude earlier tokens.

    Returns (drafts, q, p) like ``monte_carlo.sample_inputs``; ``q[k, i]`` is the sequential law
    the token was drawn from (or plain q when ``hand_over_sequential`` is False: a mutant).
    """
    keys = jax.random.split(key, L * K).reshape(L, K)
    codes = [jnp.int32(0)] * K
    tokens, q_rows, p_rows = [[] for _ in range(K)], [[] for _ in range(K)], [[] for _ in range(K)]
    for i in range(L):
        drawn = []
        for k in range(K):
            row = prefix_offset(i, V) + codes[k]
            q_plain = q_table[row]
            excluded = jnp.zeros(V, bool)
            for j, x_j in drawn:
                excluded = excluded | ((codes[j] == codes[k]) & (jnp.arange(V) == x_j))
            keep = jnp.where(excluded, 0.0, q_plain)
            mass = keep.sum()
            q_k = jnp.where(mass > 0, keep / jnp.where(mass > 0, mass, 1.0), q_plain)
            logits = jnp.where(q_k > 0, jnp.log(jnp.where(q_k > 0, q_k, 1.0)), -jnp.inf)
            x = jax.random.categorical(keys[i, k], logits).astype(jnp.int32)
            drawn.append((k, x))
            tokens[k].append(x)
            q_rows[k].append(q_k if hand_over_sequential else q_plain)
            p_rows[k].append(p_table[row])
        codes = [codes[k] * V + tokens[k][i] for k in range(K)]
    for k in range(K):
        p_rows[k].append(p_table[prefix_offset(L, V) + codes[k]])
    return (jnp.stack([jnp.stack(t) for t in tokens]), jnp.stack([jnp.stack(r) for r in q_rows]),
            jnp.stack([jnp.stack(r) for r in p_rows]))


@dataclasses.dataclass(frozen=True, kw_only=True)
class SkipDuplicateUpdate(SpecInferVerifier):
    """Mutation: a draft repeating an earlier candidate's token at the node is skipped, so the
    duplicate's rejection no longer updates the residual (the rule says it must)."""

    lossless: ClassVar[bool] = False

    def rrs_node(self, r, tokens, laws, live, u):
        K = tokens.shape[0]
        earlier = jnp.tril(jnp.ones((K, K), bool), -1) & live[None, :]
        duplicate = (earlier & (tokens[:, None] == tokens[None, :])).any(axis=1)
        return super().rrs_node(r, tokens, laws, live & ~duplicate, u)


def test_monte_carlo_matches_exact_law_and_catches_duplicate_mutation():
    P, Q = random_pair(3, 3)
    exact = iteration_law(specinfer_law, P, Q, L=2, K=3)
    run = functools.partial(sample_emitted, P=P, Q=Q, L=2, K=3, n=100_000, seed=1)
    real = chi_square(run(get_verifier("specinfer")), exact)
    mutant = chi_square(run(SkipDuplicateUpdate()), exact)
    print(f"specinfer MC: real {real}, mutant {mutant}")
    assert real.passes(FPR)
    assert not mutant.passes(FPR)


def test_monte_carlo_without_replacement_and_catches_plain_q_mutation():
    """RRSw: the JAX sampler + verifier against the exact law; handing the verifier plain q
    instead of the sequential laws (the drafter-side mistake) must fail the same test."""
    P, Q = random_pair(3, 0)
    exact = iteration_law(law(False), P, Q, L=2, K=3)
    verifier = get_verifier("specinfer")  # the same kernel: RRSw differs only in the drafts' q
    run = functools.partial(sample_emitted, verifier, P, Q, L=2, K=3, n=100_000, seed=2)
    real = chi_square(run(sampler=sample_without_replacement), exact)
    plain = functools.partial(sample_without_replacement, hand_over_sequential=False)
    mutant = chi_square(run(sampler=plain), exact)
    print(f"specinfer RRSw MC: real {real}, mutant {mutant}")
    assert real.passes(FPR)
    assert not mutant.passes(FPR)


def test_duplicate_tokens_and_survivors():
    """Two identical drafts that agree with a one-hot target are accepted to the end."""
    V = 4
    drafts = jnp.array([[1, 2], [1, 2], [3, 0]], jnp.int32)
    onehot = jax.nn.one_hot(drafts, V)
    p = jnp.concatenate([onehot[:1].repeat(3, 0), jnp.full((3, 1, V), 1 / V)], axis=1)
    verdict, _ = jax.jit(get_verifier("specinfer"))(jax.random.key(0), drafts, onehot, p, ())
    assert int(verdict.num_emitted) == 3 and int(verdict.draft_index) == 0
    assert np.asarray(verdict.tokens)[:2].tolist() == [1, 2]


def test_rejects_bad_inputs():
    with pytest.raises(ValueError, match="bad options"):
        get_verifier("specinfer", replacement=False)  # not a kernel option
    with pytest.raises(ValueError, match="replacement must be True or False"):
        specinfer_law(*example_pair(), (), L=1, K=1, replacement=0)
    v = get_verifier("specinfer")
    q = jnp.full((2, 3, 4), 0.25)
    with pytest.raises(ValueError, match="p must have shape"):
        v(jax.random.key(0), jnp.zeros((2, 3), jnp.int32), q, jnp.full((2, 3, 4), 0.25), ())
    with pytest.raises(ValueError, match="token ids"):
        v(jax.random.key(0), jnp.full((2, 3), 4, jnp.int32), q, jnp.full((2, 4, 4), 0.25), ())
