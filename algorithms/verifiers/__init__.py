"""Verifier registry: the name a config or test uses -> the frozen dataclass implementing it.

Hydra configs instantiate verifiers through ``_target_``; this registry serves Python users and
tests that want ``get_verifier("block")`` without a config. Entries are import paths, resolved on
first use, so one verifier file never has to import all the others.
"""

from __future__ import annotations

import importlib
import importlib.util

from algorithms.verifiers.base import (
    DETERMINISTIC,
    DRAFT_STRUCTURES,
    GREEDY,
    IID,
    STOPPED,
    Verdict,
    Verifier,
    accepted_structures,
    check_pairing,
    validate_inputs,
)

# name -> "module:Class"
_REGISTRY: dict[str, str] = {
    "token": "algorithms.verifiers.token:TokenVerifier",
    "block": "algorithms.verifiers.block:BlockVerifier",
    "greedy_block": "algorithms.verifiers.greedy_block:GreedyBlockVerifier",
    "specinfer": "algorithms.verifiers.specinfer:SpecInferVerifier",
    "spectr": "algorithms.verifiers.spectr:SpecTrVerifier",
    "spectr_gbv": "algorithms.verifiers.spectr_gbv:SpecTrGBVVerifier",
    "multipath_block": "algorithms.verifiers.multipath_block:MultiPathBlockVerifier",
    "traversal": "algorithms.verifiers.traversal:TraversalVerifier",
    "univer": "algorithms.verifiers.univer:UniVerVerifier",
    "hsd": "algorithms.verifiers.hsd:HSDVerifier",
    "greedy_draft": "algorithms.verifiers.greedy_draft:GreedyDraftVerifier",
    "importance": "algorithms.verifiers.importance:ImportanceSamplingVerifier",
}


def _available(path: str) -> bool:
    return importlib.util.find_spec(path.split(":")[0]) is not None


def list_verifiers() -> list[str]:
    """Names of the verifiers whose implementation is present."""
    return sorted(n for n, path in _REGISTRY.items() if _available(path))


def verifier_class(name: str) -> type:
    if name not in _REGISTRY or not _available(_REGISTRY[name]):
        raise ValueError(f"verifier: unknown name {name!r}; allowed: {', '.join(list_verifiers())}")
    module, cls = _REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), cls)


def get_verifier(name: str, **options) -> Verifier:
    cls = verifier_class(name)
    try:
        return cls(**options)
    except TypeError as e:
        raise ValueError(f"verifier {name!r}: bad options {options}: {e}") from None


__all__ = [
    "DETERMINISTIC", "DRAFT_STRUCTURES", "GREEDY", "IID", "STOPPED", "Verdict", "Verifier",
    "accepted_structures", "check_pairing", "get_verifier", "list_verifiers", "validate_inputs",
    "verifier_class",
]
