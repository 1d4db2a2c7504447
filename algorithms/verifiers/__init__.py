"""Verifiers: one file each, registered at its class (``@register(name, exact_law=...)``).

Hydra configs instantiate verifiers through ``_target_`` (the ``verifier=`` group is built from
this registry); ``get_verifier("block")`` serves Python users and tests. The contract is in
``base``; ``registry`` finds every file of this package on first use.
"""

from __future__ import annotations

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
from algorithms.verifiers.registry import (
    exact_law_spec,
    get_verifier,
    list_verifiers,
    name_of,
    register,
    verifier_class,
    verifier_options,
    verifier_target,
)

__all__ = [
    "DETERMINISTIC", "DRAFT_STRUCTURES", "GREEDY", "IID", "STOPPED", "Verdict", "Verifier",
    "accepted_structures", "check_pairing", "exact_law_spec", "get_verifier", "list_verifiers",
    "name_of", "register", "validate_inputs", "verifier_class", "verifier_options",
    "verifier_target",
]
