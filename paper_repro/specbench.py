"""Spec-Bench on the CPU at batch 1: does speculation pay on every kind of text?

    python -m paper_repro.specbench --preset cpu        # float32 target (the main command's)
    python -m paper_repro.specbench --preset cpu_int8   # int8 target (and draft)
    python -m paper_repro.specbench --preset tiny       # the toy pair, seconds (the tests')

Spec-Bench's six tasks (Xia et al. 2024, vendored: ``specjax/prompts/spec_bench``; multi-turn
is its first turn) and the EAGLE HumanEval subset, the first 8 prompts of each, 64 new tokens,
T = 1, each prompt decoded alone (latency), timing repeats interleaved across the methods of a
dataset, as in Table 1 (``paper_repro.table1``: SR intervals over prompts and repeats, exact
sign-flip tests, BE, per-position acceptance, the step breakdown, machine and commit).

Rows: AR; the main command's setup (token-wise SD, int8 0.5B draft, L = 6); the same with the
loop's fallback to autoregressive steps where speculating does not pay (``break_even=auto``);
and prompt lookup (``drafter=ngram``, L = 6: drafts copied from the context, no draft model,
so no draft prefill either). Wall times include each prompt's prefill, as Spec-Bench counts
them; every prompt is prefilled at its own padded width (``specjax.api.prompt_bucket``).
"""

from __future__ import annotations

from dataclasses import replace

from paper_repro.cells import Method, Setting
from paper_repro.table1 import run_table

TASKS = ("mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag")
DATASETS = (*(f"spec_bench/{t}" for t in TASKS), "humaneval")
_CPU = Setting(models="qwen-coder", datasets=DATASETS, n=8, max_new_tokens=64, K=1, L=6,
               temperature=1.0, batch_size=1, repeats=2, draft_weights="int8", breakdown=True)
PRESETS: dict[str, Setting] = {
    "tiny": Setting(models="toy", datasets=DATASETS, n=2, max_new_tokens=12, K=1, L=3,
                    temperature=1.0, batch_size=1, fast_compile=True, repeats=2),
    "cpu": _CPU,
    "cpu_int8": replace(_CPU, target_weights="int8"),
}


def methods(setting: Setting) -> list[Method]:
    return [
        Method(None),
        Method("token", label="sd"),
        Method("token", break_even="auto", label="sd_fallback"),
        Method("token", drafter="ngram", label="lookup"),
    ]


def main(argv=None) -> dict:
    return run_table("specbench", "Spec-Bench at batch 1 on the CPU: AR, the main command's "
                     "SD, SD with the fallback, prompt lookup", argv, PRESETS, methods,
                     paper=False)


if __name__ == "__main__":
    main()
