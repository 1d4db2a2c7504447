"""Exact one-iteration laws of serving engines' acceptance rules (docs/verifiers/engine_rules.md).

Each rule is a node rule applied down a draft tree: at a node z (the accepted prefix) with
target law p = P(ctx + z), draft law q = Q(ctx + z) and candidates c_1..c_m (the distinct next
tokens of the drafts that share z, in draft order), it returns the probability that each
candidate is accepted and the unnormalised law of the extra token emitted when none is. The
walk continues below an accepted candidate; after depth L the rule runs with no candidates,
which makes the extra token a bonus from p (argmax p for ``strict``).
The drafts come from ``engine_drafts`` for the rule's ``referee_drafts`` (the argmax chain or
the top-k tree of Q), or are enumerated as one i.i.d. block of Q. Written in float64 from the
rules as the docs page states them, not from the JAX kernels.

Node rules (p, q as above; "off C" means with the candidates' mass removed):

- ``strict``: accept the candidate equal to argmax p; otherwise emit argmax p.
- ``min_ratio``: each candidate with q(c) > 0 is tried in turn against the unchanged p, accepted
  with min(1, p(c)/q(c)); after all fail the extra token is drawn from norm(max(p - q, 0)) (from
  p when no candidate was tried). With one candidate this is the token rule.
- ``rrs``: SpecInfer's recursive rejection sampling with the softmax q: r = p; each candidate
  with q(c) > 0 is accepted with min(1, r(c)/q(c)), on rejection r <- norm(max(r - q, 0)); the
  extra token is drawn from the final r.
- ``naive``: one target draw y ~ p decides the node: the candidate equal to y is accepted, and
  when y is no candidate it is the extra token (SGLang's target-only kernel, llama.cpp's match).
"""

from __future__ import annotations

import numpy as np

from algorithms.exact.checker import accumulate, enumerate_blocks, stateless
from algorithms.exact.engine_drafts import referee_drafts
from algorithms.exact.token import residual

Outcome = tuple[list[float], np.ndarray]  # (acceptance prob of each candidate, extra mass)


def strict_node(p, q, cands) -> Outcome:
    g = int(np.argmax(p))  # ties: the lower id
    extra = np.zeros_like(p) if g in cands else np.eye(len(p))[g]
    return [float(c == g) for c in cands], extra


def min_ratio_node(p, q, cands) -> Outcome:
    reach, accept, tried = 1.0, [], False
    for c in cands:
        a = 0.0 if q[c] <= 0 else min(1.0, p[c] / q[c])
        tried |= q[c] > 0
        accept.append(reach * a)
        reach *= 1.0 - a
    return accept, reach * (residual(p, q) if tried else p)


def rrs_node(p, q, cands) -> Outcome:
    r, reach, accept = p, 1.0, []
    for c in cands:
        if q[c] <= 0:  # never proposed by q: skipped, r unchanged
            accept.append(0.0)
            continue
        a = min(1.0, r[c] / q[c])
        accept.append(reach * a)
        reach *= 1.0 - a
        r = residual(r, q)
    return accept, reach * r


def naive_node(p, q, cands) -> Outcome:
    off = p.copy()
    off[list(cands)] = 0.0
    return [float(p[c]) for c in cands], off


def walk(P, Q, ctx, drafts, node_rule, out: dict, prob: float = 1.0, truncate=None) -> dict:
    """Add the law of one verification of the fixed ``drafts`` (weighted by ``prob``) to
    ``out``. ``truncate(i, z)``: True when the drafts are cut before depth i (no candidates)."""
    L = len(drafts[0])

    def node(z, reach):
        p = P(ctx + z)
        depth = len(z)
        cands = [] if depth == L else list(dict.fromkeys(
            d[depth] for d in drafts if d[:depth] == z))
        if cands and truncate is not None and truncate(depth, z):
            cands = []
        # No candidates (a full path's bonus, or nothing drafted here): each rule's extra law
        # is then p itself, except strict's, which is argmax p.
        accept, extra = node_rule(p, Q(ctx + z), cands)
        for c, a in zip(cands, accept, strict=True):
            if a > 0:
                node(z + (int(c),), reach * a)
        for y in np.flatnonzero(extra > 0):
            accumulate(out, z + (int(y),), reach * extra[y])

    node((), prob)
    return out


def fixed_structure_law(structure: str, node_rule):
    """The law of ``node_rule`` on the drafts ``engine_drafts`` builds from Q."""
    def law(P, Q, ctx, *, L, K=1):
        return walk(P, Q, ctx, referee_drafts(structure, Q, ctx, L, K), node_rule, {})
    return law


def iid_chain_law(node_rule):
    """The law of ``node_rule`` on one i.i.d. block of Q (K = 1), enumerated."""
    def law(P, Q, ctx, *, L, K=1):
        out: dict = {}
        for x, qx in enumerate_blocks(Q, ctx, L):
            walk(P, Q, ctx, (x,), node_rule, out, qx)
        return out
    return law


vllm_strict_law = stateless(fixed_structure_law("argmax", strict_node))
vllm_prob_law = stateless(iid_chain_law(min_ratio_node))
vllm_argmax_softmax_law = stateless(fixed_structure_law("argmax", min_ratio_node))
llamacpp_exact_match_law = stateless(iid_chain_law(naive_node))
sglang_topk_target_only_law = stateless(fixed_structure_law("topk", naive_node))
topk_min_ratio_law = stateless(fixed_structure_law("topk", min_ratio_node))
eagle_topk_rrs_law = stateless(fixed_structure_law("topk", rrs_node))


def dspark_truncation_law(P, Q, ctx, state=(), *, L, K=1, threshold=0.7, confidence="top"):
    """Token rule on one i.i.d. block of Q cut at the first position whose draft confidence is
    below ``threshold``: that position and all after it count as not drafted, so the extra token
    there is drawn from p. ``confidence="top"`` (the rule): max_x q(x | prefix), known before the
    position's token is drawn. ``"drafted"``: q(x_i | prefix) of the drawn token itself, a cut
    that looks at the token it discards (kept to show it is biased; no kernel uses it)."""
    out: dict = {}
    for x, qx in enumerate_blocks(Q, ctx, L):
        rows = [Q(ctx + x[:i]) for i in range(L)]
        conf = [r.max() if confidence == "top" else r[x[i]] for i, r in enumerate(rows)]
        cut = next((i for i in range(L) if conf[i] < threshold), L)
        walk(P, Q, ctx, (x,), min_ratio_node, out, qx, truncate=lambda i, z, cut=cut: i >= cut)
    return {(e, ()): pr for e, pr in out.items()}
