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
"""

from __future__ import annotations

import itertools

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import coo_matrix

from algorithms.exact.checker import enumerate_blocks, joint
from algorithms.exact.models import ToyModel


def optimal_expected_tau(P: ToyModel, Q: ToyModel, *, L: int, K: int) -> float:
    """max E[tau] over stateless lossless verifiers with K i.i.d. drafts of length L (HiGHS).

    Solved in the variables u(D, e) = P(D) pi(e | D) / p(e) rather than pi: every target row then
    reads sum_{(D, e): e prefix of x} u(D, e) = 1 with unit coefficients, and each draft set's row
    sum_e p(e) u(D, e) = P(D) is scaled by its largest p(e). In pi the coefficients are products
    P(D) p(x_{>|e|} | e), down to ~1e-28 on peaked laws, which HiGHS rounds to zero and then
    reports the (feasible) LP infeasible."""
    V = P.V
    blocks = list(enumerate_blocks(Q, (), L))
    targets = list(itertools.product(range(V), repeat=L + 1))
    t_index = {x: i for i, x in enumerate(targets)}
    rows, cols, vals, cost, b_set = [], [], [], [], []
    n_var = 0
    for combo in itertools.product(blocks, repeat=K):
        prob = float(np.prod([pr for _, pr in combo]))
        prefixes = {x[:t] for x, _ in combo for t in range(L + 1)}
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
