"""The best E[tau] any stateless lossless verifier can reach on a toy pair: an exact LP.

Why: the membership-OT bound (``bounds.block_bound``) only says a lossless verifier cannot accept
a block more often than the target emits it or a draft carries it; it ignores that the extra
token and the next iteration must make up the rest of the law. This LP is the exact optimum of
one iteration under the only constraint losslessness imposes. For every draft set D (K i.i.d.
blocks, probability prod q) the verifier picks a law pi(. | D) over emitted strings e = z y with z
a prefix of some draft in D (|z| <= L) and y any token. A stateless verifier is lossless iff one
iteration followed by target sampling has the target law on V^(L+1):

    sum_D P(D) sum_{e prefix of x} pi(e | D) p(x_{>|e|} | e) = p(x)    for every x in V^(L+1).

(Iterations compose: after e the next iteration restarts from context e.) Maximise
E[tau] = sum_D P(D) sum_e pi(e | D) (|e| - 1). The optimum is monotone in K (a rule may ignore a
draft) and >= every lossless verifier; the LP may read p and q anywhere, so it bounds the
verifiers that see only the drafted prefixes and need not be reachable by them. At K = 1 it
equals block verification's E[tau] (Sun et al., ICLR 2025, Thm 2; Thomas & Pal, arXiv 2602.16961:
BV is optimal even when off-path probabilities are known), which tests/algorithms/test_lp_optimum.py
checks.

The same LP takes any law over draft sets (``optimal_expected_tau_given``), in particular the one
draft set that an engine's deterministic drafter builds (``engine_drafts``: Q's argmax chain, or
its top-k paths), with probability 1. There q reaches the verifier only through D. With one
fixed set, a verifier can draw the target's own sample and accept it as far as it stays in D's
prefix tree, and no lossless one can accept a t-prefix z more often than p(z), so the optimum is
sum_{z node of D's tree, |z| >= 1} p(z); at L = 1 with roots S, p(S). At L = 1 with K i.i.d.
drafts it is Hu et al.'s alpha*(p, q, K) (``bounds.optimal_acceptance``): the extra token after
an accepted draft is free, so only the coupling of the first token is constrained. Both are
checked in tests/algorithms/test_lp_optimum.py on hand-worked laws.

Sizes reached (one 2-core Xeon, HiGHS; python -m algorithms.exact.lp_optimum prints them):
    drafts         V  L  K   draft sets   seconds
    i.i.d.         3  2  2           81      0.02
    i.i.d.         3  2  3          729      0.26
    i.i.d.         3  3  2          729      0.43
    i.i.d.         5  2  2          625      0.39
    i.i.d.         4  2  3         4096     10.1
    i.i.d.         3  2  4         6561     20.8
    i.i.d.         3  3  3        19683    369      (the practical limit: V^(L K) draft sets)
    argmax chain   6  5  1            1      0.49
    top-k paths    6  5  3            1      0.54
    top-k paths   10  4  5            1      0.98   (V^(L+1) = 1e5 target rows)
    top-k paths    4  7  3            1      1.17

A deterministic set costs one set of at most (K L + 1) V variables against V^(L+1) target rows,
so it reaches vocabularies and depths the i.i.d. LP cannot; the referee
(``paper_repro/referee.py``) still uses the small cases, where both are solved.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import coo_matrix

from algorithms.exact.checker import enumerate_drafts, joint
from algorithms.exact.engine_drafts import referee_drafts
from algorithms.exact.models import ToyModel

Block = tuple[int, ...]
DraftSets = Iterable[tuple[tuple[Block, ...], float]]


def optimal_expected_tau(P: ToyModel, Q: ToyModel, *, L: int, K: int) -> float:
    """max E[tau] over stateless lossless verifiers with K i.i.d. drafts of length L (HiGHS)."""
    return optimal_expected_tau_given(P, enumerate_drafts(Q, (), L, K), L=L)


def optimal_expected_tau_for(P: ToyModel, Q: ToyModel, *, L: int, K: int,
                             structure: str = "iid") -> float:
    """The optimum for the draft structure an engine rule sees (``engine_drafts.REFEREE_DRAFTS``):
    K i.i.d. blocks from Q, or the one fixed set Q's argmax chain / top-k paths make."""
    if structure == "iid":
        return optimal_expected_tau(P, Q, L=L, K=K)
    return optimal_expected_tau_given(P, [(referee_drafts(structure, Q, (), L, K), 1.0)], L=L)


def optimal_expected_tau_given(P: ToyModel, draft_sets: DraftSets, *, L: int) -> float:
    """max E[tau] over stateless lossless verifiers that see draft set D with probability P(D).

    ``draft_sets`` lists (drafts, P(D)) with P summing to 1; drafts are blocks of length <= L
    (a deterministic drafter: one set with probability 1). Solved in the variables
    u(D, e) = P(D) pi(e | D) / p(e) rather than pi: every target row then reads
    sum_{(D, e): e prefix of x} u(D, e) = 1 with unit coefficients, and each draft set's row
    sum_e p(e) u(D, e) = P(D) is scaled by its largest p(e). In pi the coefficients are products
    P(D) p(x_{>|e|} | e), down to ~1e-28 on peaked laws, which HiGHS rounds to zero and then
    reports the (feasible) LP infeasible."""
    V = P.V
    targets = list(itertools.product(range(V), repeat=L + 1))
    t_index = {x: i for i, x in enumerate(targets)}
    rows, cols, vals, cost, b_set = [], [], [], [], []
    n_var = 0
    for drafts, prob in draft_sets:
        if any(len(d) > L for d in drafts):
            raise ValueError(f"optimal_expected_tau_given: drafts longer than L={L}: {drafts}")
        prefixes = {x[:t] for x in drafts for t in range(len(x) + 1)}
        set_row = len(targets) + len(b_set)
        # strings the target never emits cannot be emitted by a lossless verifier: no variable
        entries = [(e, pe) for z in sorted(prefixes) for y in range(V)
                   if (pe := joint(P, (), e := z + (y,))) > 0]
        scale = max(pe for _, pe in entries)
        for e, pe in entries:
            cost.append(-pe * (len(e) - 1))
            rows.append(set_row)
            cols.append(n_var)
            vals.append(pe / scale)
            # every x in V^(L+1) that starts with e and that the target can emit
            for rest in itertools.product(range(V), repeat=L + 1 - len(e)):
                if joint(P, e, rest) > 0:
                    rows.append(t_index[e + rest])
                    cols.append(n_var)
                    vals.append(1.0)
            n_var += 1
        b_set.append(prob / scale)
    A = coo_matrix((vals, (rows, cols)), shape=(len(targets) + len(b_set), n_var)).tocsr()
    possible = np.array([joint(P, (), x) > 0 for x in targets] + [True] * len(b_set))
    b = np.concatenate([np.ones(len(targets)), b_set])
    # The target rows sum to the set rows' weighted sum (both are 1): drop one target row, or
    # rounding makes the system inconsistent and presolve reports it infeasible. Rows of strings
    # the target never emits have no variable: drop them too.
    drop = max(i for i in range(len(targets)) if possible[i])
    keep = possible & (np.arange(A.shape[0]) != drop)
    A, b = A[keep], b[keep]
    res = linprog(np.asarray(cost), A_eq=A, b_eq=b, bounds=(0, None), method="highs")
    if res.status != 0:
        raise RuntimeError(f"optimal_expected_tau: LP failed: {res.message}")
    return float(-res.fun)


def sizes(cells=None) -> list[tuple[str, int, int, int, float, float]]:
    """(structure, V, L, K, E[tau], seconds) on random_pair(V, 0): remeasures the docstring's
    table (``python -m algorithms.exact.lp_optimum``; the default leaves out the minute-long
    cells)."""
    from algorithms.exact.models import random_pair

    cells = cells or [("iid", 3, 2, 2), ("iid", 3, 2, 3), ("iid", 3, 3, 2), ("iid", 5, 2, 2),
                      ("iid", 4, 2, 3), ("argmax", 6, 5, 1), ("topk", 6, 5, 3),
                      ("topk", 10, 4, 5), ("topk", 4, 7, 3)]
    out = []
    for structure, V, L, K in cells:
        P, Q = random_pair(V, 0)
        t0 = time.perf_counter()
        value = optimal_expected_tau_for(P, Q, L=L, K=K, structure=structure)
        out.append((structure, V, L, K, value, time.perf_counter() - t0))
    return out


if __name__ == "__main__":
    for structure, V, L, K, value, seconds in sizes():
        print(f"    {structure:6s} V = {V}, L = {L}, K = {K}: E[tau] {value:.4f}, "
              f"{seconds:.2f} s")
