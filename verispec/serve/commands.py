"""`verispec serve` (the HTTP server) and `verispec bench-batch` (speedup against batch size, offline).

bench-batch serves the same requests (greedy, so every method emits the same tokens) with continuous batching at
a fixed concurrency B, plain and speculative in alternation, and compares tokens per second. A closed batch
(all start together, none join) would understate speculation: the batch then lasts as long as its slowest
sequence, while a served batch refills the slot of every sequence that finishes early."""
from __future__ import annotations

import json
import statistics
import time

from ..errors import VerispecError


def cmd_serve(args) -> int:
    import uvicorn

    from ..api import Target
    from .app import APIError, Server, create_app
    from .guard import uvicorn_config
    if not 1 <= args.max_batch <= 256:
        raise VerispecError(f"--max-batch must be in 1..256, got {args.max_batch}")
    if not 0 <= args.port <= 65535:
        raise VerispecError(f"--port must be in 0..65535, got {args.port}")
    if args.prefill_chunk < 0:
        raise VerispecError(f"--prefill-chunk must be >= 0, got {args.prefill_chunk}")
    if args.api_key is not None and not args.api_key.strip():     # an empty key would serve with none
        raise VerispecError("--api-key (or $VERISPEC_API_KEY) is empty: give a key, or leave both unset to serve "
                            "without one")
    from .limits import Limits
    limits = Limits(args.max_model_len, args.max_tokens, args.max_waiting, args.kv_cache_mb, args.max_k,
                    args.max_body_bytes, prefix_cache_mb=args.prefix_cache_mb)    # checked before the model loads
    allowed = parse_methods(args.allowed_methods)
    target = Target.load(args.model, args.dtype, args.device, args.draft_weights)
    try:
        server = Server(target, args.method, args.k, args.max_batch, args.draft, args.name, args.tree, limits,
                        allowed, args.api_key or None, args.prefill_chunk, args.acceptance)
    except APIError as e:                            # a bad --method / --tree / --draft: one line, exit 2
        raise VerispecError(e.message) from None
    import threading
    http = uvicorn.Server(uvicorn_config(create_app(server, decode_thread=False), args.host, args.port, args.log_level))
    web = threading.Thread(target=http.run, name="verispec-http", daemon=True)   # HTTP on a thread, decoding
    web.start()                                                                 # on the main one
    shape = f", tree {args.tree}" if args.tree else ""
    print(f"verispec: serving {server.name} ({args.method}{shape}, k={args.k}, up to {args.max_batch} sequences per "
          f"batch; methods {','.join(server._proposers)}{'; API key required' if server.api_key else ''}) on "
          f"http://{args.host}:{args.port}/v1", flush=True)
    stopper = threading.Thread(target=lambda: (web.join(), server.scheduler.stop()), daemon=True)
    stopper.start()                                  # the HTTP side ending (say, the port is taken) stops decoding
    try:
        server.scheduler.run()
    except KeyboardInterrupt:
        pass
    finally:
        http.should_exit = True
        web.join(timeout=10)
    if not http.started:
        raise VerispecError(f"could not serve on {args.host}:{args.port} (see uvicorn's message above)")
    if server.scheduler.dead:
        raise VerispecError(f"the decoding loop died: {server.scheduler.dead}")
    return 0


def parse_methods(text: str | None) -> list[str] | None:
    """--allowed-methods: None (the default set), 'all', or a comma-separated list of known methods."""
    from ..api import METHODS
    if text is None:
        return None
    if text.strip() == "all":
        return list(METHODS)
    methods = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in methods if m not in METHODS]
    if bad or not methods:
        raise VerispecError(f"--allowed-methods: unknown method {', '.join(bad) or '(none given)'}; choose from "
                            f"{', '.join(METHODS)} or 'all'")
    return methods


def decode_batch(target, method: str, prompt_ids: list[list[int]], cfg, concurrency: int, draft=None):
    """Serve the prompts with continuous batching at a fixed concurrency: `concurrency` sequences decode together
    and each one that finishes is replaced by the next prompt. Returns (seconds, sequences), prefills included."""
    from ..api import engine_profile, make_proposer
    from ..engine import Sequence
    from ..proposers.base import fork
    from .batch import Batch
    base = make_proposer(method, target, draft)
    profile = engine_profile(target, base, draft)
    seqs = [Sequence(target.model, fork(base), ids, cfg, profile) for ids in prompt_ids]
    batch, waiting = Batch(target.model, profile), list(reversed(seqs))
    t0 = time.perf_counter()
    while waiting or batch.running:
        while waiting and len(batch) < concurrency:
            batch.add(waiting.pop())
        batch.step()
    return time.perf_counter() - t0, seqs


def predicted(profile, method: str, batch: int, k_max: int = 12) -> tuple[int, float]:
    """(k, speedup) the batch-aware cost model predicts at the method's profiled alpha; k = 0 means plain."""
    from ..autok import MARGIN
    from ..theory import best_k, speedup
    c, curve = profile.batch_costs(method, batch, drafts_together=method == "draft")
    alpha = profile.alpha.get(method, 0.5)
    k = best_k(alpha, c, curve, k_max)
    s = speedup(alpha, k, c, curve) if k else 1.0
    return (k, s) if s >= 1 + MARGIN else (0, 1.0)


def round_robin(prompts):
    """Prompts reordered to take one of each category in turn (so any first B mix the categories)."""
    by_cat = {}
    for p in prompts:
        by_cat.setdefault(p.category, []).append(p)
    out, lists = [], list(by_cat.values())
    for i in range(max(map(len, lists))):
        out += [ps[i] for ps in lists if i < len(ps)]
    return out


def cmd_bench_batch(args) -> int:
    from ..api import Target
    from ..costs import parse_batch_sizes
    from ..engine import GenerationConfig, check_fits
    from ..files import atomic_file
    from ..prompts import load_prompts
    from ..sampling import SamplingConfig
    sizes = parse_batch_sizes(args.batch)
    if min(args.repeats, args.max_new_tokens, args.requests) < 1:
        raise VerispecError("--repeats, --requests and --max-new-tokens must be >= 1")
    if args.method == "plain":
        raise VerispecError("bench-batch compares a speculative --method with plain decoding: pick one other than plain")
    prompts = round_robin(load_prompts(args.prompts))
    target = Target.load(args.model, args.dtype, args.device, args.draft_weights)
    tok = target.tokenizer
    ids = [tok.prompt_ids(p.prompt) for p in prompts]
    for p, i in zip(prompts, ids):     # before the warm-up (which asks for fewer tokens, and would name its own)
        check_fits(len(i), args.max_new_tokens, target.model.cfg.max_position, p.id)
    cfg = GenerationConfig(max_new_tokens=args.max_new_tokens, k=args.k, sampling=SamplingConfig(0.0),
                           stop_token_ids=tok.stop_token_ids)
    warm = GenerationConfig(max_new_tokens=4, k=args.k)
    decode_batch(target, args.method, (ids * 2)[:2], warm, 2, args.draft)     # warm up (one prompt: twice)
    rows, profile = [], target.profile()
    print(f"{'batch':>5} {'plain tok/s':>11} {args.method + ' tok/s':>13} {'speedup':>8} {'MAT':>5} "
          f"{'drafts/pass':>11} {'predicted':>10}")
    for b in sizes:
        group = [ids[i % len(ids)] for i in range(max(args.requests, 3 * b))]
        times = {"plain": [], args.method: []}
        for _ in range(args.repeats):                               # interleaved: plain, method, plain, ...
            for m in times:
                wall, seqs = decode_batch(target, m, group, cfg, b, args.draft)
                times[m].append((wall, seqs))
        (tp, sp), (tm, sm) = (min(v, key=lambda r: r[0]) for v in times.values())
        if [s.out for s in sp] != [s.out for s in sm]:
            raise VerispecError(f"batch {b}: speculative greedy output differs from plain")   # never expected
        new = sum(len(s.out) for s in sp)
        passes = sum(s.stats.target_passes - 1 for s in sm)
        drafted = sum(s.stats.drafted_tokens for s in sm)
        emitted = sum(len(s.out) - 1 for s in sm)
        k_pred, s_pred = predicted(profile, args.method, b)
        tput_plain = new / statistics.median(t for t, _ in times["plain"])
        tput = new / statistics.median(t for t, _ in times[args.method])
        row = {"batch": b, "plain_tok_s": tput_plain, "method_tok_s": tput, "speedup": tput / tput_plain,
               "mat": emitted / passes if passes else None, "drafted_per_pass": drafted / passes if passes else 0,
               "predicted_k": k_pred, "predicted_speedup": s_pred, "new_tokens": new}
        rows.append(row)
        print(f"{b:>5} {tput_plain:>11.1f} {tput:>13.1f} {row['speedup']:>7.2f}x {row['mat'] or 0:>5.2f} "
              f"{row['drafted_per_pass']:>11.2f} {s_pred:>9.2f}x" + ("" if k_pred else " (off)"), flush=True)
    off = [r["batch"] for r in rows if r["predicted_k"] == 0]
    print(f"speculation predicted to switch off from batch {off[0]}" if off else
          "speculation predicted to pay at every batch size measured")
    if args.json_out:
        with atomic_file(args.json_out) as f:
            json.dump({"method": args.method, "k": args.k, "max_new_tokens": args.max_new_tokens,
                       "requests": args.requests,
                       "repeats": args.repeats, "dtype": args.dtype, "rows": rows,
                       "predicted_off_from_batch": off[0] if off else None}, f, indent=1)
    return 0
