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


def exact_laws() -> dict[str, str]:
    """Verifier name -> ``"module:function"`` of its exact one-iteration law (signature in
    ``checker.py``), as each verifier's ``@register`` names it."""
    from algorithms.verifiers import exact_law_spec, list_verifiers

    out = {}
    for name in list_verifiers():
        spec = exact_law_spec(name)
        if spec is not None:
            out[name] = spec if isinstance(spec, str) else f"{spec.__module__}:{spec.__qualname__}"
    return out


def get_exact_law(name: str, **options):
    """The exact law of verifier ``name`` with ``options`` bound (e.g. ``fixup=False``).

    Options of the JAX verifier (fields other than ``lossless``/``max_drafts``) are passed
    through."""
    import functools
    import importlib

    from algorithms.verifiers import exact_law_spec

    spec = exact_law_spec(name)  # ValueError naming the allowed verifiers when unknown
    if spec is None:
        raise ValueError(f"exact law: verifier {name!r} names none; verifiers with one: "
                         f"{sorted(exact_laws())}")
    if isinstance(spec, str):
        module, fn = spec.split(":")
        spec = getattr(importlib.import_module(module), fn)
    return functools.partial(spec, **options) if options else spec


def exact_law_of(verifier):
    """The exact law matching a JAX verifier instance (its dataclass options passed through)."""
    import dataclasses

    from algorithms.verifiers import name_of

    name = name_of(verifier)
    if name is None:
        raise ValueError(f"exact law: {type(verifier).__name__} is not a registered verifier")
    options = {f.name: getattr(verifier, f.name) for f in dataclasses.fields(verifier)
               if f.name not in ("lossless", "max_drafts")}
    return get_exact_law(name, **options)


__all__ = [
    "exact_law_of", "exact_laws", "get_exact_law", "ConstantModel", "DirichletModel",
    "MaskedModel", "OneHotModel", "ToyModel",
    "adversarial_pairs", "cumulative_emitted", "enumerate_blocks", "enumerate_drafts",
    "example_pair", "expected_tau", "iteration_law", "joint", "lossless_tv",
    "multi_iteration_law", "random_pair", "single_draft_bound", "stateless", "target_law",
    "token_law", "total_variation",
]
