"""Did two `verispec bench --json` runs produce the same tokens? For each (prompt, method) both ran, compares the
digests of the token ids (`tokens_sha256`); and the model fingerprints of the two environments. Use it across
machines (the same command on each) or across versions:

    python scripts/compare_runs.py A.json B.json
"""
import json
import sys


def load(path):
    try:
        with open(path) as f:
            data = json.load(f)
        return data["environment"], {r["id"]: r for r in data["per_prompt"]}
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"compare_runs: error: {path} is not a `verispec bench --json` file ({e})")


def main(a_path, b_path):
    (env_a, a), (env_b, b) = load(a_path), load(b_path)
    for key in ("cpu", "model_fingerprint", "torch", "dtype", "temperature", "seed", "max_new_tokens"):
        same = "same" if env_a.get(key) == env_b.get(key) else "DIFFERENT"
        print(f"{key:18s} {same:9s} {env_a.get(key)!s:40.40s} {env_b.get(key)!s:40.40s}")
    same = differ = missing = 0
    for pid in sorted(a.keys() & b.keys()):
        for method, run in a[pid].items():
            if not isinstance(run, dict) or method not in b[pid]:
                continue
            x, y = run.get("tokens_sha256"), b[pid][method].get("tokens_sha256")
            if x is None or y is None:
                missing += 1
            elif x == y:
                same += 1
            else:
                differ += 1
                print(f"differs: {pid} {method}")
    print(f"same tokens: {same} of {same + differ} (prompt, method) pairs"
          + (f"; {missing} without digests (older runs)" if missing else ""))
    return 0 if differ == 0 and same > 0 else 1


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python scripts/compare_runs.py A.json B.json")
    sys.exit(main(sys.argv[1], sys.argv[2]))
