"""Monte Carlo check of E[n] on a pair whose acceptance is exactly constant [DERIVED].

Leviathan's E[n] = (1 − α^(k+1))/(1 − α) assumes i.i.d. acceptances. On V = 2 with target
p = ((2−α)/2, α/2) and draft q = (α/2, (2−α)/2) at every context, Σ min(p, q) = α exactly, so the
assumption holds and the formula is exact: a real verifier run on this pair must reproduce it up
to sampling error (docs/theory.md). Drafts are sampled from q in JAX and the verifier (any object
following ``algorithms.verifiers.base.Verifier``; passed in, never imported here) is vmapped over
keys, exactly as in the decode loop. This module needs JAX, so ``specjax.theory`` does not import
it.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Int

from specjax.theory._arguments import check_alpha, check_int


def constant_acceptance_pair(alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """(p, q) on V = 2 with Σ min(p, q) = α: the target favours token 0, the draft token 1."""
    a = float(check_alpha(alpha))
    return np.array([(2 - a) / 2, a / 2]), np.array([a / 2, (2 - a) / 2])


@partial(jax.jit, static_argnames=("verifier", "k", "n"))
def _emitted_counts(verifier, key: Array, alpha: Array, k: int, n: int) -> Int[Array, " n"]:
    p = jnp.stack([(2 - alpha) / 2, alpha / 2])
    q = jnp.stack([alpha / 2, (2 - alpha) / 2])
    q_block = jnp.broadcast_to(q, (1, k, 2))
    p_block = jnp.broadcast_to(p, (1, k + 1, 2))

    def one(key):
        k_draft, k_verify = jax.random.split(key)
        drafts = jax.random.categorical(k_draft, jnp.log(q), shape=(1, k)).astype(jnp.int32)
        verdict, _ = verifier(k_verify, drafts, q_block, p_block, verifier.init_state(k, 2))
        return verdict.num_emitted

    return jax.vmap(one)(jax.random.split(key, n))


def simulate_emitted(verifier, alpha: float, k: int, *, n: int, seed: int) -> np.ndarray:
    """Tokens emitted by each of n independent iterations (draft k tokens, verify) on the pair.

    ``alpha`` is traced, so one compile per (verifier, k, n) serves every α.
    """
    check_alpha(alpha)
    k = check_int(k, "k", 1)
    n = check_int(n, "n", 1)
    key = jax.random.key(seed)
    return np.asarray(_emitted_counts(verifier, key, jnp.float32(alpha), k, n))
