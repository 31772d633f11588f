"""Speed of the quantized products (`qlinear`, and `q8linear` of --dtype gguf-q8) against `linear` over bf16 and
fp32 panels of the same weights.

    python scripts/quant_speed.py MODEL.gguf [--threads 2] [--rows 1,2,4,8,16,32,128] [--draft-head NAME]

Takes layer 0's ffn_gate, ffn_up, ffn_down, attn_q and the output matrix (a tied model's: the embedding) from a
GGUF file; prints, per weight and row count, the median time of each product and its weight bytes read per second
(effective GB/s), q8linear's multiply-adds per second, and checks that qlinear's output equals fp32 linear's bit
for bit. --draft-head NAME: also the output matrix cut to the rows a named draft keeps (`api.draft_head`).
"""
from __future__ import annotations

import argparse
import statistics
import time

import gguf
import numpy as np
import torch

from verispec import kernels
from verispec.model import ops, quant

NAMES = ["blk.0.ffn_gate.weight", "blk.0.ffn_up.weight", "blk.0.ffn_down.weight", "blk.0.attn_q.weight",
         "output.weight"]
HEAD_TIED = "token_embd.weight"                     # the output head of a model with tied embeddings


def median_ms(fn, budget_s: float = 0.4, min_reps: int = 5) -> float:
    fn()
    times = []
    start = time.perf_counter()
    while len(times) < min_reps or time.perf_counter() - start < budget_s:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", default="1,2,4,8,16,32,128")
    ap.add_argument("--draft-head", help="a named draft: also time its reduced output head")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    lib = kernels.load()
    assert lib is not None, kernels.status()
    tensors = {t.name: t for t in gguf.GGUFReader(args.gguf).tensors}
    print(f"threads {args.threads}; ms (GB/s of weight bytes); qlinear bitwise = fp32 linear checked per row count")
    print("| weight | type | N x K | M | qlinear | q8linear (GMAC/s) | bf16 linear | fp32 linear | bf16 / q |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    head = None
    if args.draft_head:
        from verispec.api import draft_head
        head = draft_head(args.draft_head)
        assert head is not None, f"{args.draft_head} has no reduced head"
    for name, cut in [(n, False) for n in NAMES] + ([("output.weight", True)] if head is not None else []):
        t = tensors.get(name) or tensors[HEAD_TIED if name == "output.weight" else name]
        kind, k, n = t.tensor_type.name, int(t.shape[0]), int(t.shape[1])
        raw = np.asarray(t.data).reshape(n, -1)                                # [N, bytes per row]
        if cut:
            raw, n = raw[head.numpy()], len(head)
        p = quant.pack(raw, kind, n, k)
        w = quant.dequantize(p)                                                # [N, K] fp32
        p32, p16 = ops._panels(w), ops._panels(w.bfloat16())
        del w
        gb = {"q": p.nbytes() / 1e9, "bf16": 2 * n * k / 1e9, "fp32": 4 * n * k / 1e9}
        for m in [int(r) for r in args.rows.split(",")]:
            x = torch.randn(m, k)
            yq = lib.qlinear(x, quant.TYPES[kind][2], p.q, p.sc, p.mn, p.d, p.dmin, n, None)
            assert torch.equal(yq.view(torch.int32), lib.linear(x, p32, n, None).view(torch.int32)), (name, m)
            q8 = median_ms(lambda: lib.q8linear(x, quant.TYPES[kind][2], p.q, p.sc, p.mn, p.d, p.dmin, n, None))
            ms = {"q": median_ms(lambda: lib.qlinear(x, quant.TYPES[kind][2], p.q, p.sc, p.mn, p.d, p.dmin, n, None)),
                  "bf16": median_ms(lambda: lib.linear(x, p16, n, None)),
                  "fp32": median_ms(lambda: lib.linear(x, p32, n, None))}
            cell = {key: f"{v:.2f} ({gb[key] / v * 1e3:.1f})" for key, v in ms.items()}
            print(f"| {t.name.replace('.weight', '')} | {kind} | {n} x {k} | {m} | {cell['q']} | "
                  f"{q8:.2f} ({m * n * k / q8 / 1e6:.0f}) | {cell['bf16']} | "
                  f"{cell['fp32']} | {ms['bf16'] / ms['q']:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
