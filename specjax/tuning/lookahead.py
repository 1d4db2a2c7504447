"""``L=auto``: the draft length chosen by theory from this run's measured acceptance and costs.

Leviathan et al. (arXiv 2211.17192) §3.5 pick the lookahead that maximises the walltime
improvement f(L) = (1 - alpha^(L+1)) / ((1 - alpha)(c L + 1)); ``specjax.theory.optimal_k``
solves it in closed form. This module measures the two inputs on the run's own first prompts,
as the draft-length policies of EAGLE-2 and SpecDec++ do from their own statistics:

- alpha, the per-token acceptance, from a short speculative probe at ``probe_L``: each step
  accepts tau tokens and, when tau < L, rejects one, so under the i.i.d.-acceptance model the
  maximum-likelihood alpha = accepted / (accepted + rejections);
- c, the cost of one draft forward over one target forward, from the time per token of two
  short autoregressive probes (the draft model decoding alone, the target decoding alone).

Why the decode stays exact: L is fixed before the measured run starts, from probe runs whose
tokens are thrown away; every fixed L is lossless, so the run is too. The probes cost three
compiles and ``probe_tokens`` tokens each.
"""

from __future__ import annotations

import dataclasses
import sys

from specjax.theory import optimal_k


def alpha_from(per_prompt: list[dict], L: int) -> float:
    """Maximum-likelihood per-token acceptance from a probe's counters (see the module doc)."""
    accepted = sum(p["accepted"] for p in per_prompt)
    full = sum(p["accepted_per_position"][L - 1] for p in per_prompt)  # steps with tau == L
    rejections = sum(p["target_calls"] for p in per_prompt) - full
    total = accepted + rejections
    return accepted / total if total else 0.0


def lookahead_for(alpha: float, c: float, L_max: int) -> int:
    """The theory's best integer L in [1, L_max] (1 when it says not to speculate at all)."""
    k, _ = optimal_k(min(max(alpha, 0.0), 1.0), max(c, 1e-9), k_max=L_max)
    return max(int(k), 1)


def choose_lookahead(target, draft, drafter, prompts, *, verifier=None, sampling=None,
                     probe_L: int = 4, probe_tokens: int = 32, L_max: int = 12, seed: int = 0,
                     chat: bool = False, **generate_kw) -> tuple[int, dict]:
    """(L, what was measured) for ``drafter`` on the first of ``prompts``."""
    from specjax.api import generate

    if not (isinstance(L_max, int) and L_max >= 1):
        raise ValueError(f"L_max must be an integer >= 1, got {L_max!r}")
    first = prompts[:1]
    kw = dict(sampling=sampling, max_new_tokens=probe_tokens, seed=seed + 1, chat=chat,
              progress=False, **generate_kw)
    probe = dataclasses.replace(drafter, L=probe_L)
    spec = generate(target, first, draft=draft, drafter=probe, verifier=verifier, **kw)
    alpha = alpha_from(spec.per_prompt, probe_L)
    ar_target = generate(target, first, **kw)
    ar_draft = generate(draft, first, **kw) if draft is not None else None
    per_token = lambda r: r.summary["wall_time_s"] / max(r.summary["new_tokens"], 1)  # noqa
    c = per_token(ar_draft) / per_token(ar_target) if ar_draft is not None else 0.0
    L = lookahead_for(alpha, c, L_max)
    info = dict(L=L, alpha=alpha, c=c, probe_L=probe_L, probe_tokens=probe_tokens,
                L_max=L_max)
    print(f"specjax: L=auto -> L={L} (measured alpha {alpha:.3f}, draft/target cost ratio "
          f"c {c:.3f}, from a {probe_tokens}-token probe at L={probe_L})", file=sys.stderr,
          flush=True)
    return L, info
