"""Analytic planning models for speculative decoding (float64 NumPy/SciPy, no JAX).

- ``leviathan``: expected tokens, speedup, operation count, acceptance (Leviathan et al. 2023).
- ``lookahead``: closed-form optimal lookahead via Lambert W₋₁ [DERIVED], integer optimum.
- ``sdsl``: SDSL's acceptance plane and throughput-optimal draft size, rebuilt [2ND/DERIVED].
- ``batch``: roofline ridge, goodput versus batch size, lookahead policy k*(B) [DERIVED].
- ``simulation`` (imported explicitly; uses JAX): Monte Carlo check of E[n] with a real verifier.

Derivations, source tags and reference numbers: docs/theory.md. Invalid arguments raise ValueError
naming the argument (α ∉ [0, 1], k < 0, c <= 0, ...).
"""

from specjax.theory.batch import (
    H100_SXM,
    H200,
    Accelerator,
    batch_speedup,
    goodput,
    k_policy,
    ridge_tokens,
    step_time,
)
from specjax.theory.leviathan import (
    acceptance_rate,
    alpha_from_tar,
    expected_tokens,
    operations_factor,
    speedup,
    token_acceptance_rate,
)
from specjax.theory.lookahead import continuous_optimum, optimal_k
from specjax.theory.sdsl import (
    CHINCHILLA,
    N_STAR_LAW,
    REBUILD_DATA,
    REBUILD_TARGETS,
    SDSL_2ND,
    AcceptanceFit,
    AcceptancePlane,
    ChinchillaLaw,
    fit_acceptance,
    fit_draft_size_law,
    optimal_draft_size,
    predicted_acceptance,
    throughput_per_flop,
)

__all__ = [
    "CHINCHILLA", "H100_SXM", "H200", "N_STAR_LAW", "REBUILD_DATA", "REBUILD_TARGETS", "SDSL_2ND",
    "Accelerator", "AcceptanceFit", "AcceptancePlane", "ChinchillaLaw", "acceptance_rate",
    "alpha_from_tar", "batch_speedup", "continuous_optimum", "expected_tokens", "fit_acceptance",
    "fit_draft_size_law", "goodput", "k_policy", "operations_factor", "optimal_draft_size",
    "optimal_k", "predicted_acceptance", "ridge_tokens", "speedup", "step_time",
    "throughput_per_flop", "token_acceptance_rate",
]
