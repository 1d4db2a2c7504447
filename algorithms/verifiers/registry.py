"""Verifier registry: a verifier file registers itself, and nothing else needs an edit.

``@register("block", exact_law="algorithms.exact.block:block_law")`` on the class puts it under
its name for ``get_verifier``, the Hydra group ``verifier=`` (``experiments.config_tree``), the
contract tests (``tests/algorithms/test_all_verifiers.py``) and the docs check; the exact law
named there is what ``algorithms.exact.get_exact_law`` returns for it. The package's modules are
imported on the first lookup, so a new file in ``algorithms/verifiers/`` is found without being
listed anywhere, and importing the package for its base types stays cheap.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Callable
from typing import NamedTuple

#: Modules of this package that hold no verifier.
NOT_VERIFIERS = frozenset({"base", "registry"})


class Entry(NamedTuple):
    cls: type
    # "module:function", or the function itself (a law written in the verifier's own file)
    exact_law: str | Callable | None


_REGISTRY: dict[str, Entry] = {}
_discovered = False


def register(name: str, *, exact_law: str | Callable | None = None):
    """Class decorator: file ``cls`` under ``name``, with the float64 exact law that checks it.

    A verifier claiming ``lossless`` must name its exact law; the contract tests compare the two.
    """
    if not (isinstance(name, str) and name.isidentifier()):
        raise ValueError(f"register: a verifier name must be an identifier, got {name!r}")

    def decorate(cls: type) -> type:
        known = _REGISTRY.get(name)
        if known is not None and _path(known.cls) != _path(cls):
            raise ValueError(f"register: verifier name {name!r} is taken by {_path(known.cls)}; "
                             f"{_path(cls)} needs another")
        if getattr(cls, "lossless", False) and exact_law is None:
            raise ValueError(f"register: {name!r} claims lossless=True but names no exact_law "
                             "to check the claim against")
        _REGISTRY[name] = Entry(cls, exact_law)
        return cls

    return decorate


def _path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _discover() -> None:
    """Import every module of this package once, so each registers its verifiers."""
    global _discovered
    if _discovered:
        return
    package = importlib.import_module(__package__)
    for info in pkgutil.iter_modules(package.__path__):
        if info.name not in NOT_VERIFIERS and not info.name.startswith("_"):
            importlib.import_module(f"{__package__}.{info.name}")
    _discovered = True


def list_verifiers() -> list[str]:
    """Names of every registered verifier, sorted."""
    _discover()
    return sorted(_REGISTRY)


def verifier_class(name: str) -> type:
    _discover()
    if name not in _REGISTRY:
        raise ValueError(f"verifier: unknown name {name!r}; allowed: {', '.join(list_verifiers())}")
    return _REGISTRY[name].cls


def get_verifier(name: str, **options):
    cls = verifier_class(name)
    try:
        return cls(**options)
    except TypeError as e:
        raise ValueError(f"verifier {name!r}: bad options {options}: {e}") from None


def verifier_target(name: str) -> str:
    """The import path of ``name``'s class, as Hydra's ``_target_`` writes it."""
    return _path(verifier_class(name))


def verifier_options(name: str) -> dict:
    """The class's constructor fields with their defaults (the options a config may set)."""
    return {f.name: f.default for f in dataclasses.fields(verifier_class(name))
            if f.init and f.default is not dataclasses.MISSING}


def name_of(verifier_or_class) -> str | None:
    """The registry name of a verifier instance or class; None when it is not registered."""
    _discover()
    cls = verifier_or_class if isinstance(verifier_or_class, type) else type(verifier_or_class)
    return next((n for n, e in _REGISTRY.items() if _path(e.cls) == _path(cls)), None)


def exact_law_spec(name: str) -> str | Callable | None:
    """What ``register`` was given as ``name``'s exact law."""
    verifier_class(name)
    return _REGISTRY[name].exact_law
