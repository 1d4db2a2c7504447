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
    """max E[tau] over stateless lossless verifiers with K i.i.d. drafts of length L (HiGHS)."""
    V = P.V
    blocks = list(enumerate_blocks(Q, (), L))
    targets = list(itertools.product(range(V), repeat=L + 1))
    t_index = {x: i for i, x in enumerate(targets)}
    rows, cols, vals, cost = [], [], [], []
    n_var = 0
    n_sets = 0
    for combo in itertools.product(blocks, repeat=K):
        prob = float(np.prod([pr for _, pr in combo]))
        prefixes = {x[:t] for x, _ in combo for t in range(L + 1)}
        set_row = len(targets) + n_sets
        for z in sorted(prefixes):
            for y in range(V):
                e = z + (y,)
                cost.append(-prob * (len(e) - 1))
                rows.append(set_row)
                cols.append(n_var)
                vals.append(1.0)
                # every x in V^(L+1) that starts with e, weighted by the target's continuation
                for rest in itertools.product(range(V), repeat=L + 1 - len(e)):
                    cont = joint(P, e, rest)
                    if cont > 0:
                        rows.append(t_index[e + rest])
                        cols.append(n_var)
                        vals.append(prob * cont)
                n_var += 1
        n_sets += 1
    A = coo_matrix((vals, (rows, cols)), shape=(len(targets) + n_sets, n_var)).tocsr()
    b = np.concatenate([[joint(P, (), x) for x in targets], np.ones(n_sets)])
    # The target rows sum to the set rows' weighted sum (both are 1): drop one target row, or
    # rounding makes the system inconsistent and presolve reports it infeasible.
    keep = np.arange(A.shape[0]) != len(targets) - 1
    A, b = A[keep], b[keep]
    res = linprog(np.asarray(cost), A_eq=A, b_eq=b, bounds=(0, None), method="highs")
    if res.status != 0:
        raise RuntimeError(f"optimal_expected_tau: LP failed: {res.message}")
    return float(-res.fun)
