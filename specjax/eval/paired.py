"""Paired comparisons that hold at small n: an exact sign-flip p, a t interval, Holm.

Why beside the bootstrap. The percentile bootstrap over prompts is only asymptotically right:
with the 6 timed prompts per dataset of a CPU table it resamples from 6 values, its interval is
too narrow (it never sees a prompt it was not shown), and a table of seven comparisons makes
some interval miss 0 by chance. So a comparison is *resolved* only when three views agree:

- the paired percentile bootstrap of the table's own statistic (``specjax.eval.bootstrap``)
  excludes 0;
- the paired Student t interval of the mean per-prompt difference excludes 0, on the same side;
- the exact sign-flip (permutation) p of that mean, Holm-adjusted over the comparisons of the
  table, is at most alpha = 1 - ``bootstrap.LEVEL``.

The sign-flip test needs no distributional assumption: under the null that the two methods are
exchangeable on each prompt (same seeds, same prompt: only the label differs), each prompt's
difference is as likely to have either sign, so the observed |mean| is ranked among the 2^n
means with every sign pattern. The identity pattern is one of them, so p >= 2 / 2^n (the
pattern and its mirror): at n = 6 the smallest possible p is 2/64 = 0.03125, which clears
0.05 only when all 6 prompts agree in sign, and a Holm factor of 2 already forbids it. That is
the point: at such n no amount of effect size resolves a comparison on which one prompt
disagrees, however tight the bootstrap interval looks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np
from scipy import stats

from specjax.eval import bootstrap

#: Up to this many prompts the sign-flip p enumerates every pattern; above, Monte Carlo.
EXACT_MAX_N = 20
N_MC = 200_000
#: Sign vectors handled per block: bounds memory at n = 20 (2^20 patterns) to a few MB.
CHUNK = 1 << 16
#: Sums within this fraction of sum|d| of the observed one count as ties: float rounding of a
#: sum of +-d is a few ulps of sum|d|, far below any real gap between two patterns' sums.
TIE_RTOL = 1e-9


def _as_extreme(sums: np.ndarray, observed: float, tol: float) -> np.ndarray:
    """Two-sided: a pattern counts when its |sum| reaches the observed |sum| (ties included)."""
    return np.abs(sums) >= abs(observed) - tol


def _all_sign_vectors(n: int) -> Iterator[np.ndarray]:
    """Every sign vector of length n once, in blocks; pattern 0 (all +1) is the identity."""
    bits = np.arange(n)
    for start in range(0, 1 << n, CHUNK):
        k = np.arange(start, min(start + CHUNK, 1 << n), dtype=np.int64)
        yield 1.0 - 2.0 * ((k[:, None] >> bits) & 1)


def sign_flip_p(diffs, *, exact_max_n: int = EXACT_MAX_N, n_mc: int = N_MC, seed: int = 0
                ) -> float:
    """Two-sided paired sign-flip p of the mean difference (zeros flip to themselves).

    Exact up to ``exact_max_n`` prompts (all 2^n patterns, so no seed and no Monte Carlo error
    where n is small and the error would matter most); above, ``n_mc`` seeded random patterns
    with the observed one counted in, p = (1 + hits) / (1 + n_mc), which keeps the test valid
    (never below the exact p in expectation, never 0)."""
    d = np.asarray(diffs, dtype=float).ravel()
    if d.size == 0 or not np.all(np.isfinite(d)):
        return float("nan")
    observed = float(d.sum())  # the mean up to the factor 1/n, which every pattern shares
    tol = TIE_RTOL * float(np.abs(d).sum())
    if d.size <= exact_max_n:
        hits = sum(int(_as_extreme(s @ d, observed, tol).sum()) for s in
                   _all_sign_vectors(d.size))
        return hits / float(1 << d.size)
    rng = np.random.default_rng(seed)
    hits = 0
    for start in range(0, n_mc, CHUNK):
        s = 1.0 - 2.0 * rng.integers(0, 2, size=(min(CHUNK, n_mc - start), d.size))
        hits += int(_as_extreme(s @ d, observed, tol).sum())
    return (1 + hits) / (1 + n_mc)


def t_quantile(level: float, df: int) -> float:
    """Two-sided Student t critical value (a seam, so a test can swap in the normal's)."""
    return float(stats.t.ppf(0.5 + level / 2, df))


def t_interval(diffs, level: float = bootstrap.LEVEL) -> tuple[float, float]:
    """Paired Student t interval of the mean difference; (nan, nan) below 2 prompts, where there
    is no spread to scale by. All differences equal give the point: the data show no spread,
    and the sign-flip p, not this interval, then carries the small-n caution."""
    d = np.asarray(diffs, dtype=float).ravel()
    if d.size < 2 or not np.all(np.isfinite(d)):
        return float("nan"), float("nan")
    half = t_quantile(level, d.size - 1) * d.std(ddof=1) / np.sqrt(d.size)
    return float(d.mean() - half), float(d.mean() + half)


def holm(pvalues, alpha: float = round(1 - bootstrap.LEVEL, 12)) -> tuple[np.ndarray, np.ndarray]:
    """Holm's step-down adjustment: (adjusted p, reject) in the input order.

    Holm rather than Bonferroni because it controls the same familywise error with more power,
    and it needs no assumption about how the comparisons of a table depend on each other (they
    share a baseline and prompts, so they do). A nan p stays nan, is never rejected, and still
    counts in the family size."""
    p = np.asarray(pvalues, dtype=float).ravel()
    m = p.size
    order = np.argsort(p)  # nan last, so they cannot lower anyone's running maximum
    steps = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adjusted = np.empty(m)
    adjusted[order] = np.maximum.accumulate(steps)
    return adjusted, adjusted <= alpha


@dataclass(frozen=True, kw_only=True)
class PairedTest:
    """One paired comparison on the reporting scale (e.g. a gain in %).

    ``point``, ``boot``: the table's statistic on all prompts and its bootstrap interval;
    ``mean``, ``t``: the mean per-prompt difference and its t interval, mapped to the same scale;
    ``p``: the sign-flip p; ``p_holm``: adjusted over the table's family (``adjust``), equal to
    ``p`` until then; ``n``: prompts."""

    point: float
    boot: tuple[float, float]
    mean: float
    t: tuple[float, float]
    p: float
    p_holm: float
    n: int
    alpha: float = round(1 - bootstrap.LEVEL, 12)

    @property
    def resolved(self) -> bool:
        """Every view excludes 0 on the same side and the adjusted p is at most alpha (nan in
        any of them: not resolved)."""
        above = self.boot[0] > 0 and self.t[0] > 0
        below = self.boot[1] < 0 and self.t[1] < 0
        return bool((above or below) and self.p_holm <= self.alpha)

    def as_dict(self) -> dict:
        return asdict(self) | {"resolved": self.resolved}


def paired_test(diffs, boot: tuple[float, float, float], *,
                scale: Callable[[float], float] | None = None,
                level: float = bootstrap.LEVEL) -> PairedTest:
    """A ``PairedTest`` from per-prompt differences and a ``bootstrap.estimate`` triple.

    ``scale`` maps the differences' scale to the table's (e.g. a mean log ratio to a gain in %,
    100 (e^x - 1)); it must be increasing with scale(0) = 0, so "excludes 0" and the side mean
    the same on both scales."""
    f = scale or float
    d = np.asarray(diffs, dtype=float).ravel()
    lo, hi = t_interval(d, level)
    p = sign_flip_p(d)
    mean = float(d.mean()) if d.size else float("nan")
    return PairedTest(point=float(boot[0]), boot=(float(boot[1]), float(boot[2])),
                      mean=float(f(mean)), t=(float(f(lo)), float(f(hi))), p=p, p_holm=p,
                      n=int(d.size), alpha=round(1 - level, 12))


def adjust(tests: Sequence[PairedTest]) -> list[PairedTest]:
    """The tests of one table's family with their Holm-adjusted p filled in, in order."""
    if not tests:
        return []
    adjusted, _ = holm([t.p for t in tests], tests[0].alpha)
    return [replace(t, p_holm=float(a)) for t, a in zip(tests, adjusted, strict=True)]
