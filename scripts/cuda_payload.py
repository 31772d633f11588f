"""Pack what `scripts/cuda_check.py` needs on a GPU machine into two calls' worth of files, and untrack or restore
what must not travel.

    python scripts/cuda_payload.py pack [--parts a,b,..] [--budget S]   # .dev/c1, .dev/c2, each with its size
    python scripts/cuda_payload.py untrack                              # before the two calls
    python scripts/cuda_payload.py restore                              # after them (or if anything fails)

The device machine reaches nothing outside, and each call carries at most 64 MiB: the tracked tree (about 91 MB
with the shipped drafts and bench/results) and the default GGUF (98 MB) cannot go in one. So:
- `untrack` takes verispec/drafts and bench/results out of the index (`git rm -r --cached`) and ignores them
  (.git/info/exclude), so about 2.3 MB of tracked files travel; `restore` puts both back (`git reset`, the lines
  removed). Commit nothing in between.
- `pack` writes xz-compressed parts under the ignored .dev/: c1 = the default model's shipped draft, EAGLE and
  Medusa folders (tar.xz), the GGUF's first part, the `gguf` wheel and ../shared/data/prompts/long.jsonl; c2 =
  the GGUF's other parts and run.sh. It refuses where either call would pass 64 MiB with the tree.
- Call 1 (device `run`, carry [".dev/c1"]): `mkdir -p /root/pay && cp .dev/c1/* /root/pay/`. Call 2 (carry
  [".dev/c2"]) within the 30 s the machine stays warm: `bash .dev/c2/run.sh`. run.sh installs the wheel, joins
  and unpacks the parts (Python's lzma: the image may lack xz), and runs the check with --parts and a timeout of
  --budget seconds, its log and JSON under $OUT (session 45 prepared it; no machine was lent then).
"""
from __future__ import annotations

import argparse
import io
import lzma
from importlib import metadata
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from verispec.model import catalog  # noqa: E402
from verispec.model.loader import home  # noqa: E402

LIMIT = 64 * 2 ** 20                 # bytes a call carries, the working tree included
UNTRACKED = ("verispec/drafts", "bench/results")
DRAFTS = ("smollm2-135m-instruct-draft", "smollm2-135m-instruct-eagle", "smollm2-135m-instruct-medusa")
PARTS = "pass,exactness,plain,methods,t1,long,syncs,verify,stepwise,serve"
EXCLUDE = ROOT / ".git" / "info" / "exclude"

RUN = """#!/bin/bash
# Made by scripts/cuda_payload.py: set up from /root/pay (call 1) and .dev/c2 (this call), then the check.
export VERISPEC_HOME=/root/vh VERISPEC_KERNELS=0 PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.used,driver_version --format=csv
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /root/pay/*.whl || exit 1
mkdir -p $VERISPEC_HOME/downloads verispec/drafts
python3 - <<'PY' || exit 1
import glob, lzma, os, tarfile
parts = sorted(glob.glob("/root/pay/gguf.xz.*") + glob.glob(".dev/c2/gguf.xz.*"), key=os.path.basename)
data = lzma.decompress(b"".join(open(p, "rb").read() for p in parts))
open(os.environ["VERISPEC_HOME"] + "/downloads/{gguf}", "wb").write(data)
with tarfile.open("/root/pay/drafts.tar.xz", "r:xz") as t:
    t.extractall("verispec/drafts", filter="data")
print("gguf", len(data), "bytes; drafts", sorted(os.listdir("verispec/drafts")))
PY
S=$(date +%s)
timeout {budget} python3 scripts/cuda_check.py --out $OUT/check --fp32 --long /root/pay/long.jsonl --long-limit 4 \\
  --parts {parts} 2>&1 | tee $OUT/check_log.txt | grep -v "Warning\\|warn(\\|^  torch._C\\|^\\[syncs"
echo "check: $(( $(date +%s) - S )) s"
"""


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True).stdout


def tree_bytes() -> int:
    """Bytes of the working tree a call sends (tracked files, and untracked ones git does not ignore), drafts and
    results left out whether they are untracked yet or not."""
    files = [f for f in git("ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
             if f and not f.startswith(tuple(p + "/" for p in UNTRACKED))]
    return sum((ROOT / f).stat().st_size for f in files if (ROOT / f).is_file())


def exclude(lines: list[str], add: bool) -> None:
    have = EXCLUDE.read_text().splitlines() if EXCLUDE.exists() else []
    keep = [x for x in have if x not in lines] + (lines if add else [])
    EXCLUDE.parent.mkdir(parents=True, exist_ok=True)
    EXCLUDE.write_text("".join(x + "\n" for x in keep))


def pack(parts: str, budget: int) -> None:
    gguf = home() / "downloads" / catalog.entry("smollm2-135m")["file"]
    long = ROOT.parent / "shared" / "data" / "prompts" / "long.jsonl"
    for need, how in ((gguf, "run `verispec fetch` (or any command on the default model) first"),
                      (long, "the long prompts live beside the checkout")):
        if not need.exists():
            sys.exit(f"cuda_payload: {need} is missing: {how}")
    dev, c1, c2 = ROOT / ".dev", ROOT / ".dev" / "c1", ROOT / ".dev" / "c2"
    exclude(["/.dev/"], True)
    for d in (c1, c2):
        d.mkdir(parents=True, exist_ok=True)
        for f in d.iterdir():
            f.unlink()
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w") as t:
        for name in DRAFTS:
            t.add(ROOT / "verispec" / "drafts" / name, arcname=name)
    (c1 / "drafts.tar.xz").write_bytes(lzma.compress(tar.getvalue(), preset=9))
    (c1 / "long.jsonl").write_bytes(long.read_bytes())
    wheel = f"gguf=={metadata.version('gguf')}"                   # the version verispec runs with here
    if subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(c1), wheel]).returncode:
        sys.exit(f"cuda_payload: pip could not download {wheel}")
    blob = lzma.compress(gguf.read_bytes(), preset=9)
    tree = tree_bytes()
    room1 = LIMIT - tree - sum(f.stat().st_size for f in c1.iterdir())
    first = max(0, min(room1 - 2 ** 20, len(blob)))                       # 1 MiB to spare
    (c1 / "gguf.xz.0").write_bytes(blob[:first])
    (c2 / "gguf.xz.1").write_bytes(blob[first:])
    (c2 / "run.sh").write_text(RUN.format(gguf=gguf.name, budget=budget, parts=parts))
    sizes = [tree + sum(f.stat().st_size for f in d.iterdir()) for d in (c1, c2)]
    for d, size in zip((c1, c2), sizes):
        print(f"{d.relative_to(ROOT)}: {size / 2 ** 20:.1f} MiB with the tree ({tree / 2 ** 20:.1f} MiB)")
    if max(sizes) > LIMIT:
        sys.exit("cuda_payload: a call would carry more than 64 MiB; nothing to send as packed")
    print(f"in {dev.relative_to(ROOT)}; now `python scripts/cuda_payload.py untrack`, the two calls, then `restore`")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=("pack", "untrack", "restore"))
    ap.add_argument("--parts", default=PARTS, help="cuda_check.py's parts to run")
    ap.add_argument("--budget", type=int, default=400, help="seconds the check may run on the device")
    args = ap.parse_args()
    if args.what == "pack":
        pack(args.parts, args.budget)
    elif args.what == "untrack":
        if git("diff", "--cached", "--name-only", "--", *UNTRACKED).strip():     # `restore` would unstage them
            sys.exit(f"cuda_payload: staged changes under {' or '.join(UNTRACKED)}: commit them first")
        git("rm", "-r", "-q", "--cached", *UNTRACKED)
        exclude([f"/{p}/" for p in UNTRACKED], True)
        print(f"untracked {', '.join(UNTRACKED)}: {tree_bytes() / 2 ** 20:.1f} MiB of the working tree travel")
    else:
        git("reset", "-q", "--", *UNTRACKED)
        exclude([f"/{p}/" for p in UNTRACKED], False)
        print(f"restored {', '.join(UNTRACKED)} to the index")


if __name__ == "__main__":
    main()
