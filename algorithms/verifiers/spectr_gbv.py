"""SpecTr-GBV Algorithm 1 as released: multi-draft greedy block verification, no fix-up.

Lin, Sheng, Cai, Zhou, "SpecTr-GBV: Multi-Draft Block Verification Accelerating Speculative
Decoding", arXiv 2604.25925, Algorithm 1, Eq. 2 (sub-block acceptance) and Eq. 4 (residual), in
the form of the official code (docs/verifiers/spectr_gbv.md; notation p = target, q = draft). Ported
so the paper's experiments can be reproduced; it is NOT distribution-preserving (this repo's exact
checker: first-token bias for K >= 2, multi-token bias at K = 1 without greedy_block's fix-up).

With joint probabilities along a block z, r(z) = min(1, q(z)/p(z)), A(z) = p(z)[1 - (1-r(z))^K]
and C(z) = 1 - (1 - q(z))^K:
    h(y) = [A(y) - sum_x A(y,x)] / [C(y) - sum_x A(y,x)]    for |y| < L      (Eq. 2, code form)
    h(y) = A(y) / C(y)                                        for |y| = L
and a test passes when U < h (clipping is implicit: h > 1 always passes, h < 0 never).

Control flow: drafts are scanned in order. For draft k the sub-blocks y = X^(k)_<=t, t = tau+1
.. L-1, are tested unless y is in H (the set of rejected sub-blocks); a pass sets tau = t and
acc = y (h uses draft k's own joints, so acc may switch drafts), a failure adds y to H. Then the
full block is tested ignoring H; a pass sets tau = L and ends the draft loop (a rejected full
block is not added to H). The extra token is a bonus from p(.|acc) when tau = L, else a
correction from Eq. 4 at y = acc:
    "released": p(y,x) [1 - r(y,x)^K]   (the power on the min, as coded)
    "deficit":  p(y,x) [1 - r(y,x)]^K = p(y,x) - A(y,x)
falling back to p(.|acc) when that residual has no mass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from algorithms.verifiers.base import (
    IID,
    Verdict,
    emit,
    residual,
    safe_ratio,
    sample,
    validate_inputs,
)
from algorithms.verifiers.registry import register

RESIDUALS = ("released", "deficit")


def one_minus_pow(x: Float[Array, "..."], K: int) -> Float[Array, "..."]:
    """1 - (1 - x)^K without cancellation for small x."""
    return -jnp.expm1(K * jnp.log1p(-jnp.minimum(x, 1.0)))


def one_minus_pow_over_x(log_x: Float[Array, "..."], K: int) -> Float[Array, "..."]:
    """[1 - (1 - x)^K] / x from log x; K in the limit x -> 0 (also once exp(log x) underflows)."""
    x = jnp.exp(jnp.minimum(log_x, 0.0))
    return jnp.where(x > 0, one_minus_pow(x, K) / jnp.where(x > 0, x, 1.0), float(K))


def safe_log(x: Float[Array, "..."]) -> Float[Array, "..."]:
    return jnp.where(x > 0, jnp.log(jnp.where(x > 0, x, 1.0)), -jnp.inf)


def acceptance(drafts: Int[Array, "K L"], q: Float[Array, "K L V"], p: Float[Array, "K L+1 V"]
               ) -> tuple[Float[Array, "K L"], Float[Array, "K L+1"], Float[Array, "K L+1"]]:
    """h(X^(k)_<=t) for every draft k and t = 1..L (Eq. 2), plus the log joints log p(X_<=t),
    log q(X_<=t).

    Joints are sums of logs, and every quantity in h is divided by s(z) = max(p(z), q(z)) before
    it is formed: A(z)/s, C(z)/s and sum_x A(z,x)/s stay O(1) however small the joints are (a
    cumprod underflows at L = 12 once the geometric-mean token probability is below ~7e-4 in
    float32, giving h = 1, then 0/0). Every division is guarded: a zero denominator gives h = 1,
    the convention the released code uses for an exhausted sub-block.
    """
    K, L = drafts.shape
    p_x = jnp.take_along_axis(p[:, :L], drafts[..., None], -1)[..., 0]  # p(X_t | X_<t)
    q_x = jnp.take_along_axis(q, drafts[..., None], -1)[..., 0]
    zeros = jnp.zeros((K, 1), p.dtype)
    log_p = jnp.concatenate([zeros, jnp.cumsum(safe_log(p_x), axis=1)], axis=1)  # [K, L+1]
    log_q = jnp.concatenate([zeros, jnp.cumsum(safe_log(q_x), axis=1)], axis=1)
    lp, lq = log_p[:, 1:], log_q[:, 1:]  # t = 1..L
    m = jnp.maximum(lp, lq)
    m = jnp.where(jnp.isfinite(m), m, 0.0)  # both joints 0: a probability-0 block
    a, b = jnp.exp(lp - m), jnp.exp(lq - m)  # p(z)/s, q(z)/s in [0, 1], one of them 1

    def accepted_mass(pz, qz):  # A(z)/s for scaled joints: p(z) [1 - (1 - min(1, q/p))^K]
        return pz * one_minus_pow(jnp.where(qz >= pz, 1.0, qz / jnp.where(pz > 0, pz, 1.0)), K)

    own = accepted_mass(a, b)
    cover = b * one_minus_pow_over_x(lq, K)  # C(z)/s = (q(z)/s) [1 - (1 - q(z))^K] / q(z)
    # sum_x A(X_<=t, x)/s for t = 1..L-1 (the children of each tested sub-block). This is the
    # K x (L-1) x V part of the cost, so the power is K multiplications (integer_pow), not
    # expm1/log1p: each term's absolute error stays ~eps p(z,x), the rounding the sum has anyway.
    pc, qc = a[:, :L - 1, None] * p[:, 1:L], b[:, :L - 1, None] * q[:, 1:]
    r_child = jnp.where(qc >= pc, 1.0, qc / jnp.where(pc > 0, pc, 1.0))
    # Summed as a product with ones: XLA:CPU's last-axis reduce took 27-33 ms here at K = 4,
    # L = 8, V = 151,936 (5.5 % of the 1.5B's tree pass), the matvec 2.4 ms.
    children = (pc * (1.0 - (1.0 - r_child) ** K)) @ jnp.ones((p.shape[-1],), p.dtype)
    num = own[:, :L - 1] - children
    den = cover[:, :L - 1] - children
    h_sub = jnp.where(den != 0, num / jnp.where(den != 0, den, 1.0), 1.0)
    c_last = cover[:, L - 1:]
    h_full = jnp.where(c_last > 0, own[:, L - 1:] / jnp.where(c_last > 0, c_last, 1.0), 1.0)
    return jnp.concatenate([h_sub, h_full], axis=1), log_p, log_q


@register("spectr_gbv", exact_law="algorithms.exact.spectr_gbv:spectr_gbv_law")
@dataclass(frozen=True, kw_only=True)
class SpecTrGBVVerifier:
    residual: str = "released"
    # Measured by tests/algorithms/test_spectr_gbv.py, not the paper's claim. Lookup drafts are
    # refused: the paper's Eq. 2 is derived for K i.i.d. drafts only.
    lossless: ClassVar[bool] = False
    max_drafts: ClassVar[int | None] = None
    draft_structures: ClassVar[frozenset[str]] = frozenset({IID})

    def __post_init__(self):
        if self.residual not in RESIDUALS:
            raise ValueError(f"SpecTrGBVVerifier: residual must be one of {RESIDUALS}, "
                             f"got {self.residual!r}")

    def init_state(self, L: int, V: int):
        return ()

    @staticmethod
    def tests_sub_block(done, t, tau, in_h):
        """Algorithm 1: a sub-block is tested past the accepted length unless it is in H."""
        return ~done & (t > tau) & ~in_h

    def __call__(
        self,
        key: Array,
        drafts: Int[Array, "K L"],
        q: Float[Array, "K L V"],
        p: Float[Array, "K L+1 V"],
        state=(),
    ) -> tuple[Verdict, tuple]:
        K, L, _ = validate_inputs(self, drafts, q, p)
        k_coin, k_extra = jax.random.split(key)
        h, log_p, log_q = acceptance(drafts, q, p)
        u = jax.random.uniform(k_coin, (K, L))
        # same[j, k, t]: drafts j and k agree on their first t tokens (same sub-block).
        eq = drafts[:, None, :] == drafts[None, :, :]
        same = jnp.concatenate([jnp.ones((K, K, 1), bool), jnp.cumprod(eq, -1).astype(bool)], -1)

        def draft(k, carry):
            tau, acc, rejected, done = carry
            for t in range(1, L):  # sub-blocks X^(k)_<=t
                in_h = (rejected[:, t] & same[:, k, t]).any()
                test = self.tests_sub_block(done, t, tau, in_h)
                passed = u[k, t - 1] < h[k, t - 1]
                tau = jnp.where(test & passed, t, tau)
                acc = jnp.where(test & passed, k, acc)
                rejected = rejected.at[k, t].set(rejected[k, t] | (test & ~passed))
            full = ~done & (u[k, L - 1] < h[k, L - 1])  # ignores H; ends the draft loop
            return (jnp.where(full, L, tau), jnp.where(full, k, acc), rejected, done | full)

        init = (jnp.int32(0), jnp.int32(0), jnp.zeros((K, L + 1), bool), jnp.bool_(False))
        tau, acc, _, _ = jax.lax.fori_loop(0, K, draft, init)
        # Eq. 4 at y = X^(acc)_<=tau, with joint ratio r(y,x) = min(1, q(y,x)/p(y,x)); the
        # residual is normalised, so p(y) is scaled out and q(y)/p(y) taken in log space.
        i = jnp.minimum(tau, L - 1)
        p_yx = p[acc, i]
        log_ratio = jnp.where(log_p[acc, i] > -jnp.inf, log_q[acc, i] - log_p[acc, i], 80.0)
        ratio_y = jnp.exp(jnp.minimum(log_ratio, 80.0))  # beyond e^80, r saturates at 1 anyway
        r = safe_ratio(ratio_y * q[acc, i], p_yx)
        deficit = 1.0 - r**K if self.residual == "released" else (1.0 - r) ** K
        correction = residual(p_yx * deficit, jnp.zeros_like(p_yx), fallback=p[acc, i])
        extra = sample(k_extra, jnp.where(tau == L, p[acc, L], correction))
        return emit(drafts[acc], tau, extra, jnp.where(tau > 0, acc, 0)), state
