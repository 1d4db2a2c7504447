"""Engine acceptance rules (docs/verifiers/engine_rules.md): (a) each exact law's verdict on
canonical cases, (b) a seeded Monte Carlo of each JAX kernel that must reach the same verdict,
(c) mutants the Monte Carlo must reject.

(a) Exact: ``lossless_tv`` over the first L + 2 tokens, L = 2: lossless means <= 1e-12, biased
means >= 0.1 (the smallest biased cell measured is 0.267; numbers on the docs page).
(b) Monte Carlo: a lossless rule's first emitted token is a draw from p(. | ctx), so N = 20,000
kernel steps (one compile per rule, shared with test_one_step_law) are G-tested against p on
two V = 3 cases at ALPHA = 1e-6 per test; the exact verdict of the same statistic (TV of the
exact first-token marginal from p: <= 1e-12 lossless, >= 0.03 biased, the smallest biased
value being 0.039) must agree with the test's. Family-wise false-positive rate: at most
16 x 1e-6 over the lossless cells (Bonferroni); power on the biased cells: a TV of 0.039 at
N = 20,000 gives G ~ 10^2 on 2 degrees of freedom. Seeds are fixed, so a run is reproducible.
Each kernel against its own full exact law runs in test_one_step_law (ALPHA = 1e-4).
(c) Two mutants, one chain (llama.cpp's rule emitting a fresh target draw on a mismatch) and one
tree (SGLang's node drawing its extra token from p without removing the children), fail the
one-step G-test against the rule's exact law; the chain mutant also fails the first-token
verdict (the tree one cannot: with K = V = 3 the root's children are every token).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from algorithms.exact import exact_law_of, example_pair, iteration_law, lossless_tv, random_pair
from algorithms.exact.engine_rules import dspark_truncation_law
from algorithms.exact.models import DirichletModel, OneHotModel
from algorithms.exact.monte_carlo import referee_inputs
from algorithms.exact.one_step import fit, g_test, run
from algorithms.verifiers import get_verifier
from algorithms.verifiers.base import emit, residual, sample
from algorithms.verifiers.llamacpp_exact_match import LlamaCppExactMatchVerifier
from algorithms.verifiers.sglang_topk_target_only import SGLangTargetOnlyVerifier

ENGINE_RULES = ("vllm_strict", "vllm_prob", "vllm_argmax_softmax", "llamacpp_exact_match",
                "dspark_truncation", "sglang_topk_target_only", "topk_min_ratio",
                "eagle_topk_rrs")
LOSSLESS = {"vllm_prob", "llamacpp_exact_match", "dspark_truncation", "sglang_topk_target_only"}
# One-hot q makes the reported law the true one (argmax drafting reported as one-hot, what
# vllm#40651 says V1 does): the q-reading rules on argmax / top-k drafts are then lossless.
LOSSLESS_ON_ONE_HOT_Q = LOSSLESS | {"vllm_argmax_softmax", "topk_min_ratio", "eagle_topk_rrs"}
ALPHA = 1e-6
V, L = 3, 2


def cases():
    """name -> (P, Q); V = 3 except the running example (V = 2)."""
    return {"example": example_pair(), "random": random_pair(3, 1),
            "peaked": random_pair(3, 2, concentration=0.3),
            "p_equals_q": (DirichletModel(3, 7), DirichletModel(3, 7)),
            "one_hot_q": (DirichletModel(3, 13), OneHotModel(3, 14)),
            "greedy_target": (OneHotModel(3, 15), DirichletModel(3, 16))}


def k_of(name: str, P) -> int:
    return 1 if get_verifier(name).max_drafts == 1 else min(3, P.V)


def expected_lossless(name: str, case: str) -> bool:
    if case == "greedy_target":  # T = 0: every rule, vllm_strict included, emits the greedy path
        return True
    return name in (LOSSLESS_ON_ONE_HOT_Q if case == "one_hot_q" else LOSSLESS)


def test_the_registered_engine_rules_and_their_claims():
    for name in ENGINE_RULES:
        v = get_verifier(name)
        assert v.lossless == (name in LOSSLESS), name
        assert v.referee_drafts in ("iid", "argmax", "topk") and v.models, name


@pytest.mark.parametrize("case", sorted(cases()))
@pytest.mark.parametrize("name", ENGINE_RULES)
def test_exact_verdict(name, case):
    P, Q = cases()[case]
    tv = lossless_tv(exact_law_of(get_verifier(name)), P, Q, L=L, K=k_of(name, P))
    print(f"{name} {case}: exact TV {tv:.3e}")
    assert tv <= 1e-12 if expected_lossless(name, case) else tv >= 0.1, tv


def test_dspark_cut_on_the_drawn_token_is_biased():
    """A cut that reads q(x_i) of the token it discards changes that token's law (conditioned
    on being kept) while the token rule still uses q: biased; the rule's cut on max q is not."""
    P, Q = random_pair(3, 1)
    top = functools.partial(dspark_truncation_law, confidence="top")
    drafted = functools.partial(dspark_truncation_law, confidence="drafted")
    assert lossless_tv(top, P, Q, L=L) <= 1e-12
    assert lossless_tv(drafted, P, Q, L=L) >= 0.1


# --- (b) the kernels' Monte Carlo verdicts ---------------------------------------------------

def first_token_counts(verifier, P, Q, K: int, seed: int = 3) -> dict[tuple, int]:
    structure = verifier.referee_drafts
    inputs = None if structure == "iid" else referee_inputs(P, Q, structure, L=L, K=K)
    counts: dict[tuple, int] = {}
    for emitted, c in run(verifier, K, L, P, Q, seed=seed, inputs=inputs).items():
        counts[emitted[:1]] = counts.get(emitted[:1], 0) + c
    return counts


def exact_first_token_tv(verifier, P, Q, K: int) -> float:
    first = np.zeros(P.V)
    for emitted, pr in iteration_law(exact_law_of(verifier), P, Q, L=L, K=K).items():
        first[emitted[0]] += pr
    return 0.5 * float(np.abs(first - P(())).sum())


def mc_verdict(verifier, P, Q, K: int, exact_of=None) -> tuple[bool, bool]:
    """(exact first-token verdict, Monte Carlo verdict): True = lossless."""
    tv = exact_first_token_tv(exact_of or verifier, P, Q, K)
    assert tv <= 1e-12 or tv >= 0.03, f"first-token TV {tv} is in the undecided band"
    target = {(y,): float(P(())[y]) for y in range(P.V)}
    result = g_test(first_token_counts(verifier, P, Q, K), target)
    print(f"{type(verifier).__name__}: first-token exact TV {tv:.3e}, G-test {result}")
    return tv <= 1e-12, result.passes(ALPHA)


@pytest.mark.parametrize("case", ["random", "peaked"])
@pytest.mark.parametrize("name", ENGINE_RULES)
def test_monte_carlo_verdict_agrees_with_the_exact_one(name, case):
    P, Q = cases()[case]
    v = get_verifier(name)
    exact, mc = mc_verdict(v, P, Q, k_of(name, P))
    assert exact == (name in LOSSLESS)
    assert mc == exact


# --- (c) the Monte Carlo rejects broken kernels ------------------------------------------------

@dataclasses.dataclass(frozen=True, kw_only=True)
class FreshDrawOnMismatch(LlamaCppExactMatchVerifier):
    """Mutant: on a mismatch the emitted token is a new target draw, not the one compared."""

    lossless: ClassVar[bool] = False

    def __call__(self, key, drafts, q, p, state=()):
        verdict, state = super().__call__(key, drafts, q, p, state)
        tau = verdict.num_emitted - 1
        fresh = sample(jax.random.fold_in(key, 11), p[0, tau])
        extra = jnp.where(tau == drafts.shape[1], verdict.tokens[tau], fresh)
        return emit(drafts[0], tau, extra, jnp.int32(0)), state


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChildrenKeptInExtra(SGLangTargetOnlyVerifier):
    """Mutant: when no child is accepted, the extra token is drawn from p itself."""

    lossless: ClassVar[bool] = False

    def __call__(self, key, drafts, q, p, state=()):
        verdict, state = super().__call__(key, drafts, q, p, state)
        tau, lead = verdict.num_emitted - 1, verdict.draft_index
        redraw = sample(jax.random.fold_in(key, 13), p[lead, tau])
        keep = tau == drafts.shape[1]
        extra = jnp.where(keep, verdict.tokens[tau], redraw)
        return emit(drafts[lead], tau, extra, lead), state


MUTANTS = [(FreshDrawOnMismatch(), "llamacpp_exact_match"),
           (ChildrenKeptInExtra(), "sglang_topk_target_only")]


@pytest.mark.parametrize("mutant, name", MUTANTS, ids=[n for _, n in MUTANTS])
def test_mutants_fail(mutant, name):
    result = fit(mutant, "random", exact_of=get_verifier(name))
    print(f"{type(mutant).__name__} vs {name}'s exact law: {result}")
    assert not result.passes()
    if name == "sglang_topk_target_only":
        return  # K = V = 3: the root's children are all tokens, the mutant differs below it
    P, Q = cases()["random"]
    exact, mc = mc_verdict(mutant, P, Q, k_of(name, P), exact_of=get_verifier(name))
    assert exact and not mc  # the rule is lossless; its broken kernel is caught


def test_residual_helper_is_the_one_the_kernels_use():
    """The SGLang kernel's extra law is p off the children, renormalised: on a hand case."""
    p = jnp.array([0.5, 0.3, 0.2])
    off = residual(p * jnp.array([0.0, 1.0, 1.0]), jnp.zeros(3), fallback=p)
    np.testing.assert_allclose(np.asarray(off), [0.0, 0.6, 0.4], rtol=1e-6)
