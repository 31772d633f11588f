"""verispec's row-invariant CPU kernels (cpu.cpp, quant.cpp), built once per machine and torch version.

`load()` returns the compiled module, or None where it cannot be had (no AVX2/FMA, no compiler, not a CPU
tensor): callers then use PyTorch's own operators, and `verispec doctor` reports that rows are not guaranteed to
be invariant. Set VERISPEC_KERNELS=0 to force PyTorch's operators, VERISPEC_ISA=avx2 to keep the products off AVX-512 (the
float product) and off AVX-512 VNNI and AMX (the integer product, gguf-q8) where the CPU has them, and
VERISPEC_ISA=avx512 to keep both products off AMX: the same bits, more slowly, for comparisons, except bf16
products, which AMX-BF16 tiles give bits of their own (famx.h): VERISPEC_ISA=avx512 gives the portable ones.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import platform
import sys
from pathlib import Path

import torch

SOURCES = [Path(__file__).with_name(name)
           for name in ("cpu.cpp", "quant.cpp", "qdot.cpp", "qlayer.cpp", "stack.cpp")]
HEADERS = [Path(__file__).with_name(name)
           for name in ("simd.h", "attention_simd.h", "attention.h", "attention_pairs.h", "attention_mixed.h", "aamx.h",
                        "qweight.h", "qamx.h", "qstream.h", "famx.h", "dpbf16.h")]
FLAGS = ["-O3", "-mavx2", "-mfma", "-mf16c", "-ffp-contract=off", "-fno-fast-math", "-fopenmp"]
_state: dict = {}


def cpu_flags_lines() -> list[str]:
    """The CPU's model name and feature flags as /proc/cpuinfo gives them (empty where it cannot be read)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return []
    return [line for line in lines if line.startswith(("model name", "flags"))][:2]


def cpu_model() -> str | None:
    """The CPU's model name as /proc/cpuinfo gives it, or None where it cannot be read."""
    return next((line.split(":", 1)[1].strip() for line in cpu_flags_lines() if line.startswith("model name")), None)


def cpu_flags() -> set[str]:
    flags = [line for line in cpu_flags_lines() if line.startswith("flags")]
    return set(flags[0].split(":", 1)[1].split()) if flags else set()


def isa_asked() -> str:
    """VERISPEC_ISA: 'best' (the default), 'avx512' or 'avx2'; anything else is a one-line error."""
    isa = os.environ.get("VERISPEC_ISA") or "best"                # unset or empty: the best
    if isa not in ("best", "avx512", "avx2"):
        from ..errors import VerispecError
        raise VerispecError(f"VERISPEC_ISA must be 'best', 'avx512' or 'avx2', got {isa!r}")
    return isa


def isa(module) -> str:
    """The instruction sets the products use now, e.g. 'float avx512, integer vnni'."""
    return f"float {module.fp_isa()}, integer {module.q8_isa()}"


def bf16_on_amx() -> bool:
    """Whether the kernels are loaded and their bf16 product runs on AMX-BF16 tiles now (bits of its own)."""
    module = load()
    return module is not None and module.fp_isa() == "amx"


def unavailable_reason() -> str | None:
    """Why the kernels cannot run on this machine, or None."""
    if os.environ.get("VERISPEC_KERNELS", "1") == "0":
        return "disabled by VERISPEC_KERNELS=0"
    if platform.machine() not in ("x86_64", "AMD64"):
        return f"no kernels for {platform.machine()} (x86-64 with AVX2 and FMA only)"
    missing = {"avx2", "fma", "f16c"} - cpu_flags()
    if missing:
        return f"this CPU lacks {', '.join(sorted(missing))}"
    return None


def build_dir() -> Path:
    """One build per source, flags, torch and Python version (never shared across those)."""
    key = hashlib.sha1(b"".join(p.read_bytes() for p in SOURCES + HEADERS) + " ".join(FLAGS).encode() + torch.__version__.encode()
                       + sys.version.encode()).hexdigest()[:12]
    from ..model.loader import home
    return home() / "kernels" / key


def load():
    """The compiled kernels module, or None (see `status()` for why)."""
    if "module" in _state:
        return _state["module"]
    module, why = None, unavailable_reason()
    if why is None:
        asked = isa_asked()
        try:
            module = _build()
            module.set_q8_isa(asked)
            module.set_fp_isa(asked)
        except Exception as e:  # a compiler or header missing: report it, fall back to PyTorch
            why = f"could not build the kernels ({type(e).__name__}: {str(e).strip().splitlines()[-1][:200]})"
            print(f"verispec: {why}; rows are not guaranteed invariant (see `verispec doctor`)", file=sys.stderr)
    _state.update(module=module, why=why)
    return module


def status() -> str | None:
    """None when the kernels are loaded, else the reason they are not."""
    load()
    return _state["why"]


def compile_extension(name: str, sources: list[Path], folder: Path, include: list[Path] = ()):
    """Build (once) and load a C++ extension from `sources` in `folder`, with the kernels' flags: the kernels
    themselves, and builds of other kernel sources for tests and comparisons."""
    from torch.utils.cpp_extension import load as cpp_load
    # the `ninja` wheel puts its binary beside this interpreter, which need not be on PATH (an unactivated venv)
    bin_dir = str(Path(sys.executable).parent)
    if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "build.flock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)            # released when this process ends, however it ends
        # torch's own lock file, which it waits on forever: under our lock no other build runs, so one found
        # here was left by a build that was killed (Ctrl-C during the first build)
        (folder / "lock").unlink(missing_ok=True)
        return cpp_load(name=name, sources=[str(p) for p in sources], extra_include_paths=[str(p) for p in include],
                        extra_cflags=FLAGS, extra_ldflags=["-fopenmp"], build_directory=str(folder), verbose=False)


def _build():
    folder = build_dir()
    name = "verispec_cpu_" + folder.name
    if not (folder / f"{name}.so").exists():
        print("verispec: building the CPU kernels (once per machine, about a minute) ...", file=sys.stderr)
    return compile_extension(name, SOURCES, folder)
