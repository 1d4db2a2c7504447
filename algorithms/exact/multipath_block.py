"""Exact one-iteration law of greedy multi-path block verification.

docs/verifiers/multipath_block.md describes the rule.

Thomas & Pal, "Greedy Multi-Path Block Verification for Faster Decoding in Speculative
Sampling", arXiv 2602.16961, as reconstructed in §6: a per-node total order on tokens induces a
lexicographic order on blocks; the largest of K i.i.d. drafts is selected; its law is
q^Γ(x | z) = [G(z,x)^K - (G(z,x) - q(z,x))^K] / [G(z)^K - (G(z) - q(z))^K],
and block verification (Sun et al., ICLR 2025, Eqs. 4-5) runs on the selected path with q^Γ
in place of q. BV is lossless for any draft law it is told the truth about, so the whole scheme
is lossless with no cross-iteration state.

The per-node order is an option (``ORDERS``; "band" by default, as in the JAX verifier) and the
law depends on it: "band" and "ratio" rank tokens alike at V = 2 and on one-hot q, elsewhere
they may not, and then select other drafts.

The law enumerates the selected path under q^Γ (V^L paths) instead of the V^(K L) draft sets;
``selected_path_law_bruteforce`` enumerates the draft sets to check the closed form.
"""

from __future__ import annotations

import numpy as np

from algorithms.exact.checker import accumulate, enumerate_drafts

ORDERS = ("band", "ratio", "target")


def node_order(p: np.ndarray, q: np.ndarray, order: str) -> np.ndarray:
    """Rank of every token in the node's total order (0 = smallest).

    "band": p >= q (q = 0 included) above p < q, ties by token id.
    "ratio": ascending p/q (q = 0 counts as +inf), ties by token id.
    "target": ascending p, ties by token id.
    """
    if order == "band":
        key = (p >= q).astype(int)
    elif order == "ratio":
        key = np.where(q > 0, p / np.where(q > 0, q, 1.0), np.inf)
    elif order == "target":
        key = p
    else:
        raise ValueError(f"multipath_block: order must be one of {ORDERS}, got {order!r}")
    ranks = np.empty(len(p), dtype=int)
    ranks[np.lexsort((np.arange(len(p)), key))] = np.arange(len(p))
    return ranks


def pow_diff(a: np.ndarray, b: np.ndarray, K: int) -> np.ndarray:
    """(a^K - b^K) / (a - b) = sum_i a^(K-1-i) b^i: a^K - b^K without cancellation."""
    return sum(a ** (K - 1 - i) * b**i for i in range(K))


def q_gamma(p: np.ndarray, q: np.ndarray, below: float, q_z: float, K: int, order: str
            ) -> tuple[np.ndarray, np.ndarray]:
    """q^Γ(. | z) and, per token x, the mass of blocks strictly below the (z, x)-block.

    ``below`` = G(z) - q(z) (mass strictly below z), ``q_z`` = q(z). G(z,x) - q(z,x) = below +
    q_z F_<(x), and the factor q(z) cancels between numerator and denominator.
    """
    ranks = node_order(p, q, order)
    sorted_q = q[np.argsort(ranks)]
    f_below = (np.cumsum(sorted_q) - sorted_q)[ranks]  # F_<(x): q-mass of tokens before x
    b_x = below + q_z * f_below
    a_x = b_x + q_z * q
    law = q * pow_diff(a_x, b_x, K) / pow_diff(below + q_z, below, K)
    return law, b_x


def selected_path_law(P, Q, ctx, L: int, K: int, order: str) -> dict[tuple, float]:
    """Closed-form law of the lexicographically largest of K i.i.d. draft blocks."""
    out: dict = {}

    def rec(z, prob, below, q_z):
        if len(z) == L:
            accumulate(out, z, prob)
            return
        q_node = Q(ctx + z)
        law, b_x = q_gamma(P(ctx + z), q_node, below, q_z, K, order)
        for x in np.flatnonzero(law > 0):
            rec(z + (int(x),), prob * law[x], b_x[x], q_z * q_node[x])

    rec((), 1.0, 0.0, 1.0)
    return out


def selected_path_law_bruteforce(P, Q, ctx, L: int, K: int, order: str) -> dict[tuple, float]:
    """The same law by enumerating every set of K drafts and selecting the largest."""
    out: dict = {}
    for drafts, prob in enumerate_drafts(Q, ctx, L, K):
        def rank_key(block):
            return tuple(node_order(P(ctx + block[:i]), Q(ctx + block[:i]), order)[block[i]]
                         for i in range(L))
        accumulate(out, max(drafts, key=rank_key), prob)
    return out


def multipath_block_law(P, Q, ctx, state=(), *, L, K=1, order="band"):
    """Exact law of one iteration: select the path, then block verification against q^Γ."""
    if order not in ORDERS:
        raise ValueError(f"multipath_block: order must be one of {ORDERS}, got {order!r}")
    out: dict = {}

    def rec(z, prob, below, q_z, w):
        """Walk the selected path; at each depth add the P(tau = |z|) branch (Sun et al. Eq. 4)."""
        p_z = P(ctx + z)
        if len(z) == L:  # h_L = w_L: accept all, bonus from p(. | block)
            for y in np.flatnonzero(p_z > 0):
                accumulate(out, ((z + (int(y),)), ()), prob * w * p_z[y])
            return prob * (1 - w)  # mass that falls back to a shorter tau
        q_node = Q(ctx + z)
        law, b_x = q_gamma(p_z, q_node, below, q_z, K, order)
        res = np.maximum(w * p_z - law, 0.0)
        S = res.sum()
        fallback = 0.0  # P(this path, and no eta_j <= h_j for j > |z|)
        for x in np.flatnonzero(law > 0):
            wx = 1.0 if w * p_z[x] >= law[x] else w * p_z[x] / law[x]
            fallback += rec(z + (int(x),), prob * law[x], b_x[x], q_z * q_node[x], wx)
        # tau = |z| needs eta_|z| <= h_|z| and every later eta above its h (folded in `fallback`).
        den = S + 1 - w
        h = 1.0 if len(z) == 0 or den <= 0 else min(1.0, S / den)
        corr = res / S if S > 0 else p_z
        for y in np.flatnonzero(corr > 0):
            accumulate(out, (z + (int(y),), ()), fallback * h * corr[y])
        return fallback * (1 - h)

    rec((), 1.0, 0.0, 1.0, 1.0)
    return out


__all__ = ["ORDERS", "multipath_block_law", "node_order", "q_gamma", "selected_path_law",
           "selected_path_law_bruteforce"]
