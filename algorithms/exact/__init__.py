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

# verifier name -> "module:function" of its exact one-iteration law (signature in checker.py).
# Options of the JAX verifier (fields other than ``lossless``/``max_drafts``) are passed through.
EXACT_LAWS: dict[str, str] = {
    "token": "algorithms.exact.token:token_law",
    "block": "algorithms.exact.block:block_law",
    "greedy_block": "algorithms.exact.greedy_block:greedy_block_law",
    "specinfer": "algorithms.exact.specinfer:specinfer_law",
    "spectr": "algorithms.exact.spectr:spectr_law",
    "spectr_gbv": "algorithms.exact.spectr_gbv:spectr_gbv_law",
    "multipath_block": "algorithms.exact.multipath_block:multipath_block_law",
    "traversal": "algorithms.exact.traversal:traversal_law",
    "univer": "algorithms.exact.univer:univer_law",
    "hsd": "algorithms.exact.hsd:hsd_law",
    "greedy_draft": "algorithms.exact.greedy_draft:greedy_draft_law",
    "importance": "algorithms.exact.importance:importance_law",
}


def get_exact_law(name: str, **options):
    """The exact law of verifier ``name`` with ``options`` bound (e.g. ``fixup=False``)."""
    import functools
    import importlib

    if name not in EXACT_LAWS:
        raise ValueError(f"exact law: unknown verifier {name!r}; allowed: {sorted(EXACT_LAWS)}")
    module, fn = EXACT_LAWS[name].split(":")
    law = getattr(importlib.import_module(module), fn)
    return functools.partial(law, **options) if options else law


def exact_law_of(verifier):
    """The exact law matching a JAX verifier instance (its dataclass options passed through)."""
    import dataclasses

    from algorithms.verifiers import _REGISTRY

    path = f"{type(verifier).__module__}:{type(verifier).__name__}"
    names = [n for n, p in _REGISTRY.items() if p == path]
    if not names:
        raise ValueError(f"exact law: {type(verifier).__name__} is not a registered verifier")
    options = {f.name: getattr(verifier, f.name) for f in dataclasses.fields(verifier)
               if f.name not in ("lossless", "max_drafts")}
    return get_exact_law(names[0], **options)

__all__ = [
    "EXACT_LAWS", "exact_law_of", "get_exact_law", "ConstantModel", "DirichletModel",
    "MaskedModel", "OneHotModel", "ToyModel",
    "adversarial_pairs", "cumulative_emitted", "enumerate_blocks", "enumerate_drafts",
    "example_pair", "expected_tau", "iteration_law", "joint", "lossless_tv",
    "multi_iteration_law", "random_pair", "single_draft_bound", "stateless", "target_law",
    "token_law", "total_variation",
]
