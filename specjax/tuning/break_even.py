"""``fallback.break_even=auto``: the tokens a speculative step must emit to pay, measured here.

A speculative step costs the draft forwards, a tree pass of L + 1 tokens and the verifier;
an autoregressive step one decode. Their ratio is the break-even of the loop's fallback rule
(``specjax.decode.fallback``), and it depends on the machine far more than on the text: 1.4 on
an Intel Xeon (AVX-512, int8 0.5B draft at L = 6 beside the float32 1.5B) against 2.4 on an
AMD EPYC family 23 VM (``docs/running.md``). So it is timed, not assumed: two short probes from
the first prompt's first token (a prefill of one row, so the time is the steps' own), the
run's drafter without the fallback and the target alone, each ``probe_tokens`` tokens and
timed on its second call; the ratio of their wall time per target call. A step's cost barely
depends on what it accepts (the shapes are static), so a cut prompt measures it.

Why the decode stays exact: the number is fixed before the measured run starts, from probe
runs whose tokens are thrown away, and the rule is exact for every break-even.
"""

from __future__ import annotations

import sys


def calls(result) -> int:
    return max(result.summary["target_calls"], 1)


def measure_break_even(target, draft, drafter, prompts, *, verifier=None, sampling=None,
                       probe_prompt: int = 1, probe_tokens: int = 64, seed: int = 0,
                       **generate_kw) -> tuple[float, dict]:
    """(break-even tokens per speculative step, what was measured) on the first prompt."""
    from specjax.api import generate

    first = prompts[0]
    ids = list(target.encode(first) if isinstance(first, str) else first)[:probe_prompt]
    kw = dict(sampling=sampling, max_new_tokens=probe_tokens, seed=seed + 1, progress=False,
              **generate_kw)
    # Each probe runs twice and the second call is timed: the first call after a compile also
    # pays one-time costs (a 32-token probe on the Xeon: 636 ms per speculative step on the
    # first call, against the loop's 365 ms).
    for _ in range(2):
        spec = generate(target, [ids], draft=draft, drafter=drafter, verifier=verifier, **kw)
        ar = generate(target, [ids], **kw)
    # The prefill of a one-token prompt is one forward of one row: an AR step's cost, counted
    # as one more step of the AR probe and taken off the speculative one.
    ar_ms = 1e3 * ar.summary["wall_time_s"] / (calls(ar) + 1)
    spec_ms = (1e3 * spec.summary["wall_time_s"] - ar_ms) / calls(spec)
    info = dict(break_even=max(spec_ms / ar_ms, 1.0), speculative_step_ms=spec_ms,
                ar_step_ms=ar_ms, speculative_steps=calls(spec), ar_steps=calls(ar),
                probe_prompt=len(ids), probe_tokens=probe_tokens)
    print(f"specjax: fallback.break_even=auto -> {info['break_even']:.2f} tokens per "
          f"speculative step (step {spec_ms:.0f} ms vs AR {ar_ms:.0f} ms, {probe_tokens}-token "
          f"probes)", file=sys.stderr, flush=True)
    return info["break_even"], info
