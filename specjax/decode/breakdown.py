"""Where a decode step's time goes: draft passes, tree pass, verifier, and the rest.

The decode loop is one compiled ``while_loop``, so its parts cannot be timed from inside. Each
part is compiled on its own instead, at the run's exact shapes (batch, prompt padding, K, L,
vocabulary), and timed on a state taken right after prefill:

- ``draft``: the drafter's ``propose`` (all L draft-model forwards, or the n-gram lookup);
- ``tree``: the target forward over the largest compiled tree (the trie may run a smaller one);
- ``verify``: the sampling transform of the target logits and the verifier, in one program as
  the loop runs them; ``sampling`` and ``verifier`` time each alone. The two alone need not
  add up to ``verify``: in one program XLA runs the transform (K (L + 1) rows of the
  vocabulary) beside the verifier's work that does not wait for it, so the transform's cost
  depends on the verifier it is compiled with (docs/verifiers/spectr.md has the numbers);
- ``other``: one whole loop step minus the three (commit, drafter update, bookkeeping, and
  whatever the fused step saves or costs over the parts).

For autoregressive decoding ``tree`` is the one-token pass and ``draft`` / ``verify`` are 0.

The parts are standalone programs; the loop compiles them into one ``while_loop``, where
copies of the carry, layout changes and scheduling can cost more (or less). So the prefill is
timed too (``prefill_ms``), and ``in_loop`` turns a run's own wall time into the step the loop
really took: (wall time - prefill per call) / loop iterations, beside ``step_ms`` as a ratio.
"""

from __future__ import annotations

import statistics
import time

import jax
from flax import nnx

from specjax.decode.engine import DecodeLoop, per_sequence


def _median_ms(fn, args, reps: int, *, warm: bool = False) -> float:
    if not warm:
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

    init = jit(init)
    st = jax.block_until_ready(init(tstate, dstate, prompts, lengths, keys))  # its warm-up
    prefill_ms = _median_ms(init, (tstate, dstate, prompts, lengths, keys), reps, warm=True)

    def step(ts, ds, st):
        return loop.body(*models(ts, ds), st)

    out = {"step_ms": _median_ms(jit(step), (tstate, dstate, st), reps),
           "prefill_ms": prefill_ms}
    if loop.drafter is None:
        out |= dict(draft_ms=0.0, tree_ms=out["step_ms"], verify_ms=0.0, sampling_ms=0.0,
                    verifier_ms=0.0)
    else:
        def propose(ts, ds, st):
            return per_sequence(lambda s: loop.propose(models(ts, ds)[1], s), st)

        def score(ts, st, drafts):
            target = nnx.merge(loop.target_graph, ts)
            nodes = loop.tree_sizes[-1]
            return jax.vmap(lambda s, d: loop.score(target, s, d, nodes))(st, drafts)

        def verifying(transform):
            """The verifier on ``transform(x)``, per sequence as the loop's ``finish`` calls it."""
            def run(st, drafts, q, x):
                def one(s, d, qq, xx):
                    return loop.verifier(loop._keys(s)[1], d, qq, transform(xx),
                                         s.verifier_state)
                return per_sequence(one, st, drafts, q, x)
            return jit(run)

        # One jitted callable per part: a fresh jax.jit wrapper would compile the part again.
        propose, score, verify = jit(propose), jit(score), verifying(loop.sampling)
        drafts, q, _ = propose(tstate, dstate, st)
        logits = score(tstate, st, drafts)[0]
        out["draft_ms"] = _median_ms(propose, (tstate, dstate, st), reps)
        out["tree_ms"] = _median_ms(score, (tstate, st, drafts), reps)
        out["verify_ms"] = _median_ms(verify, (st, drafts, q, logits), reps)
        sampling = jit(loop.sampling)  # any leading axes
        out["sampling_ms"] = _median_ms(sampling, (logits,), reps)
        out["verifier_ms"] = _median_ms(verifying(lambda p: p), (st, drafts, q,
                                                                 sampling(logits)), reps)
    parts = out["draft_ms"] + out["tree_ms"] + out["verify_ms"]
    out["other_ms"] = max(out["step_ms"] - parts, 0.0)
    total = parts + out["other_ms"]
    for part in ("draft", "tree", "verify", "other"):
        out[f"{part}_frac"] = out[f"{part}_ms"] / total if total > 0 else 0.0
    return {k: float(v) for k, v in out.items()}


def in_loop(breakdown: dict[str, float], wall_s: list[float], iterations: list[int]
            ) -> dict[str, float]:
    """The step the compiled loop took, from a run's wall time per call (``wall_s``) and its
    loop iterations per call (the most target calls of any row of the call): the prefill's
    time taken out, the rest over the iterations; and its ratio to the standalone step."""
    steps = sum(iterations)
    if steps <= 0:
        return {}
    decode_ms = 1e3 * sum(wall_s) - breakdown["prefill_ms"] * len(wall_s)
    step = max(decode_ms, 0.0) / steps
    return {"in_loop_step_ms": step, "in_loop_ratio": step / breakdown["step_ms"]
            if breakdown["step_ms"] > 0 else float("nan")}


def format_breakdown(b: dict[str, float]) -> str:
    head = (f"in the loop {b['in_loop_step_ms']:.1f} ms per step, {b['in_loop_ratio']:.2f}x "
            f"the standalone step; " if "in_loop_step_ms" in b else "")
    split = (f"; alone: transform {b['sampling_ms']:.1f}, verifier {b['verifier_ms']:.1f}"
             if "verifier_ms" in b else "")
    return (head + f"standalone step {b['step_ms']:.1f} ms: draft {b['draft_ms']:.1f} "
            f"({b['draft_frac']:.0%}), tree {b['tree_ms']:.1f} ({b['tree_frac']:.0%}), verify "
            f"{b['verify_ms']:.1f} ({b['verify_frac']:.0%}{split}), other {b['other_ms']:.1f} "
            f"({b['other_frac']:.0%}); prefill {b['prefill_ms']:.1f} ms")

