"""Self-speculation: the target's first n layers + final norm + LM head draft for the target.

Draft & Verify (Zhang et al., ACL 2024, arXiv 2309.08168) and LayerSkip (Elhoushi et al., 2024,
arXiv 2404.16710): no second model, the early-exit sub-network shares the target's weights
(``model.early_exit(n)`` from the model contract) and keeps its own n-layer KV cache. Drafting,
q bookkeeping and cache sync are exactly the draft-model drafter's, so this only swaps the module.
"""

from __future__ import annotations

from dataclasses import dataclass

from specjax.drafters.model import ModelDrafter


@dataclass(frozen=True, kw_only=True)
class EarlyExitDrafter(ModelDrafter):
    num_layers: int = 1

    def module(self, target, draft):
        config = getattr(target.model, "config", None) or getattr(target, "config", None)
        total = getattr(target.model, "num_layers", None) or getattr(config, "num_layers", None)
        if not (isinstance(self.num_layers, int) and 1 <= self.num_layers <= (total or 10**9)):
            raise ValueError(f"EarlyExitDrafter: num_layers must be an integer in [1, {total}] "
                             f"(the target's layers), got {self.num_layers}")
        return target.model.early_exit(self.num_layers)
