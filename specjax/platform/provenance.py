"""Which code produced a result: the git commit of the checkout, marked when it had edits.

A measured cell is only comparable with another when both ran the same decoder (the float32
kernels alone halved the tree pass), so every stored result names its commit next to the machine
(``specjax.platform.hardware``). ``+dirty`` means tracked code differed from that commit while
it ran.
Edits under ``paper_repro/results/`` do not count: the runs themselves rewrite those tracked
result files (cells.jsonl, the tables), so counting them would stamp every resumed run dirty.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = "paper_repro/results"  # generated outputs: their edits are not code edits


def _git(root: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                             timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def commit(root: Path = ROOT) -> str:
    """``<short hash>``, ``<short hash>+dirty``, or ``unknown`` outside a git checkout (e.g. a
    non-editable install). Asked anew on every call: commits and edits can land mid-run."""
    head = _git(root, "rev-parse", "--short=12", "HEAD")
    if not head:
        return "unknown"
    status = _git(root, "status", "--porcelain", "--untracked-files=no", "--", ".",
                  f":(exclude){RESULTS}")
    return head + ("+dirty" if status else "")
