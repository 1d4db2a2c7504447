"""Prompt suites: the vendored EAGLE subsets (``eagle_suites/``), the full HumanEval and the toy
suite (``suites``).

Low in the house: prompts are text and ids, read before any model is loaded.
"""

from specjax.prompts.suites import (
    EAGLE_SUITES,
    HUMANEVAL_INSTRUCTION,
    SUITES,
    Prompt,
    PromptSuite,
    format_prompt,
    load_prompts,
)

__all__ = ["EAGLE_SUITES", "HUMANEVAL_INSTRUCTION", "SUITES", "Prompt", "PromptSuite",
           "format_prompt", "load_prompts"]
