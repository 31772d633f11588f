"""Seconds and peak memory of one EAGLE training step (unroll 3, bf16 autocast) for B sequences of L tokens.

    python bench/results/s47/scratch/train_step_cost.py B L [L ...]
"""
import resource, sys, time, torch
import verispec.api as a
from verispec.model.eagle import load_eagle
from verispec.train.eagle import eagle_loss, pad_batch
from verispec.train.draft import descend
torch.set_num_threads(2)
t = a.Target.load(None, "bf16", "cpu")
head, _ = load_eagle(a.default_draft(t, a.DEFAULT_EAGLE, "eagle"), t.model, torch.float32)
opt = torch.optim.AdamW([p for p in head.parameters() if p.requires_grad], lr=1e-5)
B, D = int(sys.argv[1]), t.model.cfg.hidden_size
for L in map(int, sys.argv[2:]):
    feats = [torch.randn(L - 1, D).to(torch.float16) for _ in range(B)]
    toks = [torch.randint(0, 1000, (L,)) for _ in range(B)]
    for i in range(2):
        t0 = time.perf_counter(); head.train()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss, _ = eagle_loss(head, *pad_batch(feats, toks, head), 0.5, 0.1, torch.Generator().manual_seed(0), 3)
        descend(head, opt, loss)
        dt = time.perf_counter() - t0
    print(f"B={B} L={L}: {dt:.2f} s/step, peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss/1e6:.1f} GB", flush=True)
