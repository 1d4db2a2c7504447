"""Prompt suites: the vendored EAGLE subsets (``eagle_suites/``) and Spec-Bench
(``spec_bench/``), the full HumanEval and the toy suite (``suites``).

Low in the house: prompts are text and ids, read before any model is loaded.
"""

from specjax.prompts.suites import (
    EAGLE_SUITES,
    HUMANEVAL_INSTRUCTION,
    SPEC_BENCH_TASKS,
    SUITES,
    Prompt,
    PromptSuite,
    format_prompt,
    load_prompts,
)

__all__ = ["EAGLE_SUITES", "HUMANEVAL_INSTRUCTION", "SPEC_BENCH_TASKS", "SUITES", "Prompt",
           "PromptSuite", "format_prompt", "load_prompts"]
