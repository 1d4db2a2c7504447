"""Deterministic draft structures that serving engines build from the draft model's laws.

The engine rules (``docs/verifiers/engine_rules.md``) are checked on the drafts their engines
make, not on i.i.d. draws: each rule's class names one of ``REFEREE_DRAFTS`` as its
``referee_drafts``, and its exact law builds the drafts here from the draft model Q.

- ``"iid"``: K i.i.d. blocks drawn from Q (enumerated by ``checker.enumerate_drafts``).
- ``"argmax"``: one chain, K = 1: the argmax of Q after each prefix (greedy drafting, what vLLM's
  draft model and EAGLE's chain proposer do at temperature 0 on the draft side).
- ``"topk"``: a tree of K paths: the K distinct most likely tokens of Q at the root, each
  continued by Q's argmax after each prefix (EAGLE / DDTree-style static top-k expansion, kept
  to one branching level).

Ties are broken by the lower token id, as ``np.argmax`` and a stable sort on -prob do. A top-k
root may hold tokens Q gives probability 0 (K larger than Q's support): engines take the k
largest entries whatever they are, and so do these builders.
"""

from __future__ import annotations

import numpy as np

from algorithms.exact.models import Context, ToyModel

Block = tuple[int, ...]
REFEREE_DRAFTS = ("iid", "argmax", "topk")


def ranked(law: np.ndarray) -> list[int]:
    """Token ids by decreasing probability, ties by the lower id."""
    return sorted(range(len(law)), key=lambda x: (-float(law[x]), x))


def continue_argmax(Q: ToyModel, ctx: Context, prefix: Block, L: int) -> Block:
    """Extend ``prefix`` to length L with Q's argmax after each prefix."""
    block = tuple(prefix)
    while len(block) < L:
        block += (int(np.argmax(Q(ctx + block))),)  # first maximum: the lower id on ties
    return block


def argmax_chain(Q: ToyModel, ctx: Context, L: int) -> Block:
    """The greedy chain of length L: x_i = argmax Q(. | ctx, x_<i)."""
    return continue_argmax(Q, ctx, (), L)


def topk_paths(Q: ToyModel, ctx: Context, L: int, K: int) -> tuple[Block, ...]:
    """K paths of length L: the K top tokens of Q at the root, each continued by Q's argmax."""
    if not 1 <= K <= Q.V:
        raise ValueError(f"topk_paths: need 1 <= K <= V={Q.V}, got K={K}")
    return tuple(continue_argmax(Q, ctx, (x,), L) for x in ranked(Q(ctx))[:K])


def referee_drafts(structure: str, Q: ToyModel, ctx: Context, L: int, K: int
                   ) -> tuple[Block, ...]:
    """The fixed draft set of a deterministic structure ("argmax": K must be 1; "topk")."""
    if structure == "argmax":
        if K != 1:
            raise ValueError(f"referee_drafts: 'argmax' is one chain (K = 1), got K={K}")
        return (argmax_chain(Q, ctx, L),)
    if structure == "topk":
        return topk_paths(Q, ctx, L, K)
    raise ValueError(f"referee_drafts: {structure!r} is not deterministic; "
                     f"deterministic ones: 'argmax', 'topk'")


def draft_rows(model: ToyModel, ctx: Context, drafts: tuple[Block, ...], extra: bool = False
               ) -> np.ndarray:
    """``model``'s law at every prefix of every draft: [K, L, V] (or [K, L+1, V] with the law
    after the full block when ``extra``): q as the engines report it, or p as the target
    scores it."""
    L = len(drafts[0]) + int(extra)
    return np.stack([np.stack([model(ctx + tuple(d[:i])) for i in range(L)]) for d in drafts])
