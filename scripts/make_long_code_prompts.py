"""Long code prompts for training data: tasks over excerpts of this Python's standard library, never of a module
that ../shared/data/prompts/long.jsonl (the long-prompt benchmark) draws on.

    python scripts/make_long_code_prompts.py OUT.jsonl [N] [SEED] [--lib DIR] [--bench LONG.jsonl]

Each prompt is one of a set of tasks (explain, review, document, test, summarise, ...) over a window of 3,000 to
12,000 characters of one module, cut at line boundaries. Modules are drawn in turn from a seeded shuffle, so the
file follows from N, SEED and the library alone. Category `long_code_train`; ids `longtrain-SEED-I`.
"""
import argparse
import json
import random
import sys
import sysconfig
from pathlib import Path

TASKS = [
    "What does this code do? Explain it to a new team member, then name the two functions they should read first.",
    "Find two places in this code that could fail on unusual input, and say how you would guard each.",
    "Give a bullet-point summary of this code: its classes, its functions and how they fit together.",
    "Write docstrings for the three most important functions in this code.",
    "Write three pytest test cases for this code, with a sentence on what each one checks.",
    "Describe the public interface of this module: what a caller imports and how they use it.",
    "Suggest one refactoring that would make this code easier to maintain, and show the changed code.",
    "Explain how data flows through this code, from its inputs to its outputs.",
    "Write a short usage guide for this module, with one example.",
    "Review this code as if it were a pull request: what is good, what would you ask to change?",
]
SKIP_DIRS = {"test", "tests", "idlelib", "lib2to3", "tkinter", "turtledemo", "ensurepip", "site-packages",
             "dist-packages", "__pycache__"}


def modules(lib: Path, exclude: set[str]) -> list[Path]:
    """Python files under lib with enough text, skipping tests and the benchmark's modules."""
    out = []
    for path in sorted(lib.rglob("*.py")):
        rel = path.relative_to(lib)
        dirs = rel.parts[:-1]
        if set(dirs) & SKIP_DIRS or any(d.startswith("config-") for d in dirs) or rel.as_posix() in exclude \
                or path.name.startswith("_"):                       # (config-*: the build's own scripts)
            continue
        try:
            if len(path.read_text(encoding="utf-8")) >= 4000:
                out.append(path)
        except (OSError, UnicodeDecodeError):
            continue
    return out


def excerpt(text: str, rng: random.Random) -> str:
    """A window of whole lines, 3,000 to 12,000 characters long."""
    lines = text.split("\n")
    want = rng.randint(3000, 12000)
    start = rng.randrange(max(1, len(lines) - 40))
    out, size = [], 0
    for line in lines[start:]:
        if size + len(line) + 1 > want and out:
            break
        out.append(line)
        size += len(line) + 1
    return "\n".join(out).strip("\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("n", type=int, nargs="?", default=400)
    ap.add_argument("seed", type=int, nargs="?", default=0)
    ap.add_argument("--lib", default=sysconfig.get_paths()["stdlib"])
    ap.add_argument("--bench", default=str(Path(__file__).resolve().parents[2] / "shared/data/prompts/long.jsonl"))
    args = ap.parse_args()
    try:
        bench = [json.loads(line) for line in Path(args.bench).read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as e:
        sys.exit(f"make_long_code_prompts: cannot read --bench {args.bench}: {e}")
    exclude = {r["source"].split(" Lib/", 1)[1] for r in bench if " Lib/" in r.get("source", "")}
    files = modules(Path(args.lib), exclude)
    if not files:
        sys.exit(f"make_long_code_prompts: no modules of 4,000+ characters under {args.lib}")
    rng = random.Random(args.seed)
    rng.shuffle(files)
    rows = []
    for i in range(args.n):
        path = files[i % len(files)]
        code = excerpt(path.read_text(encoding="utf-8"), rng)
        task = TASKS[rng.randrange(len(TASKS))]
        rows.append({"id": f"longtrain-{args.seed}-{i}", "category": "long_code_train",
                     "source": f"Python {sys.version_info.major}.{sys.version_info.minor} "
                               f"Lib/{path.relative_to(args.lib).as_posix()}",
                     "prompt": f"{task}\n\n```python\n{code}\n```"})
    tmp = Path(args.out + ".tmp")
    try:
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        tmp.replace(args.out)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        sys.exit(f"make_long_code_prompts: cannot write {args.out}: {e}")
    print(f"wrote {len(rows)} prompts from {min(len(files), args.n)} of {len(files)} modules "
          f"({len(exclude)} benchmark modules left out) to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
