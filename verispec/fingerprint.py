"""A model's fingerprint: a digest of the exact bits of its logits on one fixed pass, to compare machines.

The kernels run the same fp32 instruction sequence for every output whatever the CPU's instruction sets, so a
model, dtype and torch version should give the same logits, bit for bit, on every x86-64 machine with AVX2 and
FMA; bf16 on AMX-BF16 tiles (`kernels/famx.h`) excepted, whose bits are their own, recorded apart as `bf16+amx`.
`verispec doctor` prints the fingerprint and compares it with the one recorded for a named model in
`model/fingerprints.json` (with the machine it was recorded on): equal digests mean this machine decodes
exactly what that machine decodes, token for token, at any temperature and seed.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

REFERENCES = Path(__file__).parent / "model" / "fingerprints.json"
PROMPT, ROWS = 40, 17            # a 40-token prefill, then a 17-row pass (a chain of k = 16) over that cache


@torch.inference_mode()
def fingerprint(model) -> str:
    """16 hex digits of sha256 over the fp32 logits of a fixed prefill and a fixed 17-row pass after it."""
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, model.cfg.vocab_size, (1, PROMPT), generator=g)
    chain = torch.randint(0, model.cfg.vocab_size, (1, ROWS), generator=g)
    cache = model.new_cache(PROMPT + ROWS)
    first = model.logits(model(prompt, torch.arange(PROMPT)[None], cache))[0]       # (PROMPT, vocab)
    then = model.logits(model(chain, torch.arange(PROMPT, PROMPT + ROWS)[None], cache))[0]   # (ROWS, vocab)
    digest = hashlib.sha256()
    for logits in (first, then):
        digest.update(logits.float().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def reference(name: str | None, dtype: str) -> dict | None:
    """The recorded fingerprint of a named model in this dtype (or `bf16+amx`: bf16 on AMX-BF16 tiles) with this
    torch version, or None."""
    if name is None or not REFERENCES.exists():
        return None
    entry = json.loads(REFERENCES.read_text()).get(name, {}).get(dtype)
    if entry is None or entry.get("torch") != torch.__version__.split("+")[0]:
        return None
    return entry
