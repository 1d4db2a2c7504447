"""The Hydra config tree that ``specjax-run`` composes, with the ``verifier=`` group filled from
the verifier registry.

The YAML files live in ``configs/`` (package data of ``experiments``: ``experiments/configs``
links there and a wheel holds the files). The ``verifier`` group has no YAML files: each
registered verifier (``algorithms.verifiers.register``) becomes an option of it in Hydra's
ConfigStore, with its class as ``_target_`` and its constructor fields at their defaults, so a
new verifier file is a ``verifier=<name>`` option with no config written by hand.
"""

from __future__ import annotations

from pathlib import Path

from hydra.core.config_store import ConfigStore

#: Absolute, so ``python -m`` and the console script resolve it alike.
CONFIG_DIR = Path(__file__).resolve().parent / "configs"
#: Groups filled from a registry rather than from YAML files.
REGISTRY_GROUPS = ("verifier",)


def register_verifier_configs() -> None:
    """Put every registered verifier into Hydra's ConfigStore as ``verifier/<name>``."""
    from algorithms.verifiers import list_verifiers, verifier_options, verifier_target

    store = ConfigStore.instance()
    for name in list_verifiers():
        node = {"_target_": verifier_target(name), **verifier_options(name)}
        store.store(group="verifier", name=name, node=node,
                    provider="algorithms.verifiers.registry")


def config_dir() -> Path:
    """The config tree's directory, ready to compose: the registry's groups are stored first.

    Everything that composes ``specjax-run``'s config (the app, ``paper_repro``, tests) goes
    through here, so all of them see the same options."""
    register_verifier_configs()
    return CONFIG_DIR


def group_options(group: str) -> list[str]:
    """The values ``group=...`` accepts: the group's YAML files, or its registry's names."""
    if group == "verifier":
        from algorithms.verifiers import list_verifiers

        return list_verifiers()
    return sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml"))


__all__ = ["CONFIG_DIR", "config_dir", "group_options", "register_verifier_configs"]
