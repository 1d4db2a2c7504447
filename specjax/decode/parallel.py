"""Scaling out on JAX's own distribution: a device mesh, a sharded batch and target, many hosts.

The mesh always has two named axes, ``data`` and ``model``; an axis that is not used has size 1.

- ``data``: the batch of prompts is split over it. Each device decodes B / data sequences, and the
  decode loop stays ONE jitted ``while_loop``. XLA adds the few collectives the loop needs, which
  are the "every sequence done" test and the batch's tree size (``DecodeLoop.body``).
- ``model``: the target's attention heads and MLP columns are split over it (Megatron-LM's
  column/row split, Shoeybi et al. 2019, §3). The split is written as sharding annotations on
  the params (``decoder.TENSOR_PARALLEL``). Its KV cache is split over the same heads
  (``DecodeLoop.shard``). XLA inserts the all-reduce after ``wo`` and after ``w_down``. The
  draft model stays whole on every device, since drafts are small.

Nothing here is needed on one device: ``make_mesh(1, 1)`` is None, and ``generate`` then takes
the unsharded path, unchanged. Several processes (hosts) join one mesh through
``jax.distributed`` (``initialize_distributed``). Each process then loads the same weights and
prompts and feeds its own devices' shards, and every process receives the whole result.
"""

from __future__ import annotations

import os

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

DATA, MODEL = "data", "model"


def make_mesh(data: int = 1, model: int = 1, devices=None) -> Mesh | None:
    """A (data, model) mesh over the first data·model devices, or None for one device.

    ``data=-1`` takes every device (of every process) that the ``model`` axis leaves. With
    several processes the mesh must span all of their devices, because each process has to
    take part in the one jitted loop.
    """
    devices = list(jax.devices() if devices is None else devices)
    for name, value in (("data", data), ("model", model)):
        if isinstance(value, bool) or not isinstance(value, int) or not (
                value >= 1 or (name == "data" and value == -1)):
            raise ValueError(f"mesh.{name}: must be an integer >= 1"
                             f"{' or -1 (all devices)' if name == 'data' else ''}, got {value!r}")
    if data == -1:
        data = max(len(devices) // model, 1)
    n = data * model
    if n == 1 and jax.process_count() == 1:
        return None
    if n > len(devices):
        hint = (" (on CPU: XLA_FLAGS=--xla_force_host_platform_device_count="
                f"{n})" if devices[0].platform == "cpu" else "")
        raise ValueError(f"mesh.data x mesh.model: {data} x {model} = {n} devices needed, "
                         f"{len(devices)} found{hint}")
    if jax.process_count() > 1 and n != len(devices):
        raise ValueError(f"mesh.data x mesh.model: {data} x {model} = {n}, but the "
                         f"{jax.process_count()} processes have {len(devices)} devices in all; "
                         "a multi-process mesh must use every device")
    return Mesh(np.asarray(devices[:n]).reshape(data, model), (DATA, MODEL))


def check_tensor_parallel(config, model: int) -> None:
    """The target's heads must split evenly over the ``model`` axis (whole heads per device)."""
    if model == 1 or config is None:
        return
    for field in ("num_heads", "num_kv_heads", "intermediate_size"):
        if getattr(config, field) % model:
            raise ValueError(f"mesh.model: {model} must divide the target's {field} "
                             f"({getattr(config, field)})")


def _put(x, sharding: NamedSharding):
    """One array placed with ``sharding``: from this process's copy when it is one of several."""
    if jax.process_count() == 1:
        return jax.device_put(x, sharding)
    x = np.asarray(x)
    return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])


def shard_params(state, mesh: Mesh, *, tensor_parallel: bool):
    """Weights onto the mesh: split as annotated (``tensor_parallel``), or whole on every device."""
    if tensor_parallel:
        specs = nnx.get_partition_spec(state)
    else:
        specs = jax.tree.map(lambda _: PartitionSpec(), state)
    return jax.tree.map(lambda x, p: _put(x, NamedSharding(mesh, p)), state, specs)


def shard_batch(arrays, mesh: Mesh):
    """Batch arrays (leading axis = prompts) split over the ``data`` axis."""
    return jax.tree.map(lambda x: _put(x, NamedSharding(mesh, PartitionSpec(DATA))), arrays)


def replicated(mesh: Mesh) -> NamedSharding:
    """Every device (hence every process) holds all of it: the decode loop's outputs."""
    return NamedSharding(mesh, PartitionSpec())


def distributed_env() -> dict | None:
    """``jax.distributed.initialize`` arguments when this process is one of many, else None.

    Two environments say so: a SLURM job step with ``SLURM_NTASKS`` > 1 (JAX reads the
    coordinator, process count and id from SLURM itself; only a one-task-per-node step is
    handed its node's GPUs, ``SLURM_GPUS_ON_NODE``, as local devices), or
    ``JAX_COORDINATOR_ADDRESS`` + ``JAX_NUM_PROCESSES`` > 1 + ``JAX_PROCESS_ID`` set by hand
    (any launcher, and the local two-process test).
    """
    env = os.environ
    if int(env.get("JAX_NUM_PROCESSES", "1")) > 1:
        missing = [k for k in ("JAX_COORDINATOR_ADDRESS", "JAX_PROCESS_ID") if k not in env]
        if missing:
            raise ValueError(f"JAX_NUM_PROCESSES={env['JAX_NUM_PROCESSES']} also needs "
                             f"{', '.join(missing)} in the environment")
        return dict(coordinator_address=env["JAX_COORDINATOR_ADDRESS"],
                    num_processes=int(env["JAX_NUM_PROCESSES"]),
                    process_id=int(env["JAX_PROCESS_ID"]))
    slurm = ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_PROCID", "SLURM_LOCALID")
    if int(env.get("SLURM_NTASKS", "1")) > 1 and all(k in env for k in slurm):
        # JAX's SLURM detection gives each task the one GPU numbered by its SLURM_LOCALID (one
        # process per GPU). With one task per node, that task drives all the node's GPUs.
        per_node = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_NTASKS_PER_NODE", "")
        gpus = int(env.get("SLURM_GPUS_ON_NODE", "0") or 0)
        if per_node.split("(")[0] == "1" and gpus > 1:
            return dict(local_device_ids=list(range(gpus)))
        return {}
    return None


def initialize_distributed() -> bool:
    """Join the other processes (``jax.distributed.initialize``) when the environment says there
    are any. Call it before anything touches a device. Returns True when it did."""
    kwargs = distributed_env()
    if kwargs is None or jax.distributed.is_initialized():
        return False
    jax.distributed.initialize(**kwargs)
    return True


def is_main_process() -> bool:
    """Process 0 writes files and logs; the others only compute."""
    return jax.process_index() == 0
