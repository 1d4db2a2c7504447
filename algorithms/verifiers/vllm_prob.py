"""vLLM's probabilistic rejection sampler: the token rule min(1, p/q), residual, bonus from p.

Models vLLM's V1 ``RejectionSampler`` random path (``vllm/v1/sample/rejection_sampler.py``,
introduced as "[Speculative decoding 1/9] Optimized rejection sampler", vllm-project/vllm#2336,
which cites Chen et al., arXiv 2302.01318). Modelled from the documented behaviour in #2336 and
#40651 (which describes the acceptance test u < p(x)/q(x) and the recovered-token residual); the
engine source was not read. Accept draft token x_i when q(x_i) > 0 and U < min(1, p_i(x_i) /
q_i(x_i)); at the first rejection emit a token from norm(max(p_i - q_i, 0)); after a full block
a bonus token from p_{L+1}.

It is specjax's ``token`` rule, so the class is ``TokenVerifier`` under vLLM's name (the
referee's row, its claims and its exact law, written separately from ``token_law``, are what
this file adds). Lossless when the draft was sampled from the q it reports (draft structure
"iid"): the referee enumerates one i.i.d. block of Q
(``algorithms.exact.engine_rules.vllm_prob_law``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from algorithms.verifiers.base import DETERMINISTIC, IID
from algorithms.verifiers.registry import register
from algorithms.verifiers.token import TokenVerifier


@register("vllm_prob", exact_law="algorithms.exact.engine_rules:vllm_prob_law")
@dataclass(frozen=True, kw_only=True)
class VllmProbVerifier(TokenVerifier):
    """vLLM's probabilistic rejection sampler (token rule with the reported q)."""

    models: ClassVar[str] = "vLLM v1 RejectionSampler, random path (vllm-project/vllm#2336)"
    referee_drafts: ClassVar[str] = "iid"
    lossless: ClassVar[bool] = True
    max_drafts: ClassVar[int | None] = 1
    draft_structures: ClassVar[frozenset[str]] = frozenset({IID, DETERMINISTIC})
