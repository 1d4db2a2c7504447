"""Orbax checkpoints of a training run: trainable parameters, optimizer state, step.

``save`` writes ``<run>/ckpt/<step>/`` through the run's orbax ``CheckpointManager``
(``specjax.drafters.runs.checkpoint_manager``; atomic: a step directory exists only once it is
complete, so a kill mid-save leaves the previous one); ``restore`` rebuilds exactly the saved
pytrees (the optimizer state keeps its optax structure, taken from a freshly initialised template).
"""

from __future__ import annotations

import jax
import orbax.checkpoint as ocp


def save(mngr: ocp.CheckpointManager, step: int, params, opt_state) -> None:
    mngr.save(step, args=ocp.args.Composite(params=ocp.args.StandardSave(params),
                                            opt_state=ocp.args.StandardSave(opt_state)))
    mngr.wait_until_finished()


def restore(mngr: ocp.CheckpointManager, params_template, opt_template):
    """(step, params, opt_state) of the latest complete checkpoint, or None."""
    step = mngr.latest_step()
    if step is None:
        return None
    abstract = lambda t: jax.tree.map(ocp.utils.to_shape_dtype_struct, t)  # noqa: E731
    out = mngr.restore(step, args=ocp.args.Composite(
        params=ocp.args.StandardRestore(abstract(params_template)),
        opt_state=ocp.args.StandardRestore(abstract(opt_template))))
    return step, out["params"], out["opt_state"]
