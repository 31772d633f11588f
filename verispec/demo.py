"""`verispec demo` (what `make run` shows): a few prompts, plain decoding against speculative decoding."""
from __future__ import annotations

import sys

from .api import Target, make_engine
from .engine import Engine, GenerationConfig
from .errors import VerispecError
from .flags import method_names
from .sampling import SamplingConfig

PROMPTS = [
    "Summarize this paragraph in two sentences: The city council met on Tuesday evening to discuss the new "
    "riverside park. Residents asked for more trees, more benches and a playground near the water. The council "
    "agreed to plant fifty trees next spring, to add twenty benches along the river path, and to study the "
    "playground at its next meeting.",
    "Add a docstring and type hints to this function, and return the whole function:\n\n"
    "def mean(values):\n    total = 0\n    for v in values:\n        total += v\n    return total / len(values)",
    "What are three good habits for staying healthy?",
]


def _faster(engine, ids, cfg):
    """The faster of two runs of one generation: a prompt's first run pays one-time costs (its prefill's shapes,
    a proposer's first sight of the prompt) that would skew a single side-by-side timing either way."""
    runs = [engine.generate(ids, cfg) for _ in range(2)]
    if runs[0].token_ids != runs[1].token_ids:
        raise VerispecError(f"{engine.method}: two greedy runs of the same prompt gave different tokens")
    return max(runs, key=lambda g: g.stats.tokens_per_s)


def cmd_demo(args) -> int:
    methods = method_names(args.methods, speculative=True)
    target = Target.load(args.model, args.dtype, args.device, args.draft_weights)
    tok = target.tokenizer
    plain = Engine(target.model)
    # --draft is the draft model's folder; EAGLE drafts its static tree with the n-gram path grafted on (its
    # fastest mode here, see the README)
    engines = {m: make_engine(m, target, args.draft if m in ("draft", "draft-tree") else None,
                              tree="auto+ngram" if m == "eagle" else None) for m in methods}
    cfg = GenerationConfig(max_new_tokens=args.max_new_tokens, k=args.k, sampling=SamplingConfig(0.0),
                           stop_token_ids=tok.stop_token_ids)
    warm = tok.prompt_ids("Hello!")
    for e in [plain, *engines.values()]:
        e.generate(warm, GenerationConfig(max_new_tokens=4, k=args.k))
    print(f"verispec demo: {target.folder} ({args.dtype}), greedy, k = {args.k}, "
          f"up to {args.max_new_tokens} new tokens; each timing the faster of two runs\n")
    for prompt in PROMPTS:
        ids = tok.prompt_ids(prompt)
        base = _faster(plain, ids, cfg)
        print(f">>> {prompt}\n")
        print(tok.decode(base.token_ids).strip() + "\n")
        print(f"  {'plain':<6} {base.stats.tokens_per_s:6.1f} tok/s")
        for name, engine in engines.items():
            g = _faster(engine, ids, cfg)
            s = g.stats
            alpha = "-" if s.acceptance_rate is None else f"{s.acceptance_rate:.2f}"
            print(f"  {name:<6} {s.tokens_per_s:6.1f} tok/s  speedup {s.tokens_per_s / base.stats.tokens_per_s:.2f}x"
                  f"  MAT {s.mean_accepted_tokens:.2f}  alpha {alpha}"
                  f"  output identical to plain: {'yes' if g.token_ids == base.token_ids else 'NO'}")
        print()
    sys.stdout.flush()
    return 0
