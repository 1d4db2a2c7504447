"""Exact one-iteration law of greedy block verification with the cross-iteration fix-up.

Greedy variant of Sun et al., ICLR 2025 (arXiv 2403.10444), Sec. 4 = SpecTr-GBV (arXiv
2604.25925) with K = 1; fix-up as reconstructed in docs/verifiers/greedy_block.md. Written
from the joint probabilities there, not from the JAX kernel's ratio form:

    h_i = [a(X_<=i) - sum_x a(X_<=i, x)] / [Q_i - sum_x a(X_<=i, x)],  h_L = a(X_<=L) / Q_L,

with a(z) = min(T(z), Q(z)) under the effective target T, P(tau = i | draft) = h_i prod_{j>i}
(1 - h_j), the correction ∝ max(T_tau T(. | X_<=tau) - Q_tau q(. | X_<=tau), 0) and the bonus
T(. | X_<=L).

State: a tuple of (remaining, omega) pairs, oldest first. ``remaining`` counts the positions from
the start of the next iteration that the modification still covers. After emitting v with a
correction and |v| < L, (L - |v|, Q(v) / T(v)) is pushed.
"""

from __future__ import annotations

import math

import numpy as np

from algorithms.exact.block import tau_law
from algorithms.exact.checker import accumulate, enumerate_blocks
from algorithms.exact.token import add_extra

Mods = tuple[tuple[int, float], ...]


class FixedTarget:
    """Effective targets and fix-up weights along the prefixes of one iteration, memoised.

    Modification k applies at position j (a prefix z with |z| = j) when remaining_k > j:
    T <- norm(max(T - omega_k q, 0)), oldest first; after token x, omega_k <- omega_k q(x) /
    T_before(x). Where omega_k is infinite or the cut leaves no mass (only on branches of target
    probability 0, docs/verifiers/greedy_block.md) the modification is skipped.
    """

    def __init__(self, P, Q, ctx, mods: Mods):
        self.P, self.Q, self.ctx, self.mods = P, Q, ctx, mods
        self._rows: dict = {}
        self._nodes: dict = {(): ([w for _, w in mods], 1.0, 1.0)}

    def row(self, z: tuple[int, ...]) -> tuple[np.ndarray, list[np.ndarray]]:
        """T(. | z) and, per modification, the target just before it was applied."""
        if z not in self._rows:
            omegas = self.node(z)[0]
            t = self.P(self.ctx + z)
            live = [r > len(z) and math.isfinite(w) for (r, _), w in zip(self.mods, omegas,
                                                                          strict=True)]
            q = self.Q(self.ctx + z) if any(live) else None
            before = []
            for k, on in enumerate(live):
                before.append(t)
                if on:
                    cut = np.maximum(t - omegas[k] * q, 0.0)
                    if cut.sum() > 0:
                        t = cut / cut.sum()
            self._rows[z] = (t, before)
        return self._rows[z]

    def node(self, z: tuple[int, ...]) -> tuple[list[float], float, float]:
        """(weights after following z, T(z), Q(z)) with joints relative to the iteration start."""
        if z not in self._nodes:
            head, x = z[:-1], z[-1]
            omegas, t_joint, q_joint = self.node(head)
            t, before = self.row(head)
            q_x = self.Q(self.ctx + head)[x]
            follow = []
            for (r, _), w, b in zip(self.mods, omegas, before, strict=True):
                if r > len(head):
                    w = w * q_x / b[x] if b[x] > 0 else math.inf
                follow.append(w)
            self._nodes[z] = (follow, t_joint * t[x], q_joint * q_x)
        return self._nodes[z]

    def next_state(self, emitted: tuple[int, ...], L: int) -> Mods:
        """Age the live weights past the committed string; push the new correction's weight."""
        n = len(emitted)
        omegas, t_joint, q_joint = self.node(emitted)
        out = [(r - n, w) for (r, _), w in zip(self.mods, omegas, strict=True) if r - n > 0]
        if n < L:  # a correction at tau = n - 1 with tau + 1 < L
            out.append((L - n, q_joint / t_joint))
        return tuple(out)


def greedy_block_law(P, Q, ctx, state: Mods = (), *, L, K=1, fixup=True):
    """{(emitted, new_state): prob} for one GBV iteration after ctx from ``state``."""
    if K != 1:
        raise ValueError(f"greedy_block_law: K must be 1 (single-draft verifier), got {K}")
    mods = tuple(state) if fixup else ()
    fixed = FixedTarget(P, Q, ctx, mods)
    emitted_law: dict = {}
    for x, q_block in enumerate_blocks(Q, ctx, L):
        targets = [fixed.row(x[:j])[0] for j in range(L + 1)]
        drafts = [Q(ctx + x[:j]) for j in range(L)]
        t_joint = [fixed.node(x[:i])[1] for i in range(L + 1)]
        q_joint = [fixed.node(x[:i])[2] for i in range(L + 1)]
        h = [0.0]
        for i in range(1, L):
            a_next = np.minimum(t_joint[i] * targets[i], q_joint[i] * drafts[i]).sum()
            num = min(t_joint[i], q_joint[i]) - a_next
            den = q_joint[i] - a_next
            h.append(1.0 if den <= 0 else min(max(num / den, 0.0), 1.0))
        h.append(min(t_joint[L], q_joint[L]) / q_joint[L])
        for tau, pr in enumerate(tau_law(h)):
            if pr <= 0:
                continue
            if tau == L:
                law = targets[L]
            else:
                law = np.maximum(t_joint[tau] * targets[tau] - q_joint[tau] * drafts[tau], 0.0)
                law = law / law.sum() if law.sum() > 0 else targets[tau]
            add_extra(emitted_law, x[:tau], q_block * pr, law)
    if not fixup:
        return {(e, state): pr for e, pr in emitted_law.items()}
    out: dict = {}
    for e, pr in emitted_law.items():
        accumulate(out, (e, fixed.next_state(e, L)), pr)
    return out
