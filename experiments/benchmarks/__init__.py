"""Micro-benchmarks of specjax components (run as modules: python -m experiments.benchmarks.X)."""

import shlex
import sys
from pathlib import Path


def command_line(module: str) -> str:
    """The command that produced a report, flags included (so a committed table says how it was
    run), e.g. ``python -m experiments.benchmarks.peers --weights float32 int8``."""
    return " ".join(["python -m", module, *map(shlex.quote, sys.argv[1:])])


def write_report(text: str, out) -> None:
    """Print a benchmark's markdown and write it to ``out`` (parents created)."""
    print(text)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(text)
    print(f"wrote {out}")
