"""What this machine is, in words, for results files and for the kernels' build.

Why it matters: the same decoder runs at 0.5 of the copy roofline on one cloud VM kind and 0.8
on another (their read bandwidth differs), so a speed table is only readable next to the CPU
that produced it, and the CPU kernels pick their prefetch form by vendor.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

import jax

CPUINFO = Path("/proc/cpuinfo")


def cpuinfo(*keys: str, path: Path = CPUINFO) -> str:
    """The value on the first line of ``path`` that starts with one of ``keys`` ('' if there
    is none, or no such file)."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(keys):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return ""


def cpu_name(path: Path = CPUINFO) -> str:
    """The CPU's model name with its family and model numbers (cloud VMs often report only
    "Intel(R) Xeon(R) Processor", which the numbers tell apart)."""
    name = cpuinfo("model name", path=path) or platform.processor() or platform.machine()
    family, model = cpuinfo("cpu family", path=path), cpuinfo("model\t", path=path)
    return f"{name} (family {family} model {model})" if family and model else name


def describe() -> str:
    """The device decoding runs on: CPU name and cores, or the accelerator."""
    dev = jax.devices()[0]
    if dev.platform != "cpu":
        return f"{len(jax.devices())} x {dev.device_kind} ({dev.platform})"
    return f"CPU: {cpu_name()}, {os.cpu_count()} cores"
