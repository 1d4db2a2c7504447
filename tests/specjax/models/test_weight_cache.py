"""The dequantized-weights cache (``specjax.models.weight_cache``): exact round trip, and never
read when stale, incomplete or turned off."""

import os

import numpy as np
import pytest

from specjax.models import weight_cache


@pytest.fixture
def gguf(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECJAX_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SPECJAX_WEIGHT_CACHE", raising=False)
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF stand-in")
    rng = np.random.default_rng(0)
    weights = {"wq": rng.standard_normal((2, 8, 4)).astype(np.float32),
               "embed": rng.standard_normal((16, 8)).astype(np.float32)}
    return path, weights


def test_round_trip_is_exact_and_read_only(gguf):
    path, weights = gguf
    assert weight_cache.load(path) is None
    weight_cache.store(path, weights)
    got = weight_cache.load(path)
    assert sorted(got) == sorted(weights)
    for name, value in weights.items():
        np.testing.assert_array_equal(got[name], value)
        assert got[name].dtype == np.float32 and not got[name].flags.writeable


def test_a_changed_file_is_not_served_the_old_weights(gguf):
    path, weights = gguf
    weight_cache.store(path, weights)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert weight_cache.load(path) is None


def test_an_incomplete_directory_is_ignored(gguf):
    path, weights = gguf
    weight_cache.store(path, weights)
    (weight_cache._directory(path) / "complete").unlink()
    assert weight_cache.load(path) is None


def test_turned_off_neither_reads_nor_writes(gguf, monkeypatch):
    path, weights = gguf
    weight_cache.store(path, weights)
    monkeypatch.setenv("SPECJAX_WEIGHT_CACHE", "0")
    assert weight_cache.load(path) is None
    other = path.with_name("other.gguf")
    other.write_bytes(b"x")
    weight_cache.store(other, weights)
    monkeypatch.setenv("SPECJAX_WEIGHT_CACHE", "1")
    assert weight_cache.load(other) is None
