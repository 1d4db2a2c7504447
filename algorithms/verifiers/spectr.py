"""SpecTr: K-SEQ draft selection at every node of K i.i.d. draft sequences.

Sun, Suresh, Ro, Beirami, Jain, Yu, "SpecTr: Fast Speculative Decoding via Optimal Transport",
NeurIPS 2023 (arXiv 2310.15141): the K-SEQ selection and its multi-draft sequence version,
restated in docs/verifiers/spectr.md (the paper writes p for the draft and q for the target;
here p is the target and q the draft).

K-SEQ at a node with target p, draft q and k surviving drafts x_1..x_k ~ q i.i.d.:
accept x_i with probability min(1, p(x_i) / (rho q(x_i))), output the first accepted; if none,
sample the residual
    p_res(x) ∝ p(x) - min(q(x), p(x)/rho) * P_acc / beta,
with beta(rho) = sum_x min(q(x), p(x)/rho) and P_acc = 1 - (1 - beta)^k. The output is exactly
p-distributed whenever P_acc <= rho beta (p_res >= 0). f(rho) = P_acc - rho beta is
non-increasing on [1, k] with f(1) >= 0 >= f(k); acceptance falls with rho, so the best valid
rho is the root rho*. Any valid rho keeps the output exact; rho* only maximises acceptance. The
search (``kseq_rho``) is a bracketed Newton iteration, one pass over the vocabulary per step,
always keeping the upper end (f(hi) <= 0), so the rho used is valid even when it stops early.
k = 1 gives rho = 1, standard speculative sampling.

Tree walk: at depth t the survivors are the drafts whose first t tokens equal the emitted
prefix; K-SEQ runs with k = #survivors and that node's p and q. If its output Y (accepted or
residual) equals some survivor's depth-t token, Y is appended and the survivors become those
drafts; otherwise Y is the correction and the iteration stops. With survivors at depth L a bonus
token is drawn from p(.|prefix). Continuing after a residual sample that matches a draft is
valid because the matching survivors' continuations are still i.i.d. q given the prefix.

Drafts that are not i.i.d. (prompt lookup: K distinct fixed blocks, one-hot q per draft). K-SEQ
needs the k survivors to be exchangeable draws from one law; on lookup drafts it emitted
(0.294, 0.706) where p = (0.5, 0.5). So a node runs K-SEQ only when every survivor carries the
same q row (true for i.i.d. drafts sharing a prefix, and for duplicated lookup drafts: k copies
of one token are k i.i.d. draws from its one-hot law). Otherwise it runs per-draft recursive
rejection (SpecInfer, Miao et al. 2024 §4; docs/verifiers/specinfer.md) with each survivor's own
q row, which is lossless whenever each candidate's q is its law given the earlier ones. Either rule
emits exactly p(.|prefix) at the node, so the walk below stays lossless.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Float, Int

from algorithms.verifiers.base import (
    DETERMINISTIC,
    IID,
    Verdict,
    emit,
    residual,
    safe_ratio,
    sample,
    validate_inputs,
)
from algorithms.verifiers.registry import register


def kseq_acceptance(p: Float[Array, " V"], q: Float[Array, " V"], rho, k):
    """(beta(rho), P_acc(rho)) of K-SEQ; P_acc = 1 - (1 - beta)^k as -expm1(k log1p(-beta)),
    which keeps its relative precision when beta is tiny (the naive form rounds to 0)."""
    beta = jnp.minimum(q, p / rho).sum()
    return beta, -jnp.expm1(k * jnp.log1p(-jnp.minimum(beta, 1.0)))


def kseq_gap_slope(p: Float[Array, " V"], q: Float[Array, " V"], rho, k):
    """f(rho) = P_acc - rho beta and its slope, from one pass over the vocabulary.

    Tokens with q <= p/rho add q to beta (mass ``capped``), the rest p/rho, so on each piece
    between the breakpoints rho = p(x)/q(x): beta' = -(beta - capped)/rho and
    f' = -capped - k (1 - beta)^(k-1) (beta - capped)/rho < 0. The slope is exact on the piece,
    so a Newton step lands on the root whenever no breakpoint lies in between.
    """
    beta = jnp.minimum(q, p / rho).sum()
    capped = jnp.where(q <= p / rho, q, 0.0).sum()
    log_miss = jnp.log1p(-jnp.minimum(beta, 1.0))
    gap = -jnp.expm1(k * log_miss) - rho * beta
    return gap, -capped - k * jnp.exp((k - 1) * log_miss) * (beta - capped) / rho


def kseq_rho(p: Float[Array, " V"], q: Float[Array, " V"], k, max_passes: int) -> Array:
    """rho* by at most ``max_passes`` bracketed Newton steps on [1, k]; the valid upper end.

    Why not bisection: 40 halvings cost 40 passes over V = 151,936 at every node with two or
    more survivors. Newton from rho = 1 needs ~5 on random laws and <= 13 on peaked ones. A step
    that leaves the bracket is replaced by its midpoint (so the bracket still shrinks), and a
    step from the invalid side overshoots by 1/8 so that the next point is usually valid. The
    search stops at a valid rho a few ulps from the root (or, where f is flat, with a gap within
    2 ulps of 0: computed f is only that accurate, and any valid rho is exact). In float32 at
    V = 151,936 it loses < 1e-6 of acceptance against rho*, as 40 halvings did
    (tests/algorithms/test_spectr.py).
    """
    dtype = p.dtype
    k = jnp.asarray(k, dtype)
    eps = jnp.finfo(dtype).eps

    def step(carry):
        i, lo, hi, rho, _ = carry
        gap, slope = kseq_gap_slope(p, q, rho, k)
        valid = gap <= 0
        lo, hi = jnp.where(valid, lo, rho), jnp.where(valid, rho, hi)
        # Done at a valid rho whose Newton step is < 4 ulps, or whose gap is within 2 ulps of 0
        # (where f is flat), or when the bracket is 4 ulps wide.
        near = (-gap <= -4 * eps * rho * slope) | (gap >= -2 * eps)
        done = (valid & near) | (hi - lo <= 4 * eps * hi)
        newton = -gap / jnp.where(slope < 0, slope, -1.0)
        nxt = rho + jnp.where(valid, newton, 1.125 * newton + 4 * eps * rho)
        nxt = jnp.where((nxt > lo) & (nxt < hi), nxt, 0.5 * (lo + hi))
        return i + 1, lo, hi, nxt, done

    one = jnp.ones((), dtype)
    init = (jnp.int32(0), one, k, one, jnp.bool_(False))
    _, _, hi, _, _ = lax.while_loop(lambda c: (c[0] < max_passes) & ~c[4], step, init)
    return hi


@register("spectr", exact_law="algorithms.exact.spectr:spectr_law")
@dataclass(frozen=True, kw_only=True)
class SpecTrVerifier:
    bisection_steps: int = 40
    lossless: ClassVar[bool] = True
    max_drafts: ClassVar[int | None] = None
    draft_structures: ClassVar[frozenset[str]] = frozenset({IID, DETERMINISTIC})

    def __post_init__(self):
        if not isinstance(self.bisection_steps, int) or self.bisection_steps < 1:
            raise ValueError(
                "SpecTrVerifier: bisection_steps must be an integer >= 1, "
                f"got {self.bisection_steps!r}"
            )

    def init_state(self, L: int, V: int):
        return ()

    def rho(self, p: Float[Array, " V"], q: Float[Array, " V"], k) -> Array:
        # bisection_steps caps the search passes (the name predates the Newton search).
        # One survivor (the common case below the root at large V) needs no search: rho* = 1.
        return lax.cond(k > 1, lambda: kseq_rho(p, q, k, self.bisection_steps),
                        lambda: jnp.ones((), p.dtype))

    def kseq_node(self, key, p, q, tokens, q_tokens, live, u) -> Int[Array, ""]:
        """K-SEQ over the live drafts' tokens: the output token Y.

        ``q_tokens[k]`` is draft k's own q at its token; for i.i.d. drafts it equals
        ``q[tokens[k]]``, and reading it per draft keeps a draft whose token the shared q
        cannot produce (an input outside the contract) from being accepted by the 0/0 rule.
        """
        k = live.sum()
        rho = self.rho(p, q, k)
        beta, p_acc = kseq_acceptance(p, q, rho, k)
        accept = live & (u < safe_ratio(p[tokens], rho * q_tokens))  # strict: u can be 0

        def from_residual():
            scale = jnp.where(beta > 0, p_acc / jnp.where(beta > 0, beta, 1.0), 0.0)
            res = jnp.maximum(p - jnp.minimum(q, p / rho) * scale, 0.0)
            res = jnp.where(res.sum() > 0, res, p)  # no mass: only on a probability-0 branch
            return sample(key, res)

        # cond, not where: unbatched, the vocabulary-wide residual draw runs only when needed.
        return lax.cond(accept.any(), lambda: tokens[jnp.argmax(accept)].astype(jnp.int32),
                        from_residual)

    def rrs_node(self, key, p, laws, tokens, live, u) -> Int[Array, ""]:
        """Per-draft recursive rejection (SpecInfer) for survivors with different q rows."""

        def trial(carry, k):
            r, winner = carry
            trying = live[k] & (winner < 0)
            accept = u[k] < safe_ratio(r[tokens[k]], laws[k, tokens[k]])  # strict, as K-SEQ
            winner = jnp.where(trying & accept, k, winner).astype(jnp.int32)
            r = jnp.where(trying & ~accept, residual(r, laws[k], fallback=r), r)
            return (r, winner), None

        (r, winner), _ = lax.scan(trial, (p, jnp.int32(-1)), jnp.arange(tokens.shape[0]))
        return lax.cond(winner >= 0, lambda: tokens[jnp.maximum(winner, 0)].astype(jnp.int32),
                        lambda: sample(key, r))

    def node(self, key, p, laws, lead, tokens, live, u) -> Int[Array, ""]:
        """K-SEQ when every survivor has the lead's q row (exchangeable draws), else RRS."""
        shared = (~live | (laws == laws[lead][None, :]).all(-1)).all()
        q_tokens = laws[jnp.arange(tokens.shape[0]), tokens]
        return lax.cond(shared,
                        lambda: self.kseq_node(key, p, laws[lead], tokens, q_tokens, live, u),
                        lambda: self.rrs_node(key, p, laws, tokens, live, u))

    def __call__(
        self,
        key: Array,
        drafts: Int[Array, "K L"],
        q: Float[Array, "K L V"],
        p: Float[Array, "K L+1 V"],
        state=(),
    ) -> tuple[Verdict, tuple]:
        K, L, _ = validate_inputs(self, drafts, q, p)
        k_coin, k_res, k_bonus = jax.random.split(key, 3)
        u = jax.random.uniform(k_coin, (L, K))
        res_keys = jax.random.split(k_res, L)

        def depth(carry, t):
            alive, stopped, tau, lead, extra = carry
            x = drafts[:, t]
            active = ~stopped
            y = lax.cond(active, lambda: self.node(res_keys[t], p[lead, t], q[:, t], lead, x,
                                                   alive, u[t]), lambda: jnp.int32(0))
            matches = alive & (x == y)
            go_on = active & matches.any()
            alive = jnp.where(go_on, matches, alive)
            lead = jnp.where(go_on, jnp.argmax(matches).astype(jnp.int32), lead)
            tau = jnp.where(go_on, t + 1, tau).astype(jnp.int32)
            stop_here = active & ~go_on
            extra = jnp.where(stop_here, y, extra)
            return (alive, stopped | stop_here, tau, lead, extra), None

        init = (jnp.ones(K, bool), jnp.bool_(False), jnp.int32(0), jnp.int32(0), jnp.int32(0))
        (_, stopped, tau, lead, extra), _ = lax.scan(depth, init, jnp.arange(L))
        # cond, not where: the bonus draw over the vocabulary runs only after a full block (most
        # calls stop earlier); unconditional, XLA also ran it beside the sampling transform.
        extra = lax.cond(stopped, lambda: extra, lambda: sample(k_bonus, p[lead, L]))
        return emit(drafts[lead], tau, extra, lead), state
