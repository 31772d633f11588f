"""Where the extra rows of a verification pass cost time, on the CPU kernels: for n new rows after CONTEXT cached
tokens (default model, bf16, 2 threads), the whole forward (no logits), the model's 120 matrix products alone (its
real weights, streamed as in a pass), one layer's attention, and the norms and SiLU of every layer. Medians of 15.

    python scripts/row_costs.py [CONTEXT [N N ...]]        (default: 256 and 1 9 16 17 24 32)
"""
import statistics
import sys
import time

import torch

from verispec import kernels
from verispec.api import Target
from verispec.model import ops
from verispec.model.kv_cache import KVCache


def median_ms(fn, repeats=15) -> float:
    times = []
    for _ in range(repeats + 1):                       # the first call warms up
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:]) * 1e3


@torch.inference_mode()
def main(context: int, ns: list[int]):
    torch.set_num_threads(2)
    k = kernels.load()
    model = Target.load(None, "bf16", "cpu").model
    g = torch.Generator().manual_seed(0)
    cache = model.new_cache(context + max(ns) + 8)
    model(torch.randint(0, 1000, (1, context), generator=g), torch.arange(context)[None], cache)
    products = []
    for b in model.layers:
        for lin in (b.attn.wqkv, b.attn.wo, b.mlp.w13, b.mlp.w2):
            panels, bias = lin.panels()
            products.append((panels, lin.weight.shape[0], bias, lin.weight.shape[1]))
    norms = [(b.attn_norm.weight32(), b.mlp_norm.weight32()) for b in model.layers]
    cfg = model.cfg
    print(f"isa {k.fp_isa()}, context {context}; ms (medians of 15)")
    print(f"{'rows':>5} {'forward':>8} {'products':>9} {'attention x30':>14} {'norms+silu':>11}")
    for n in ns:
        tokens = torch.randint(0, 1000, (1, n), generator=g)
        positions = torch.arange(context, context + n)[None]

        def forward():
            cache.truncate(context)
            model(tokens, positions, cache)
        xs = {kk: torch.randn(n, kk) for kk in (cfg.hidden_size, cfg.intermediate_size)}
        prod = median_ms(lambda: [k.linear(xs[kk], p, out, bias) for p, out, bias, kk in products])
        att_cache = KVCache(1, 1, cfg.num_kv_heads, context + n, cfg.head_dim, torch.bfloat16, torch.device("cpu"))
        att_cache.k.normal_(generator=g)
        att_cache.v.normal_(generator=g)
        att_cache.length = context
        rows = ops.Rows.plan([(att_cache, 0, n, None)])
        ks, vs = rows.caches(0)
        width = (cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim
        args = (torch.randn(n, width), torch.randn(n, cfg.head_dim // 2), torch.randn(n, cfg.head_dim // 2), ks, vs,
                rows.seq, rows.slot, rows.ctx, rows.extra, rows.n_extra, cfg.num_heads, cfg.head_dim ** -0.5,
                ops.CHUNK, False)
        att = median_ms(lambda: k.attention_step(*args)) * cfg.num_layers
        x, gate_up = torch.randn(n, cfg.hidden_size), torch.randn(n, 2 * cfg.intermediate_size)
        rest = median_ms(lambda: [(k.rms_norm(x, a, 1e-5), k.rms_norm(x, b, 1e-5), k.silu_mul(gate_up))
                                  for a, b in norms])
        print(f"{n:5d} {median_ms(forward):8.2f} {prod:9.2f} {att:14.2f} {rest:11.2f}", flush=True)


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    main(args[0] if args else 256, args[1:] or [1, 9, 16, 17, 24, 32])
