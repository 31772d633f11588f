"""Python's share of a plain decoding step: the model's 30 layers as `model(...)` runs them (one token after 256
cached ones, default model, bf16, no logits) against the same 30 kernel calls with their arguments prepared once.
The difference is the Python per step outside the kernels. Run it from two checkouts to compare:

    python scripts/layer_overhead.py
    PYTHONPATH=/path/to/other/checkout python scripts/checkout_run.py scripts/layer_overhead.py
"""
import torch

from verispec import kernels
from verispec.api import Target
from verispec.model import ops

from tree_cost import median_time  # scripts/ is on the path when run as a script

torch.set_num_threads(2)
model = Target.load(None, "bf16", "cpu").model
context = 256
cache = model.new_cache(context + 8)
model(torch.randint(0, 1000, (1, context)), torch.arange(context)[None], cache)
token, position = torch.tensor([[5]]), torch.tensor([[context]])


def step():
    cache.truncate(context)
    model(token, position, cache)


lib = kernels.load()
rows = ops.Rows.plan([(cache, 0, 1, None)])
cos, sin = (r.reshape(1, -1) for r in model.rope(position))
calls = []
for i, block in enumerate(model.layers):
    a, m = block.attn, block.mlp
    (wqkv, bqkv), (wo, _), (w13, _), (w2, _) = a.wqkv.panels(), a.wo.panels(), m.w13.panels(), m.w2.panels()
    params = [block.attn_norm.weight32(), wqkv, torch.empty(0) if bqkv is None else bqkv, wo,
              block.mlp_norm.weight32(), w13, w2]
    widths = [a.wqkv.out_features, a.wo.out_features, m.w13.out_features, m.w2.out_features]
    ks, vs = [cache.k[i, 0]], [cache.v[i, 0]]
    calls.append((params, widths, ks, vs, a.h, block.attn_norm.eps, a.d ** -0.5))
x = torch.randn(1, model.cfg.hidden_size)


def bare():
    y = x
    for params, widths, ks, vs, heads, eps, scale in calls:
        y = lib.layer(y, params, widths, cos, sin, ks, vs, rows.seq, rows.slot, rows.ctx, rows.extra, rows.n_extra,
                      heads, eps, scale, ops.CHUNK)


whole, kernels_only = median_time(step, 31) * 1e3, median_time(bare, 31) * 1e3
print(f"model layers {whole:.2f} ms; the same kernel calls alone {kernels_only:.2f} ms; "
      f"Python outside the kernels {whole - kernels_only:.2f} ms per step")
