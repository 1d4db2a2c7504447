"""Where trained drafters live and how the drafters find them.

A training run writes to ``<cache>/train/<kind>/<target>/<hash>/`` (``specjax.assets.cache_root``;
``$SPECJAX_CACHE`` moves it), where ``<hash>`` is a digest of the resolved training config minus
the fields that do not change the weights (logging, progress). The directory holds ``run.json``
(the config and what the module needs to be rebuilt), the orbax checkpoints under ``ckpt/`` and,
once training has finished, ``final.json``. ``<cache>/train/<kind>/<target>/latest`` names the
last finished run: what ``EagleDrafter(checkpoint=None)`` and friends load.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from specjax.assets import cache_root

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


def build_trained(kind: str, target, checkpoint: str | None, name: str, *,
                  draft_vocab: int | None = None, **defaults):
    """The drafter module for ``kind`` on ``target``: trained weights, or a random init.

    ``checkpoint``: None = the latest finished run for (kind, target); ``random[:seed]`` = an
    untrained module built with ``defaults`` (tests, smoke runs); else a run directory.
    ``draft_vocab``: restrict drafting to the n most frequent tokens of the run's training text
    (``token_counts.npy``; for a random module, ids 0..n-1).
    """
    module, counts = _build_trained(kind, target, checkpoint, name, **defaults)
    if draft_vocab is not None:
        V = int(module.readout.config.vocab_size)
        if not (isinstance(draft_vocab, int) and 1 <= draft_vocab <= V):
            raise ValueError(f"{name}: draft_vocab must be an integer in [1, {V}] or null, got "
                             f"{draft_vocab!r}")
        ids = (np.arange(draft_vocab) if counts is None
               else np.argsort(-counts, kind="stable")[:draft_vocab])
        module.readout.restrict(ids)
    return module


def _build_trained(kind: str, target, checkpoint: str | None, name: str, **defaults):
    from specjax.drafters.eagle import target_decoder
    from specjax.training.checkpoints import restore_params
    from specjax.training.tasks import make_trainable, wrap_for_drafting

    decoder = target_decoder(target, name)
    target_name = getattr(target, "name", "target")
    if checkpoint is not None and str(checkpoint).startswith("random"):
        seed = int(str(checkpoint).partition(":")[2] or 0)
        trainable = make_trainable(kind, decoder.config, seed=seed, **defaults)
        return wrap_for_drafting(kind, trainable, decoder), None
    if checkpoint is None:
        run = latest_run(kind, target_name)
        if run is None:
            raise ValueError(
                f"{name}: no trained {kind} drafter for target {target_name!r} under "
                f"{kind_root(kind, target_name)}; train one first: specjax-train drafter={kind} "
                f"target={target_name} (or pass drafter.checkpoint=random for an untrained one)")
    else:
        run = Path(checkpoint).expanduser()
    meta = read_run(run)
    if meta["kind"] != kind:
        raise ValueError(f"{name}: checkpoint {run} holds a {meta['kind']!r} run, not {kind!r}")
    trainable = make_trainable(kind, decoder.config, seed=0, **meta["module"])
    restore_params(run, trainable)
    counts = run / "token_counts.npy"
    return (wrap_for_drafting(kind, trainable, decoder),
            np.load(counts) if counts.is_file() else None)
