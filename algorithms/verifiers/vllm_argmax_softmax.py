"""vLLM's probabilistic rule on argmax drafts reported with their softmax q (biased).

Models the combination vllm-project/vllm#16899 made possible: that PR draws V1 draft tokens by
argmax whatever the request's temperature, while the probabilistic rejection test min(1, p/q)
(``vllm_prob``) is only lossless when the draft was sampled from q. If the draft model's softmax
is handed to it as q, a token that was proposed with probability 1 is accepted as if it had
been proposed with probability q(x) < 1. Modelled from the documented behaviour in #16899 and
#40651; the engine source was not read. #40651 states that V1 in fact treats q as one-hot after
#16899 (accept with probability p(x), residual p with x removed), which is the token rule with a
one-hot q and lossless; this class is the softmax-q variant, not a claim about shipped vLLM.

The kernel is ``vllm_prob``'s; what differs is the draft structure it is refereed on:
``referee_drafts = "argmax"``, one chain x_i = argmax Q(. | x_<i) with q = Q's softmax rows
(``algorithms.exact.engine_rules.vllm_argmax_softmax_law``). Not lossless.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from algorithms.verifiers.registry import register
from algorithms.verifiers.vllm_prob import VllmProbVerifier


@register("vllm_argmax_softmax",
          exact_law="algorithms.exact.engine_rules:vllm_argmax_softmax_law")
@dataclass(frozen=True, kw_only=True)
class VllmArgmaxSoftmaxVerifier(VllmProbVerifier):
    """vLLM's min(1, p/q) rule on argmax drafts with softmax q (vllm#16899 case; biased)."""

    models: ClassVar[str] = "vLLM v1 argmax drafting (vllm-project/vllm#16899) + softmax q"
    referee_drafts: ClassVar[str] = "argmax"
    lossless: ClassVar[bool] = False
