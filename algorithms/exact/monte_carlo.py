"""Monte Carlo check of a JAX verifier against its exact law.

The exact law is float64 enumeration; the JAX verifier is the code that runs in the decode loop.
We sample draft blocks from a tabulated toy draft model *in JAX*, run the verifier vmapped over
many keys, and compare emitted-string frequencies with the exact law by Pearson's chi-square.
Cells with expected count < 5 are pooled so the chi-square approximation holds.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from algorithms.exact.engine_drafts import draft_rows, referee_drafts
from algorithms.exact.models import Context, ToyModel


def prefix_offset(t: int, V: int) -> int:
    """Index of the first length-t prefix in the flat table (prefixes ordered by length)."""
    return (V**t - 1) // (V - 1)


def tabulate(model: ToyModel, depth: int, ctx: Context = ()) -> np.ndarray:
    """Laws after ctx + z for every prefix z with |z| <= depth, as a [num_prefixes, V] table."""
    V = model.V
    rows = []
    for t in range(depth + 1):
        for code in range(V**t):
            z = tuple(int(d) for d in np.base_repr(code, V).zfill(t)) if t else ()
            rows.append(model(ctx + z))
    return np.stack(rows)


def sample_inputs(key, q_table, p_table, *, V: int, L: int, K: int):
    """Sample K i.i.d. blocks of length L from the tabulated draft; gather q and p along them."""
    def one_draft(k):
        keys = jax.random.split(k, L)
        code = jnp.int32(0)
        tokens, q_rows, p_rows = [], [], []
        for i in range(L):
            idx = prefix_offset(i, V) + code
            q_rows.append(q_table[idx])
            p_rows.append(p_table[idx])
            logits = jnp.log(jnp.where(q_table[idx] > 0, q_table[idx], 1e-38))
            logits = jnp.where(q_table[idx] > 0, logits, -jnp.inf)
            x = jax.random.categorical(keys[i], logits).astype(jnp.int32)
            tokens.append(x)
            code = code * V + x
        p_rows.append(p_table[prefix_offset(L, V) + code])
        return jnp.stack(tokens), jnp.stack(q_rows), jnp.stack(p_rows)

    return jax.vmap(one_draft)(jax.random.split(key, K))


def sample_emitted(verifier, P: ToyModel, Q: ToyModel, *, L: int, K: int, n: int, seed: int,
                   ctx: Context = (), state=None, chunk: int = 50_000,
                   sampler=sample_inputs, dtype=jnp.float32) -> dict[tuple, int]:
    """Counts of emitted strings over n independent (draft, verify) iterations from ``ctx``.

    ``sampler`` draws (drafts, q, p) with ``sample_inputs``'s signature; the default is K i.i.d.
    blocks, another drafting scheme (e.g. without replacement) passes its own. ``dtype`` is the
    precision of the laws handed to the verifier (float64 needs ``jax.enable_x64``).
    """
    V = P.V
    q_table = jnp.asarray(tabulate(Q, L, ctx), dtype)
    p_table = jnp.asarray(tabulate(P, L, ctx), dtype)
    state = verifier.init_state(L, V) if state is None else state

    @jax.jit
    def run(keys):
        def one(key):
            k_draft, k_verify = jax.random.split(key)
            drafts, q, p = sampler(k_draft, q_table, p_table, V=V, L=L, K=K)
            verdict, _ = verifier(k_verify, drafts, q, p, state)
            return verdict.tokens
        return jax.vmap(one)(keys)

    keys = jax.random.split(jax.random.key(seed), n)
    rows = np.concatenate([np.asarray(run(keys[i:i + chunk])) for i in range(0, n, chunk)])
    uniq, counts = np.unique(rows, axis=0, return_counts=True)
    return {tuple(int(t) for t in row if t >= 0): int(c)
            for row, c in zip(uniq, counts, strict=True)}


def fixed_inputs(P: ToyModel, drafts, ctx: Context = (), dtype=jnp.float32,
                 drafts_dtype=jnp.int32):
    """(drafts, one-hot q, p) arrays for a deterministic draft set (lookup drafts).
    ``drafts_dtype``: int64 under x64 hands the verifier the token ids an x64 caller would."""
    V = P.V
    d = np.asarray(drafts, np.int32)
    q = np.eye(V)[d]
    p = np.stack([np.stack([P(ctx + tuple(int(t) for t in row[:i])) for i in range(d.shape[1] + 1)])
                  for row in d])
    return jnp.asarray(d, drafts_dtype), jnp.asarray(q, dtype), jnp.asarray(p, dtype)


def sample_fixed(verifier, P: ToyModel, drafts, *, n: int, seed: int, ctx: Context = (),
                 dtype=jnp.float32, drafts_dtype=jnp.int32) -> dict[tuple, int]:
    """Counts of emitted strings over n verifier runs on one fixed (lookup) draft set."""
    d, q, p = fixed_inputs(P, drafts, ctx, dtype, drafts_dtype)
    state = verifier.init_state(d.shape[1], P.V)
    run = jax.jit(jax.vmap(lambda k: verifier(k, d, q, p, state)[0].tokens))
    rows = np.asarray(run(jax.random.split(jax.random.key(seed), n)))
    uniq, counts = np.unique(rows, axis=0, return_counts=True)
    return {tuple(int(t) for t in row if t >= 0): int(c)
            for row, c in zip(uniq, counts, strict=True)}


def referee_inputs(P: ToyModel, Q: ToyModel, structure: str, *, L: int, K: int,
                   ctx: Context = (), dtype=jnp.float32, drafts_dtype=jnp.int32):
    """(drafts, q, p) arrays of a deterministic engine draft structure ("argmax", "topk"):
    ``engine_drafts`` builds the drafts from Q, q is Q's law at every draft prefix (what the
    engines report, not one-hot) and p the target's, with the bonus row."""
    drafts = referee_drafts(structure, Q, ctx, L, K)
    return (jnp.asarray(np.asarray(drafts), drafts_dtype),
            jnp.asarray(draft_rows(Q, ctx, drafts), dtype),
            jnp.asarray(draft_rows(P, ctx, drafts, extra=True), dtype))


def fixed_sampler(inputs):
    """A ``sample_inputs``-shaped sampler that hands the same (drafts, q, p) to every step."""
    return lambda key, q_table, p_table, *, V, L, K: inputs


@dataclass(frozen=True)
class FitResult:
    statistic: float
    df: int
    p_value: float
    unexpected: int  # samples of strings the exact law gives probability 0

    def passes(self, false_positive_rate: float) -> bool:
        return self.unexpected == 0 and self.p_value >= false_positive_rate


def chi_square(counts: dict[tuple, int], exact: dict[tuple, float]) -> FitResult:
    """Pearson chi-square of observed counts against the exact law (small cells pooled)."""
    n = sum(counts.values())
    unexpected = sum(c for s, c in counts.items() if exact.get(s, 0.0) <= 0)
    big = [s for s, pr in exact.items() if pr * n >= 5]
    obs = [counts.get(s, 0) for s in big]
    exp = [exact[s] * n for s in big]
    rest_exp = n - sum(exp)
    if rest_exp >= 5:
        obs.append(n - sum(obs))
        exp.append(rest_exp)
    obs, exp = np.asarray(obs, float), np.asarray(exp, float)
    if len(obs) < 2:
        return FitResult(0.0, 0, 1.0, unexpected)
    stat = float(((obs - exp) ** 2 / exp).sum())
    df = len(obs) - 1
    return FitResult(stat, df, float(stats.chi2.sf(stat, df)), unexpected)
