"""A fast reader for the GGUF container: metadata dict + memory-mapped tensor data.

``gguf.GGUFReader`` builds a memmap view per metadata element, which takes ~20 s for a
150k-token vocabulary with its merges; tests and every model load pay that. The container is
simple (GGUF v2/v3, ggml's docs/gguf.md): a header, typed key/value pairs, tensor infos (name,
dims, ggml type, offset), then tensor data aligned to ``general.alignment``. Parsing it with
``struct`` over the raw bytes takes well under a second. Tensor data stays memory-mapped, so
dequantizing one tensor at a time never holds the whole file in memory. The reader is checked
against ``gguf.GGUFReader`` in tests/specjax/models/test_gguf.py.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

_MAGIC = b"GGUF"
_SCALARS = {  # GGUFValueType -> struct format
    0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q",
    12: "<d",
}  # fmt: skip
_NUMPY = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "?"}
_NUMPY |= {10: "<u8", 11: "<i8", 12: "<f8"}
_STRING, _ARRAY = 8, 9
#: ``tokenizer.ggml.token_type`` values (llama.cpp's ``llama_token_type``) that specjax reads.
CONTROL, USER_DEFINED = 3, 4


@dataclass(frozen=True, kw_only=True)
class TensorInfo:
    """One tensor: ``shape`` in ggml order (ne: [in, out]); ``data`` is rows of raw bytes."""

    name: str
    shape: tuple[int, ...]
    qtype: GGMLQuantizationType
    data: np.ndarray  # uint8 [out, bytes per row] (or [n] float32 for 1-D F32), memory-mapped


class GGUFFile:
    """``fields`` (key -> int | float | bool | str | list) and ``tensors`` (name -> TensorInfo)."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        with open(self.path, "rb") as f:
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        buf = self._map
        if buf[:4] != _MAGIC:
            raise ValueError(f"{self.path} is not a GGUF file (magic {bytes(buf[:4])!r})")
        version, n_tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
        if version not in (2, 3):
            raise ValueError(f"unsupported GGUF version={version}; allowed: [2, 3]")
        self._pos = 24
        self.fields: dict[str, Any] = {}
        for _ in range(n_kv):
            key = self._string()
            (vtype,) = self._unpack("<I")
            self.fields[key] = self._value(vtype)
        infos = []
        for _ in range(n_tensors):
            name = self._string()
            (n_dims,) = self._unpack("<I")
            dims = self._unpack(f"<{n_dims}Q")
            qtype, offset = self._unpack("<IQ")
            infos.append((name, tuple(int(d) for d in dims), GGMLQuantizationType(qtype), offset))
        align = int(self.fields.get("general.alignment", 32))
        start = -(-self._pos // align) * align
        whole = np.frombuffer(buf, dtype=np.uint8)
        self.tensors: dict[str, TensorInfo] = {}
        for name, dims, qtype, offset in infos:
            block, nbytes = GGML_QUANT_SIZES[qtype]
            if dims[0] % block:
                raise ValueError(f"tensor {name!r}: row length {dims[0]} not a multiple of {block}")
            row_bytes = dims[0] // block * nbytes
            rows = int(np.prod(dims[1:], dtype=np.int64))
            raw = whole[start + offset : start + offset + rows * row_bytes].reshape(rows, row_bytes)
            if qtype == GGMLQuantizationType.F32 and len(dims) == 1:
                raw = raw.view(np.float32).reshape(-1)
            self.tensors[name] = TensorInfo(name=name, shape=dims, qtype=qtype, data=raw)

    def get(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key, default)

    def _unpack(self, fmt: str) -> tuple[Any, ...]:
        out = struct.unpack_from(fmt, self._map, self._pos)
        self._pos += struct.calcsize(fmt)
        return out

    def _string(self) -> str:
        (n,) = self._unpack("<Q")
        s = self._map[self._pos : self._pos + n].decode("utf-8", errors="replace")
        self._pos += n
        return s

    def _value(self, vtype: int) -> Any:
        if vtype == _STRING:
            return self._string()
        if vtype in _SCALARS:
            return self._unpack(_SCALARS[vtype])[0]
        if vtype != _ARRAY:
            raise ValueError(f"{self.path}: unknown GGUF value type {vtype}")
        etype, count = self._unpack("<IQ")
        if etype in _NUMPY:  # numeric arrays in one go
            arr = np.frombuffer(self._map, dtype=_NUMPY[etype], count=count, offset=self._pos)
            self._pos += arr.nbytes
            return arr.tolist()
        return [self._value(etype) for _ in range(count)]


def open_gguf(path_or_file: str | os.PathLike | GGUFFile) -> GGUFFile:
    """A parsed ``GGUFFile`` (passed through when given one)."""
    if isinstance(path_or_file, GGUFFile):
        return path_or_file
    if not isinstance(path_or_file, str | os.PathLike):
        raise TypeError(f"expected a path or GGUFFile, got {type(path_or_file).__name__}")
    return GGUFFile(path_or_file)
