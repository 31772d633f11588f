"""`verispec doctor`: what this machine guarantees, and the bitwise checks that show it on the loaded model.

The guarantee: every row of a pass (a verified chain, a token tree, a packed batch of sequences) gets, bit for
bit, the hidden state and logits it gets decoded alone, so greedy speculative output is plain decoding's output
and a request's output does not depend on its batch. It holds where verispec's kernels run (`verispec.kernels`);
the checks below test it on this machine, with this torch, on the model's own shapes. Exit 0: it holds; exit 1:
it does not (the output is then exact in distribution only: lossless in exact arithmetic, not bitwise).
"""
from __future__ import annotations

import platform
import sys

import torch

from . import kernels


def machine_lines() -> list[str]:
    flags = kernels.cpu_flags()
    shown = [f for f in ("avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_int8",
                         "amx_bf16") if f in flags]
    model = kernels.cpu_model() or "?"
    return [f"machine: {platform.machine()}, {model}, {torch.get_num_threads()} threads",
            f"cpu features: {' '.join(shown) or 'none of interest'}",
            f"torch {torch.__version__}, capability {torch.backends.cpu.get_cpu_capability()}, "
            f"python {platform.python_version()}"]


def checks(model, rows: int) -> list[tuple[str, bool]]:
    """(what, held) for each bitwise check on `model`."""
    from .model import ops
    g = torch.Generator().manual_seed(0)
    vocab = model.cfg.vocab_size
    out = []
    with torch.inference_mode():
        prompt = torch.randint(0, vocab, (1, 40), generator=g)
        tokens = torch.randint(0, vocab, (1, rows), generator=g)

        def fresh(extra=0):
            cache = model.new_cache(40 + rows + extra + 1)
            model(prompt, torch.arange(40)[None], cache)
            return cache

        c = fresh()
        chain = model.logits(model(tokens, torch.arange(40, 40 + rows)[None], c))[0]
        c = fresh()
        plain = torch.cat([model.logits(model(tokens[:, i:i + 1], torch.tensor([[40 + i]]), c))[0]
                           for i in range(rows)])
        out.append((f"a chain of {rows} rows equals plain decoding, row by row", torch.equal(chain, plain)))
        c = fresh()
        with ops.one_row_at_a_time():
            ref = model.logits(model(tokens, torch.arange(40, 40 + rows)[None], c))[0]
        out.append((f"every reduction of a {rows}-row pass equals its row computed alone", torch.equal(chain, ref)))
        # a tree: the chain's tokens as one path, with a decoy sibling beside every node
        n = min(rows, 32)
        mask = torch.zeros(2 * n, 2 * n, dtype=torch.bool)
        for i in range(n):
            mask[2 * i, 0:2 * i + 1:2] = True
            mask[2 * i + 1, 0:2 * i:2] = True
            mask[2 * i + 1, 2 * i + 1] = True
        tree_tokens = torch.stack([tokens[0, :n], (tokens[0, :n] + 1) % vocab], 1).reshape(1, 2 * n)
        full = torch.cat([torch.ones(2 * n, 40, dtype=torch.bool), mask], 1)[None]
        c = fresh(n)
        tree = model.logits(model(tree_tokens, (40 + torch.arange(n).repeat_interleave(2))[None], c, full))[0]
        out.append((f"a {2 * n}-node tree's path equals plain decoding", torch.equal(tree[::2], plain[:n])))
        caches = [fresh(), fresh()]
        m = min(rows, 5)
        packed = model.forward_packed([(tokens[:, :m], torch.arange(40, 40 + m)[None], caches[0], None),
                                       (tokens[:, :1], torch.tensor([[40]]), caches[1], None)])
        out.append(("a packed batch of two sequences equals each alone",
                    torch.equal(model.logits(packed[0])[0], plain[:m])
                    and torch.equal(model.logits(packed[1])[0], plain[:1])))
    return out


def fingerprint_line(target) -> str:
    """This machine's fingerprint of the model, against the one recorded on another machine where there is one (for
    bf16 on AMX-BF16 tiles, whose bits are their own, against one recorded on an AMX machine: key `bf16+amx`; bf16a
    takes no tiles, its products and attention are bf16 pair products, the same bits on every machine)."""
    from .fingerprint import fingerprint, reference
    mine = fingerprint(target.model)
    key = target.dtype + ("+amx" if target.dtype == "bf16" and kernels.bf16_on_amx() else "")
    ref = reference(target.name, key)
    if ref is None:
        return f"fingerprint: {mine} (the logits' bits on a fixed pass; none recorded for this model, {key} and torch)"
    if ref["digest"] == mine:
        return f"fingerprint: {mine}, the same bits as recorded on {ref['machine']}: this machine decodes what it does"
    return (f"fingerprint: {mine}, NOT the {ref['digest']} recorded on {ref['machine']}: outputs here can differ "
            "from that machine's (the bitwise promise on this machine is the checks above)")


def cmd_doctor(args) -> int:
    from .api import Target
    if args.rows < 2:
        print("verispec: error: --rows must be >= 2 (a pass of several rows against the rows alone)", file=sys.stderr)
        return 2
    for line in machine_lines():
        print(line)
    why = kernels.status()
    built = f"row-invariant kernels (AVX2/FMA, AVX-512 where present), built in {kernels.build_dir()}"
    print(f"kernels: {built if why is None else why}")
    if why is None:
        lib = kernels.load()
        wide = "AVX-512" if lib.fp_isa() in ("avx512", "amx") else "AVX2"
        which = "fp32 and fp16 products, and attention over fp32 caches" if lib.fp_isa() == "amx" else \
            "float products and attention"
        print(f"{which}: {wide} (the same fp32 instruction sequence per output with either instruction set: the "
              "same bits)")
        if lib.fp_isa() == "amx":
            print("bf16 products, and attention over bf16 caches: AMX-BF16 tiles, for every row count (each fp32 "
                  "operand in two bf16 parts; rows invariant, but bits of this machine's own, not the AVX kernels': "
                  "VERISPEC_ISA=avx512 gives those); a bf16 cache (head size a multiple of 32) keeps its full chunks "
                  "packed for the tiles, as much memory again as its keys and values")
        # the kernels' own words (`pairs_isa`: "avx512_bf16", "avx2", or "avx2 (vdpbf16ps disagreed)"), named
        pairs = lib.pairs_isa().replace("avx512_bf16", "AVX512_BF16 (vdpbf16ps)").replace("avx2", "AVX2 FMAs")
        print(f"bf16 pair products (bf16a: its products and attention, on AMX machines too): {pairs} (the same two "
              "roundings per pair with either: the same bits); a bf16a cache keeps its full chunks laid out, as much "
              "memory again as its keys and values")
        names = {"amx": f"AMX tiles from {lib.q8_amx_rows()} rows, AVX-512 VNNI below", "vnni": "AVX-512 VNNI",
                 "avx2": "AVX2"}
        print(f"integer products (gguf-q8): {names[lib.q8_isa()]} (exact integer sums: the same bits with every "
              "instruction set)")
    target = Target.load(args.model, args.dtype, args.device)
    device = target.model.device
    print(f"model: {target.folder} ({args.dtype}, {device})")
    if 40 + args.rows + 2 > target.model.cfg.max_position:
        print(f"verispec: error: --rows {args.rows} does not fit the model's context of "
              f"{target.model.cfg.max_position} tokens (the checks run after 40 of them)", file=sys.stderr)
        return 2
    results = checks(target.model, args.rows)
    for what, held in results:
        print(f"  {'ok  ' if held else 'FAIL'} {what}")
    if device.type == "cpu":
        print(fingerprint_line(target))
    else:
        print("CUDA: passes of up to 16 rows (decode steps, chains up to k = 15, trees up to 15 nodes) replay graphs "
              "of one shape (model/graphs.py): plain decoding and chains share the kernels; tree rows attend to "
              "ancestors at other cache slots, so trees are exact in distribution only (scripts/cuda_check.py "
              "measures greedy agreement)")
    if all(held for _, held in results):
        print("guarantee: bitwise. Greedy speculative output equals plain decoding's, and a request's output does "
              "not depend on its batch, on this machine, torch and dtype.")
        return 0
    print("guarantee: exact in distribution only (lossless in exact arithmetic; rows are not bitwise invariant "
          "here, so greedy output can differ from plain decoding's at near-ties).")
    return 1
