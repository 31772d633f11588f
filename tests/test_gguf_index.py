"""`gguf_index.Index`, the fast GGUF header reader weights are loaded through, against gguf-py's `GGUFReader` on
the default model's file: every tensor's name, type, shape and bytes, and every metadata value it decodes."""
import numpy as np
import pytest

from verispec.errors import VerispecError
from verispec.model import loader
from verispec.model.gguf_index import Index

gguf = pytest.importorskip("gguf")


def test_index_reads_what_ggufreader_reads():
    path = loader.default_gguf()
    ours, theirs = Index(path), gguf.GGUFReader(str(path))
    assert [t.name for t in ours.tensors] == [t.name for t in theirs.tensors]
    for a, b in zip(ours.tensors, theirs.tensors):
        assert a.tensor_type == b.tensor_type and list(a.shape) == list(b.shape), a.name
        assert a.data.dtype == b.data.dtype and a.data.shape == b.data.shape and np.array_equal(a.data, b.data), a.name
    skipped = 0
    for key, field in theirs.fields.items():
        if key.startswith("GGUF."):                       # gguf-py's own header entries
            continue
        mine = ours.fields[key].contents()
        if mine is None:                                  # arrays of strings are skipped, not decoded
            skipped += 1
            assert isinstance(field.contents(), list) and isinstance(field.contents()[0], str), key
            continue
        value = field.contents()
        assert np.array_equal(np.asarray(value), mine) if isinstance(mine, np.ndarray) else value == mine, key
    assert skipped >= 1                                   # the tokenizer's tokens at least


def test_a_file_that_is_not_gguf_is_one_clear_error(tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 8)
    with pytest.raises(VerispecError, match="not a readable GGUF file"):
        Index(bad)
    bad.write_bytes(b"not a gguf file at all")
    with pytest.raises(VerispecError, match="not a readable GGUF file"):
        Index(bad)
