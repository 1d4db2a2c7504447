"""The in-loop gap-to-optimum probe: jnp alpha* against the float64 original, and in the engine."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from algorithms.exact.bounds import optimal_acceptance as exact_alpha
from algorithms.verifiers import get_verifier
from specjax.drafters import ModelDrafter
from specjax.eval.root_bound import RootBoundProbe, optimal_acceptance

FAST = {"xla_backend_optimization_level": 0}


@pytest.mark.parametrize("K", [1, 2, 3, 7])
@pytest.mark.parametrize("V", [5, 2000])
def test_jnp_bound_equals_the_float64_bound(K, V):
    rng = np.random.default_rng(V + K)
    for conc in (0.05, 1.0):  # peaked (like T = 0.4 laws) and flat
        p = rng.dirichlet(np.full(V, conc))
        q = rng.dirichlet(np.full(V, conc))
        q[rng.random(V) < 0.2] = 0.0  # zeros in q: ratio +inf, sorted last
        q /= q.sum()
        got = float(optimal_acceptance(jnp.asarray(p, jnp.float32), jnp.asarray(q, jnp.float32),
                                       K))
        assert got == pytest.approx(exact_alpha(p, q, K), abs=2e-5)


def test_jnp_bound_single_draft_is_one_minus_tv():
    p = jnp.asarray([0.5, 0.3, 0.2])
    q = jnp.asarray([0.2, 0.3, 0.5])
    assert float(optimal_acceptance(p, q, 1)) == pytest.approx(0.7, abs=1e-6)


def _generate(verifier, K, temperature, probe):
    v = get_verifier(verifier)
    return specjax.generate(
        "toy-target", ["0 1 2", "3 2", "1 1 0 3", "2"], draft="toy-draft",
        drafter=ModelDrafter(K=K, L=3), verifier=RootBoundProbe(verifier=v) if probe else v,
        sampling=specjax.Sampling(temperature=temperature), max_new_tokens=12, seed=3,
        progress=False, compiler_options=FAST)


def test_greedy_root_acceptance_equals_the_bound_step_by_step():
    # At T = 0 p and q are one-hot: alpha* = 1 iff the argmaxes agree, which is exactly when a
    # lossless verifier accepts the first draft token, so the sums agree prompt by prompt.
    res = _generate("token", 1, 0.0, probe=True)
    for row in res.per_prompt:
        assert row["root_bound"] == row["accepted_per_position"][0]
    assert any(0 < r["root_bound"] < r["target_calls"] for r in res.per_prompt)


def test_probe_changes_nothing_and_bounds_lossless_acceptance():
    plain = _generate("specinfer", 3, 1.0, probe=False)
    probed = _generate("specinfer", 3, 1.0, probe=True)
    assert probed.tokens == plain.tokens
    assert "root_bound" not in plain.per_prompt[0]
    for row in probed.per_prompt:
        # One alpha* per step, each in [0, 1]
        assert 0 <= row["root_bound"] <= row["target_calls"] + 1e-4
    acc = sum(r["accepted_per_position"][0] for r in probed.per_prompt)
    bound = sum(r["root_bound"] for r in probed.per_prompt)
    assert bound > 0 and acc <= bound + 3 * np.sqrt(bound)  # lossless: E[1{tau>=1}] <= alpha*


def test_probe_forwards_the_claims():
    probe = RootBoundProbe(verifier=get_verifier("spectr_gbv"))
    assert probe.lossless is False and probe.max_drafts is None
    assert jax.tree.leaves(probe.init_state(3, 4))[-1].shape == ()
