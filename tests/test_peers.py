"""The llama.cpp bench peer's probe: a llama.cpp that cannot decode on this machine is a one-line error, not a
crash of `verispec bench` (llama-cpp-python itself is an optional extra; the probe runs it in a child process)."""
import subprocess

import pytest

from verispec import peers
from verispec.errors import VerispecError


def test_a_llama_cpp_that_cannot_decode_is_a_one_line_error(tmp_path):
    bad = tmp_path / "not-a-model.gguf"
    bad.write_bytes(b"not a gguf file")
    with pytest.raises(VerispecError, match="llama.cpp could not decode not-a-model.gguf") as e:
        peers.probe(str(bad), 1)
    assert "\n" not in str(e.value)


def test_a_crash_is_named_with_its_signal_and_the_fix(monkeypatch):
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, -11, "", ""))
    with pytest.raises(VerispecError, match=r"crashed \(signal 11\) decoding model.gguf.*without AMX") as e:
        peers.probe("/models/model.gguf", 2)
    assert "\n" not in str(e.value)
