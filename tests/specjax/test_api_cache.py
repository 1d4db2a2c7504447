"""Compiled loops: generate's in-process cache is bounded (a long sweep must not keep every
executable), and the on-disk cache that specjax-run enables serves a later process."""

import os
import subprocess
import sys

import specjax
from specjax import api

FAST = {"xla_backend_optimization_level": 0}


def test_compiled_loops_beyond_the_bound_are_dropped_least_recent_first(monkeypatch):
    monkeypatch.setattr(api, "_COMPILED", type(api._COMPILED)())

    def run(n):
        return specjax.generate("toy-target", ["0 1 2"], max_new_tokens=n, compiler_options=FAST,
                                progress=False, keep_compiled=2).summary["compile_time_s"]

    assert run(2) > 0 and run(3) > 0
    assert run(2) == 0  # still cached, and now the most recent
    assert run(4) > 0  # a third shape: the least recent (3 tokens) goes
    assert sum(key[0] == "resume" for key in api._COMPILED) == 2  # loops, each with its prefill
    assert run(2) == 0 and run(3) > 0


# ---- JAX's persistent cache as specjax-run enables it (specjax.platform.compile_cache) ---

_PROGRAM = """
import hashlib, sys
import jax, jax.numpy as jnp, numpy as np
from jax import monitoring
from specjax.platform import compile_cache
from specjax.models import kernels
from specjax.models.quant import linear, pack_float32

hits = []
monitoring.register_event_listener(
    lambda event, **kw: hits.append(1) if event == "/jax/compilation_cache/cache_hits" else None)
compile_cache.MIN_COMPILE_SECONDS = 0.0
print("DIR", compile_cache.enable(sys.argv[1]))
rng = np.random.default_rng(0)
w = pack_float32(rng.standard_normal((40, 70)).astype(np.float32))  # the CPU kernel's FFI call
x = jnp.asarray(rng.standard_normal((3, 40)).astype(np.float32))
y = jax.jit(lambda x, w: jnp.tanh(linear(x, w)) * 2.0)(x, w)
print("KERNEL", kernels.available(), "HITS", len(hits),
      "OUT", hashlib.sha256(np.asarray(y).tobytes()).hexdigest())
"""


def _run_program(cache_dir, env_value):
    env = {**os.environ, "SPECJAX_COMPILE_CACHE": env_value, "JAX_PLATFORMS": "cpu"}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    out = subprocess.run([sys.executable, "-c", _PROGRAM, str(cache_dir)], env=env,
                         capture_output=True, text=True, timeout=300, check=True).stdout
    fields = out.split()
    return {k: fields[fields.index(k) + 1] for k in ("DIR", "KERNEL", "HITS", "OUT")}


def test_persistent_cache_serves_a_second_process_the_same_executable(tmp_path):
    off = _run_program(tmp_path / "off", "0")
    assert off["DIR"] == "None" and not (tmp_path / "off").exists()
    first = _run_program(tmp_path / "xla", "1")
    assert first["HITS"] == "0" and any((tmp_path / "xla").iterdir())
    second = _run_program(tmp_path / "xla", "1")
    assert second["HITS"] != "0", "the second process compiled again"
    assert first["OUT"] == second["OUT"] == off["OUT"]  # the kernel's FFI call deserializes
