"""Verifier registry: the name a config or test uses -> the frozen dataclass implementing it.

Hydra configs instantiate verifiers through ``_target_``; this registry serves Python users and
tests that want ``get_verifier("block")`` without a config.
"""

from __future__ import annotations

from algorithms.verifiers.base import Verdict, Verifier, validate_inputs
from algorithms.verifiers.token import TokenVerifier

_REGISTRY: dict[str, type] = {
    "token": TokenVerifier,
}


def register(name: str, cls: type) -> None:
    """Add a verifier class under ``name`` (for verifiers defined outside this package)."""
    _REGISTRY[name] = cls


def list_verifiers() -> list[str]:
    return sorted(_REGISTRY)


def get_verifier(name: str, **options) -> Verifier:
    if name not in _REGISTRY:
        raise ValueError(f"verifier: unknown name {name!r}; allowed: {', '.join(list_verifiers())}")
    try:
        return _REGISTRY[name](**options)
    except TypeError as e:
        raise ValueError(f"verifier {name!r}: bad options {options}: {e}") from None


__all__ = ["Verdict", "Verifier", "get_verifier", "list_verifiers", "register", "validate_inputs"]
