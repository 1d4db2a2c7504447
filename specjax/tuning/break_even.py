"""``fallback.break_even=auto``: the tokens a speculative step must emit to pay, measured here.

A speculative step costs the draft forwards, a tree pass of L + 1 tokens and the verifier;
an autoregressive step one decode. Their ratio is the break-even of the loop's fallback rule
(``specjax.decode.fallback``), and it depends on the machine far more than on the text: 1.4 on
an Intel Xeon (AVX-512, int8 0.5B draft at L = 6 beside the float32 1.5B) against 2.4 on an
AMD EPYC family 23 VM (``docs/running.md``). So it is timed, not assumed: two short probes on
the first prompt cut to ``probe_prompt`` tokens (a short prefill, so the per-step time is the
steps' own), the run's drafter without the fallback and the target alone, each
``probe_tokens`` tokens; the ratio of their wall time per target call. A step's cost barely
depends on what it accepts (the shapes are static), so a cut prompt measures it.

Why the decode stays exact: the number is fixed before the measured run starts, from probe
runs whose tokens are thrown away, and the rule is exact for every break-even.
"""

from __future__ import annotations

import sys


def step_ms(result) -> float:
    """Wall time per target call of a probe (compile excluded by ``generate``)."""
    return 1e3 * result.summary["wall_time_s"] / max(result.summary["target_calls"], 1)


def measure_break_even(target, draft, drafter, prompts, *, verifier=None, sampling=None,
                       probe_prompt: int = 16, probe_tokens: int = 32, seed: int = 0,
                       **generate_kw) -> tuple[float, dict]:
    """(break-even tokens per speculative step, what was measured) on the first prompt."""
    from specjax.api import generate

    first = prompts[0]
    ids = list(target.encode(first) if isinstance(first, str) else first)[:probe_prompt]
    kw = dict(sampling=sampling, max_new_tokens=probe_tokens, seed=seed + 1, progress=False,
              **generate_kw)
    spec = generate(target, [ids], draft=draft, drafter=drafter, verifier=verifier, **kw)
    ar = generate(target, [ids], **kw)
    ratio = step_ms(spec) / step_ms(ar)
    info = dict(break_even=max(ratio, 1.0), speculative_step_ms=step_ms(spec),
                ar_step_ms=step_ms(ar), probe_prompt=len(ids), probe_tokens=probe_tokens)
    print(f"specjax: fallback.break_even=auto -> {info['break_even']:.2f} tokens per "
          f"speculative step (step {info['speculative_step_ms']:.0f} ms vs AR "
          f"{info['ar_step_ms']:.0f} ms, {probe_tokens}-token probes)", file=sys.stderr,
          flush=True)
    return info["break_even"], info
