"""SDSL: throughput-optimal draft size from pre-training hyperparameters, rebuilt.

Bozorgkhoo & Molybog, "Speculative Decoding Scaling Laws" (arXiv 2603.11053). What is known and
how (docs/theory.md):
- [SRC] (abstract, §1): an analytic law links the pre-training hyperparameters of draft and
  target to the throughput of speculative decoding, to pick the draft size before pre-training,
  assuming both are trained on similar data.
- [2ND] (secondary summaries only): the acceptance plane α = A·PPL_draft + B·PPL_target + C with
  A = −0.0067, B = 0.01297, C = 0.642 (R² = 0.602) on raw HellaSwag perplexities; throughput in
  tokens per FLOP at the optimal lookahead; the pooled fit N* = μ·M + M₀ with μ = 2.71e-3 and
  M₀ = 8.71e7 for 13B <= M <= 110B.
- [DERIVED] (our reconstruction; the paper's T(N, M, D, D′) and γ* were not readable): PPL from
  the Chinchilla law (Hoffmann et al. 2022, arXiv 2203.15556, approach 3), α from the plane,
  T = f(γ*; α, c = N/M) / (2M), and N* = argmax_N T by a bounded search over ln N. It reproduces
  μ within 2 % and M₀ within 7 %.

Assumptions (each one changes the numbers):
1. i.i.d. acceptances with mean α (Leviathan's model; see ``leviathan``).
2. One-pass verification: the target is charged one forward (2M FLOPs) per iteration, not
   2M(γ+1); charging every position makes speculation never beat AR in tokens per FLOP
   (Leviathan Thm 3.11).
3. FLOPs per token = 2 × params for both models; cost ratio c = N/M.
4. α is clipped to [ε, 1 − ε] because the plane is linear and leaves [0, 1] for tiny drafts.
5. PPL units: raw perplexity exp(loss in nats/token). Chinchilla's loss is on MassiveText while
   the plane was fitted on HellaSwag; the mismatch is accepted, as SDSL apparently does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import optimize

from specjax.theory._arguments import (
    as_float_array,
    check_alpha,
    check_int,
    check_positive,
    scalar_or_array,
)
from specjax.theory.leviathan import speedup
from specjax.theory.lookahead import continuous_optimum, optimal_k


@dataclass(frozen=True, kw_only=True)
class AcceptancePlane:
    """α = A·x + B·y + C with x, y the draft and target perplexities."""

    A: float
    B: float
    C: float

    def __call__(self, draft_ppl, target_ppl):
        return self.A * np.asarray(draft_ppl) + self.B * np.asarray(target_ppl) + self.C


@dataclass(frozen=True, kw_only=True)
class ChinchillaLaw:
    """Loss(n, d) = E + A/n^a + B/d^b in nats per token; PPL = exp(loss)."""

    E: float
    A: float
    B: float
    a: float
    b: float

    def perplexity(self, params, tokens):
        n, d = check_positive(params, "params"), check_positive(tokens, "tokens")
        return np.exp(self.E + self.A / n**self.a + self.B / d**self.b)


SDSL_2ND = AcceptancePlane(A=-0.0067, B=0.01297, C=0.642)  # [2ND]
CHINCHILLA = ChinchillaLaw(E=1.69, A=406.4, B=410.7, a=0.34, b=0.28)  # Hoffmann approach 3
N_STAR_LAW = (2.71e-3, 8.71e7)  # [2ND] (μ, M₀) of N* = μ·M + M₀; valid for 13B <= M <= 110B
ALPHA_CLIP = 1e-6


@dataclass(frozen=True)
class AcceptanceFit:
    """Least-squares acceptance plane. Unpacks as ``A, B, C, r2 = fit`` (residuals, MSE kept)."""

    A: float
    B: float
    C: float
    r2: float
    residuals: np.ndarray
    mse: float

    def __iter__(self):
        return iter((self.A, self.B, self.C, self.r2))

    @property
    def plane(self) -> AcceptancePlane:
        return AcceptancePlane(A=self.A, B=self.B, C=self.C)


def fit_acceptance(draft_ppl, target_ppl, alpha) -> AcceptanceFit:
    """Ordinary least squares of α on [draft PPL, target PPL, 1], as SDSL's plane [2ND].

    Pass raw perplexities (not log-PPL or loss): that is the unit SDSL reportedly used [2ND],
    and the only one under which its coefficients produce the N* law (docs/theory.md).
    """
    x = check_positive(draft_ppl, "draft_ppl").ravel()
    y = check_positive(target_ppl, "target_ppl").ravel()
    a = check_alpha(alpha).ravel()
    if not x.size == y.size == a.size:
        raise ValueError(f"draft_ppl, target_ppl, alpha must have equal sizes, got "
                         f"{x.size}, {y.size}, {a.size}")
    if x.size < 3:
        raise ValueError(f"fit_acceptance needs at least 3 points, got {x.size}")
    design = np.column_stack([x, y, np.ones_like(x)])
    (A, B, C), *_ = np.linalg.lstsq(design, a, rcond=None)
    residuals = a - design @ np.array([A, B, C])
    total = ((a - a.mean()) ** 2).sum()
    r2 = 1.0 - (residuals**2).sum() / total if total > 0 else 1.0
    return AcceptanceFit(float(A), float(B), float(C), float(r2), residuals,
                         float((residuals**2).mean()))


def predicted_acceptance(N, M, *, D=1e12, D_prime=1e12, coeffs=SDSL_2ND, ppl_law=CHINCHILLA,
                         eps: float = ALPHA_CLIP):
    """α(N, M) = clip(plane(PPL(N, D), PPL(M, D′)), ε, 1 − ε) [DERIVED pipeline, step 2]."""
    alpha = coeffs(ppl_law.perplexity(N, D), ppl_law.perplexity(M, D_prime))
    return scalar_or_array(np.clip(alpha, eps, 1 - eps))


def throughput_per_flop(N, M, alpha, k=None):
    """Tokens per FLOP, T = f(k; α, c = N/M) / (2M) [DERIVED, step 3].

    ``k=None`` uses the continuous throughput-optimal lookahead γ* (as SDSL does [2ND]);
    otherwise the given lookahead. 2M·T is the FLOP speedup over autoregressive decoding.
    Assumes i.i.d. acceptances, one target forward per iteration (one-pass verify), FLOPs =
    2 × params per token and c = N/M; SDSL's own T(N, M, D, D′) was not readable.
    """
    N, M = check_positive(N, "N"), check_positive(M, "M")
    c = N / M
    f = continuous_optimum(alpha, c)[1] if k is None else speedup(alpha, k, c)
    return scalar_or_array(np.asarray(f) / (2 * M))


def _best_throughput(N, M, D, D_prime, coeffs, ppl_law, integer_k, k_max):
    alpha = predicted_acceptance(N, M, D=D, D_prime=D_prime, coeffs=coeffs, ppl_law=ppl_law)
    if not integer_k:
        return throughput_per_flop(N, M, alpha)
    k, _ = optimal_k(alpha, N / M, k_max=k_max)
    return throughput_per_flop(N, M, alpha, k)


def optimal_draft_size(target_params, *, D=1e12, D_prime=1e12, coeffs=SDSL_2ND,
                       ppl_law=CHINCHILLA, integer_k: bool = False, k_max: int = 64,
                       n_min: float = 1e6, grid: int = 256):
    """N*(M, D, D′) = argmax_N T [DERIVED, step 4]; D, D′ are the draft/target data tokens.

    A coarse grid over ln N in [ln n_min, ln M] locates the maximum, then a bounded scalar search
    refines it between the neighbouring grid points (T need not be unimodal for every plane).
    The 1e12 defaults for D and D′ are a mid-grid choice, not a value from SDSL.

    Assumptions (module docstring): i.i.d. β with mean α; one-pass verify cost; FLOPs = 2 ×
    params; α clipped to [ε, 1 − ε]; raw-PPL units from Chinchilla's MassiveText loss fed to a
    plane fitted on HellaSwag PPL [2ND]. The result is [DERIVED]; compare with ``N_STAR_LAW``.
    """
    check_int(k_max, "k_max", 1)
    check_int(grid, "grid", 3)
    n_min = float(check_positive(n_min, "n_min"))
    M, D, D_prime = np.broadcast_arrays(check_positive(target_params, "target_params"),
                                        check_positive(D, "D"), check_positive(D_prime, "D_prime"))
    if (M <= n_min).any():
        raise ValueError(f"target_params must exceed n_min={n_min:g}, got {M.min():g}")
    out = np.empty(M.shape)
    for idx in np.ndindex(M.shape):
        m, d, dp = M[idx], D[idx], D_prime[idx]

        def log_t(log_n, m=m, d=d, dp=dp):
            return np.log(_best_throughput(np.exp(log_n), m, d, dp, coeffs, ppl_law,
                                           integer_k, k_max))

        xs = np.linspace(np.log(n_min), np.log(m), grid)
        i = int(np.argmax(log_t(xs)))
        lo, hi = xs[max(i - 1, 0)], xs[min(i + 1, grid - 1)]
        res = optimize.minimize_scalar(lambda x, f=log_t: -f(x), bounds=(lo, hi),
                                       method="bounded", options={"xatol": 1e-9})
        out[idx] = np.exp(res.x) if -res.fun >= log_t(xs[i]) else np.exp(xs[i])
    return scalar_or_array(out)


def fit_draft_size_law(targets, data_sizes, **options) -> tuple[float, float]:
    """(μ, M₀) of the pooled least-squares line N* = μ·M + M₀ over targets × D × D′.

    The rebuild's grid (docs/theory.md): targets {13, 14, 30, 32, 36, 66, 70, 72, 110}B, D, D′ in
    {3e11, 1e12, 2e12, 1.5e13}. Compare with ``N_STAR_LAW`` [2ND].
    """
    M, D, Dp = np.meshgrid(as_float_array(targets, "targets"),
                           as_float_array(data_sizes, "data_sizes"),
                           as_float_array(data_sizes, "data_sizes"), indexing="ij")
    n_star = optimal_draft_size(M, D=D, D_prime=Dp, **options)
    mu, m0 = np.polyfit(M.ravel(), np.ravel(n_star), 1)
    return float(mu), float(m0)


REBUILD_TARGETS = tuple(x * 1e9 for x in (13, 14, 30, 32, 36, 66, 70, 72, 110))
REBUILD_DATA = (3e11, 1e12, 2e12, 1.5e13)
