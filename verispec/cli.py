"""The `verispec` command line: generate, bench, audit, export. Bad input -> one line on stderr, exit status 2."""
from __future__ import annotations

import argparse
import json
import os
import sys

from .generation import GenerationConfig
from .errors import VerispecError
from .files import check_new_file
from .export.commands import add_export_parser
from .model import catalog
from .flags import DRAFT_WEIGHTS, check_decoding_flags, device, float_in, format_stats, int_at_least, parse_k, seed
from .train.flags import add_train_parsers


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, status 2, no usage dump
        self.exit(2, f"verispec: error: {message}\n")


def _model_flags(p: argparse.ArgumentParser, drafts: bool = True) -> None:
    """--model, --dtype, --device; and, where the command runs a proposer (`drafts`), --draft and --draft-weights."""
    g = p.add_argument_group("model")
    g.add_argument("--model", help=f"target: a model name ({', '.join(catalog.names())}), a model folder "
                                   "(safetensors) or a .gguf file; default: smollm2-135m")
    if drafts:
        g.add_argument("--draft", help="draft model for --method draft / draft-tree (name, folder or .gguf), or "
                                       "heads for --method medusa / eagle; default: the ones shipped or named for "
                                       "the target")
    g.add_argument("--dtype", choices=("fp32", "bf16", "bf16a", "gguf", "gguf-q8"),
                   help="weights in fp32, bf16, or as the GGUF file stores them (gguf: quantized, exactly the "
                        "fp32 model, fewer bytes; gguf-q8: the same weights with 8-bit activations and integer sums, "
                        "as llama.cpp computes, faster, a slightly different model); bf16a: bf16 weights and bf16 "
                        "activations into each product (CPU; faster where the CPU has AVX512_BF16, a slightly "
                        "different model from bf16); default: the named model's (gguf for Qwen2.5-Coder), else bf16")
    if drafts:
        g.add_argument("--draft-weights", choices=DRAFT_WEIGHTS, default="auto",
                       help="the draft's or heads' weights: q4 (requantized to 4 bits, integer products: cheaper to "
                            "read), native (as loaded), auto (q4 wherever verispec's CPU kernels run, "
                            "else native); acceptance and speed change, the output never does")
    g.add_argument("--device", type=device, default="auto", help="cpu, cuda or auto (default: cuda when present)")


def _k_arg(text: str) -> int | str:
    try:
        return parse_k(text)
    except VerispecError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _decoding_flags(p: argparse.ArgumentParser, k_list: bool = False) -> None:
    g = p.add_argument_group("decoding")
    if k_list:
        g.add_argument("--k", default="auto",
                       help="draft tokens per cycle, 'auto' (default), or a list such as 1,2,4,auto to sweep")
    else:
        g.add_argument("--k", type=_k_arg, default="auto",
                       help="draft tokens per cycle, or 'auto' (default): chosen each cycle from the cost profile")
    g.add_argument("--k-max", type=int, default=GenerationConfig.k_max,
                   help=f"the largest k 'auto' may choose (default {GenerationConfig.k_max}); a tree method's copy "
                        "of a long repeat ('+ngram') runs up to it too")
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--top-k", type=int, default=0, help="0 = off")
    g.add_argument("--seed", type=seed, default=0)
    g.add_argument("--max-new-tokens", type=int, default=128)
    g.add_argument("--no-chat", action="store_true", help="feed the prompt raw, without the chat template")
    g.add_argument("--ngram-max", type=int_at_least(1), default=3, help="longest suffix n-gram for --method ngram")
    g.add_argument("--acceptance", choices=("exact", "typical"), default="exact",
                   help="exact (default): lossless rejection sampling. typical: Medusa's typical acceptance for "
                        "tree methods, LOSSY -- at T > 0 the output no longer follows the target's distribution")
    g.add_argument("--tree", help="token tree for --method draft-tree / medusa / eagle: per-depth widths such as "
                                  "2,2,1,1,1 or a JSON file of choice-rank paths; for medusa and eagle also a node "
                                  "count (the best tree of that size from the heads' measured accuracy; with --k "
                                  "auto the most a cycle verifies, cut to the nodes that pay) or 'auto' "
                                  "(the size the cost profile predicts fastest; medusa's default); for eagle "
                                  "'chain' (its default), 'dynamic' or 'dynamic:N' (EAGLE-2). Any tree takes "
                                  "'+ngram': the prompt-lookup continuation as one more path, or alone where the "
                                  "context's last 6+ tokens repeat (e.g. auto+ngram, dynamic+ngram)")


def _remote_flags(p: argparse.ArgumentParser, audit: bool) -> None:
    g = p.add_argument_group("remote endpoint (any OpenAI-compatible server; no model loads here)")
    if audit:
        g.add_argument("--url", help="audit this endpoint (http://host:port[/v1]) against --reference-url")
        g.add_argument("--reference-url", help="the same model served without speculation")
        g.add_argument("--concurrency", type=int, default=8, help="requests in flight per endpoint (default 8)")
    else:
        g.add_argument("--url", action="append", help="benchmark this endpoint instead of local methods; repeat "
                                                      "to compare endpoints side by side (ratios to the first)")
        g.add_argument("--request-methods", help="verispec servers: speculative.method per request, e.g. "
                                                 "plain,ngram (one row each)")
    g.add_argument("--remote-model", help="model id to request (default: the first /v1/models lists)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="verispec", description="Exact speculative decoding of Llama-family models.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    g = sub.add_parser("generate", help="generate text, streaming it, then print statistics")
    g.add_argument("prompt")
    g.add_argument("--method", default="ngram", help="plain | ngram | draft | draft-tree | medusa (default ngram)")
    g.add_argument("--json", action="store_true", help="print one JSON object: text, token_ids, stats")
    _model_flags(g)
    _decoding_flags(g)

    b = sub.add_parser("bench", help="compare methods side by side over a prompts file")
    b.add_argument("--prompts", nargs="+", required=True, help="JSONL files with 'prompt' (+ 'category')")
    b.add_argument("--methods", default="plain,ngram", help="comma-separated; plain is always included")
    b.add_argument("--limit", type=int_at_least(1), default=None, help="prompts per category")
    b.add_argument("--json", dest="json_out", metavar="OUT", help="write the figures to this JSON file")
    _model_flags(b)
    _decoding_flags(b, k_list=True)
    b.add_argument("--repeats", type=int, default=1,
                   help="run each prompt this many times per method, in alternating order, and keep the median")
    b.set_defaults(max_new_tokens=64)
    _remote_flags(b, audit=False)

    a = sub.add_parser("audit", help="check that speculative sampling reproduces plain sampling's distribution")
    a.add_argument("--method", default="ngram")
    a.add_argument("--samples", type=int, default=400, help="samples per sampler (default 400)")
    a.add_argument("--tokens", type=int, default=4, help="compare the law of the first M tokens (default 4)")
    a.add_argument("--prompt", default="Repeat this sentence exactly: the blue cat sat on the blue mat.")
    a.add_argument("--level", type=float_in(0, 1, True, True), default=0.01, help="FAIL when the p-value is below this")
    a.add_argument("--batch", type=int_at_least(1), default=16,
                   help="runs sampled together in packed passes (default 16; each run's tokens are what it samples "
                        "alone, so this changes only the time; 1: one after another)")
    _model_flags(a)
    _decoding_flags(a)
    a.set_defaults(temperature=1.0, k=4)
    _remote_flags(a, audit=True)
    d = sub.add_parser("demo", help="a few prompts: plain against speculative decoding (what `make run` shows)")
    d.add_argument("--methods", default="ngram,draft,eagle", help="speculative methods to compare with plain")
    d.add_argument("--k", type=_k_arg, default="auto")
    d.add_argument("--max-new-tokens", type=int, default=96)
    _model_flags(d)

    c = sub.add_parser("cost-curve", help="time one target pass over n = 1..N tokens (the verify cost curve)")
    c.add_argument("--max-n", type=int, default=16)
    c.add_argument("--context", type=int, default=256, help="cached tokens before the n new ones")
    c.add_argument("--repeats", type=int, default=7)
    c.add_argument("--json", dest="json_out", metavar="OUT")
    c.add_argument("--batch", help="also time packed passes of B sequences, e.g. 1,2,4,8,16 (the serving cost "
                                   "curves behind batch-aware k)")
    c.add_argument("--profile", help="with --batch: save the batch curves into this cost profile file")
    _model_flags(c)  # --draft PATH (or "default") also measures the draft step cost c

    pr = sub.add_parser("profile", help="measure cost curve, draft costs and alpha; predicted vs measured speedup")
    pr.add_argument("--methods", default="ngram,draft")
    pr.add_argument("--prompts", nargs="+", required=True, help="JSONL prompt files (e.g. bench/dev_prompts.jsonl)")
    pr.add_argument("--limit", type=int_at_least(1), default=5, help="prompts per category")
    pr.add_argument("--context", type=int_at_least(1), default=256, help="context length for the cost curve")
    pr.add_argument("--repeats", type=int_at_least(1), default=5)
    pr.add_argument("--out", help="profile file (default: in the cache, per model / dtype / device)")
    pr.add_argument("--json", dest="json_out", metavar="OUT", help="also write every figure as JSON")
    _model_flags(pr)
    _decoding_flags(pr)
    pr.set_defaults(k=6, max_new_tokens=64)

    rp = sub.add_parser("report", help="benchmark report: Markdown tables, PNG plots and JSON (k sweep, "
                                       "temperatures, categories, adversarial input, transformers peers)")
    rp.add_argument("--prompts", nargs="+", required=True, help="JSONL prompt files (e.g. bench/dev_prompts.jsonl)")
    rp.add_argument("--methods", default="ngram,draft")
    rp.add_argument("--out", required=True, help="output folder: report.md, report.json, *.png (a new or empty "
                                                "one, or an earlier report's with --force)")
    rp.add_argument("--force", action="store_true", help="replace the report an earlier run wrote at --out")
    rp.add_argument("--limit", type=int_at_least(1), default=4, help="prompts per category (default 4)")
    rp.add_argument("--k", default="1,2,3,4,6,8", help="fixed k values to sweep (auto is always added)")
    rp.add_argument("--temperatures", default="0,0.7,1.0")
    rp.add_argument("--adversarial", type=int_at_least(0), default=6, help="random-token prompts at T = 1.5 (0 = skip)")
    rp.add_argument("--no-hf", action="store_true", help="skip the transformers comparison")
    rp.add_argument("--no-trees", dest="trees", action="store_false", help="skip the tree cost curve")
    rp.add_argument("--context", type=int_at_least(1), default=256, help="context length for the cost curve")
    rp.add_argument("--repeats", type=int_at_least(1), default=5)
    rp.add_argument("--max-new-tokens", type=int, default=64)
    rp.add_argument("--seed", type=seed, default=0)
    rp.add_argument("--no-chat", action="store_true")
    rp.add_argument("--ngram-max", type=int_at_least(1), default=3)
    _model_flags(rp)

    add_train_parsers(sub, _model_flags)

    add_export_parser(sub)

    sv = sub.add_parser("serve", help="an OpenAI-compatible HTTP server with batched speculative decoding")
    sv.add_argument("--method", default="ngram", help="default speculative method (requests may override it)")
    sv.add_argument("--k", type=_k_arg, default="auto", help="default draft length, or 'auto' (batch-aware)")
    sv.add_argument("--host", default="127.0.0.1")
    sv.add_argument("--port", type=int, default=8000)
    sv.add_argument("--max-batch", type=int, default=16, help="sequences decoded together, at most")
    sv.add_argument("--tree", help="token tree of the default method (as for generate), e.g. auto+ngram for "
                                   "eagle: the fastest greedy mode here")
    sv.add_argument("--name", help="model name clients use (default: the model folder's name)")
    sv.add_argument("--acceptance", choices=("exact", "typical"), default="exact",
                    help="exact (default), or typical: Medusa's typical acceptance for tree methods, LOSSY at "
                         "T > 0 (for checking `verispec audit --url`, which must FAIL it)")
    sv.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"))
    _serve_limit_flags(sv)
    _model_flags(sv)

    bb = sub.add_parser("bench-batch", help="throughput of batched decoding: a method against plain, by batch size")
    bb.add_argument("--prompts", nargs="+", required=True, help="JSONL prompt files (e.g. bench/dev_prompts.jsonl)")
    bb.add_argument("--method", default="ngram")
    bb.add_argument("--k", type=_k_arg, default="auto")
    bb.add_argument("--batch", default="1,2,4,8,16", help="batch sizes (default 1,2,4,8,16)")
    bb.add_argument("--max-new-tokens", type=int, default=64)
    bb.add_argument("--requests", type=int, default=8,
                    help="requests served per run: at least this many, and at least 3 B (default 8)")
    bb.add_argument("--repeats", type=int, default=3, help="runs per batch size and method, interleaved")
    bb.add_argument("--json", dest="json_out", metavar="OUT")
    _model_flags(bb)

    lt = sub.add_parser("loadtest", help="N concurrent OpenAI clients for a fixed time: throughput, latency, errors")
    lt.add_argument("--url", help="a running server's base URL (default: start one on a free loopback port)")
    lt.add_argument("--clients", type=int, default=8)
    lt.add_argument("--duration", type=float, default=30.0, help="seconds per method")
    lt.add_argument("--methods", default="plain,ngram", help="speculative methods to compare, one after another")
    lt.add_argument("--max-tokens", type=int, default=64)
    lt.add_argument("--prompts", nargs="+", help="prompt files (default: the development prompts of verispec's "
                                                 "repository, bench/dev_prompts.jsonl)")
    lt.add_argument("--max-batch", type=int, default=16)
    lt.add_argument("--json", dest="json_out", metavar="OUT")
    lt.add_argument("--faults", action="store_true", help="fault injection against a server in this process: bad "
                                                          "and departing clients, a planted failure, long prompts")
    lt.add_argument("--fault-every", type=int, default=5, help="with --faults: every Nth request is a fault")
    lt.add_argument("--long-prompt", type=int, default=4000, help="with --faults: tokens of the long prompts sent "
                                                                  "in the second half")
    lt.add_argument("--prefill-chunk", type=int, default=64,
                    help="with --faults: the server's --prefill-chunk (default 64)")
    _model_flags(lt)

    dr = sub.add_parser("doctor", help="what this machine guarantees (bitwise rows, kernels, dtype), checked on "
                                       "the model; exit 1 where the guarantee does not hold")
    _model_flags(dr, drafts=False)
    dr.add_argument("--rows", type=int, default=64, help="largest pass checked (default 64 rows; at least 2)")

    f = sub.add_parser("fetch", help="download and convert a model into the local cache, then print its folder")
    f.add_argument("--model", help=f"a model name ({', '.join(catalog.names())}), a .gguf file or a model folder; "
                                   "default: smollm2-135m")
    return parser


def _serve_limit_flags(p: argparse.ArgumentParser) -> None:
    from .serve.limits import Limits
    d = Limits()
    g = p.add_argument_group("limits and access (each refusal is an OpenAI-style error)")
    g.add_argument("--max-model-len", type=int, help="prompt + completion tokens of a request, at most (default: "
                                                     "the model's context); longer: 400")
    g.add_argument("--max-tokens", type=int, default=d.max_tokens, help="completion tokens a request may ask for "
                                                                        "(more: 400, not clamped)")
    g.add_argument("--max-waiting", type=int, default=d.max_waiting, help="requests waiting for a batch slot, at "
                                                                          "most (more: 429 with Retry-After)")
    g.add_argument("--kv-cache-mb", type=float, default=d.kv_cache_mb, help="KV cache of all running requests, at "
                                                                            "most: requests wait for room")
    g.add_argument("--prefix-cache-mb", type=float, default=d.prefix_cache_mb,
                   help="keep recent prompts' KV caches in this much memory, so prompts sharing a prefix with them "
                        "prefill only the rest (default %(default)s; 0: off)")
    g.add_argument("--max-k", type=int, default=d.max_k, help="largest speculative.k a request may ask for")
    g.add_argument("--max-body-bytes", type=int, default=d.max_body_bytes, help="request body size (more: 413)")
    g.add_argument("--api-key", default=os.environ.get("VERISPEC_API_KEY"),
                   help="require 'Authorization: Bearer KEY' on /v1 routes (default: $VERISPEC_API_KEY, else "
                        "none); /health and /metrics stay open")
    g.add_argument("--allowed-methods", help="speculative methods requests may ask for, comma-separated, or 'all' "
                                             "(default: --method, plain, ngram); their weights load at start-up")
    g.add_argument("--prefill-chunk", type=int, default=64, help="prefill prompts N tokens between two decoding "
                                                                 "steps (default 64; 0: whole prompts)")


def cmd_generate(args) -> int:
    from .api import Speculator
    check_decoding_flags(args)
    if args.method in ("plain", "ngram") and (args.draft or args.draft_weights != "auto"):
        flag = "--draft" if args.draft else "--draft-weights"
        raise VerispecError(f"{flag} is for --method draft, draft-tree, medusa or eagle, not {args.method}")
    spec = Speculator(args.model, args.method, args.draft, args.dtype, args.device, tree=args.tree,
                     draft_weights=args.draft_weights, ngram_max=args.ngram_max)
    stream = None if args.json else (lambda text: (sys.stdout.write(text), sys.stdout.flush()))
    r = spec.generate(args.prompt, args.max_new_tokens, args.k, args.temperature, args.top_p, args.top_k,
                      args.seed, chat=not args.no_chat, on_text=stream, acceptance=args.acceptance, k_max=args.k_max)
    if args.json:
        print(json.dumps({"text": r.text, "token_ids": r.token_ids, "finish_reason": r.finish_reason,
                          "method": args.method, "stats": r.stats}))
    else:
        print()
        print(format_stats(args.method, r.stats), file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # --help (0) or a bad flag (2, message already printed)
        return int(e.code or 0)
    if "dtype" in args and args.dtype is None:
        args.dtype = catalog.default_dtype(getattr(args, "model", None))
    try:
        for path in (getattr(args, "json_out", None), args.out if args.command == "profile" else None):
            if path is not None:
                check_new_file(path)         # before the work: a run must not end unable to write its figures
        for flag in ("model", "draft"):
            if getattr(args, flag, None) is not None and not getattr(args, flag).strip():
                raise VerispecError(f"--{flag} is empty: name a model, a folder or a file")
        if args.command == "generate":
            return cmd_generate(args)
        if args.command in ("bench", "audit") and args.url:
            from .remote_cmds import cmd_audit_remote, cmd_bench_remote
            return (cmd_bench_remote if args.command == "bench" else cmd_audit_remote)(args)
        if args.command == "bench":
            if args.request_methods or args.remote_model:
                raise VerispecError("--request-methods and --remote-model go with --url (the server to benchmark)")
            from .bench import cmd_bench
            return cmd_bench(args)
        if args.command == "audit":
            if args.remote_model:
                raise VerispecError("--remote-model goes with --url (the endpoint to audit)")
            from .audit import cmd_audit
            return cmd_audit(args)
        if args.command == "demo":
            from .demo import cmd_demo
            return cmd_demo(args)
        if args.command == "cost-curve":
            from .costs import cmd_cost_curve
            return cmd_cost_curve(args)
        if args.command == "profile":
            from .profile import cmd_profile
            return cmd_profile(args)
        if args.command == "report":
            from .report import cmd_report
            args.argv = list(sys.argv[1:] if argv is None else argv)
            return cmd_report(args)
        if args.command == "distill-data":
            from .train.distill_data import cmd_distill_data
            return cmd_distill_data(args)
        if args.command in ("train-draft", "train-medusa", "train-eagle"):
            from .train.workdir import leaves_no_empty_work_folder
            with leaves_no_empty_work_folder(args.out):
                if args.command == "train-draft":
                    from .train.train_draft_cmd import cmd_train_draft
                    return cmd_train_draft(args)
                if args.command == "train-medusa":
                    from .train.train_medusa_cmd import cmd_train_medusa
                    return cmd_train_medusa(args)
                from .train.train_eagle_cmd import cmd_train_eagle
                return cmd_train_eagle(args)
        if args.command == "serve":
            from .serve.commands import cmd_serve
            return cmd_serve(args)
        if args.command == "bench-batch":
            from .serve.commands import cmd_bench_batch
            return cmd_bench_batch(args)
        if args.command == "loadtest":
            from .serve.loadtest import cmd_loadtest
            return cmd_loadtest(args)
        if args.command == "doctor":
            from .doctor import cmd_doctor
            return cmd_doctor(args)
        if args.command == "export":
            from .export.commands import cmd_export
            return cmd_export(args)
        if args.command == "fetch":
            from .model.loader import resolve
            print(resolve(args.model))
            return 0
    except VerispecError as e:          # one line, whatever the message quotes (PyTorch's own span lines)
        print(f"verispec: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    except OSError as e:            # a file or folder the user named cannot be read or written
        where = f": {e.filename}" if e.filename else ""
        print(f"verispec: error: {e.strerror or e}{where}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("verispec: interrupted", file=sys.stderr)
        return 130
    return 2


if __name__ == "__main__":
    sys.exit(main())
