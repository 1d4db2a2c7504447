"""JAX's persistent compilation cache for the command-line runs.

Why: compiling a decode loop costs more than running it in a short experiment (the README
command: 15.7 s for the autoregressive loop and 29.5 s for the speculative one, against 33 s
and 41 s of decoding), and a researcher reruns the same shapes many times. XLA keeps each
compiled executable on disk under a key of its program and compiler, so a rerun deserializes
it instead (SmolLM2's loop: 8.7 s -> 3.4 s, the rest being tracing). The program embeds the
CPU kernel only by its FFI target name, which is registered while tracing, before the lookup.

Library calls leave JAX's settings alone; ``specjax-run`` turns this on (config
``compile_cache``). A ``JAX_COMPILATION_CACHE_DIR`` set by the user wins;
``SPECJAX_COMPILE_CACHE=0`` turns it off everywhere (the test suite does, so that tests never
share executables).
"""

from __future__ import annotations

import os
from pathlib import Path

import jax

from specjax.platform.assets import cache_root

ENV = "SPECJAX_COMPILE_CACHE"
#: Programs that compile faster than this are not worth a file.
MIN_COMPILE_SECONDS = 1.0


def enable(directory: str | os.PathLike | None = None) -> Path | None:
    """Turn the cache on (``directory``, else ``$JAX_COMPILATION_CACHE_DIR``, else
    ``<specjax cache>/xla``) and return where it lives; None when ``$SPECJAX_COMPILE_CACHE``
    is 0 / false / no / off."""
    if os.environ.get(ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    chosen = directory or os.environ.get("JAX_COMPILATION_CACHE_DIR") or cache_root() / "xla"
    path = Path(chosen).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    return path
