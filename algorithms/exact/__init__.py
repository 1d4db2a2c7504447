"""Float64 NumPy exact laws of every verifier and the enumeration checker that uses them.

Independent of the JAX verifiers on purpose: a bug shared by both would otherwise hide.
"""

from algorithms.exact.checker import (
    cumulative_emitted,
    enumerate_blocks,
    enumerate_drafts,
    expected_tau,
    iteration_law,
    joint,
    lossless_tv,
    multi_iteration_law,
    single_draft_bound,
    stateless,
    target_law,
    total_variation,
)
from algorithms.exact.models import (
    ConstantModel,
    DirichletModel,
    MaskedModel,
    OneHotModel,
    ToyModel,
    adversarial_pairs,
    example_pair,
    random_pair,
)
from algorithms.exact.token import token_law

EXACT_LAWS = {"token": token_law}

__all__ = [
    "EXACT_LAWS", "ConstantModel", "DirichletModel", "MaskedModel", "OneHotModel", "ToyModel",
    "adversarial_pairs", "cumulative_emitted", "enumerate_blocks", "enumerate_drafts",
    "example_pair", "expected_tau", "iteration_law", "joint", "lossless_tv",
    "multi_iteration_law", "random_pair", "single_draft_bound", "stateless", "target_law",
    "token_law", "total_variation",
]
