"""The run's record: ``results.jsonl`` (one line per prompt + one summary line) and its table.

The summary line is written last and atomically (the whole file goes to a temporary name and is
renamed), so "results.jsonl has a summary line" means exactly "this run finished": that is the
resume test of a sweep, and a crash or an invalid config never leaves a half-written record over
an earlier one.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

RESULTS_FILE = "results.jsonl"

# (summary key, row label, format) in table order; missing keys are shown as "-".
METRICS = (
    ("num_prompts", "prompts", "{:d}"),
    ("new_tokens", "new tokens", "{:d}"),
    ("block_efficiency", "block efficiency (tokens / target call)", "{:.3f}"),
    ("mean_accepted", "mean accepted length", "{:.3f}"),
    ("acceptance_rate", "acceptance rate", "{:.3f}"),
    ("per_position_acceptance", "per-position acceptance", None),
    ("ar_steps", "autoregressive steps (fallback)", "{:d}"),
    ("tokens_per_s", "tokens / s (end to end)", "{:.1f}"),
    ("wall_time_s", "wall time (s, compile excluded)", "{:.3f}"),
    ("mean_prefill_s", "prefill per prompt (s, time to first token)", "{:.3f}"),
    ("decode_tokens_per_s", "decode tokens / s (prefill excluded)", "{:.1f}"),
    ("compile_time_s", "compile time (s)", "{:.2f}"),
)


def to_json(value: Any) -> Any:
    """NumPy / JAX scalars and arrays -> plain Python, recursively (json.dumps ``default``)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (set, tuple)):
        return list(value)
    return str(value)


def read_summary(run_dir: str | os.PathLike) -> dict[str, Any] | None:
    """The summary line of ``run_dir/results.jsonl``, or None if the run never finished."""
    path = Path(run_dir) / RESULTS_FILE
    if not path.exists():
        return None
    summary = None
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            return None  # a truncated file is not a finished run
        if row.get("type") == "summary":
            summary = row
    return summary


def write_results(run_dir: str | os.PathLike, prompt_rows: list[dict[str, Any]],
                  summary: dict[str, Any]) -> Path:
    """Write every prompt line, then the summary line, replacing the file in one rename."""
    path = Path(run_dir) / RESULTS_FILE
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for row in prompt_rows:
            f.write(json.dumps({"type": "prompt", **row}, default=to_json) + "\n")
        f.write(json.dumps({"type": "summary", **summary}, default=to_json) + "\n")
        f.flush()
        os.fsync(f.fileno())  # on disk before the rename publishes it (a crash, not only a kill)
    os.replace(tmp, path)
    return path


def _cell(value: Any, fmt: str | None) -> str:
    if value is None:
        return "-"
    if fmt is None:
        return " ".join(f"{v:.2f}" for v in value) if isinstance(value, list) else str(value)
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    try:
        return fmt.format(value)
    except (ValueError, TypeError):
        return str(value)


def metrics_table(summary: dict[str, Any]) -> Table:
    """Autoregressive vs speculative, one row per metric, and the speedup of the two."""
    spec = summary.get("speculative") or {}
    ar = summary.get("autoregressive") or {}
    title = (f"{summary.get('run_name', 'run')}: {summary.get('model', {}).get('target', '?')} | "
             f"drafter={summary.get('drafter', {}).get('name', '?')} "
             f"verifier={summary.get('verifier', '?')}"
             + (f" | {summary['regime']}" if summary.get("regime") else ""))
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("autoregressive", justify="right")
    table.add_column("speculative", justify="right")
    for key, label, fmt in METRICS:
        if key in spec or key in ar:
            table.add_row(label, _cell(ar.get(key), fmt) if ar else "-", _cell(spec.get(key), fmt))
    label = "speedup vs autoregressive" + (f" ({summary['regime']})" if summary.get("regime")
                                           else "")
    table.add_row(label, "", _speedup(summary, "speedup"))
    if summary.get("decode_speedup") is not None:
        table.add_row("speedup, decoding alone (prefill excluded)", "",
                      _speedup(summary, "decode_speedup"))
    if summary.get("speedup_sign_flip_p") is not None:
        table.add_row(f"sign-flip p, per-prompt speed ratio ({summary.get('timing_repeats', 1)} "
                      "interleaved timing repeats)", "", f"{summary['speedup_sign_flip_p']:.3g}")
    return table


def _speedup(summary: dict[str, Any], key: str) -> str:
    """``1.23x [1.10, 1.35]``: the ratio and, when the run measured one, its 95 % interval."""
    value = summary.get(key)
    if value is None:
        return "-"
    interval = summary.get(f"{key}_interval")
    return f"{value:.2f}x" + ("" if not interval else f" [{interval[0]:.2f}, {interval[1]:.2f}]")


def print_table(summary: dict[str, Any], console: Console | None = None) -> None:
    (console or Console()).print(metrics_table(summary))


__all__ = ["RESULTS_FILE", "metrics_table", "print_table", "read_summary", "to_json",
           "write_results"]
