"""Experiment (not taken): EAGLE head passes without the modules around their kernel calls (fc product, the one-layer
stack and its final norm called straight from the proposer, no validity checks), timed by scripts/cycle_phases.py.

    python bench/results/s43/scratch/lean_head_try.py lean|base
"""
import sys, torch
from verispec.proposers import eagle_graph as G
from verispec.model.rows import RowPlan
from verispec.model import ops
from verispec.model.quant import TYPES
from verispec import kernels
K = kernels.load()
lean = sys.argv[1] == "lean"
orig = G.eager_pass
def lean_pass(head, cache, n, plan=()):
    planned = {id(d.rel): d.rows for d in plan if d.rel is not None}
    (fcp,) = head.fc.quant
    dec = head.decoder; s = dec.layers.__dict__["_stack"]; w32 = dec.norm.weight32(); eps = dec.norm.eps
    cos_t, sin_t = dec._rope
    q = (TYPES[fcp.kind][2], fcp.q, fcp.sc, fcp.mn, fcp.d, fcp.dmin, fcp.n, None)
    def run(f, tokens, d, used, rel):
        m = len(tokens)
        rp = RowPlan.chain(m) if rel is None else planned.get(id(rel)) or RowPlan(m, rel)
        rows = rp.at(cache)
        x = torch.cat([f, head.embed[tokens].to(f.dtype)], -1).float()
        x = K.q8linear(x, *q).to(f.dtype).float()
        p = n - 2 + d
        y = s.kernel.run(x, cos_t[p].expand(m, -1).contiguous(), sin_t[p].expand(m, -1).contiguous(), [cache.k], [cache.v], [0], rows.seq, rows.slot, rows.ctx, rows.extra, rows.n_extra, ops.CHUNK)
        cache.advance(m)
        return y
    return run
if lean: G.eager_pass = lean_pass; 
import verispec.proposers.eagle as EG
if lean: EG.eager_pass = lean_pass
sys.argv = ["cycle_phases.py", "smollm2-135m", "bf16", "eagle", "auto+ngram"]
sys.path.insert(0, "scripts")
exec(open("scripts/cycle_phases.py").read().replace('if __name__ == "__main__":', 'if True:'))
