"""A GGUF file's metadata and tensor index, read in a fraction of a second.

gguf-py's `GGUFReader` turns every metadata value into numpy views, the tokenizer's 151,936 tokens and 151,387
merges included: 20 s on Qwen2.5-Coder's files, on every load. `Index` walks the header with `struct` (string
arrays skipped unless asked for) and exposes what verispec reads of a `GGUFReader`: `fields[key].contents()` and
`.types`, and `tensors` (name, tensor_type, shape, data, with gguf-py's shapes and types, over a read-only memory
map). The file format: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import VerispecError

_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class Field:
    value: object                     # a scalar, a str, a list, or None for an array of strings not decoded
    types: list                       # gguf.GGUFValueType: [type], or [ARRAY, item type] (as gguf-py gives them)

    def contents(self):
        return self.value


@dataclass(frozen=True)
class Tensor:
    name: str
    tensor_type: object               # gguf.GGMLQuantizationType
    shape: np.ndarray                 # GGML order (inputs first), as gguf-py gives it
    data: np.ndarray                  # float types as values, others as bytes [..., bytes per row]


class Index:
    def __init__(self, path: str | Path, strings: bool = False):
        """strings: decode arrays of strings too (the tokenizer's tokens and merges: a fraction of a second more)."""
        import gguf
        self._gguf, self._strings = gguf, strings
        self._numeric = {t: np.dtype(d).newbyteorder("<") for t, d in gguf.GGUFReader.gguf_scalar_to_np.items()}
        try:
            self._buf = np.memmap(str(path), dtype=np.uint8, mode="r")
            self._read()
        except (OSError, ValueError, struct.error, IndexError, KeyError) as e:
            raise VerispecError(f"{path} is not a readable GGUF file ({type(e).__name__}: {e})") from None

    def _unpack(self, fmt: str):
        v = struct.unpack_from(fmt, self._buf, self._pos)
        self._pos += struct.calcsize(fmt)
        return v[0] if len(v) == 1 else v

    def _string(self) -> str:
        n = self._unpack("<Q")
        s = bytes(self._buf[self._pos:self._pos + n]).decode("utf-8", errors="replace")
        self._pos += n
        return s

    def _numbers(self, kind: int, n: int) -> list:
        """n values of a numeric type, little-endian, at the read position (gguf-py's own type table)."""
        a = np.frombuffer(self._buf, self._numeric[self._gguf.GGUFValueType(kind)], n, self._pos)
        self._pos += n * a.itemsize
        return a.tolist()

    def _value(self, kind: int) -> tuple[object, list[int]]:
        """The value at the read position, and its types."""
        if kind == _STRING:
            return self._string(), [kind]
        if kind != _ARRAY:
            return self._numbers(kind, 1)[0], [kind]       # an unknown type raises ValueError
        item, n = self._unpack("<I"), self._unpack("<Q")
        if item not in (_STRING, _ARRAY):
            return self._numbers(item, n), [kind, item]
        if item == _STRING and self._strings:
            return [self._string() for _ in range(n)], [kind, item]
        for _ in range(n):                                   # strings (or nested arrays): skipped, not decoded
            if item == _STRING:
                self._pos += 8 + struct.unpack_from("<Q", self._buf, self._pos)[0]
            else:
                self._value(item)
        return None, [kind, item]

    def _read(self) -> None:
        gguf = self._gguf
        if bytes(self._buf[:4]) != b"GGUF":
            raise ValueError("no GGUF magic")
        self._pos = 4
        version = self._unpack("<I")
        if version not in (2, 3):
            raise ValueError(f"GGUF version {version}")
        n_tensors, n_kv = self._unpack("<Q"), self._unpack("<Q")
        self.fields: dict[str, Field] = {}
        for _ in range(n_kv):
            key = self._string()
            value, types = self._value(self._unpack("<I"))
            self.fields[key] = Field(value, [gguf.GGUFValueType(t) for t in types])
        infos = []
        for _ in range(n_tensors):
            name = self._string()
            dims = [self._unpack("<Q") for _ in range(self._unpack("<I"))]
            infos.append((name, dims, self._unpack("<I"), self._unpack("<Q")))
        align = int(self.fields["general.alignment"].value) if "general.alignment" in self.fields else 32
        start = -(-self._pos // align) * align
        self.tensors = []
        for name, dims, kind, offset in infos:
            qtype = gguf.GGMLQuantizationType(kind)
            block, size = gguf.GGML_QUANT_SIZES[qtype]
            shape = tuple(reversed(dims))                    # numpy order: rows last-but-one, inputs last
            n = int(np.prod(dims))
            floats = {gguf.GGMLQuantizationType.F32: np.float32, gguf.GGMLQuantizationType.F16: np.float16}
            if qtype in floats:
                data = np.frombuffer(self._buf, floats[qtype], n, start + offset).reshape(shape)
            else:
                data = np.frombuffer(self._buf, np.uint8, n // block * size, start + offset)
                data = data.reshape(*shape[:-1], shape[-1] // block * size)
            self.tensors.append(Tensor(name, qtype, np.array(dims, dtype=np.uint64), data))
