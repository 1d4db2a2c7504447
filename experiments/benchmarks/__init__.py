"""Micro-benchmarks of specjax components (run as modules: python -m experiments.benchmarks.X)."""

from pathlib import Path


def write_report(text: str, out) -> None:
    """Print a benchmark's markdown and write it to ``out`` (parents created)."""
    print(text)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(text)
    print(f"wrote {out}")
