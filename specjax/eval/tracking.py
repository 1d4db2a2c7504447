"""Experiment trackers behind one interface (the levanter pattern: wandb / json / noop).

The app talks only to :class:`Tracker`, so switching ``logger=wandb`` to ``logger=jsonl`` or
``logger=none`` changes where metrics go, never what the experiment does. Construction is cheap
and side-effect free (configs are instantiated in tests); nothing is opened before ``start``.

W&B runs offline unless the user has set ``WANDB_MODE`` (machines here have no route to the W&B
servers; ``wandb sync`` uploads an offline run later).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Protocol


class Tracker(Protocol):
    def start(self, run_dir: str | os.PathLike, name: str, config: dict[str, Any]) -> None:
        """Open the run and record its resolved config."""

    def log_table(self, name: str, rows: list[dict[str, Any]]) -> None:
        """One row per prompt (same keys in every row)."""

    def log(self, metrics: dict[str, float], step: int) -> None:
        """Scalars at a training step (``specjax-train``: loss, lr, eval metrics)."""

    def log_summary(self, metrics: dict[str, Any]) -> None:
        """Final scalar metrics of the run."""

    def finish(self) -> None: ...


class NoneTracker:
    """Logs nothing: results.jsonl in the run dir is still written by the app."""

    def start(self, run_dir, name, config):
        pass

    def log_table(self, name, rows):
        pass

    def log(self, metrics, step):
        pass

    def log_summary(self, metrics):
        pass

    def finish(self):
        pass


class JsonlTracker:
    """Appends one JSON event per call to ``<run_dir>/<filename>``: greppable, no dependencies."""

    def __init__(self, filename: str = "tracker.jsonl"):
        self.filename = filename
        self.path: Path | None = None

    def _write(self, event: dict[str, Any]) -> None:
        if self.path is None:
            raise RuntimeError("JsonlTracker: call start(run_dir, name, config) first")
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(event, default=str) + "\n")

    def start(self, run_dir, name, config):
        self.path = Path(run_dir) / self.filename
        self._write({"event": "config", "name": name, "config": config})

    def log_table(self, name, rows):
        self._write({"event": "table", "name": name, "rows": rows})

    def log(self, metrics, step):
        self._write({"event": "metrics", "step": step, "metrics": metrics})

    def log_summary(self, metrics):
        self._write({"event": "summary", "metrics": metrics})

    def finish(self):
        self.path = None


class WandbTracker:
    """Weights & Biases: config, a per-prompt table and summary metrics; offline by default."""

    def __init__(self, project: str = "specjax", entity: str | None = None,
                 group: str | None = None, tags: list[str] | tuple[str, ...] = (),
                 mode: str = "offline"):
        self.project, self.entity, self.group = project, entity, group
        self.tags = list(tags)
        self.mode = mode
        self.run = None

    def start(self, run_dir, name, config):
        import wandb

        # The user's WANDB_MODE wins over the config's default; otherwise pin the config's mode
        # in the environment too, so wandb's own subprocesses agree with it.
        mode = os.environ.setdefault("WANDB_MODE", self.mode)
        self.run = wandb.init(
            project=self.project, entity=self.entity, group=self.group, tags=self.tags,
            name=name, dir=str(run_dir), config=config, mode=mode, reinit="finish_previous",
        )

    def log_table(self, name, rows):
        import wandb

        if not rows:
            return
        columns = list(rows[0])
        data = [[_scalar(r.get(c)) for c in columns] for r in rows]
        self.run.log({name: wandb.Table(columns=columns, data=data)})

    def log(self, metrics, step):
        self.run.log(metrics, step=step)

    def log_summary(self, metrics):
        self.run.summary.update(metrics)

    def finish(self):
        if self.run is not None:
            self.run.finish()
            self.run = None


def _scalar(value):
    """wandb.Table cells must be scalars or strings; lists (per-position counts) become JSON."""
    return value if isinstance(value, (int, float, str, bool, type(None))) else json.dumps(value)


__all__ = ["JsonlTracker", "NoneTracker", "Tracker", "WandbTracker"]
