"""Exact-enumeration checker: compose one-iteration exact laws into the law of N tokens.

An exact law is a function ``law(P, Q, ctx, state, *, L, K) -> {(emitted, new_state): prob}``
that enumerates every draft sample and every internal coin with its probability (no sampling).
Losslessness is then decided by total variation against the target's own law over V^N strings,
which is exact up to float64 rounding (~1e-16), so a tolerance of 1e-12 separates "lossless"
from "biased" by many orders of magnitude.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Iterator

import numpy as np

from algorithms.exact.models import Context, ToyModel

Emitted = tuple[int, ...]
ExactLaw = Callable[..., dict[tuple[Emitted, Hashable], float]]


def enumerate_blocks(Q: ToyModel, ctx: Context, L: int) -> Iterator[tuple[Emitted, float]]:
    """Every length-L draft block with positive probability under Q, with that probability."""
    def rec(prefix: Emitted, prob: float):
        if len(prefix) == L:
            yield prefix, prob
            return
        law = Q(ctx + prefix)
        for x in range(Q.V):
            if law[x] > 0:
                yield from rec(prefix + (x,), prob * law[x])
    yield from rec((), 1.0)


def enumerate_drafts(Q: ToyModel, ctx: Context, L: int, K: int
                     ) -> Iterator[tuple[tuple[Emitted, ...], float]]:
    """Every set of K i.i.d. draft blocks, in draft-index order, with its probability."""
    blocks = list(enumerate_blocks(Q, ctx, L))
    for combo in itertools.product(blocks, repeat=K):
        yield tuple(b for b, _ in combo), float(np.prod([pr for _, pr in combo]))


def joint(model: ToyModel, ctx: Context, z: Emitted) -> float:
    """Joint probability of block z after ctx: prod_i model(ctx + z[:i])[z[i]]."""
    prob = 1.0
    for i, x in enumerate(z):
        prob *= model(ctx + z[:i])[x]
    return prob


def accumulate(out: dict, key, prob: float) -> None:
    if prob > 0:
        out[key] = out.get(key, 0.0) + prob


def stateless(one_iteration: Callable[..., dict[Emitted, float]]) -> ExactLaw:
    """Lift a law ``(P, Q, ctx, *, L, K) -> {emitted: prob}`` to the stateful signature."""
    def law(P, Q, ctx, state=(), *, L, K=1):
        return {(e, ()): pr for e, pr in one_iteration(P, Q, ctx, L=L, K=K).items()}
    law.__name__ = getattr(one_iteration, "__name__", "law")
    law.__doc__ = one_iteration.__doc__
    return law


def iteration_law(law: ExactLaw, P, Q, *, L: int, K: int = 1, ctx: Context = (),
                  state: Hashable = ()) -> dict[Emitted, float]:
    """One iteration's law of the emitted string, with the verifier state marginalised out."""
    out: dict[Emitted, float] = {}
    for (emitted, _), pr in law(P, Q, ctx, state, L=L, K=K).items():
        accumulate(out, emitted, pr)
    return out


def multi_iteration_law(law: ExactLaw, P, Q, N: int, *, L: int, K: int = 1,
                        init_state: Hashable = ()) -> dict[Emitted, float]:
    """Exact law of the first N emitted tokens when the verifier runs iteration after iteration."""
    out: dict[Emitted, float] = {}

    def rec(ctx: Context, state, prob: float):
        for (emitted, new_state), pr in law(P, Q, ctx, state, L=L, K=K).items():
            seq = ctx + emitted
            if len(seq) >= N:
                accumulate(out, seq[:N], prob * pr)
            else:
                rec(seq, new_state, prob * pr)

    rec((), init_state, 1.0)
    return out


def target_law(P: ToyModel, N: int, ctx: Context = ()) -> dict[Emitted, float]:
    """Ancestral sampling's law over V^N strings: the reference every lossless verifier meets."""
    return {z: pr for z in itertools.product(range(P.V), repeat=N)
            if (pr := joint(P, ctx, z)) > 0}


def total_variation(a: dict, b: dict) -> float:
    keys = set(a) | set(b)
    return 0.5 * sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in keys)


def lossless_tv(law: ExactLaw, P, Q, *, L: int, K: int = 1, N: int | None = None,
                init_state: Hashable = ()) -> float:
    """TV between the verifier's law of the first N tokens and the target's (N = L + 2 default)."""
    N = L + 2 if N is None else N
    return total_variation(multi_iteration_law(law, P, Q, N, L=L, K=K, init_state=init_state),
                           target_law(P, N))


def expected_tau(one_iteration: dict[Emitted, float]) -> float:
    """Expected accepted draft tokens per iteration: E[len(emitted) - 1]."""
    return sum(pr * (len(e) - 1) for e, pr in one_iteration.items())


def cumulative_emitted(law: ExactLaw, P, Q, iterations: int, *, L: int, K: int = 1,
                       init_state: Hashable = ()) -> float:
    """Expected number of tokens emitted after a fixed number of iterations
    (docs/verifiers/greedy_block.md)."""
    total = 0.0

    def rec(ctx, state, prob, depth):
        nonlocal total
        if depth == iterations:
            total += prob * len(ctx)
            return
        for (emitted, new_state), pr in law(P, Q, ctx, state, L=L, K=K).items():
            rec(ctx + emitted, new_state, prob * pr, depth + 1)

    rec((), init_state, 1.0, 0)
    return total


def single_draft_bound(P: ToyModel, Q: ToyModel, L: int, ctx: Context = ()) -> float:
    """sum_{t<=L} sum_{z in V^t} min(p(z), q(z)): no single-draft verifier's E[tau] exceeds it."""
    total = 0.0
    for t in range(1, L + 1):
        for z in itertools.product(range(P.V), repeat=t):
            total += min(joint(P, ctx, z), joint(Q, ctx, z))
    return total
