"""One-shot CUDA check of the engine (run on a GPU machine): correctness first, then speed.

    python scripts/cuda_check.py [--out DIR]

1. logits on CUDA (fp32) against the CPU (fp32) for the same checkpoint (--device cpu: a dry run);
2. greedy equality of ngram and draft decoding against plain decoding on CUDA, fp32 and bf16, 10 prompts;
3. the accept rule's statistical exactness test with CUDA tensors;
4. plain / ngram decode speed and the verify cost curve on CUDA, and transformers generate beside it.
Prints a summary and writes cuda_check.json to --out.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from verispec.api import Target, make_engine  # noqa: E402
from verispec.costs import cost_curve  # noqa: E402
from verispec.engine import Engine, GenerationConfig  # noqa: E402
from verispec.model import loader  # noqa: E402
from verispec.model.llama import Llama  # noqa: E402
from verispec.proposers.draft_model import DraftModelProposer  # noqa: E402
from verispec.proposers.ngram import NgramProposer  # noqa: E402
from verispec.sampling import SamplingConfig, probs  # noqa: E402
from verispec.verify import verify_chain  # noqa: E402


def sync(dev):
    if dev == "cuda":
        torch.cuda.synchronize()


def truncated(target: Target, layers: int) -> Llama:
    """A weak draft: a second copy of the target cut to its first `layers` layers."""
    model, _, _ = loader.load(target.folder, target.dtype, target.model.device)
    model.layers = model.layers[:layers]
    model.cfg = dataclasses.replace(model.cfg, num_layers=layers)
    return model


def greedy_equality(target: Target, prompts, max_new=48):
    tok = target.tokenizer
    cfg = GenerationConfig(max_new_tokens=max_new, k=4, stop_token_ids=tok.stop_token_ids)
    plain = Engine(target.model)
    draft = truncated(target, 12)
    others = {"ngram": Engine(target.model, NgramProposer()), "draft": Engine(target.model, DraftModelProposer(draft)),
              "self-draft": Engine(target.model, DraftModelProposer(target.model)),
              "shipped-draft@auto": make_engine("draft", target), "ngram@auto": make_engine("ngram", target)}
    out = {m: 0 for m in others}
    for p in prompts:
        ids = tok.prompt_ids(p)
        ref = plain.generate(ids, cfg).token_ids
        for m, e in others.items():
            mcfg = dataclasses.replace(cfg, k="auto") if m.endswith("@auto") else cfg
            out[m] += e.generate(ids, mcfg).token_ids == ref
    return {m: v / len(prompts) for m, v in out.items()}


def speed(target: Target, prompts, max_new=64):
    tok = target.tokenizer
    cfg = GenerationConfig(max_new_tokens=max_new, k=4, stop_token_ids=tok.stop_token_ids)
    engines = {"plain": Engine(target.model), "ngram": Engine(target.model, NgramProposer()),
               "draft": make_engine("draft", target)}
    for e in engines.values():
        e.generate(tok.prompt_ids("Hello"), GenerationConfig(max_new_tokens=8))
    res = {m: [] for m in engines}
    for p in prompts:
        ids = tok.prompt_ids(p)
        for m, e in engines.items():
            res[m].append(e.generate(ids, cfg).stats.tokens_per_s)
    return {m: statistics.median(v) for m, v in res.items()}


def hf_speed(target: Target, prompts, dtype, dev, max_new=64):
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(target.folder, dtype=dtype).to(dev).eval()
    tok = target.tokenizer
    rates = []
    with torch.inference_mode():
        for i, p in enumerate([prompts[0]] + list(prompts)):
            x = torch.tensor([tok.prompt_ids(p)], device=dev)
            sync(dev)
            t0 = time.perf_counter()
            y = m.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=max_new, do_sample=False,
                           eos_token_id=sorted(tok.stop_token_ids), pad_token_id=0)
            sync(dev)
            if i:
                rates.append((y.shape[1] - x.shape[1]) / (time.perf_counter() - t0))
    return statistics.median(rates)


def exactness_on(dev):
    import test_exactness as t
    results = {}
    for k, temperature, top_p in [(3, 1.0, 1.0), (4, 0.7, 0.9)]:
        cfg = SamplingConfig(temperature=temperature, top_p=top_p)
        a, b = t.tables(seed=k)
        p, q = probs(a.to(dev), cfg), probs(b.to(dev), cfg)
        samples = t.simulate(p, q, k, k + 1, verify_chain, seed=7, device=dev)
        results[f"k={k},T={temperature},top_p={top_p}"] = t.gof_pvalue(samples.cpu(), t.exact_joint(p.cpu(), k + 1))
    biased = t.simulate(p, q, 4, 5, t.residual_free_verifier, seed=7, device=dev)
    results["planted residual-free verifier"] = t.gof_pvalue(biased.cpu(), t.exact_joint(p.cpu(), 5))
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--prompts", type=int, default=10, help="how many of the engine tests' prompts to use")
    args = ap.parse_args()
    dev = args.device
    report = {"device": torch.cuda.get_device_name() if dev == "cuda" else dev, "torch": torch.__version__}
    from test_engine import PROMPTS
    PROMPTS = PROMPTS[:args.prompts]
    cpu = Target.load(None, "fp32", "cpu")
    gpu32 = Target.load(None, "fp32", dev)
    ids = cpu.tokenizer.prompt_ids(PROMPTS[0])
    with torch.inference_mode():
        lc = cpu.model.logits(cpu.model(torch.tensor([ids]), torch.arange(len(ids))[None], cpu.model.new_cache(512)))
        x = torch.tensor([ids], device=dev)
        lg = gpu32.model.logits(gpu32.model(x, torch.arange(len(ids), device=dev)[None],
                                            gpu32.model.new_cache(512))).cpu()
    report["fp32_logits_max_abs_diff_cuda_vs_cpu"] = float((lc - lg).abs().max())
    report["fp32_argmax_agree"] = float((lc.argmax(-1) == lg.argmax(-1)).float().mean())
    del cpu
    report["greedy_match_fp32"] = greedy_equality(gpu32, PROMPTS)
    gpu16 = Target.load(None, "bf16", dev)
    report["greedy_match_bf16"] = greedy_equality(gpu16, PROMPTS)
    report["exactness_pvalues"] = exactness_on(dev)
    for name, tgt, dt in (("fp32", gpu32, torch.float32), ("bf16", gpu16, torch.bfloat16)):
        report[f"speed_{name}_tok_s"] = speed(tgt, PROMPTS)
        report[f"speed_{name}_transformers_tok_s"] = hf_speed(tgt, PROMPTS, dt, dev)
        curve = cost_curve(tgt.model, [1, 2, 4, 8, 16], context=256, repeats=5)
        report[f"cost_curve_{name}"] = {n: curve[n] / curve[1] for n in curve}
        report[f"ms_per_pass_{name}"] = curve[1] * 1e3
    print(json.dumps(report, indent=1))
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "cuda_check.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
