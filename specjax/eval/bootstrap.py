"""Paired percentile bootstrap over prompts for ratio-of-sums statistics (BE, SR, gains).

Every method of a table ran on the same prompts with the same per-prompt seeds, so one resample
of prompt indices is applied to every method at once (a paired bootstrap): the CI of a gain
"A over B" then reflects only how the prompts vary, not two independent draws. Statistics are
corpus-level ratios of sums, as in ``specjax.eval.metrics.summarize`` (a long prompt weighs more):

- BE = sum(new tokens) / sum(target calls);
- SR = [sum(spec tokens) / sum(spec seconds)] / [sum(AR tokens) / sum(AR seconds)];
- fraction of optimum = sum(1{tau >= 1}) / sum(alpha*) over all steps of the prompts.

Method: ``RESAMPLES`` resamples of the prompt indices with replacement from a seeded
``numpy.random.default_rng(SEED)``, the 2.5 % and 97.5 % percentiles of the resampled statistic.
Seeded, so a table regenerated from the same cells has the same CIs.

Timing repeats. A speed ratio also varies from one timing of the same decode to the next (the
machine's other load, its clock): re-timing a cell across sessions moved it 8-16 %, more than a
prompts-only interval is wide. When each prompt was timed R times (seconds ``[n, R]``), every
resample also draws R repeat indices with replacement (``resample_repeats``, its own seeded RNG,
shared by every method of a table so the repeats stay paired, as the prompts are) and a prompt's
seconds are its mean over the drawn repeats. The interval then holds both sources of spread.
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


def resample_repeats(repeats: int, resamples: int = RESAMPLES, seed: int = SEED + 7919
                     ) -> np.ndarray:
    """[resamples, repeats] repeat indices, drawn with replacement (independent of the prompts'
    draws: another seed)."""
    if repeats < 1:
        raise ValueError(f"bootstrap: need at least one timing repeat, got {repeats}")
    return np.random.default_rng(seed).integers(0, repeats, size=(resamples, repeats))


def _sums(x: np.ndarray, idx: np.ndarray, rep: np.ndarray | None) -> np.ndarray:
    """Per resample: sum over the drawn prompts of x (``[n]``, or ``[n, R]`` averaged over the
    drawn repeats)."""
    if x.ndim == 1:
        return x[idx].sum(axis=-1)
    if rep is None:  # the point estimate: every repeat once
        rep = np.broadcast_to(np.arange(x.shape[1]), (idx.shape[0], x.shape[1]))
    return x[idx[:, :, None], rep[:, None, :]].mean(axis=-1).sum(axis=-1)


def ratio(num: np.ndarray, den: np.ndarray) -> Callable[..., np.ndarray]:
    """(idx [B, n], rep [B, R] | None) -> sum(num[idx]) / sum(den[idx]) per resample (nan where
    the sum is 0). ``num`` / ``den`` are ``[n]``, or ``[n, R]`` per timing repeat."""
    num, den = np.asarray(num, float), np.asarray(den, float)

    def stat(idx: np.ndarray, rep: np.ndarray | None = None) -> np.ndarray:
        d = _sums(den, idx, rep)
        return np.where(d > 0, _sums(num, idx, rep) / np.where(d > 0, d, 1.0), np.nan)

    return stat


def estimate(stat: Callable[..., np.ndarray], n: int, idx: np.ndarray | None = None,
             rep: np.ndarray | None = None) -> tuple[float, float, float]:
    """(point estimate on all prompts and repeats, CI low, CI high) of ``stat``; ``rep``: the
    repeat draws when the statistic has timing repeats (``resample_repeats``)."""
    idx = resample_indices(n) if idx is None else idx
    point = float(stat(np.arange(n)[None])[0])
    draws = stat(idx) if rep is None else stat(idx, rep)
    draws = draws[np.isfinite(draws)]
    if draws.size == 0:
        return point, float("nan"), float("nan")
    alpha = (1 - LEVEL) / 2
    lo, hi = np.quantile(draws, [alpha, 1 - alpha])
    return point, float(lo), float(hi)
