"""Paired percentile bootstrap over prompts for ratio-of-sums statistics (BE, SR, gains).

Every method of a table ran on the same prompts with the same per-prompt seeds, so one resample
of prompt indices is applied to every method at once (a paired bootstrap): the CI of a gain
"A over B" then reflects only how the prompts vary, not two independent draws. Statistics are
corpus-level ratios of sums, as in ``specjax.metrics.summarize`` (a long prompt weighs more):

- BE = sum(new tokens) / sum(target calls);
- SR = [sum(spec tokens) / sum(spec seconds)] / [sum(AR tokens) / sum(AR seconds)];
- fraction of optimum = sum(1{tau >= 1}) / sum(alpha*) over all steps of the prompts.

Method: ``RESAMPLES`` resamples of the prompt indices with replacement from a seeded
``numpy.random.default_rng(SEED)``, the 2.5 % and 97.5 % percentiles of the resampled statistic.
Seeded, so a table regenerated from the same cells has the same CIs.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

RESAMPLES = 2000
SEED = 0
LEVEL = 0.95


def resample_indices(n: int, resamples: int = RESAMPLES, seed: int = SEED) -> np.ndarray:
    """[resamples, n] prompt indices, drawn with replacement; row 0 is NOT the identity."""
    if n < 1:
        raise ValueError(f"bootstrap: need at least one prompt, got {n}")
    return np.random.default_rng(seed).integers(0, n, size=(resamples, n))


def ratio(num: np.ndarray, den: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """idx [R, n] -> sum(num[idx]) / sum(den[idx]) per resample (nan where the sum is 0)."""
    num, den = np.asarray(num, float), np.asarray(den, float)

    def stat(idx: np.ndarray) -> np.ndarray:
        d = den[idx].sum(axis=-1)
        return np.where(d > 0, num[idx].sum(axis=-1) / np.where(d > 0, d, 1.0), np.nan)

    return stat


def estimate(stat: Callable[[np.ndarray], np.ndarray], n: int,
             idx: np.ndarray | None = None) -> tuple[float, float, float]:
    """(point estimate on all prompts, CI low, CI high) of ``stat``."""
    idx = resample_indices(n) if idx is None else idx
    point = float(stat(np.arange(n)[None])[0])
    draws = stat(idx)
    draws = draws[np.isfinite(draws)]
    if draws.size == 0:
        return point, float("nan"), float("nan")
    alpha = (1 - LEVEL) / 2
    lo, hi = np.quantile(draws, [alpha, 1 - alpha])
    return point, float(lo), float(hi)
