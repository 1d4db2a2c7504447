"""Where a decode step's time goes: draft passes, tree pass, verifier, and the rest.

The decode loop is one compiled ``while_loop``, so its parts cannot be timed from inside. Each
part is compiled on its own instead, at the run's exact shapes (batch, prompt padding, K, L,
vocabulary), and timed on a state taken right after prefill:

- ``draft``: the drafter's ``propose`` (all L draft-model forwards, or the n-gram lookup);
- ``tree``: the target forward over the largest compiled tree (the trie may run a smaller one);
- ``verify``: the sampling transform of the target logits and the verifier;
- ``other``: one whole loop step minus the three (commit, drafter update, bookkeeping, and
  whatever the fused step saves or costs over the parts).

For autoregressive decoding ``tree`` is the one-token pass and ``draft`` / ``verify`` are 0.
"""

from __future__ import annotations

import statistics
import time

import jax
from flax import nnx

from specjax.decode.engine import DecodeLoop


def _median_ms(fn, args, reps: int) -> float:
    jax.block_until_ready(fn(*args))  # compile + warm-up
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t)
    return 1e3 * statistics.median(times)


def time_breakdown(loop: DecodeLoop, tstate, dstate, prompts, lengths, keys, *, reps: int = 3,
                   compiler_options: dict | None = None) -> dict[str, float]:
    """Milliseconds per loop step for each part (see the module docstring), plus fractions."""
    jit = lambda f: jax.jit(f, compiler_options=compiler_options)  # noqa: E731

    def models(ts, ds):
        target = nnx.merge(loop.target_graph, ts)
        dmodel = None if loop.draft_graph is None else nnx.merge(loop.draft_graph, ds)
        return target, dmodel

    def init(ts, ds, p, n, k):
        target, dmodel = models(ts, ds)
        return jax.vmap(lambda *a: loop.init(target, dmodel, *a))(p, n, k)

    st = jit(init)(tstate, dstate, prompts, lengths, keys)

    def step(ts, ds, st):
        return loop.body(*models(ts, ds), st)

    out = {"step_ms": _median_ms(jit(step), (tstate, dstate, st), reps)}
    if loop.drafter is None:
        out |= dict(draft_ms=0.0, tree_ms=out["step_ms"], verify_ms=0.0)
    else:
        def propose(ts, ds, st):
            return jax.vmap(lambda s: loop.propose(models(ts, ds)[1], s))(st)

        def score(ts, st, drafts):
            target = nnx.merge(loop.target_graph, ts)
            nodes = loop.tree_sizes[-1]
            return jax.vmap(lambda s, d: loop.score(target, s, d, nodes))(st, drafts)

        def verify(st, drafts, q, logits):
            def one(s, d, qq, lg):
                k_verify = loop._keys(s)[1]
                return loop.verifier(k_verify, d, qq, loop.sampling(lg), s.verifier_state)
            return jax.vmap(one)(st, drafts, q, logits)

        # One jitted callable per part: a fresh jax.jit wrapper would compile the part again.
        propose, score, verify = jit(propose), jit(score), jit(verify)
        drafts, q, _ = propose(tstate, dstate, st)
        logits = score(tstate, st, drafts)[0]
        out["draft_ms"] = _median_ms(propose, (tstate, dstate, st), reps)
        out["tree_ms"] = _median_ms(score, (tstate, st, drafts), reps)
        out["verify_ms"] = _median_ms(verify, (st, drafts, q, logits), reps)
    parts = out["draft_ms"] + out["tree_ms"] + out["verify_ms"]
    out["other_ms"] = max(out["step_ms"] - parts, 0.0)
    total = parts + out["other_ms"]
    for part in ("draft", "tree", "verify", "other"):
        out[f"{part}_frac"] = out[f"{part}_ms"] / total if total > 0 else 0.0
    return {k: float(v) for k, v in out.items()}


def format_breakdown(b: dict[str, float]) -> str:
    return (f"per step {b['step_ms']:.1f} ms: draft {b['draft_ms']:.1f} ({b['draft_frac']:.0%}), "
            f"tree {b['tree_ms']:.1f} ({b['tree_frac']:.0%}), verify {b['verify_ms']:.1f} "
            f"({b['verify_frac']:.0%}), other {b['other_ms']:.1f} ({b['other_frac']:.0%})")

