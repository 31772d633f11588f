"""What `--dtype gguf-q8` (8-bit activations, integer sums), or another dtype (`--dtype bf16`, `bf16a`), costs in
quality against `--dtype gguf` (the file's exact fp32 model), and where llama.cpp, which computes the same kind of
way, stands on the same prompts.

For held-out development prompts (code, general, maths): greedy 48 tokens from the exact model; then
  - top-1 agreement and mean KL(exact || q8) over those positions, teacher-forced (one pass over prompt + answer);
  - greedy decodings in the dtype tested (and llama.cpp's, when installed): the share identical to the exact model's, and the
    median first differing position;
and on long held-out text (long.jsonl prompts, first 384 tokens) the mean negative log-likelihood per token.

Usage: python scripts/q8_quality.py [MODEL] [--dtype gguf-q8] [--per-category N] [--json OUT]
"""
import argparse
import json
import statistics
import sys

import torch

from verispec.engine import Engine, GenerationConfig
from verispec.model import catalog, loader
from verispec.prompts import is_dev, load_prompts

ap = argparse.ArgumentParser()
ap.add_argument("model", nargs="?", default="qwen2.5-coder-1.5b")
ap.add_argument("--per-category", type=int, default=4)
ap.add_argument("--tokens", type=int, default=48)
ap.add_argument("--long", type=int, default=4)
ap.add_argument("--dtype", default="gguf-q8", help="the dtype compared with the exact model (default gguf-q8)")
ap.add_argument("--no-llamacpp", action="store_true", help="leave llama.cpp out even when installed")
ap.add_argument("--json")
args = ap.parse_args()
torch.set_num_threads(2)
DATA = "../shared/data/prompts/"
exact, tok, _ = loader.load(args.model, "gguf")
q8, _, _ = loader.load(args.model, args.dtype)
try:
    if args.no_llamacpp:
        raise ImportError
    import llama_cpp
    llm = llama_cpp.Llama(str(catalog.gguf_path(args.model, loader.home() / "downloads")), n_ctx=4096,
                          n_threads=2, verbose=False)
except ImportError:
    llm = None


def logits(model, ids):
    cache = model.new_cache(len(ids) + 1)
    return model.logits(model(torch.tensor([ids]), torch.arange(len(ids))[None], cache))[0].float()   # [T, V]


def first_diff(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), len(a))


rows = []
for cat in ("code", "general", "math"):
    prompts = [p for p in load_prompts([DATA + f"{cat}.jsonl"]) if is_dev(p.id)][:args.per_category]
    for p in prompts:
        ids = tok.prompt_ids(p.prompt)
        cfg = GenerationConfig(max_new_tokens=args.tokens, stop_token_ids=frozenset())
        ref = Engine(exact).generate(ids, cfg).token_ids
        mine = Engine(q8).generate(ids, cfg).token_ids
        seq = ids + ref
        le, lq = logits(exact, seq)[len(ids) - 1:-1], logits(q8, seq)[len(ids) - 1:-1]      # [n, V] predicting ref
        pe, lpq = torch.log_softmax(le, -1), torch.log_softmax(lq, -1)
        row = {"category": cat, "id": p.id, "top1": (le.argmax(-1) == lq.argmax(-1)).float().mean().item(),
               "kl": (pe.exp() * (pe - lpq)).sum(-1).mean().item(), "test_first_diff": first_diff(ref, mine)}
        if llm is not None:
            from verispec.peers import greedy
            row["llamacpp_first_diff"] = first_diff(ref, greedy(llm, ids, args.tokens))
        rows.append(row)
        print(json.dumps(row), flush=True)

nll = []
for p in load_prompts([DATA + "long.jsonl"])[:args.long]:
    ids = tok.encode(p.prompt)[:384]
    one = {}
    for name, model in (("exact", exact), ("test", q8)):
        lp = torch.log_softmax(logits(model, ids)[:-1], -1)
        one[name] = -lp.gather(1, torch.tensor(ids[1:])[:, None]).mean().item()
    nll.append(one)
    print(json.dumps({"long": p.id, **one}), flush=True)

n = len(rows)
summary = {
    "model": args.model, "dtype": args.dtype, "prompts": n, "tokens": args.tokens,
    "top1_agreement": statistics.mean(r["top1"] for r in rows),
    "mean_kl": statistics.mean(r["kl"] for r in rows),
    "test_identical": sum(r["test_first_diff"] == args.tokens for r in rows) / n,
    "test_median_first_diff": statistics.median(r["test_first_diff"] for r in rows),
    "nll_exact": statistics.mean(x["exact"] for x in nll), "nll_test": statistics.mean(x["test"] for x in nll),
}
if llm is not None:
    summary["llamacpp_identical"] = sum(r["llamacpp_first_diff"] == args.tokens for r in rows) / n
    summary["llamacpp_median_first_diff"] = statistics.median(r["llamacpp_first_diff"] for r in rows)
print(json.dumps(summary, indent=1))
if args.json:
    with open(args.json, "w") as f:
        json.dump({"summary": summary, "prompts": rows, "long": nll}, f, indent=1)
sys.exit(0)
