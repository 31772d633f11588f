"""`verispec doctor` and the model fingerprint: the logits' exact bits on a fixed pass, which should not depend on
the instruction sets torch and the kernels use (the same fp32 sequence per output on every x86-64 machine)."""
import os
import subprocess
import sys

import pytest

from verispec.cli import main
from verispec.fingerprint import fingerprint


def test_doctor_runs_the_checks_and_prints_the_fingerprint(target_bf16, capsys):
    assert main(["doctor", "--rows", "6"]) == 0
    out = capsys.readouterr().out
    assert out.count("  ok   ") == 4 and "guarantee: bitwise" in out
    line = next(line for line in out.splitlines() if line.startswith("fingerprint: "))
    assert line.split()[1].rstrip(",") == fingerprint(target_bf16.model)
    assert main(["doctor", "--rows", "2"]) == 0                  # fewer rows than the packed batch's 5
    assert capsys.readouterr().out.count("  ok   ") == 4


def test_doctor_rejects_bad_rows_in_one_line(capsys):
    assert main(["doctor", "--rows", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("verispec: error:") and "\n" not in err


@pytest.mark.parametrize("dtype", ["bf16", "bf16a", "gguf-q8"])
def test_the_fingerprint_does_not_depend_on_the_instruction_sets(target_bf16, dtype):
    """Torch forced to its scalar kernels and verispec's forced to AVX2 (as on an AVX2-only machine) give the
    same bits as the best portable ones this machine has (AVX-512 where present; the integer product on AMX
    tiles too; bf16 products on AMX tiles have bits of their own, `test_invariance`). A difference names the
    instruction set that changed them."""
    from verispec import kernels
    from verispec.api import Target
    lib = kernels.load()
    lib.set_fp_isa("avx512")
    try:
        best = fingerprint(target_bf16.model if dtype == "bf16" else Target.load(None, dtype, "cpu").model)
    finally:
        lib.set_fp_isa("best")
    code = ("from verispec.api import Target; from verispec.fingerprint import fingerprint; "
            f"print(fingerprint(Target.load(None, {dtype!r}, 'cpu').model))")
    env = dict(os.environ, ATEN_CPU_CAPABILITY="default", VERISPEC_ISA="avx2")
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    narrow = run.stdout.split()[-1]
    assert narrow == best, (f"{dtype}: torch's scalar kernels with verispec's AVX2 kernels give {narrow}, this "
                            f"machine's best instruction sets {best}")


def test_a_killed_builds_lock_does_not_stop_the_next_load():
    """torch's extension builder waits forever on its lock file while it exists, and a build killed midway (Ctrl-C
    during the first build) leaves it behind: the kernels' own lock, released whatever way a process ends, clears
    it, so the next run loads the kernels."""
    from verispec import kernels
    if kernels.load() is None:
        pytest.skip(f"kernels unavailable: {kernels.status()}")
    baton = kernels.build_dir() / "lock"
    baton.touch()
    run = subprocess.run([sys.executable, "-c", "from verispec import kernels; assert kernels.load() is not None"],
                         timeout=300, capture_output=True, text=True)
    assert run.returncode == 0 and not baton.exists(), run.stderr[-500:]
