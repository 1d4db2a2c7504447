"""Speculative-decoding metrics, computed from the counters the decode loop returns.

Definitions (Leviathan et al. 2023 §3.1, Sun et al. 2024 "Block verification", §5):
- block efficiency = generated tokens / target calls (scoring forwards; prefill excluded). It is
  the expected tokens per iteration E[τ + 1] up to EOS/length truncation; 1 for autoregressive.
- mean accepted length = E[τ] = accepted draft tokens / target calls. τ is what the verifier
  accepted, counted in full even when EOS or ``max_new_tokens`` truncates the last step's output,
  so acceptance measures the verifier and mean accepted + 1 can exceed the (truncated) block
  efficiency by up to L / target calls.
- acceptance rate = accepted draft tokens / drafted tokens (L per call) = E[τ] / L.
- per-position acceptance[i] = P(τ > i): how often draft position i was accepted.
- speedup = throughput of speculative / throughput of autoregressive decoding of the same target
  on the same prompts (tokens/s ratio; equal to the wall-time ratio when both generate the same
  number of tokens). Wall times exclude compilation, which is reported separately.
"""

from __future__ import annotations

import numpy as np

#: Per-prompt keys that hold measured seconds (they differ between runs of the same decode).
TIMINGS = ("wall_time_s", "prefill_s")

def per_prompt_metrics(counters: dict[str, np.ndarray], i: int, L: int) -> dict:
    """Plain-Python metrics of prompt ``i`` from the loop's counters."""
    calls = int(counters["target_calls"][i])
    new = int(counters["new_tokens"][i])
    acc = int(counters["accepted"][i])
    app = [int(a) for a in counters["accepted_per_position"][i]]
    extra = {}
    if "root_bound" in counters:  # a RootBoundProbe ran (specjax.eval.root_bound): sum of alpha*
        extra["root_bound"] = float(counters["root_bound"][i])
    spec_calls = calls
    if "ar_steps" in counters:  # the loop fell back to autoregressive steps (decode.fallback)
        extra["ar_steps"] = int(counters["ar_steps"][i])
        spec_calls = calls - extra["ar_steps"]
    return extra | dict(
        prompt_tokens=int(counters["prompt_len"][i]),
        new_tokens=new,
        target_calls=calls,
        drafter_calls=int(counters["drafter_calls"][i]),
        accepted=acc,
        accepted_per_position=app,
        block_efficiency=new / calls if calls else 0.0,
        mean_accepted=acc / calls if calls else 0.0,
        acceptance_rate=acc / (spec_calls * L) if spec_calls and L else 0.0,
        stop="eos" if bool(counters["hit_eos"][i]) else "length",
    )


def summarize(per_prompt: list[dict], *, L: int, wall_time_s: float,
              compile_time_s: float, prefill_s: float | None = None) -> dict:
    """Corpus-level metrics: ratios of sums (a long prompt weighs more than a short one).

    ``prefill_s``: the seconds of ``wall_time_s`` spent prefilling (the time to the first
    token, less the one step that draws it); the rest is decoding, whose rate
    (``decode_tokens_per_s``) is what speculation changes. On a long prompt the prefill can be
    most of the wall time, so both are reported."""
    calls = sum(p["target_calls"] for p in per_prompt)
    new = sum(p["new_tokens"] for p in per_prompt)
    acc = sum(p["accepted"] for p in per_prompt)
    app = np.zeros(L)
    for p in per_prompt:
        app += np.asarray(p["accepted_per_position"], float)
    extra = {}
    spec_calls = calls  # acceptance is a property of the speculative steps only
    if all("ar_steps" in p for p in per_prompt) and per_prompt:
        extra["ar_steps"] = sum(p["ar_steps"] for p in per_prompt)
        spec_calls = calls - extra["ar_steps"]
    return extra | dict(
        num_prompts=len(per_prompt),
        new_tokens=new,
        target_calls=calls,
        drafter_calls=sum(p["drafter_calls"] for p in per_prompt),
        block_efficiency=new / calls if calls else 0.0,
        mean_accepted=acc / calls if calls else 0.0,
        acceptance_rate=acc / (spec_calls * L) if spec_calls and L else 0.0,
        per_position_acceptance=[float(a / spec_calls) if spec_calls else 0.0 for a in app],
        tokens_per_s=new / wall_time_s if wall_time_s > 0 else float("inf"),
        wall_time_s=wall_time_s,
        compile_time_s=compile_time_s,
    ) | ({} if prefill_s is None else dict(
        prefill_s=prefill_s,
        mean_prefill_s=prefill_s / len(per_prompt) if per_prompt else 0.0,
        decode_s=wall_time_s - prefill_s,
        decode_tokens_per_s=(new / (wall_time_s - prefill_s) if wall_time_s > prefill_s
                             else float("inf"))))


def regime(batch_size: int | None, num_prompts: int | None = None) -> str:
    """How a speed-up was measured. Batch 1 is the papers' latency setting; a batch decodes in
    one call that runs until its slowest row ends, so its ratio is a throughput ratio."""
    if batch_size == 1 or num_prompts == 1:
        return "latency, batch 1"
    return f"throughput, batch {batch_size or num_prompts or 'all prompts'}"


def speedup(spec_result, ar_result) -> float:
    """Throughput ratio of a speculative run over the autoregressive run of the same target."""
    spec, ar = spec_result.summary, ar_result.summary
    if spec["num_prompts"] != ar["num_prompts"]:
        raise ValueError(f"speedup: runs differ in num_prompts ({spec['num_prompts']} vs "
                         f"{ar['num_prompts']}); compare runs on the same prompts")
    return spec["tokens_per_s"] / ar["tokens_per_s"]


def decode_speedup(spec_result, ar_result) -> float | None:
    """``speedup`` of the decoding alone (prefill time left out of both runs): what
    speculation changes, which a long prompt's prefill hides end to end. None when a run did
    not time its prefill apart."""
    spec, ar = spec_result.summary, ar_result.summary
    if "decode_tokens_per_s" not in spec or "decode_tokens_per_s" not in ar:
        return None
    speedup(spec_result, ar_result)  # the same prompts
    return spec["decode_tokens_per_s"] / ar["decode_tokens_per_s"]
