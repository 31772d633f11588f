"""Old and new kernel builds on random token trees and packed batches: attention's output bit for bit, over contexts
whose last chunk holds 0-127 context slots. bf16 caches at the best instruction set (AMX tiles here) unless DTYPE
(bf16, fp32) and ISA (best, avx512, avx2) say otherwise. usage: mixed_bits.py OLD_DIR NEW_DIR [DTYPE [ISA]]"""
import sys, importlib.util, torch
from pathlib import Path
sys.path.insert(0, "tests")
from verispec.model import ops


def load_build(folder):
    so = next(Path(folder).glob("verispec_cpu_*.so"))
    spec = importlib.util.spec_from_file_location(so.name.split(".")[0], so)
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); return m


old, new = load_build(sys.argv[1]), load_build(sys.argv[2])
dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[sys.argv[3] if len(sys.argv) > 3 else "bf16"]
isa = sys.argv[4] if len(sys.argv) > 4 else "best"
print("isa", old.set_fp_isa(isa), new.set_fp_isa(isa), dtype)
g = torch.Generator().manual_seed(0)
cases = 0
for heads, kv, d in [(9, 3, 64), (12, 2, 128), (14, 2, 64), (14, 1, 64), (4, 4, 32), (32, 1, 64), (20, 1, 32), (6, 2, 48), (3, 1, 24)]:
    for trial in range(12):
        cap = 700
        nseq = int(torch.randint(1, 4, (1,), generator=g))
        ks = [(torch.randn(kv, cap, d, generator=g) * 2).to(dtype) for _ in range(nseq)]
        vs = [torch.randn(kv, cap, d, generator=g).to(dtype) for _ in range(nseq)]
        seq, ctx, extra = [], [], []
        for sq in range(nseq):
            c = int(torch.randint(1, 600, (1,), generator=g))
            n = int(torch.randint(1, 70, (1,), generator=g))
            kind = int(torch.randint(0, 3, (1,), generator=g))
            par = [-1]
            for i in range(1, n):
                par.append(int(torch.randint(0, i, (1,), generator=g)))
            for i in range(n):
                if kind == 0:                       # a chain
                    seq.append(sq), ctx.append(c + i), extra.append([])
                else:                               # a tree: ancestors then itself, after the context
                    anc, j = [], i
                    while j >= 0:
                        anc.append(j); j = par[j]
                    seq.append(sq), ctx.append(c), extra.append([c + a for a in sorted(anc)])
        width = max(1, max(len(e) for e in extra))
        n_extra = torch.tensor([len(e) for e in extra])
        extra = torch.tensor([e + [0] * (width - len(e)) for e in extra], dtype=torch.long)
        seq, ctx = torch.tensor(seq), torch.tensor(ctx)
        q = torch.randn(len(seq), heads, d, generator=g) * 2
        a = old.attention(q, ks, vs, seq, ctx, extra, n_extra, d ** -0.5, ops.CHUNK, False)
        b = new.attention(q, ks, vs, seq, ctx, extra, n_extra, d ** -0.5, ops.CHUNK, False)
        same = torch.equal(a.view(torch.int32), b.view(torch.int32))
        cases += 1
        if not same:
            print("DIFFER", heads, kv, d, trial, ctx.tolist()[:3], (a - b).abs().max().item())
print(f"{cases} cases compared")
