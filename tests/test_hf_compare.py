"""The transformers peers: our draft converted for assisted generation keeps its weights, head and all."""
from __future__ import annotations

import json

import torch

from verispec.cli import main
from verispec.hf_compare import as_hf_model
from verispec.model.llama import Llama, LlamaConfig


def test_reduced_head_draft_as_transformers_model_gives_the_same_logits():
    cfg = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
                      num_kv_heads=2, max_position=64, tie_embeddings=False, head_tokens=50)
    torch.manual_seed(0)
    ours = Llama(cfg)
    for p in ours.parameters():
        torch.nn.init.normal_(p, std=0.05)
    ours.head_ids.copy_(torch.randperm(300)[:50])
    hf = as_hf_model(ours, torch.float32)
    tokens = torch.randint(0, 300, (1, 12))
    with torch.no_grad():
        mine = ours.logits(ours(tokens, torch.arange(12)[None], None))           # [1, 12, 300], -inf off-head
        theirs = hf(tokens).logits                                                # [1, 12, 300], 0 off-head
    on = ours.head_ids
    assert torch.allclose(mine[..., on], theirs[..., on], atol=1e-4)
    off = torch.ones(300, dtype=torch.bool)
    off[on] = False
    assert torch.all(theirs[..., off] == 0) and torch.all(mine[..., off] == float("-inf"))


def test_bench_runs_transformers_assisted_generation_with_our_draft(tmp_path, tiny_dir):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "Repeat: a b c a b c", "category": "x"}))
    out = tmp_path / "r.json"
    assert main(["bench", "--prompts", str(prompts), "--model", str(tiny_dir), "--draft", str(tiny_dir),
                 "--methods", "draft,hf-plain,hf-draft", "--k", "3", "--max-new-tokens", "6", "--dtype", "bf16",
                 "--json", str(out)]) == 0
    rows = {r["method"]: r for r in json.loads(out.read_text())["results"] if r["category"] == "all"}
    assert rows["draft"]["greedy_match_rate"] == 1.0 and rows["draft"]["acceptance_rate"] == 1.0
    assert rows["hf-draft"]["new_tokens"] > 0 and rows["hf-plain"]["new_tokens"] > 0   # bf16: ties may differ
