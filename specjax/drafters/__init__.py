"""Drafters: who proposes the K×L draft tree and the laws q it was sampled from.

``ModelDrafter`` (a separate small model; ``AdaptiveDrafter``: the same with a draft length
that stops at low draft confidence; ``DynamicTreeDrafter``: K paths, each grown while its
cumulative draft confidence stays above a threshold), ``NgramDrafter`` (prompt lookup, one-hot q;
``HybridDrafter``: lookup where the context has a match, the draft model otherwise),
``EarlyExitDrafter`` (the target's first n layers), ``GreedyDrafter`` (Hu et al.'s greedy
multi-drafting on a draft model), ``EagleDrafter`` / ``MedusaDrafter`` (trained heads on the
target's features, ``specjax-train``; ``trained``: what they share, and loading their weights).
All are frozen dataclasses following ``specjax.drafters.base.Drafter``. ``family``: the trained
draft-family decoders, loaded by name (``family/<target>/dD-lN``) for ``ModelDrafter``.
"""

from specjax.drafters.adaptive import AdaptiveDrafter
from specjax.drafters.base import Drafter
from specjax.drafters.dynamic_tree import DynamicTreeDrafter
from specjax.drafters.eagle import EagleDrafter
from specjax.drafters.early_exit import EarlyExitDrafter
from specjax.drafters.greedy import GreedyDrafter
from specjax.drafters.hybrid import HybridDrafter
from specjax.drafters.medusa import MedusaDrafter
from specjax.drafters.model import ModelDrafter
from specjax.drafters.ngram import NgramDrafter

DRAFTERS = {"model": ModelDrafter, "ngram": NgramDrafter, "early_exit": EarlyExitDrafter,
            "greedy": GreedyDrafter, "eagle": EagleDrafter, "medusa": MedusaDrafter,
            "adaptive": AdaptiveDrafter, "dynamic_tree": DynamicTreeDrafter,
            "hybrid": HybridDrafter}


def get_drafter(name: str, **options) -> Drafter:
    if name not in DRAFTERS:
        raise ValueError(f"drafter: unknown name {name!r}; allowed: {', '.join(DRAFTERS)}")
    return DRAFTERS[name](**options)


__all__ = ["DRAFTERS", "AdaptiveDrafter", "Drafter", "DynamicTreeDrafter", "EagleDrafter",
           "EarlyExitDrafter", "GreedyDrafter", "HybridDrafter", "MedusaDrafter", "ModelDrafter",
           "NgramDrafter", "get_drafter"]
