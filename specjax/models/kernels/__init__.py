"""CPU kernels XLA does not provide, built with the system C++ compiler on first use.

Why compiled kernels at all: XLA:CPU has no fused "int8 weights x float32 rows" dot; every
form written in ``jnp`` either writes a float32 copy of the weights first (~9x slower than
float32, ``docs/decoder.md``) or quantizes the activations too (W8A8, which moved
greedy decoding off float32 on 2.3 % of positions). And its float32 dot is slow for the few
rows of a decode or tree pass (13-24 GB/s of weights). ``packed_dot.cc`` multiplies weights
packed by blocks of outputs (int8 or float32) with a tile of rows. The kernels are registered
through JAX's FFI (``jax.ffi``), so they run inside the jitted decode loop like any other op;
other platforms never see them (``models.quant.linear`` falls back to ``jnp`` there).

The shared library is cached under ``~/.cache/specjax/kernels`` keyed by the source, the
compiler flags, the jaxlib version and the CPU, so a changed machine or kernel rebuilds.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import threading
import warnings
from pathlib import Path

import jax

from specjax.platform import hardware
from specjax.platform.assets import cache_root

HERE = Path(__file__).parent
#: Compiled together into one library; ``simd.h`` is their shared vector helpers.
SOURCES = (HERE / "packed_dot.cc", HERE / "attention.cc")
HEADERS = (HERE / "simd.h",)
#: FFI targets: int8 weights with scales, and float32 weights (both packed, ``quant.pack``).
Q8_TARGET, F32_TARGET = "specjax_q8dot", "specjax_f32dot"
#: FFI target: the cached decoder's attention (``models.layers.attend_cached``).
ATTENTION_TARGET = "specjax_attention"
#: FFI target: int8 weights x int8 rows (W8A8, ``quant.bulk_rows(activations="int8")``), built
#: only where the CPU has AVX-512 VNNI (``vnni``).
Q8Q8_TARGET = "specjax_q8q8dot"
FLAGS = ("-O3", "-std=c++17", "-shared", "-fPIC", "-w")

_lock = threading.Lock()
_state: dict[str, object] = {}


def cache_dir() -> Path:
    return cache_root() / "kernels"


#: Cache level the packed kernel prefetches its weights into (``packed_dot.cc``, ``Prefetch``).
PREFETCH_LEVELS = ("l1", "l2")


def prefetch_level() -> str:
    """``SPECJAX_KERNEL_PREFETCH`` if set, else the form measured best for this CPU's vendor:
    L2 on Intel (9-row matmuls ~10 % faster there), L1 elsewhere (the form that measured best on
    AMD). The variable is there so a new machine can be tried both ways; it is read
    when the kernels are first built in a process."""
    level = os.environ.get("SPECJAX_KERNEL_PREFETCH", "").strip().lower()
    if not level:
        return "l2" if hardware.cpuinfo("vendor_id") == "GenuineIntel" else "l1"
    if level not in PREFETCH_LEVELS:
        raise ValueError(f"SPECJAX_KERNEL_PREFETCH must be one of {list(PREFETCH_LEVELS)}, "
                         f"got {level!r}")
    return level


#: How a prefill's many-row products run (``quant.bulk_rows``): through the kernel, or XLA's
#: blocked GEMM on the unpacked weights.
PREFILL_DOTS = ("kernel", "xla")


def prefill_dot() -> str:
    """``SPECJAX_PREFILL_DOT`` if set, else the form measured faster for a prompt's rows with this
    CPU's kernel form. The AVX-512 form's 6-row tiles run a 128-row prefill near the matmul
    roofline, and XLA's dot on weights unpacked per call was 2.5x slower (Intel Xeon family 6
    model 167, same process: Qwen 1.5B float32 1.42 vs 3.52 s, 0.5B int8 0.80 vs 0.93 s, and
    its compile 4.6 vs 20.7 s). The AVX2 form's tiles are smaller, and there XLA's dot won
    (AMD EPYC family 23 model 1, 168 rows: 1.5B 13.6 vs 9.3 s, 0.5B int8 4.0-4.8 vs 3.0 s).
    Either way every decode and tree pass keeps the kernel, and AR and speculative runs take
    the same prefill."""
    form = os.environ.get("SPECJAX_PREFILL_DOT", "").strip().lower()
    if not form:
        return "kernel" if "avx512f" in hardware.cpuinfo("flags").split() else "xla"
    if form not in PREFILL_DOTS:
        raise ValueError(f"SPECJAX_PREFILL_DOT must be one of {list(PREFILL_DOTS)}, got {form!r}")
    return form


def build(march: str = "native") -> Path:
    """Compile the kernel for ``-march`` (or reuse the cached build); raises ``RuntimeError``
    with the compiler's message when it cannot. The kernel has an AVX-512 and an AVX2 form;
    ``native`` picks the machine's, and tests build ``haswell`` to check the AVX2 one here."""
    compiler = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        raise RuntimeError("no C++ compiler found (set CXX, or install g++)")
    include = jax.ffi.include_dir()
    flags = (*FLAGS, f"-march={march}")
    if prefetch_level() == "l2":
        flags = (*flags, "-DSPECJAX_PREFETCH_L2")
    texts = [path.read_text() for path in (*SOURCES, *HEADERS)]
    # A -march=native build is only valid on the CPU it was made on: cloud VMs of different
    # kinds share the model name "Intel(R) Xeon(R) Processor", so the family/model numbers and
    # the instruction-set flags go into the key too.
    cpu = f"{hardware.cpu_name()}\n{hardware.cpuinfo('flags')}"
    key = hashlib.sha256("\n".join([*texts, " ".join(flags), compiler, jax.__version__,
                                    cpu]).encode()).hexdigest()[:16]
    out = cache_dir() / f"specjax_kernels-{key}.so"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".{os.getpid()}.tmp")
    proc = subprocess.run([compiler, *flags, f"-I{include}", f"-I{HERE}", *map(str, SOURCES),
                           "-o", str(tmp)], capture_output=True, text=True)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"compiling the CPU kernels failed:\n{proc.stderr[-2000:]}")
    tmp.replace(out)  # atomic: a concurrent build (xdist workers) sees a whole file or none
    return out


def available() -> bool:
    """Whether the kernels are registered for CPU; builds them on the first call. A failed
    build warns once and returns False (``quant.linear`` then takes its ``jnp`` path)."""
    with _lock:
        if "ok" not in _state:
            if platform.machine().lower() not in ("x86_64", "amd64"):
                _state["ok"] = False  # the kernel is AVX2 / AVX-512 code
                return False
            try:
                lib = ctypes.cdll.LoadLibrary(str(build()))
                for target in (Q8_TARGET, F32_TARGET, ATTENTION_TARGET, Q8Q8_TARGET):
                    jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(getattr(lib, target)),
                                                platform="cpu")
                _state["lib"], _state["ok"] = lib, True
            except (RuntimeError, OSError) as err:
                warnings.warn(f"specjax CPU kernels unavailable, using XLA's dot (int8: the "
                              f"slow jnp path): {err}", stacklevel=2)
                _state["ok"] = False
        return bool(_state["ok"])


def vnni() -> bool:
    """Whether the int8 x int8 kernel (``Q8Q8_TARGET``) runs here: the kernels are available and
    the CPU has AVX-512 VNNI (the native build then uses it). Elsewhere W8A8 products take
    ``quant``'s ``jnp`` form of the same integer sums."""
    return "avx512_vnni" in hardware.cpuinfo("flags").split() and available()


#: ``specjax_w8a8_forms``' bits: AMX tiles for many rows, the stored block read directly for a
#: few rows.
AMX_FORM, FEW_ROWS_FORM = 1, 2


def _w8a8_forms(amx: int = -1, few_rows: int = -1) -> int:
    """The W8A8 kernel's forms this build has and that are on (bits), after turning each on (1)
    or off (0); -1 leaves it."""
    return int(_state["lib"].specjax_w8a8_forms(amx, few_rows))


def amx() -> bool:
    """Whether the W8A8 kernel's many-row products (16 rows or more) take AMX-INT8 tiles here:
    the CPU has them, the build has the AMX form and it is on. Linux must also grant the tile
    state; where it refuses, the kernel quietly runs its VNNI form (the same bits)."""
    return ("amx_int8" in hardware.cpuinfo("flags").split() and vnni()
            and bool(_w8a8_forms() & AMX_FORM))


@contextlib.contextmanager
def w8a8_forms(amx: bool = True, few_rows: bool = True):
    """Which forms the W8A8 kernel may take for the calls made inside (read at run time, so no
    recompile): AMX tiles for many rows (``amx``), and the stored block read directly for a
    few rows (``few_rows``; off: through the rearranged copy, as many rows on VNNI). Every
    form gives the same bits, so this is for tests and timings."""
    if not vnni():
        yield
        return
    with _lock:
        before = _w8a8_forms()
        _w8a8_forms(int(amx), int(few_rows))
    try:
        yield
    finally:
        with _lock:
            _w8a8_forms(int(bool(before & AMX_FORM)), int(bool(before & FEW_ROWS_FORM)))
