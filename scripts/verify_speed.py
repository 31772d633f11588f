"""Cost of a verification pass over M rows: every product of a whole model step, out of cache, per op and summed.

    python scripts/verify_speed.py MODEL.gguf [--rows 1,2,4,8] [--passes 3] [--kernels DIR[,DIR2]] [--no-bf16]

Runs the model's matrix products in model order (each layer's q, k, v, o, gate, up, down, then output), timing each
call, so every weight streams from memory as in decoding (no weight is reused while it sits in L3). For GGUF
weights (`qlinear`) the file's own quantized tensors; for bf16 (`linear`) random bf16 panels of the fused shapes
(wqkv, wo, w13, w2, output). Prints, per row count, the median ms of each op kind and the whole step (sum of all
products) and T(M) / T(1). --kernels: folders of cpu.cpp, quant.cpp, simd.h to build and compare (the first one's
outputs must equal every other's bit for bit); default: verispec's own.
"""
from __future__ import annotations

import argparse
import collections
import hashlib
import statistics
import time
from pathlib import Path

import gguf
import numpy as np
import torch

from verispec import kernels
from verispec.model import ops, quant


def build(folder: str):
    from torch.utils.cpp_extension import load
    d = Path(folder)
    key = hashlib.sha1(b"".join((d / n).read_bytes() for n in ("cpu.cpp", "quant.cpp", "simd.h"))).hexdigest()[:10]
    out = Path("/tmp/vk_bench_build") / key
    out.mkdir(parents=True, exist_ok=True)
    return load(name=f"vs_bench_{key}", sources=[str(d / "cpu.cpp"), str(d / "quant.cpp")],
                extra_cflags=kernels.FLAGS, extra_ldflags=["-fopenmp"], build_directory=str(out), verbose=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("--rows", default="1,2,3,4,5,8,9,16,17,32")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kernels", default="")
    ap.add_argument("--layers", type=int, default=0, help="only the first L layers (0: all)")
    ap.add_argument("--no-bf16", action="store_true")
    ap.add_argument("--no-q", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    libs = [build(f) for f in args.kernels.split(",")] if args.kernels else [kernels.load()]
    names = args.kernels.split(",") if args.kernels else ["verispec"]
    reader = gguf.GGUFReader(args.gguf)
    tensors = {t.name: t for t in reader.tensors}
    n_layers = 1 + max(int(n.split(".")[1]) for n in tensors if n.startswith("blk."))
    all_layers = n_layers
    if args.layers:
        n_layers = args.layers
    # ops: (label, callable(lib, x)) in model order
    q_ops, b_ops = [], []
    if not args.no_q:
        for i in range(n_layers):
            for part in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"):
                t = tensors[f"blk.{i}.{part}.weight"]
                k, n = int(t.shape[0]), int(t.shape[1])
                p = quant.pack(np.asarray(t.data), t.tensor_type.name, n, k)
                q_ops.append((f"{part} {t.tensor_type.name}", k, p))
        t = tensors["output.weight"]
        k, n = int(t.shape[0]), int(t.shape[1])
        q_ops.append((f"output {t.tensor_type.name}", k, quant.pack(np.asarray(t.data), t.tensor_type.name, n, k)))
    if not args.no_bf16:
        D = int(tensors["blk.0.attn_q.weight"].shape[0])
        F = int(tensors["blk.0.ffn_gate.weight"].shape[1])
        kv = int(tensors["blk.0.attn_k.weight"].shape[1])
        V = int(tensors["output.weight"].shape[1])
        shapes = [("wqkv", D + 2 * kv, D), ("wo", D, D), ("w13", 2 * F, D), ("w2", D, F)]
        g = torch.Generator().manual_seed(0)
        for i in range(n_layers):
            for label, n, k in shapes:
                w = (torch.randn(n, k, generator=g) * 0.05).bfloat16()
                b_ops.append((label, k, ops._panels(w), n))      # AMX-BF16's layout where it runs
        w = (torch.randn(V, D, generator=g) * 0.05).bfloat16()
        b_ops.append(("output", D, ops._panels(w), V))
        del w

    def q_call(lib, x, p):
        return lib.qlinear(x, quant.TYPES[p.kind][2], p.q, p.sc, p.mn, p.d, p.dmin, p.n, None)

    def run(M, ops, call):
        """per build: per op kind, the median and min ms over layers and passes (builds interleaved per pass)."""
        per = [collections.defaultdict(list) for _ in libs]
        for _ in range(args.passes):
            for lib, times in zip(libs, per):
                for op in ops:
                    x = xs[(M, op[1])]
                    t0 = time.perf_counter()
                    call(lib, x, op)
                    times[op[0]].append(1e3 * (time.perf_counter() - t0))
        count = collections.Counter(op[0] for op in ops)
        # the whole step from per-op statistics: each op kind's count scaled to all layers (output once)
        scale = {k: c if k.startswith("output") else c * all_layers / n_layers for k, c in count.items()}
        out = []
        for times in per:
            med = {k: statistics.median(v) for k, v in times.items()}
            out.append((med, sum(med[k] * scale[k] for k in scale), sum(min(times[k]) * scale[k] for k in scale)))
        return out

    rows = [int(r) for r in args.rows.split(",")]
    g = torch.Generator().manual_seed(1)
    xs = {}
    for M in rows:
        for k in {op[1] for op in q_ops + b_ops}:
            xs[(M, k)] = torch.randn(M, k, generator=g)
    for kind, kind_ops, call in (("qlinear", q_ops, lambda lib, x, op: q_call(lib, x, op[2])),
                                 ("bf16 linear", b_ops, lambda lib, x, op: lib.linear(x, op[2], op[3], None))):
        if not kind_ops:
            continue
        # bitwise: every build against the first, on one op of each kind and every row count
        firsts = {}
        for op in kind_ops:
            firsts.setdefault(op[0], op)
        for M in rows:
            for op in firsts.values():
                x = xs[(M, op[1])]
                ref = call(libs[0], x, op)
                for lib, nm in zip(libs[1:], names[1:]):
                    assert torch.equal(call(lib, x, op).view(torch.int32), ref.view(torch.int32)), (kind, op[0], M, nm)
        labels = list(firsts)
        print(f"\n## {kind}, {n_layers} layers, threads {args.threads}: median ms per op; step = all products of all layers, from the medians")
        print("| build | M | " + " | ".join(labels) + " | step ms (median) | T(M)/T(1) | step ms (min) | T(M)/T(1) |")
        print("|" + " --- |" * (len(labels) + 6))
        t1 = {}
        for M in rows:
            for i, (med, est, best) in enumerate(run(M, kind_ops, call)):
                if M == 1:
                    t1[i] = (est, best)
                r = lambda v, j: f"{v / t1[i][j]:.2f}" if i in t1 else "-"
                print(f"| {Path(names[i]).name} | {M} | " + " | ".join(f"{med[l]:.2f}" for l in labels) +
                      f" | {est:.0f} | {r(est, 0)} | {best:.0f} | {r(best, 1)} |", flush=True)


if __name__ == "__main__":
    main()
