"""``benchmarks.load_memory`` at tiny shapes, and the sharded checkpoint it writes: read through
``model.safetensors.index.json``, it gives the same logits as the same tensors in one file."""

from __future__ import annotations

import numpy as np
from safetensors.numpy import load_file, save_file

import specjax
from benchmarks import load_memory


def test_report_at_tiny_shapes(tmp_path):
    out = tmp_path / "load_memory.md"
    result = load_memory.main(["--shape", "tiny", "--out", str(out)])
    assert result["checkpoint_bytes"] > 0 and result["peak_bytes"] >= result["before_bytes"]
    assert "added / model" in out.read_text() and result["hardware"] in out.read_text()


def test_sharded_and_single_file_checkpoints_load_alike(tmp_path):
    sharded = tmp_path / "sharded"
    load_memory.write_checkpoint(sharded, load_memory.SHAPES["tiny"])
    single = tmp_path / "single"
    single.mkdir()
    tensors = {}
    for shard in sorted(sharded.glob("*.safetensors")):
        tensors |= load_file(str(shard))
    save_file(tensors, str(single / "model.safetensors"))
    for name in ("config.json", "tokenizer.json"):
        (single / name).write_bytes((sharded / name).read_bytes())
    a = specjax.load_model(str(sharded), weights="float32").forward([1, 2, 3, 4])
    b = specjax.load_model(str(single), weights="float32").forward([1, 2, 3, 4])
    np.testing.assert_array_equal(a, b)
    assert np.isfinite(a).all() and a.std() > 0
