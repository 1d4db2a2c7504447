"""The statistics every paper table reports, from stored cells: BE, SR, gains, the gap to the
optimum, each with a paired percentile-bootstrap interval, and the exact checker's verdict.

A cell is one (dataset, method) of a table (``paper_repro.cells``): per-prompt counters and the
seconds of each timing repeat. Every statistic is a function of resample indices
(``specjax.eval.bootstrap``), so all statistics of a table share the same resamples (paired).
Table scripts (``table1``, ``table_repo``, ``ablations``, ``drafting``, ``policies``) import
these; none computes its own.

A gain between two methods is *resolved* only when the bootstrap interval, a paired t interval
and an exact sign-flip p (Holm-adjusted over the table) agree (``gain_test``,
``specjax.eval.paired``); ``significant`` is the bootstrap interval alone.
"""

from __future__ import annotations

import functools

import numpy as np

from specjax.eval import bootstrap, paired

LOSSLESS_TOL = 1e-12


@functools.cache
def lossless_verdict(verifier: str | None, K: int) -> tuple[bool, float | None]:
    """(class claim, exact TV) on the running example p = (1/3, 2/3), q = (2/3, 1/3): TV of
    the first L + 2 = 4 emitted tokens from the target at L = 2, K = min(K, 3) (exact float64
    enumeration, ``algorithms.exact``). AR samples the target itself: (True, None)."""
    if verifier is None:
        return True, None
    from algorithms.exact import example_pair, get_exact_law, lossless_tv
    from algorithms.verifiers import get_verifier

    P, Q = example_pair()
    tv = lossless_tv(get_exact_law(verifier), P, Q, L=2, K=min(K, 3))
    return bool(get_verifier(verifier).lossless), float(tv)



def lossless_text(verifier: str | None, K: int) -> str:
    claim, tv = lossless_verdict(verifier, K)
    if tv is None:
        return "exact (samples p)"
    ok = tv <= LOSSLESS_TOL
    return (f"claims {'yes' if claim else 'no'} / checker {'yes' if ok else '**NO**'} "
            f"(TV {tv:.0e})")


# --- statistics ----------------------------------------------------------------------------------
def timing_repeats(cells) -> int:
    """Timing repeats every cell of a table has (a cell's ``seconds_by_repeat`` length)."""
    return min(len(p.get("seconds_by_repeat", [p["seconds"]])) for c in cells.values()
               for p in c["prompts"])


def field(cells, datasets, method: str, name: str) -> np.ndarray:
    """A per-prompt counter ``[n]``; ``seconds`` is ``[n, R]``, one column per timing repeat."""
    if name == "seconds":
        R = timing_repeats(cells)
        return np.concatenate([[p.get("seconds_by_repeat", [p["seconds"]])[:R]
                                for p in cells[d, method]["prompts"]] for d in datasets])
    return np.concatenate([[p[name] for p in cells[d, method]["prompts"]] for d in datasets])


def _indices(cells, datasets, method: str) -> tuple[np.ndarray, np.ndarray]:
    """Stratified resample: each dataset's prompts resampled within the dataset (same seed for
    every method, so every statistic of a table uses the same resamples: paired), and the
    timing repeats resampled jointly for all prompts and methods (``bootstrap``)."""
    parts, offset = [], 0
    for i, d in enumerate(datasets):
        n = len(cells[d, method]["prompts"])
        parts.append(offset + bootstrap.resample_indices(n, seed=bootstrap.SEED + i))
        offset += n
    return np.concatenate(parts, axis=1), bootstrap.resample_repeats(timing_repeats(cells))


def _ratio(cells, datasets, method, num: str, den: str):
    """sum(num) / sum(den) over the prompts of ``method``, as a bootstrap statistic."""
    return bootstrap.ratio(field(cells, datasets, method, num),
                           field(cells, datasets, method, den))


def be_stat(cells, datasets, method):
    return _ratio(cells, datasets, method, "new_tokens", "target_calls")


def ceiling_stat(cells, datasets, method):
    """The BE the fewest possible target calls would give: sum(tokens) / sum(min calls)."""
    return _ratio(cells, datasets, method, "new_tokens", "min_calls")


def at_ceiling(cells, datasets, method) -> float:
    """Fraction of prompts that used the fewest target calls their tokens allow."""
    calls = field(cells, datasets, method, "target_calls")
    return float(np.mean(calls <= field(cells, datasets, method, "min_calls")))


def sr_stat(cells, datasets, method, base="ar"):
    spec = _ratio(cells, datasets, method, "new_tokens", "seconds")
    ar = _ratio(cells, datasets, base, "new_tokens", "seconds")
    return lambda idx, rep=None: spec(idx, rep) / ar(idx, rep)


def sr_by_repeat(cells, datasets, method, base="ar") -> list[float]:
    """SR of each timing repeat on its own (all prompts): the repeat-to-repeat spread."""
    new = field(cells, datasets, method, "new_tokens").sum()
    ar_new = field(cells, datasets, base, "new_tokens").sum()
    sec = field(cells, datasets, method, "seconds").sum(axis=0)
    ar_sec = field(cells, datasets, base, "seconds").sum(axis=0)
    return [float((new / s) / (ar_new / a)) for s, a in zip(sec, ar_sec, strict=True)]


def calls_stat(cells, datasets, method):
    """Target calls per generated token (the decoding iterations a method needs)."""
    return _ratio(cells, datasets, method, "target_calls", "new_tokens")


def seconds_stat(cells, datasets, method):
    """Wall seconds per generated token."""
    return _ratio(cells, datasets, method, "seconds", "new_tokens")


def gap_stat(cells, datasets, method):
    return _ratio(cells, datasets, method, "root_accepted", "root_bound")


def gain_stat(stat_a, stat_b):
    return lambda idx, rep=None: 100.0 * (stat_a(idx, rep) / stat_b(idx, rep) - 1.0)


def prompt_log_ratios(cells, datasets, a: str, b: str, num: str, den: str) -> np.ndarray:
    """Per prompt: log[(num / den under ``a``) / (num / den under ``b``)], the paired difference
    the sign-flip test and the t interval of a gain use.

    Why a log ratio of the prompt's own metric: the gains are ratios, so the per-prompt unit is
    the prompt's own ratio, and the log makes it antisymmetric in a and b (swapping the labels
    of a prompt, the null the sign-flip test permutes, flips its sign) and a gain and its inverse
    (+25 % one way, -20 % the other) equal and opposite. Pairing is by prompt index, as the
    bootstrap pairs prompts (every method of a table decodes the same prompts with the same
    seeds). The estimand differs from the table's ratio of sums: its mean is the log of the
    geometric mean of the per-prompt ratios, each prompt weighing the same, where the ratio of
    sums weighs long prompts more. Requiring both to exclude 0 on the same side is the point: a
    gain carried by a few long prompts is not resolved. Seconds are each prompt's mean over its
    timing repeats (the point estimate's), so these tests do not hold the repeat-to-repeat
    spread of the clock that the bootstrap resamples; requiring the bootstrap too keeps that
    spread in the verdict."""
    def per_prompt(method):
        x, y = (field(cells, datasets, method, k) for k in (num, den))
        x, y = (v.mean(axis=1) if v.ndim == 2 else v for v in (x, y))
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log(np.asarray(x, float)) - np.log(np.asarray(y, float))

    return per_prompt(a) - per_prompt(b)


def gain_test(gain: tuple[float, float, float], diffs: np.ndarray) -> paired.PairedTest:
    """A gain in % (``estimate`` of a ``gain_stat``) with the paired t interval and sign-flip p
    of its per-prompt log ratios ``diffs`` (``prompt_log_ratios``), mapped to % by
    100 (e^x - 1). Holm comes later, over the table's family (``paired.adjust``)."""
    return paired.paired_test(diffs, gain, scale=lambda x: 100.0 * np.expm1(x))


def one_machine(cells, datasets, *methods) -> bool:
    """Whether these cells' seconds come from one machine: BE compares across machines, a
    ratio of two machines' seconds is the speed of neither."""
    return len({cells[d, m]["hardware"] for d in datasets for m in methods}) == 1


def estimate(stat, cells, datasets, method) -> tuple[float, float, float]:
    idx, rep = _indices(cells, datasets, method)
    return bootstrap.estimate(stat, idx.shape[1], idx, rep)


def per_position(cells, datasets, method) -> list[float]:
    """P(tau > i) for each draft position i: accepted at position i / target calls."""
    acc = np.sum([p["accepted_per_position"] for d in datasets
                  for p in cells[d, method]["prompts"]], axis=0)
    return [float(a) for a in acc / max(field(cells, datasets, method, "target_calls").sum(), 1)]


def ci(x: tuple[float, float, float], digits: int = 2, pct: bool = False) -> str:
    p, lo, hi = x
    f = f"{{:+.{digits}f}}" if pct else f"{{:.{digits}f}}"
    return f"{f.format(p)} [{f.format(lo)}, {f.format(hi)}]"


def significant(x: tuple[float, float, float]) -> str:
    return "yes" if x[1] > 0 or x[2] < 0 else "no"


def resolved(test: paired.PairedTest) -> str:
    return "yes" if test.resolved else "no"


def pvalue(test: paired.PairedTest) -> str:
    """Sign-flip p, then Holm-adjusted over the table's family."""
    f = lambda p: "nan" if not np.isfinite(p) else f"{p:.2g}" if p >= 1e-3 else f"{p:.0e}"
    return f"{f(test.p)} ({f(test.p_holm)})"
