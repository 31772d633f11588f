"""Continuous batching on CUDA: the server's `Batch` at concurrency 1, 4 and 8 for plain, ngram and draft (k = 4),
8 development prompts (2 per category), 48 new tokens: total tok/s (prefills and each new sequence's graph
captures included) and how many sequences' output at concurrency c equals their output at concurrency 1.

    python scripts/cuda_serve_check.py [OUT_DIR]          (writes serve.json there; default .)
"""
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from verispec.api import Target  # noqa: E402
from verispec.engine import GenerationConfig  # noqa: E402
from verispec.prompts import load_prompts  # noqa: E402
from verispec.serve.commands import decode_batch  # noqa: E402


def main(out_dir: str = "."):
    target = Target.load(None, "bf16", "cuda")
    cats = {}
    for p in load_prompts([ROOT / "bench" / "dev_prompts.jsonl"]):
        cats.setdefault(p.category, []).append(p)
    ids = [target.tokenizer.prompt_ids(p.prompt) for ps in cats.values() for p in ps[:2]]
    cfg = GenerationConfig(max_new_tokens=48, k=4, stop_token_ids=target.tokenizer.stop_token_ids)
    out = {}
    for method in ("plain", "ngram", "draft"):
        ref = None
        for c in (1, 4, 8):
            seconds, seqs = decode_batch(target, method, ids, cfg, c)
            toks = [s.out for s in seqs]
            ref = ref or toks
            out[f"{method} x{c}"] = {"tok_s": round(sum(map(len, toks)) / seconds, 1),
                                     "same_as_x1": sum(a == b for a, b in zip(toks, ref))}
            print(method, c, out[f"{method} x{c}"], flush=True)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    (Path(out_dir) / "serve.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main(*sys.argv[1:])
