import torch
from verispec.api import Target
from verispec.model import ops
torch.set_num_threads(1)
model = Target.load(None, "bf16a", "cpu").model
g = torch.Generator().manual_seed(3)
with torch.inference_mode():
    lens = [300, 700, 130]
    prompts = [torch.randint(0, 1000, (1, n), generator=g) for n in lens]
    packed_caches = [model.new_cache(1000) for _ in lens]
    alone_caches = [model.new_cache(1000) for _ in lens]
    for p, c1, c2 in zip(prompts, packed_caches, alone_caches):
        model(p, torch.arange(p.shape[1])[None], c1)
        model(p, torch.arange(p.shape[1])[None], c2)
    ok = True
    for step in range(30):
        segs, alone = [], []
        for i, (c1, c2) in enumerate(zip(packed_caches, alone_caches)):
            n = 1 + (step + i) % 4
            toks = torch.randint(0, 1000, (1, n), generator=g)
            pos = torch.arange(c1.length, c1.length + n)[None]
            segs.append((toks, pos, c1, None))
            alone.append(model(toks, pos, c2))
        outs = model.forward_packed(segs)
        for (t, p, c1, _), o, a, c2 in zip(segs, outs, alone, alone_caches):
            ok &= torch.equal(o, a)
            keep = c1.length - t.shape[1] + 1 + step % t.shape[1]
            c1.truncate(keep); c2.truncate(keep)
    print("packed equals alone:", ok, [c.panels(ops.CHUNK)[1][0, 0, :8].tolist() for c in packed_caches])
