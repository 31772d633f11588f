"""GGUF-quantized products (verispec.model.quant, kernels/quant.cpp) against their references, bit for bit:

- the packed weight's reconstruction (`quant.dequantize`) equals gguf-py's `dequantize` of the raw blocks;
- `quant.matmul` (the `qlinear` kernel) equals the fp32 `linear` kernel on those dequantized weights, for 1 to
  100 rows (decoding, verification, the blocked prefill path over two row blocks), K not a multiple of 128, N not
  a multiple of 16, with and without bias; and each row equals that row alone;
- `quant.embed` gives the dequantized weight's rows;
- `quant.matmul_q8` (the `q8linear` kernel, --dtype gguf-q8: 8-bit activations, integer sums) equals its PyTorch
  reference bit for bit, for any number of rows, each row alone included, and stays close to the exact product.

Synthetic blocks are random bytes with finite fp16 scales (zeros, negative zeros and subnormals included), so no
model file is needed; `VERISPEC_QWEN_GGUF=path.gguf` adds a check over a real file's tensors.
"""
import os

import numpy as np
import pytest
import torch

from verispec import kernels
from verispec.errors import VerispecError
from verispec.model import ops, quant

gguf = pytest.importorskip("gguf")

D_OFFSETS = {"Q8_0": [0], "Q5_0": [0], "Q6_K": [208], "Q4_K": [0, 2], "Q4_1": [0, 2]}   # where each block's fp16 scales sit


def random_blocks(kind: str, n: int, k: int, seed: int = 0) -> np.ndarray:
    """[n, k / block * bytes] uint8: random quants, finite fp16 scales of mixed sign and size."""
    rng = np.random.default_rng(seed)
    block, size, _ = quant.TYPES[kind]
    raw = rng.integers(0, 256, (n, k // block, size), dtype=np.uint8)
    for off in D_OFFSETS[kind]:
        d = (rng.standard_normal((n, k // block)) * 10.0 ** rng.integers(-6, 1, (n, k // block))).astype(np.float16)
        d.flat[:4] = np.array([0.0, -0.0, 6e-8, -3e-5], np.float16)            # zeros and fp16 subnormals
        raw[..., off:off + 2] = d[..., None].view(np.uint8)
    return raw.reshape(n, -1)


def reference(raw: np.ndarray, kind: str, n: int, k: int) -> torch.Tensor:
    w = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[kind]).reshape(n, k)
    return torch.from_numpy(np.ascontiguousarray(w, dtype=np.float32))


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(a.contiguous().view(torch.int32), b.contiguous().view(torch.int32))


SHAPES = [("Q8_0", 37, 896), ("Q5_0", 50, 896), ("Q8_0", 16, 160), ("Q5_0", 20, 224), ("Q6_K", 45, 1536), ("Q4_K", 45, 1536),
          ("Q4_K", 33, 256), ("Q6_K", 7, 256), ("Q4_1", 45, 576), ("Q4_1", 20, 1536)]


@pytest.mark.parametrize("kind,n,k", SHAPES)
def test_reconstruction_is_ggufs_dequantize(kind, n, k):
    raw = random_blocks(kind, n, k)
    assert same_bits(quant.dequantize(quant.pack(raw, kind, n, k)), reference(raw, kind, n, k))
    # the loader's dequantization (embeddings), a few rows at a time: the same bits
    assert same_bits(quant.dequantize_raw(raw, kind, n, k, rows=16), reference(raw, kind, n, k))


@pytest.mark.parametrize("kind,n,k", SHAPES)
def test_qlinear_is_linear_on_the_dequantized_weight(kind, n, k):
    lib = kernels.load()
    assert lib is not None, f"row-invariant kernels unavailable: {kernels.status()}"
    raw = random_blocks(kind, n, k, seed=1)
    p = quant.pack(raw, kind, n, k)
    panels = ops._panels(reference(raw, kind, n, k))                                   # [ceil(n/16), k, 16] fp32
    gen = torch.Generator().manual_seed(2)
    bias = torch.randn(n, generator=gen)
    x = torch.randn(100, k, generator=gen)
    x[0, :5] = torch.tensor([0.0, -0.0, 1e-30, -1e30, 3.0])
    for m in (1, 2, 3, 5, 8, 17, 32, 33, 64, 100):
        for b in (None, bias):
            got = quant.matmul(x[:m], p, b)                                            # [m, n]
            assert same_bits(got, lib.linear(x[:m].contiguous(), panels, n, b)), (m, b is not None)
            assert same_bits(got[m - 1:], quant.matmul(x[m - 1:m], p, b)), m           # a row alone: same bits


@pytest.mark.parametrize("kind,n,k", SHAPES)
def test_q8linear_is_its_reference_and_row_invariant(kind, n, k):
    """The integer product: the kernel gives its PyTorch reference's bits (same integers, same fp32 operations in
    the same order) for 1 to 40 rows, one row tile (<= 6 rows on AVX2, 12 on VNNI), several, and k-blocked; each
    row alone gives the same bits; and the result is within the 8-bit activations' error of the exact product."""
    assert kernels.load() is not None, f"row-invariant kernels unavailable: {kernels.status()}"
    raw = random_blocks(kind, n, k, seed=4)
    p = quant.pack(raw, kind, n, k)
    gen = torch.Generator().manual_seed(5)
    bias = torch.randn(n, generator=gen)
    x = torch.randn(40, k, generator=gen)
    x[0, :32] = 0.0                                                                    # an all-zero block
    x[1, :3] = torch.tensor([1e30, -1e-30, 7.0])                                      # one block's scale dominated
    exact = quant.matmul(x, p)
    for m in (1, 3, 4, 5, 6, 9, 11, 12, 40):
        for b in (None, bias):
            got = quant.matmul_q8(x[:m], p, b)
            assert same_bits(got, quant.matmul_q8_reference(x[:m], p, b)), (m, b is not None)
            assert same_bits(got[m - 1:], quant.matmul_q8(x[m - 1:m], p, b)), m
    err = (quant.matmul_q8(x[2:], p) - exact[2:]).norm() / exact[2:].norm()
    assert 0 < err < 0.02, err                                     # 8-bit activations: about 0.5% here


@pytest.mark.parametrize("kind", ["Q4_K", "Q6_K"])
def test_a_prefills_rows_in_several_row_blocks_give_each_rows_bits(kind):
    """A prefill's many rows are multiplied in blocks of rows (their 8-bit activations stay in cache while every
    panel passes over them): with k = 8192, 150 rows make blocks of 64, 64 and 22. Each row gives the bits it
    gives alone, and the reference's."""
    n, k = 20, 8192
    p = quant.pack(random_blocks(kind, n, k, seed=8), kind, n, k)
    x = torch.randn(150, k, generator=torch.Generator().manual_seed(9))
    got = quant.matmul_q8(x, p)
    for i in (0, 63, 64, 127, 128, 149):
        assert same_bits(got[i:i + 1], quant.matmul_q8(x[i:i + 1], p)), i
    assert same_bits(got[60:70], quant.matmul_q8_reference(x[60:70], p))


@pytest.mark.parametrize("kind,n,k", SHAPES)
def test_q8linear_gives_the_same_bits_with_every_instruction_set(kind, n, k):
    """Forced to AVX2 the integer product runs `maddubs`; where the CPU has AVX-512 VNNI, `vpdpbusd`; where it has
    AMX, tile products from 8 rows up. All form the same exact integer sums and the same float operations, so the
    same bits for every row count, including rows in several tiles (37: three of 13, the last padded) and blocks
    (150: 120 + 30). A CPU without VNNI or AMX runs what it has (the check still runs; `verispec doctor` says which
    is in use)."""
    lib = kernels.load()
    assert lib is not None, f"row-invariant kernels unavailable: {kernels.status()}"
    p = quant.pack(random_blocks(kind, n, k, seed=6), kind, n, k)
    x = torch.randn(150, k, generator=torch.Generator().manual_seed(7))
    x[2, :32] = 0.0
    best = lib.q8_isa()
    try:
        for m in (1, 2, 4, 5, 8, 12, 16, 17, 37, 150):
            lib.set_q8_isa("avx2")
            assert lib.q8_isa() == "avx2"
            plain = quant.matmul_q8(x[:m], p)
            for isa in ("avx512", "best"):
                lib.set_q8_isa(isa)
                assert same_bits(quant.matmul_q8(x[:m], p), plain), (lib.q8_isa(), m)
            assert lib.q8_isa() == best
    finally:
        lib.set_q8_isa("best")
    with pytest.raises(RuntimeError, match="'avx2', 'avx512' or 'best'"):
        lib.set_q8_isa("amx")


def test_q8_activation_quantization():
    """Per row and block of 32: dx = amax / 127, xq = round(x * 127 / amax) in [-127, 127], ties to even."""
    x = torch.zeros(2, 64)
    x[0, :4] = torch.tensor([2.54, -1.0, 0.01, 0.03])        # amax 2.54: scale 0.02, so 50, -50, 0 (0.5 -> 0), 2
    x[1, 32] = -5.0
    xq, dx, bs = quant.quantize_activations(x)
    assert xq[0, :4].tolist() == [127, -50, 0, 2] and xq[0, 4:].abs().sum() == 0 and xq[1, 32] == -127
    assert torch.allclose(dx, torch.tensor([[0.02, 0.0], [0.0, 5 / 127]])) and bs.tolist() == [[79, 0], [0, -127]]


@pytest.mark.parametrize("kind", list(quant.TYPES))
def test_embed_rows(kind):
    raw = random_blocks(kind, 70, 512, seed=3)
    ids = torch.tensor([5, 69, 5, 0, 33, 16])
    assert same_bits(quant.embed(quant.pack(raw, kind, 70, 512), ids), reference(raw, kind, 70, 512)[ids])


def test_unsupported_type_is_one_clear_error():
    with pytest.raises(VerispecError, match="Q2_K is not supported"):
        quant.pack(np.zeros(84, np.uint8), "Q2_K", 1, 256)
    with pytest.raises(VerispecError, match="expected"):
        quant.pack(np.zeros(100, np.uint8), "Q8_0", 1, 64)


def test_real_gguf_tensors():
    path = os.environ.get("VERISPEC_QWEN_GGUF")
    if not path:
        pytest.skip("set VERISPEC_QWEN_GGUF to a GGUF file to check its quantized tensors")
    lib = kernels.load()
    reader = gguf.GGUFReader(path)
    seen = set()
    for t in reader.tensors:
        kind = t.tensor_type.name
        if kind not in quant.TYPES or (kind, t.name.split(".")[-2]) in seen:
            continue
        seen.add((kind, t.name.split(".")[-2]))                     # one tensor per type and role
        k, n = int(t.shape[0]), int(t.shape[1])
        rows = min(n, 1000)                                          # the first rows: whole GGUF rows
        raw = np.asarray(t.data).reshape(n, -1)[:rows]
        p = quant.pack(raw, kind, rows, k)
        w = reference(raw, kind, rows, k)
        assert same_bits(quant.dequantize(p), w), t.name
        x = torch.randn(9, k)
        assert same_bits(quant.matmul(x, p), lib.linear(x, ops._panels(w), rows, None)), t.name


def test_a_bad_instruction_set_choice_is_a_one_line_error(monkeypatch):
    monkeypatch.setenv("VERISPEC_ISA", "amx")
    with pytest.raises(VerispecError, match="VERISPEC_ISA must be 'best', 'avx512' or 'avx2', got 'amx'"):
        kernels.isa_asked()
    for isa in ("avx2", "avx512"):
        monkeypatch.setenv("VERISPEC_ISA", isa)
        assert kernels.isa_asked() == isa
    monkeypatch.setenv("VERISPEC_ISA", "")                          # set but empty, as `VERISPEC_ISA= cmd` leaves it
    assert kernels.isa_asked() == "best"
