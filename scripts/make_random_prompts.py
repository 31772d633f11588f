"""Write bench/random_prompts.jsonl: random-token prompts, the adversarial input for `--k auto` (never slower).

    python scripts/make_random_prompts.py [N] [SEED]
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from verispec.model import loader  # noqa: E402
from verispec.report import random_prompts  # noqa: E402

n, seed = (int(a) for a in (sys.argv[1:] + ["12", "0"])[:2])
_, tok, _ = loader.load(None, "fp32", need_tokenizer=True)
out = Path(__file__).resolve().parents[1] / "bench" / "random_prompts.jsonl"
out.write_text("".join(json.dumps({"id": p.id, "category": p.category, "prompt": p.prompt}) + "\n"
                       for p in random_prompts(tok, n, seed=seed)))
print(f"wrote {n} prompts to {out}")
