"""The integer product's AMX path (kernels/qamx.h) checked on any machine: built with its tile instructions
emulated in plain C++ (tests/kernels/amx_emulated.cpp), it must give the bits of the AVX tiles for every weight
kind and row count. Where the CPU has AMX, test_quant.py checks the real instructions; this checks the path's logic
(tile shapes, group order, the integer and float steps it shares with the AVX tiles) where it has not."""
import hashlib
from pathlib import Path

import pytest
import torch

from verispec import kernels
from verispec.model import quant
from test_quant import SHAPES, random_blocks, same_bits

SOURCE = Path(__file__).with_name("kernels") / "amx_emulated.cpp"
KERNELS = Path(kernels.__file__).parent
# the AMX path's steps around the tiles (the float epilogue, activation quantization) are AVX-512 code: qamx.h's
# VS_AMX target without its amx-* parts. A CPU without them can never run this path, emulated tiles or not.
NEEDS = {"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_vnni"}


@pytest.fixture(scope="module")
def emulated():
    if kernels.load() is None:
        pytest.skip(f"kernels unavailable: {kernels.status()}")
    missing = NEEDS - kernels.cpu_flags()
    if missing:
        pytest.skip(f"the AMX path's AVX-512 steps cannot run here: this CPU lacks {', '.join(sorted(missing))}")
    key = hashlib.sha1(b"".join(p.read_bytes() for p in [SOURCE, *kernels.SOURCES, *kernels.HEADERS])
                       + torch.__version__.encode()).hexdigest()[:12]
    return kernels.compile_extension(f"verispec_amx_emulated_{key}", [SOURCE],
                                     kernels.build_dir().parent / f"amx-emulated-{key}", include=[KERNELS])


@pytest.mark.parametrize("kind,n,k", SHAPES)
def test_the_amx_path_gives_the_avx_tiles_bits(emulated, kind, n, k):
    p = quant.pack(random_blocks(kind, n, k, seed=6), kind, n, k)
    x = torch.randn(40, k, generator=torch.Generator().manual_seed(7))
    x[2, :256] = 0.0
    bias = torch.randn(n, generator=torch.Generator().manual_seed(8))
    for m in (1, 8, 13, 16, 17, 37):
        for b in (None, bias):
            got = emulated.q8linear_amx(x[:m].contiguous(), quant.TYPES[kind][2], p.q, p.sc, p.mn, p.d, p.dmin, p.n, b)
            assert same_bits(got, quant.matmul_q8(x[:m], p, b)), (m, b is not None)
