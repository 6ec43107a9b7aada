"""The walk a newcomer follows through the code for one command: which nnlm modules it visits and how
often it crosses from one package to another (issue 36: `nnlm train --preset mlp1 --loss sampled`).

The command runs in this process under a profile hook that records, for every call from one nnlm module
into another, the edge (caller module -> called module), each edge once. Modules visited are the nnlm
modules called; a crossing is an edge between two packages (nnlm.cli -> nnlm.neural, nnlm.neural ->
nnlm.data, ...; top-level modules such as nnlm.io count as their own package). The per-pair counts say
which hallways a reader goes back and forth through. Run it against another version of the code with
`--src` (e.g. a `git archive` of an older commit) to compare, same command, same corpus:

    PYTHONPATH=src python tools/call_walk.py [--src /tmp/nnlm-OLD/src] [--json] -- train --preset mlp1 --loss sampled

The corpus is a small generated text directory (so the walk takes seconds); the command's output goes to
a temporary directory, and `--out DIR --corpus DIR --epochs 1 --no-progress` are added to it.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import subprocess
import sys
import tempfile
from pathlib import Path

RUNNER = r"""
import collections, json, sys
sys.path.insert(0, sys.argv[1])
edges = set()
calls = set()

def module_of(frame):
    name = frame.f_globals.get("__name__", "")
    return name if name == "nnlm" or name.startswith("nnlm.") else None

def hook(frame, event, arg):
    if event != "call":
        return
    callee = module_of(frame)
    caller = module_of(frame.f_back) if frame.f_back is not None else None
    if callee and caller and callee != caller:
        edges.add((caller, callee))
        calls.add((caller, frame.f_back.f_code.co_qualname, callee, frame.f_code.co_qualname))

from nnlm.cli.main import main
sys.setprofile(hook)
try:
    code = main(sys.argv[3:])
except SystemExit as exc:
    code = exc.code
finally:
    sys.setprofile(None)
json.dump({"code": code, "edges": sorted(edges), "calls": sorted(calls)}, open(sys.argv[2], "w"))
"""


def package(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else parts[0]


def small_corpus(root: Path) -> Path:
    """A 30k-token text directory: enough for one quick epoch of any preset."""
    import random

    root.mkdir()
    rng = random.Random(0)
    words = [f"w{i}" for i in range(300)]
    weights = [1 / (i + 1) for i in range(300)]
    for split, lines in (("train", 1500), ("valid", 150), ("test", 150)):
        text = "\n".join(" ".join(rng.choices(words, weights, k=rng.randint(5, 20))) for _ in range(lines))
        (root / f"{split}.txt").write_text(text + "\n")
    return root


def walk(src: str, command: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        corpus = small_corpus(Path(tmp) / "corpus")
        record = Path(tmp) / "walk.json"
        argv = [*command, "--out", str(Path(tmp) / "run"), "--corpus", str(corpus), "--epochs", "1", "--no-progress"]
        done = subprocess.run([sys.executable, "-c", RUNNER, src, str(record), *argv], capture_output=True, text=True)
        if not record.exists() or json.loads(record.read_text())["code"] not in (0, None):
            raise SystemExit(f"the command failed: {done.stderr.strip()[-500:]}")
        data = json.loads(record.read_text())
    edges = [tuple(e) for e in data["edges"]]
    crossings = [(a, b) for a, b in edges if package(a) != package(b)]
    pairs = collections.Counter(" <-> ".join(sorted((package(a), package(b)))) for a, b in crossings)
    into = collections.Counter(b for _, b in crossings)
    # the same walk function by function: each (calling function, called function) pair between packages once
    # (a module calling three functions of another package counts three, where the module edge counts one)
    calls = [tuple(c) for c in data.get("calls", [])]
    call_crossings = [c for c in calls if package(c[0]) != package(c[2])]
    return {"exit": data["code"], "modules": len({m for e in edges for m in e}), "edges": len(edges),
            "crossings": len(crossings), "function_crossings": len(call_crossings), "pairs": dict(pairs.most_common()),
            "most_entered_across": dict(into.most_common(6)),
            "crossing_edges": [f"{a} -> {b}" for a, b in sorted(crossings)],
            "crossing_calls": [f"{a}.{f} -> {b}.{g}" for a, f, b, g in sorted(call_crossings)]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", default=str(Path(__file__).resolve().parents[1] / "src"),
                    help="the source tree to walk (default: this checkout's src)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="after --: the nnlm command, e.g. train --preset mlp1")
    args = ap.parse_args()
    args.command = [a for a in args.command if a != "--"] or ["train", "--preset", "mlp1", "--loss", "sampled"]
    result = walk(args.src, args.command)
    if args.json:
        print(json.dumps(result, indent=1))
        return
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print(f"{args.src}: nnlm {' '.join(args.command)} (exit {result['exit']})")
        print(f"  modules visited {result['modules']}, module-to-module edges {result['edges']}, "
              f"crossings between packages {result['crossings']} "
              f"(function to function: {result['function_crossings']})")
        for pair, count in result["pairs"].items():
            print(f"    {pair:40s} {count}")
        print("  entered most often from another package: "
              + ", ".join(f"{m} {c}" for m, c in result["most_entered_across"].items()))
    print(out.getvalue(), end="")


if __name__ == "__main__":
    main()
