"""The one-step law check: N jitted verify steps of a JAX verifier against its float64 exact
law of one iteration, by a G-test (likelihood-ratio chi-square).

Why it is a library module and not only a test: the same check must run on whatever device JAX
sees (``benchmarks/device_check.py``), since a verifier compiled for a GPU is a different program
from the one the CPU tests ran. Cases, V = 3:

- ``random``: prefix-dependent Dirichlet p and q (``random_pair``);
- ``constant_q``: prefix-dependent p, the same random q after every prefix;
- ``one_hot_q``: prefix-dependent p, a one-hot q (n-gram drafting: K i.i.d. draws of a one-hot
  law are K copies of one block);
- ``lookup_distinct`` / ``lookup_duplicate``: for the multi-draft verifiers that take
  deterministic drafts, a fixed set of distinct blocks (which may share prefixes), or distinct
  ones and a repeat of draft 0, with one-hot q, against ``algorithms.exact.lookup``'s law.

Shapes: (K, L) = (1, 2) for single-draft verifiers (``max_drafts == 1``), (3, 2) for the others.
Stateful verifiers (greedy_block) start from ``init_state``, the exact law from state ``()``.

The G-test pools every cell whose expected count is below 5 into one cell, which also counts the
samples off the exact support (merged into the smallest remaining cell if its expected count
stays below 5), and any sample on an outcome the exact law gives probability 0 fails the test
outright, whatever the statistic. Each G-test rejects a correct verifier with probability
``ALPHA`` (up to the chi-square approximation).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from algorithms.exact import exact_law_of, iteration_law, random_pair
from algorithms.exact.lookup import FIXED_LAWS, LookupDrafts
from algorithms.exact.models import ConstantModel, DirichletModel, OneHotModel
from algorithms.exact.monte_carlo import fixed_inputs, referee_inputs, sample_inputs, tabulate
from algorithms.verifiers import DETERMINISTIC, get_verifier, list_verifiers

ALPHA = 1e-4  # per-test false-positive rate
N = 20_000  # verify steps per case
V = 3
SEED = 1  # models and lookup drafts; at this seed the band order differs from the ratio one
MODELS = ("random", "constant_q", "one_hot_q")
LOOKUPS = ("lookup_distinct", "lookup_duplicate")


def shape(verifier) -> tuple[int, int]:
    """(K, L): one compile per verifier, so K = 3 and L = 2 together for multi-draft ones."""
    return (1, 2) if verifier.max_drafts == 1 else (3, 2)


def models(kind: str, seed: int = SEED):
    """(P, Q) for one case kind; P always depends on the prefix."""
    if kind == "random":
        return random_pair(V, seed)
    P = DirichletModel(V, 600 + seed)
    if kind == "constant_q":
        q = np.random.default_rng(700 + seed).dirichlet(np.ones(V))
        return P, ConstantModel(V, tuple(float(x) for x in q))
    return P, OneHotModel(V, 800 + seed)


def lookup_drafts(kind: str, K: int, L: int, seed: int = SEED):
    """K distinct blocks (they may share prefixes), or distinct ones and a repeat of draft 0."""
    return LookupDrafts(V, K, L, seed, duplicates=int(kind == "lookup_duplicate"))(())


# --- the G-test --------------------------------------------------------------------------------

@dataclass(frozen=True)
class GFit:
    statistic: float
    df: int
    p_value: float
    unexpected: int  # samples on outcomes of exact probability 0

    def passes(self, alpha: float = ALPHA) -> bool:
        return self.unexpected == 0 and self.p_value >= alpha


def g_test(counts: dict[tuple, int], exact: dict[tuple, float]) -> GFit:
    """Likelihood-ratio chi-square of observed counts against an exact law, small cells pooled."""
    n = sum(counts.values())
    unexpected = sum(c for s, c in counts.items() if exact.get(s, 0.0) <= 0)
    cells = sorted(exact, key=exact.get, reverse=True)
    obs = np.array([counts.get(s, 0) for s in cells], float)
    exp = np.array([exact[s] for s in cells]) * n
    big = exp >= 5
    obs_c, exp_c = list(obs[big]), list(exp[big])
    # One more cell: the small cells' expected count, and every sample not in a big cell (those
    # off the exact support included). Below 5 expected, it joins the smallest big cell.
    rest_obs, rest_exp = n - obs[big].sum(), exp[~big].sum()
    if rest_obs > 0 or rest_exp > 0:
        if rest_exp >= 5 or not exp_c:
            obs_c.append(rest_obs)
            exp_c.append(rest_exp)
        else:
            obs_c[-1] += rest_obs
            exp_c[-1] += rest_exp
    o, e = np.asarray(obs_c), np.asarray(exp_c)
    if len(o) < 2:
        return GFit(0.0, 0, 1.0, unexpected)
    g = float(2 * np.sum(np.where(o > 0, o * np.log(np.where(o > 0, o, 1.0) / e), 0.0)))
    df = len(o) - 1
    return GFit(g, df, float(stats.chi2.sf(g, df)), unexpected)


def count_rows(tokens) -> dict[tuple, int]:
    uniq, counts = np.unique(np.asarray(tokens), axis=0, return_counts=True)
    return {tuple(int(t) for t in row if t >= 0): int(c) for row, c in zip(uniq, counts,
                                                                           strict=True)}


# --- sampling: one compile per (verifier, K, L); the laws and the lookup drafts are arguments --

@functools.cache
def runner(verifier, K: int, L: int):
    """jit(vmap over keys) of one draft-then-verify step: K i.i.d. blocks from the tabulated q,
    or, where ``use_fixed``, the given fixed (lookup) draft set with its one-hot q."""
    state = verifier.init_state(L, V)

    def one(key, q_table, p_table, fixed, use_fixed):
        k_draft, k_verify = jax.random.split(key)
        sampled = sample_inputs(k_draft, q_table, p_table, V=V, L=L, K=K)
        drafts, q, p = (jnp.where(use_fixed, f, s) for f, s in zip(fixed, sampled, strict=True))
        return verifier(k_verify, drafts, q, p, state)[0].tokens

    return jax.jit(jax.vmap(one, in_axes=(0, None, None, None, None)))


def run(verifier, K: int, L: int, P, Q, drafts=None, seed: int = 0, n: int = N, inputs=None
        ) -> dict[tuple, int]:
    """Counts of the emitted strings of ``n`` verify steps (tau is their length minus one).
    ``inputs``: fixed (drafts, q, p) arrays (an engine rule's deterministic drafts)."""
    q_table = jnp.asarray(tabulate(Q, L), jnp.float32)
    p_table = jnp.asarray(tabulate(P, L), jnp.float32)
    fixed = inputs if inputs is not None else fixed_inputs(
        P, drafts if drafts is not None else [[0] * L] * K)
    keys = jax.random.split(jax.random.key(seed), n)
    use_fixed = drafts is not None or inputs is not None
    return count_rows(runner(verifier, K, L)(keys, q_table, p_table, fixed, use_fixed))


def fit(verifier, kind: str, exact_of=None, n: int = N) -> GFit:
    """G-test of ``n`` sampled verify steps of ``verifier`` against the exact one-step law of
    ``exact_of`` (default: the verifier itself, i.e. ``exact_law_of``: its own options passed
    through)."""
    name_of = exact_of if exact_of is not None else verifier
    K, L = shape(verifier)
    if kind in LOOKUPS:
        P, _ = models("random")
        drafts = lookup_drafts(kind, K, L)
        exact = fixed_law(name_of)(P, drafts)
        return g_test(run(verifier, K, L, P, P, drafts, seed=2, n=n), exact)
    P, Q = models(kind)
    exact = iteration_law(exact_law_of(name_of), P, Q, L=L, K=K)
    # Engine rules refereed on deterministic drafts ("argmax", "topk") get those drafts built
    # from Q, with Q's softmax rows as q; every other verifier gets K i.i.d. blocks.
    structure = getattr(verifier, "referee_drafts", "iid")
    inputs = None if structure == "iid" else referee_inputs(P, Q, structure, L=L, K=K)
    return g_test(run(verifier, K, L, P, Q, seed=1, n=n, inputs=inputs), exact)


def fixed_law(verifier):
    """The lookup-draft exact law of a registered verifier, with the options it takes bound."""
    law = FIXED_LAWS[next(n for n in list_verifiers()
                          if type(get_verifier(n)) is type(verifier))]
    takes = inspect.signature(law).parameters
    return functools.partial(law, **{f.name: getattr(verifier, f.name)
                                     for f in dataclasses.fields(verifier) if f.name in takes})


def kinds(name: str) -> tuple[str, ...]:
    """The cases a registered verifier is checked on: lookup drafts for the multi-draft ones
    that take deterministic drafts."""
    v = get_verifier(name)
    lookup = v.max_drafts is None and DETERMINISTIC in v.draft_structures
    return MODELS + (LOOKUPS if lookup else ())
