"""SpecTr: K-SEQ draft selection at every node of K i.i.d. draft sequences.

Sun, Suresh, Ro, Beirami, Jain, Yu, "SpecTr: Fast Speculative Decoding via Optimal Transport",
NeurIPS 2023 (arXiv 2310.15141): the K-SEQ selection and its multi-draft sequence version,
restated in ALGORITHMS.md §3.1-3.2 (the paper writes p for the draft and q for the target;
here p is the target and q the draft).

K-SEQ at a node with target p, draft q and k surviving drafts x_1..x_k ~ q i.i.d. (§3.1):
accept x_i with probability min(1, p(x_i) / (rho q(x_i))), output the first accepted; if none,
sample the residual
    p_res(x) ∝ p(x) - min(q(x), p(x)/rho) * P_acc / beta,
with beta(rho) = sum_x min(q(x), p(x)/rho) and P_acc = 1 - (1 - beta)^k. The output is exactly
p-distributed whenever P_acc <= rho beta (p_res >= 0). f(rho) = P_acc - rho beta is
non-increasing on [1, k] with f(1) >= 0 >= f(k); acceptance falls with rho, so the best valid
rho is the root rho*. We bisect with a fixed number of steps, always keeping the upper end
(f(hi) <= 0), so the rho used is valid even when the search stops early. k = 1 gives rho = 1,
standard speculative sampling.

Tree walk (§3.2): at depth t the survivors are the drafts whose first t tokens equal the emitted
prefix; K-SEQ runs with k = #survivors and that node's p and q. If its output Y (accepted or
residual) equals some survivor's depth-t token, Y is appended and the survivors become those
drafts; otherwise Y is the correction and the iteration stops. With survivors at depth L a bonus
token is drawn from p(.|prefix). Continuing after a residual sample that matches a draft is
valid because the matching survivors' continuations are still i.i.d. q given the prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Float, Int

from algorithms.verifiers.base import Verdict, emit, safe_ratio, sample, validate_inputs


def kseq_acceptance(p: Float[Array, " V"], q: Float[Array, " V"], rho, k):
    """(beta(rho), P_acc(rho)) of §3.1."""
    beta = jnp.minimum(q, p / rho).sum()
    return beta, 1.0 - jnp.maximum(1.0 - beta, 0.0) ** k


def kseq_rho(p: Float[Array, " V"], q: Float[Array, " V"], k, steps: int) -> Array:
    """rho* by ``steps`` bisection steps on [1, k], returning the valid upper end."""
    k = jnp.asarray(k, p.dtype)

    def step(_, bracket):
        lo, hi = bracket
        mid = 0.5 * (lo + hi)
        beta, p_acc = kseq_acceptance(p, q, mid, k)
        valid = p_acc - mid * beta <= 0.0
        return jnp.where(valid, lo, mid), jnp.where(valid, mid, hi)

    _, hi = lax.fori_loop(0, steps, step, (jnp.ones((), p.dtype), k))
    return hi


@dataclass(frozen=True, kw_only=True)
class SpecTrVerifier:
    bisection_steps: int = 40
    lossless: bool = True
    max_drafts: int | None = None

    def __post_init__(self):
        if not isinstance(self.bisection_steps, int) or self.bisection_steps < 1:
            raise ValueError(
                "SpecTrVerifier: bisection_steps must be an integer >= 1, "
                f"got {self.bisection_steps!r}"
            )

    def init_state(self, L: int, V: int):
        return ()

    def rho(self, p: Float[Array, " V"], q: Float[Array, " V"], k) -> Array:
        # One survivor (the common case below the root at large V) needs no search: rho* = 1.
        return lax.cond(k > 1, lambda: kseq_rho(p, q, k, self.bisection_steps),
                        lambda: jnp.ones((), p.dtype))

    def kseq_node(self, key, p, q, tokens, q_tokens, live, u) -> Int[Array, ""]:
        """K-SEQ (§3.1) over the live drafts' tokens: the output token Y.

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
        return lax.cond(accept.any(), lambda: tokens[jnp.argmax(accept)], from_residual)

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
            q_x = q[jnp.arange(K), t, x]
            active = ~stopped
            y = lax.cond(active, lambda: self.kseq_node(res_keys[t], p[lead, t], q[lead, t], x,
                                                        q_x, alive, u[t]), lambda: jnp.int32(0))
            matches = alive & (x == y)
            go_on = active & matches.any()
            alive = jnp.where(go_on, matches, alive)
            lead = jnp.where(go_on, jnp.argmax(matches).astype(jnp.int32), lead)
            tau = jnp.where(go_on, t + 1, tau)
            stop_here = active & ~go_on
            extra = jnp.where(stop_here, y, extra)
            return (alive, stopped | stop_here, tau, lead, extra), None

        init = (jnp.ones(K, bool), jnp.bool_(False), jnp.int32(0), jnp.int32(0), jnp.int32(0))
        (_, stopped, tau, lead, extra), _ = lax.scan(depth, init, jnp.arange(L))
        extra = jnp.where(stopped, extra, sample(k_bonus, p[lead, L]))
        return emit(drafts[lead], tau, extra, lead), state
