"""Argument checks shared by the planning formulas: one clear ``ValueError`` per bad argument.

The formulas are vectorised, so a check names the argument, the allowed range and the first
offending value instead of letting NaNs flow into a plan.
"""

from __future__ import annotations

import numpy as np


def _first_bad(x: np.ndarray, ok: np.ndarray) -> float:
    return float(x[~ok].flat[0])


def as_float_array(value, name: str) -> np.ndarray:
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number or array of them, got {value!r}") from None


def check_alpha(alpha, name: str = "alpha") -> np.ndarray:
    """Acceptance rates live in [0, 1] (NaN is rejected too)."""
    a = as_float_array(alpha, name)
    ok = (a >= 0) & (a <= 1)
    if not ok.all():
        raise ValueError(f"{name} must lie in [0, 1], got {_first_bad(a, ok)}")
    return a


def check_k(k, name: str = "k") -> np.ndarray:
    """Lookaheads are finite and >= 0 (real values allowed: the continuous relaxation)."""
    x = as_float_array(k, name)
    ok = np.isfinite(x) & (x >= 0)
    if not ok.all():
        raise ValueError(f"{name} must be finite and >= 0, got {_first_bad(x, ok)}")
    return x


def check_positive(value, name: str) -> np.ndarray:
    """Cost ratios, sizes, bandwidths: finite and > 0."""
    x = as_float_array(value, name)
    ok = np.isfinite(x) & (x > 0)
    if not ok.all():
        raise ValueError(f"{name} must be finite and > 0, got {_first_bad(x, ok)}")
    return x


def check_int(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def scalar_or_array(x: np.ndarray):
    """Return a Python float for 0-d results so scalar calls read naturally."""
    x = np.asarray(x)
    if x.ndim == 0:
        return x.item()
    return x
