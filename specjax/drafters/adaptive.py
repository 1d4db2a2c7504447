"""Adaptive draft length: the draft model stops drafting when it is no longer confident.

SpecDec++ (Huang et al., arXiv 2405.19715) stops the draft when a learned head predicts that
the next token would be rejected; EAGLE-2 (Li et al., arXiv 2406.16858, §4) ranks draft tokens
by the draft's own confidence, its probability of the token, as a proxy for acceptance. Here
the rule is EAGLE-2's proxy used as SpecDec++'s stop rule: after drafting x_i, keep drafting
iff the draft model's probability of x_i (its softmax at temperature 1, so the rule also acts
under greedy decoding) is at least ``threshold``; L is the maximum. A stop saves the remaining
draft forwards of the step (the loop is a ``while_loop`` over static shapes); the target still
scores L + 1 positions, which on a CPU costs little more than the drafted ones. (The
``drafter_calls`` counter still adds L per step: an upper bound.) It is the one-path case of
``specjax.drafters.dynamic_tree``, with the last token's confidence instead of the path's.

Why it stays lossless: whether x_{i+1} is drafted depends only on the draft's own laws and
tokens up to x_i, never on p, so it is a stopping time of the drafting process. Positions not
drafted carry an all-zero q row (draft structure STOPPED), which the token verifier reads as
"no draft": the first such position emits a token drawn from p itself, the bonus token of a
block of that length. So each step is token-wise speculative sampling with a draft length the
verifier may take as given (Leviathan et al. 2023, Thm 3.5 holds per position).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from specjax.drafters.dynamic_tree import DynamicTreeDrafter


@dataclass(frozen=True, kw_only=True)
class AdaptiveDrafter(DynamicTreeDrafter):
    cumulative: ClassVar[bool] = False  # the last token's confidence decides, not the path's
    threshold: float = 0.5  # keep drafting while the last token's draft probability >= this

    def __post_init__(self):
        super().__post_init__()
        if self.K != 1:
            raise ValueError(f"drafter.K: the adaptive drafter drafts one block (K=1), got "
                             f"K={self.K}; drafter=dynamic_tree grows K paths")
