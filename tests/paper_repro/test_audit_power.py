"""The audit's power column (``paper_repro.audit.detectable_tv``) against a simulation."""

import numpy as np
from scipy import stats

from paper_repro.audit import ALPHA, detectable_tv


def test_a_diffuse_bias_of_the_stated_tv_is_detected_four_times_in_five():
    """22 cells in equal-probability pairs, each pair biased by 1 +- eps (TV = eps / 2 at the
    column's value), 600 G-tests at the audit's alpha: the rejection rate must be 0.8. The
    band [0.72, 0.88] is 4.9 binomial sds (false-positive rate < 1e-5 with the fixed seed);
    a column off by a factor sqrt(2) in TV gives 0.24 (too small) or 1.00 (too large)."""
    rng = np.random.default_rng(0)
    half = rng.dirichlet(np.full(11, 5.0))
    exact = np.repeat(half / 2, 2)  # cells 2i and 2i + 1 equally likely
    n, df = 2000, exact.size - 1
    tv = detectable_tv(n, df)
    eps = 2 * tv
    biased = exact * np.tile([1 + eps, 1 - eps], 11)
    assert abs(0.5 * np.abs(biased - exact).sum() - tv) < 1e-12
    crit = stats.chi2.isf(ALPHA, df)
    rejected = 0
    trials = 600
    for _ in range(trials):
        counts = rng.multinomial(n, biased)
        g, _ = stats.power_divergence(counts, n * exact, lambda_="log-likelihood")
        rejected += g > crit
    assert 0.72 <= rejected / trials <= 0.88, rejected / trials


def test_more_samples_detect_smaller_biases():
    values = [detectable_tv(n, 214) for n in (2_000, 20_000, 200_000)]
    assert values[0] > values[1] > values[2]
    np.testing.assert_allclose(values[0] / values[1], np.sqrt(10), rtol=1e-9)
