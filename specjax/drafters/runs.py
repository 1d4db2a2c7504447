"""Trained drafter runs on disk: where they live, which one is the latest, their parameters.

The one place both sides agree on: ``specjax.training`` writes runs here and the drafters
(``specjax.drafters.trained``, ``specjax.drafters.family``) read them; it imports neither.

A training run writes to ``<cache>/train/<kind>/<target>/<hash>/``
(``specjax.platform.assets.cache_root``; ``$SPECJAX_CACHE`` moves it), where ``<hash>`` is a digest
of the resolved training config minus the fields that do not change the weights (logging, progress).
The directory holds ``run.json`` (the config and what the module needs to be rebuilt), the orbax
checkpoints under ``ckpt/`` and, once training has finished, ``final.json``.
``<cache>/train/<kind>/<target>/latest`` names the last finished run: what
``EagleDrafter(checkpoint=None)`` and friends load.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp
from flax import nnx

from specjax.platform.assets import cache_root

#: Config keys that do not change the trained weights (excluded from the run hash).
VOLATILE = ("logger", "progress", "run_name", "log_every", "keep", "save_every", "eval_every",
            "eval_batches", "cache_dir")


def config_hash(cfg: dict[str, Any]) -> str:
    stable = {k: v for k, v in cfg.items() if k not in VOLATILE}
    blob = json.dumps(stable, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def kind_root(kind: str, target_name: str, cache_dir: str | os.PathLike | None = None) -> Path:
    return cache_root(cache_dir) / "train" / kind / target_name.replace("/", "_")


def run_dir(kind: str, target_name: str, cfg: dict[str, Any],
            cache_dir: str | os.PathLike | None = None) -> Path:
    return kind_root(kind, target_name, cache_dir) / config_hash(cfg)


def mark_latest(run: Path) -> None:
    """Point ``latest`` at a finished run (atomic replace)."""
    tmp = run.parent / ".latest.tmp"
    tmp.write_text(run.name + "\n")
    os.replace(tmp, run.parent / "latest")


def latest_run(kind: str, target_name: str, cache_dir=None) -> Path | None:
    pointer = kind_root(kind, target_name, cache_dir) / "latest"
    if not pointer.is_file():
        return None
    run = pointer.parent / pointer.read_text().strip()
    return run if (run / "final.json").is_file() else None


def read_run(run: Path) -> dict[str, Any]:
    path = Path(run) / "run.json"
    if not path.is_file():
        raise ValueError(f"checkpoint: {run} is not a specjax-train run (no run.json)")
    return json.loads(path.read_text())


def find_family_run(target_name: str, hidden_size: int, num_layers: int, cache_dir=None):
    """The latest finished draft-family run of this shape for the target, or None."""
    root = kind_root("family", target_name, cache_dir)
    want = {"hidden_size": hidden_size, "num_layers": num_layers}
    runs = [p.parent for p in root.glob("*/final.json")
            if json.loads(p.read_text()).get("module") == want]
    return max(runs, key=lambda r: (r / "final.json").stat().st_mtime) if runs else None


def checkpoint_manager(run: Path, keep: int = 2) -> ocp.CheckpointManager:
    """The orbax manager of ``<run>/ckpt/`` (one step directory per saved step)."""
    logging.getLogger("absl").setLevel(logging.WARNING)  # orbax logs every save phase at INFO
    options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True)
    return ocp.CheckpointManager(Path(run).resolve() / "ckpt", options=options)


def restore_params(run: Path, module: nnx.Module) -> int:
    """Load the latest checkpoint's parameters into ``module`` in place; returns its step."""
    mngr = checkpoint_manager(run)
    step = mngr.latest_step()
    if step is None:
        raise ValueError(f"checkpoint: no complete checkpoint under {Path(run) / 'ckpt'}")
    template = nnx.state(module)  # the structure the trainer saved (``nnx.split``'s state)
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, template)
    out = mngr.restore(step, args=ocp.args.Composite(
        params=ocp.args.StandardRestore(abstract)))
    nnx.update(module, out["params"])
    return step
