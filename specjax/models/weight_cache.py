"""The float32 weights of a GGUF file, dequantized once and kept on disk beside it.

The shipped files are Q4_K / Q6_K; ``gguf``'s NumPy dequantizer takes ~19 s of a 32 s load of
the 1.5B on two cores, every process, every run. The result does not change between runs, so
the first load writes it as one ``.npy`` per canonical tensor (``read_gguf``'s dict) and later
loads memory-map those: reading 6 GB from the page cache, not decoding 1 GB of 4-bit blocks.

The key holds the file's identity (name, size, modification time) and ``FORMAT``, which is
bumped whenever ``read_gguf``'s output would change (dequantization, un-permutation, layout),
so a stale cache is never read. A directory counts only once its ``complete`` marker exists,
written last, so a killed first load leaves nothing that a later one would trust.
``SPECJAX_WEIGHT_CACHE=0`` turns the cache off (read and write).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import numpy as np

from specjax.platform.assets import cache_root

#: Bump when ``read_gguf``'s canonical weights would differ for the same file.
FORMAT = 1


def enabled() -> bool:
    return os.environ.get("SPECJAX_WEIGHT_CACHE", "1").strip() not in ("0", "false", "no")


def _directory(path: Path) -> Path:
    stat = path.stat()
    ident = f"{path.resolve()}\n{stat.st_size}\n{stat.st_mtime_ns}\n{FORMAT}"
    key = hashlib.sha256(ident.encode()).hexdigest()[:16]
    return cache_root() / "float32" / f"{path.stem}-{key}"


def load(path: str | os.PathLike) -> dict[str, np.ndarray] | None:
    """The canonical weights, memory-mapped read-only, or None when not cached. (The
    hyperparameters are cheap to read from the GGUF header and are not cached.)"""
    if not enabled():
        return None
    where = _directory(Path(path))
    if not (where / "complete").is_file():
        return None
    return {f.stem: np.load(f, mmap_mode="r") for f in sorted(where.glob("*.npy"))}


def store(path: str | os.PathLike, weights: dict[str, np.ndarray]) -> None:
    """Write the cache for ``path``; a failure (disk full, read-only home) only warns."""
    if not enabled():
        return
    where = _directory(Path(path))
    tmp = where.with_name(where.name + f".{os.getpid()}.tmp")
    try:
        tmp.mkdir(parents=True, exist_ok=True)
        for name, value in weights.items():
            np.save(tmp / f"{name}.npy", np.asarray(value, np.float32))
        (tmp / "complete").write_text("")
        if where.exists():  # another process finished first: its copy is as good
            shutil.rmtree(tmp)
        else:
            tmp.rename(where)
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        import warnings

        warnings.warn(f"specjax: could not cache the float32 weights of {path} ({err}); "
                      "the next load dequantizes the GGUF file again", stacklevel=2)
