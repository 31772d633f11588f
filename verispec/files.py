"""Atomic writes: what a user made (weights, data, reports) is never left half-written."""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from .errors import VerispecError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_dir(dest: Path):
    """Yield a temporary folder beside `dest`; on success it replaces `dest` in one rename."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    tmp.chmod(0o755)
    try:
        yield tmp
        (tmp / MARK).write_text("a folder verispec wrote: `--force` may replace it\n")
        for f in tmp.rglob("*"):                 # files some writers create 0600; give them the usual mode
            if f.is_file():
                f.chmod(0o666 & ~_umask())
        if dest.exists():
            old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
            os.rename(dest, old)
            os.rename(tmp, dest)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


MARK = ".verispec"          # in every folder `atomic_dir` writes (drafts, heads, exports): what --force may replace


def check_new_folder(dest, force: bool = False) -> None:
    """Refuse, in one line and before any work, a folder to be written at `dest` where it would replace what a user
    made: a file; a folder that is not empty, unless `force`; with `force`, a folder verispec did not write (without
    its MARK: a model folder with a config.json of its own is the user's)."""
    dest, where = Path(dest), Path(dest).resolve()
    if not str(dest).strip() or where == Path.cwd().resolve() or where.parent == where:
        raise VerispecError(f"name a new folder to write, not {str(dest)!r}")
    if dest.exists() and not dest.is_dir():
        raise VerispecError(f"{dest} is a file: name a folder to write")
    if dest.is_dir() and any(dest.iterdir()):
        if not force:
            raise VerispecError(f"{dest} exists: pass --force to replace it, or name another folder")
        if not (dest / MARK).is_file():
            raise VerispecError(f"{dest} holds no {MARK} file: verispec replaces only a folder it wrote (delete it "
                                "yourself to reuse the name)")


def refuse_folder(dest) -> None:
    """A one-line error where a file is to be written at `dest` and a folder stands there (a command checks its
    outputs this way before its work, and `atomic_path` again when it writes)."""
    if dest and Path(dest).is_dir():
        raise VerispecError(f"{dest} is a folder: name a file to write")


def check_new_file(dest) -> None:
    """Refuse, in one line and before a command's work, a file it could not write at `dest`: an empty name, a
    folder or other non-regular file there, or no folder it may write in (a file in the way, no permission)."""
    if not str(dest).strip() or not Path(dest).name or str(dest).endswith(("/", os.sep)):
        raise VerispecError(f"name a file to write, not {str(dest)!r}")
    dest = Path(os.path.realpath(dest))
    refuse_folder(dest)
    if dest.exists() and not dest.is_file():
        raise VerispecError(f"{dest} is not a regular file: name a file to write")
    parent = dest.parent
    while not parent.exists():                 # the folders atomic_path would make
        parent = parent.parent
    if not parent.is_dir():
        raise VerispecError(f"cannot write {dest}: {parent} is a file")
    # a file made and removed where the output will go: the folder has the say (the output replaces the file by a
    # rename), and root passes os.access where none can be made (/sys, a read-only mount)
    try:
        fd, probe = tempfile.mkstemp(prefix=".verispec-probe-", dir=parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise VerispecError(f"cannot write {dest}: {e.strerror or e}") from None


@contextlib.contextmanager
def atomic_path(dest: Path):
    """Yield the path of a temporary file beside `dest` for a writer that opens files itself; on success it is
    renamed over `dest`, on error removed."""
    check_new_file(dest)                       # again as it is written: the path may have changed since
    dest = Path(os.path.realpath(dest))        # through a link, to the file it names
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())       # mkstemp makes 0600; give the file the usual permissions
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_file(dest: Path, mode: str = "w"):
    """Yield a file object for a temporary file beside `dest`; on success it is renamed over `dest`."""
    with atomic_path(dest) as tmp, open(tmp, mode) as f:
        yield f
        f.flush()
        os.fsync(f.fileno())
