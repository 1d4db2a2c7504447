"""Prompts from a researcher's own JSON-lines file.

Two line forms, because those are what speculative-decoding benchmarks ship:

- the Spec-Bench / EAGLE ``question.jsonl`` form: ``{"question_id": ..., "category": ...,
  "turns": ["first user turn", ...]}``. Only the first turn is used, as for the bundled suites:
  later turns refer to the model's own earlier answer, which differs between runs;
- one object per line with a text field (``field``, default ``prompt``), e.g.
  ``{"prompt": "..."}``.

A line that is neither is refused with its line number, before any model loads, so a typo in a
long file never costs a run.
"""

from __future__ import annotations

import json
from pathlib import Path

from specjax.prompts.prompt import Prompt


def read_prompt_file(path: str | Path | None, field: str = "prompt",
                     categories: str | list[str] | tuple[str, ...] | None = None
                     ) -> list[Prompt]:
    """The file's prompts (``suites.Prompt``), optionally only those whose Spec-Bench
    ``category`` is one of ``categories`` (a comma list or a sequence)."""
    if path is None or str(path) == "":
        raise ValueError("dataset.path: dataset=file needs a JSON-lines file "
                         "(dataset.path=PATH)")
    file = Path(path).expanduser()
    if not file.is_file():
        raise ValueError(f"dataset.path: no such file {str(file)!r}")
    if not (isinstance(field, str) and field):
        raise ValueError(f"dataset.field: must be a non-empty field name, got {field!r}")
    prompts = []
    with file.open(encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"dataset.path: {file} line {number}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: not valid JSON ({e.msg})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{where}: each line must be a JSON object, got "
                                 f"{type(row).__name__}")
            prompts.append(Prompt(id=str(row.get("question_id", f"file/{number}")),
                                  text=_text(row, field, where),
                                  category=str(row.get("category") or "")))
    if not prompts:
        raise ValueError(f"dataset.path: {file} holds no prompts")
    if categories is None:
        return prompts
    wanted = ([c.strip() for c in categories.split(",") if c.strip()]
              if isinstance(categories, str) else [str(c) for c in categories])
    kept = [p for p in prompts if p.category in wanted]
    if not kept:
        have = sorted({p.category for p in prompts if p.category})
        raise ValueError(f"dataset.category: no prompt of {file} is in {wanted}; its "
                         f"categories: {', '.join(have) if have else 'none'}")
    return kept


def _text(row: dict, field: str, where: str) -> str:
    if "turns" in row:
        turns = row["turns"]
        if not (isinstance(turns, list) and turns and all(isinstance(t, str) for t in turns)):
            raise ValueError(f"{where}: 'turns' must be a non-empty list of strings")
        text = turns[0]
    elif field in row:
        text = row[field]
        if not isinstance(text, str):
            raise ValueError(f"{where}: {field!r} must be a string, got {type(text).__name__}")
    else:
        raise ValueError(f"{where}: no 'turns' (Spec-Bench question form) and no {field!r} "
                         f"field (dataset.field); its fields: {', '.join(sorted(row))}")
    if not text.strip():
        raise ValueError(f"{where}: the prompt text is empty")
    return text


__all__ = ["read_prompt_file"]
