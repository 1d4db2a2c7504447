"""What the engine's exactness tests share: the toy prompt and sample sizes, the target's exact
law of the first generated tokens (float64, NumPy, independent of ``specjax.models.sampling``),
the uncached greedy reference, and the chi-square fit of a drafter on the toy pair.

Imported by the decode and drafter tests (``tests/specjax`` is on ``sys.path`` through its
``conftest.py``); nothing here is a test.
"""

from __future__ import annotations

from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np

from algorithms.exact.monte_carlo import chi_square
from specjax import generate
from specjax.models.sampling import Sampling
from specjax.models.toy import load_toy

FPR = 1e-6
SEEDS = 50_000
N_NEW = 4  # first N generated tokens: longer than one block, so cache sync and state matter
PROMPT = [1, 2]
# Faster XLA compiles (the suite is compile-bound); decoding results do not depend on it.
FAST = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}
GREEDY = Sampling(temperature=0)
# Prompts for the tiny random decoders (vocabulary 67+).
DEC_PROMPTS = [[5, 9, 11, 5, 9, 11, 5, 9], [7], [3, 3, 2, 1, 0, 1, 2, 60, 61, 3, 3, 2]]


def np_law(p: np.ndarray, temperature: float, top_k: int) -> np.ndarray:
    """Temperature / top-k in float64 (logits = log p, so softmax(log p / T) ∝ p^(1/T))."""
    if temperature == 0:
        return np.eye(len(p))[np.argmax(p)]
    w = p ** (1.0 / temperature)
    if top_k:
        w = np.where(w >= np.sort(w)[-top_k], w, 0.0)
    return w / w.sum()


def exact_first_tokens(model, prompt, n, temperature, top_k) -> dict[tuple, float]:
    return model.sequence_law(prompt, n, lambda p: np_law(p, temperature, top_k))


def uncached_greedy(model, prompts, n):
    """Greedy decoding by full uncached forwards (no KV cache, no tree): the reference. Inputs
    are right-padded to one length (causal, so padding cannot change earlier logits)."""
    T = max(len(p) for p in prompts) + n
    logits = jax.jit(model.logits)
    out = []
    for p in prompts:
        ids = list(p)
        for _ in range(n):
            padded = jnp.asarray(ids + [0] * (T - len(ids)), jnp.int32)
            ids.append(int(np.argmax(np.asarray(logits(padded))[len(ids) - 1])))
        out.append(ids[len(p):])
    return out


def toy_fit(drafter, verifier="token", temperature=1.0, seed=0, **generate_kw):
    target, draft = load_toy("toy-target"), load_toy("toy-draft")
    res = generate(target, [PROMPT] * SEEDS, draft=draft, drafter=drafter, verifier=verifier,
                   sampling=Sampling(temperature=temperature), max_new_tokens=N_NEW, seed=seed,
                   progress=False, compiler_options=FAST, **generate_kw)
    counts = Counter(tuple(t) for t in res.tokens)
    return chi_square(counts, exact_first_tokens(target, PROMPT, N_NEW, temperature, 0)), res


def tiny_decoder(weight_format="float32", packed=False, seed=1):
    from specjax.models.config import tiny_config
    from specjax.models.decoder import Decoder

    return Decoder.random(tiny_config("llama"), seed=seed, weight_format=weight_format,
                          packed=packed)


def decoder_law(model, prompt, n):
    """Exact law of the first n sampled tokens (T = 1) of a decoder, by enumeration."""
    logits = jax.jit(model.logits)
    T = len(prompt) + n

    def law(ctx):
        padded = jnp.asarray(list(ctx) + [0] * (T - len(ctx)), jnp.int32)
        x = np.asarray(logits(padded), np.float64)[len(ctx) - 1]
        w = np.exp(x - x.max())
        return w / w.sum()

    out = {(): 1.0}
    for _ in range(n):
        out = {s + (t,): pr * pt for s, pr in out.items()
               for t, pt in enumerate(law(list(prompt) + list(s)))}
    return out


def greedy_sd_and_ar(target, draft, drafter, max_new_tokens=8):
    """(speculative, autoregressive) greedy tokens on ``DEC_PROMPTS``, token verifier: every
    exactness test of a new pass or drafter asserts the two equal."""
    kw = dict(sampling=GREEDY, max_new_tokens=max_new_tokens, progress=False,
              compiler_options=FAST)
    ar = generate(target, DEC_PROMPTS, **kw)
    sd = generate(target, DEC_PROMPTS, draft=draft, drafter=drafter, verifier="token", **kw)
    return sd.tokens, ar.tokens


def prefill_changes_cache(model, reference, prompt=DEC_PROMPTS[2]) -> bool:
    """Whether ``model``'s prefill of ``prompt`` leaves any float32 cache entry other than
    ``reference``'s (an option that rounds the prefill's rows must change it)."""
    from specjax.models.passes import JittedPasses

    def cache_of(m):
        jp = JittedPasses(m, FAST)
        return jp.prefill(jp.init_cache(32, len(prompt)), jnp.asarray(prompt, jnp.int32),
                          len(prompt))

    pairs = zip(jax.tree.leaves(cache_of(model)), jax.tree.leaves(cache_of(reference)),
                strict=True)
    return any(x.dtype == jnp.float32 and not np.array_equal(x, y) for x, y in pairs)
