"""Fingerprints (`verispec.fingerprint`: the logits' exact bits on a fixed pass) of the default model in every
dtype, with torch at each instruction set it offers here (ATEN_CPU_CAPABILITY) and verispec's kernels at their
best and forced to AVX2 (on an AMX-BF16 machine also at AVX-512: the portable bf16 bits), then with verispec's
kernels off (PyTorch's own operators) for contrast:

    python scripts/fingerprint_isa.py [MODEL]
"""
import os
import subprocess
import sys

import torch

from verispec import kernels

MODEL = sys.argv[1] if len(sys.argv) > 1 else "smollm2-135m"
DTYPES = ["bf16", "bf16a", "fp32", "gguf", "gguf-q8"] if MODEL == "smollm2-135m" else ["gguf", "gguf-q8"]
CODE = ("import sys, torch; from verispec.api import Target; from verispec.fingerprint import fingerprint\n"
        "for d in sys.argv[2:]:\n"
        "    print(d, torch.backends.cpu.get_cpu_capability(), fingerprint(Target.load(sys.argv[1], d, 'cpu').model))")
best = torch.backends.cpu.get_cpu_capability()
caps = {"AVX512": ["AVX512", "AVX2", "DEFAULT"], "AVX2": ["AVX2", "DEFAULT"]}.get(best, ["DEFAULT"])   # best first
amx = kernels.bf16_on_amx()                   # bf16 on AMX tiles: bits of their own; avx512: the portable ones
settings = [({"ATEN_CPU_CAPABILITY": c.lower()} | ({"VERISPEC_ISA": "avx2"} if c != best else {}))
            for c in caps] + ([{"VERISPEC_ISA": "avx512"}] if amx else []) + [
               {"VERISPEC_KERNELS": "0", "ATEN_CPU_CAPABILITY": c.lower()} for c in caps]
for extra in settings:
    env = dict(os.environ, **extra)
    run = subprocess.run([sys.executable, "-c", CODE, MODEL, *DTYPES], env=env, capture_output=True, text=True)
    label = " ".join(f"{k}={v}" for k, v in extra.items())
    for line in (run.stdout.strip().splitlines() or [f"failed: {(run.stderr.strip().splitlines() or ['?'])[-1]}"]):
        print(f"{label:55s} {line}", flush=True)
