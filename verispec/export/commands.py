"""`verispec export`: a draft or heads trained by verispec, written for the engines people deploy.

--format gguf: a draft model as a llama.cpp `--model-draft` file (`verispec.export.gguf`).
--format vllm: EAGLE / Medusa heads in vLLM's layout (`verispec.export.vllm.export_vllm(args)`).
"""
from __future__ import annotations

import sys

FORMATS = ("gguf", "vllm")


def add_export_parser(sub) -> None:
    e = sub.add_parser("export", help="write a draft (gguf: llama.cpp) or heads (vllm) for other engines")
    e.add_argument("--format", required=True, choices=FORMATS)
    e.add_argument("--draft", help="gguf: the draft model (default: the target's shipped draft); vllm: the heads "
                                   "folder, or medusa / eagle for the target's shipped heads (default: medusa)")
    e.add_argument("--out", required=True, help="output path (gguf: OUT.gguf, and its card OUT.md)")
    e.add_argument("--model", help="the target the draft serves (default: SmolLM2-135M)")
    e.add_argument("--force", action="store_true", help="replace existing output")


def cmd_export(args) -> int:
    if args.format == "gguf":
        from ..api import default_draft
        from .gguf import export_gguf
        out, card = export_gguf(args.draft or default_draft(args.model), args.out, args.model, args.force)
        print(f"verispec: wrote {out} and its card {card}", file=sys.stderr)
        return 0
    from ..api import DEFAULT_EAGLE, DEFAULT_MEDUSA, default_draft
    from .vllm import export_vllm
    if args.draft in (None, "medusa", "eagle"):
        shipped = DEFAULT_EAGLE if args.draft == "eagle" else DEFAULT_MEDUSA
        args.draft = default_draft(args.model, shipped, args.draft or "medusa")
    return export_vllm(args)
