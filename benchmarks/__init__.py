"""Benchmarks: scripts that time specjax on this machine and print tables
(``python -m benchmarks.<name>`` from the repository root).

Apart from the library on purpose: they sit above everything they time, are not installed with
``specjax``, and no library code imports them. The machine's limits come from
``specjax.platform.probes``; timers they share from ``benchmarks.timing``.
"""

import shlex
import sys
from pathlib import Path


def command_line(module: str) -> str:
    """The command that produced a report, flags included (so a committed table says how it was
    run), e.g. ``python -m benchmarks.peers --weights float32 int8``."""
    return " ".join(["python -m", module, *map(shlex.quote, sys.argv[1:])])


def write_report(text: str, out) -> None:
    """Print a benchmark's markdown and write it to ``out`` (parents created)."""
    print(text)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(text)
    print(f"wrote {out}")
