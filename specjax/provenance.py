"""Which code produced a result: the git commit of the checkout, marked when it had edits.

A measured cell is only comparable with another when both ran the same decoder (the float32
kernels alone halved the tree pass), so every stored result names its commit next to the machine
(``specjax.hardware``). ``+dirty`` means tracked files differed from that commit while it ran.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                             timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def commit() -> str:
    """``<short hash>``, ``<short hash>+dirty``, or ``unknown`` outside a git checkout (e.g. a
    non-editable install). Asked anew on every call: commits and edits can land mid-run."""
    head = _git("rev-parse", "--short=12", "HEAD")
    if not head:
        return "unknown"
    status = _git("status", "--porcelain", "--untracked-files=no")
    return head + ("+dirty" if status else "")
