"""A proposer's step with native and with 4-bit weights (`--draft-weights native|q4`), side by side in one process.

    python scripts/draft_weights_speed.py [MODEL [DTYPE]]      (default: qwen2.5-coder-1.5b gguf-q8)

Loads MODEL's default draft model and EAGLE head twice, native and requantized (`verispec/model/requant.py`),
and times, interleaved round by round: the target's one-token pass with logits; the draft's one-token pass with
its (reduced) head's logits; the EAGLE head's one-token step with its logits. Prints medians in ms and each as a
fraction of the target's pass (c), plus the weight bytes the requantization saves. 2 threads.
"""
import statistics
import sys
import time
from dataclasses import replace

import torch

from verispec.api import Target, load_draft, make_proposer
from verispec.errors import VerispecError


@torch.inference_mode()
def main() -> int:
    torch.set_num_threads(2)
    args = sys.argv[1:]
    model, dtype = (args + ["qwen2.5-coder-1.5b", "gguf-q8"][len(args):])[:2]
    try:
        target = Target.load(model, dtype, "cpu", "native")
        drafts = {w: load_draft(replace(target, draft_weights=w)) for w in ("native", "q4")}
        heads = {w: make_proposer("eagle", replace(target, draft_weights=w)).head for w in ("native", "q4")}
    except VerispecError as e:
        print(f"draft_weights_speed: {e}", file=sys.stderr)
        return 2
    ids = target.tokenizer.prompt_ids("Write a Python function that checks whether a number is prime.")
    n = len(ids)
    prompt, pos = torch.tensor([ids]), torch.arange(n)[None]
    tok, at = torch.tensor([[ids[-1]]]), torch.tensor([[n]])
    steps = {}
    for name, m in [("target", target.model)] + [(f"draft {w}", d) for w, d in drafts.items()]:
        cache = m.new_cache(n + 8)
        m(prompt, pos, cache)
        steps[name] = (lambda m, cache: lambda: (m.logits(m(tok, at, cache)), cache.truncate(n)))(m, cache)
    feats = target.model(prompt, pos, target.model.new_cache(n + 8))                 # [1, n, D]
    for w, h in heads.items():
        cache = h.new_cache(n + 8)
        h(feats[:, :-1], prompt[:, 1:], pos[:, :-1], cache)
        steps[f"EAGLE head {w}"] = (lambda h, cache: lambda: (
            h.logits(h(feats[:, -1:], tok, at - 1, cache)), cache.truncate(n - 1)))(h, cache)
    times = {k: [] for k in steps}
    for _ in range(25):
        for k, f in steps.items():
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
    base = statistics.median(times["target"][1:])
    print(f"{model} {dtype}, median of 24 interleaved rounds")
    for k, t in times.items():
        ms = statistics.median(t[1:]) * 1e3
        print(f"{k:22s} {ms:7.2f} ms   c = {ms / 1e3 / base:.3f}")
    size = lambda m: sum(p.nbytes() for x in m.modules() if getattr(x, "quant", None) for p in x.quant)  # noqa
    print(f"draft's quantized weights: native {size(drafts['native']) / 2**20:.0f} MB, "
          f"q4 {size(drafts['q4']) / 2**20:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
