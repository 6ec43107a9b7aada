"""Same results from two versions of the training code: tiny fixed-seed runs, compared bit for bit.

Every trainer (one process, hogwild with one worker -- the only deterministic hogwild --, ddp and
vocab on 2 ranks), the full and the sampled loss, each stopped in the middle (after its first
batch, by a zero time budget, or after an epoch) and resumed to the end. For each run it
records the digest of the final checkpoint's tensors (weights, optimizer state, RNG), of the best
weights, and the history without wall times. The reference is the `src/` of a git revision,
extracted to a temporary directory; both versions run the same cases in subprocesses.

    NLTK_DATA=... python benchmarks/pipeline_identity.py [--reference 57f93ec] [--only single-full]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
TINY = {"preset": "mlp7", "hidden": 8, "features": 4, "batch_size": 64, "threads": 1, "seed": 3}
# name -> (mode, workers, options of the first session, options of the resumed session)
CASES: dict[str, tuple[str, int | None, dict, dict]] = {
    "single-full": ("none", None, {"time_budget": 0.0}, {"epochs": 3}),
    "single-full-paper": ("none", None, {"recipe": "paper", "lr": 0.05, "epochs": 1}, {"epochs": 2}),
    "single-sampled": ("none", None, {"loss": "sampled", "samples": 20, "time_budget": 0.0}, {"epochs": 2}),
    "single-nce": ("none", None, {"loss": "nce", "samples": 20, "epochs": 1}, {"epochs": 2}),
    "hogwild-full": ("hogwild", 1, {"recipe": "modern", "bf16": False, "epochs": 1}, {"epochs": 2}),
    "hogwild-sampled": ("hogwild", 1, {"loss": "sampled", "samples": 20, "epochs": 1}, {"epochs": 2}),
    # (the paper's SGD in a Hogwild worker: the kept output layer on the parent's shared copy, since session 16)
    "hogwild-paper": ("hogwild", 1, {"recipe": "paper", "lr": 0.05, "bf16": False, "epochs": 1}, {"epochs": 2}),
    "ddp-2": ("ddp", 2, {"recipe": "modern", "bf16": False, "time_budget": 0.0}, {"epochs": 2}),
    "vocab-2": ("vocab", 2, {"recipe": "modern", "bf16": False, "time_budget": 0.0}, {"epochs": 2}),
}


def write_corpus(root: Path) -> Path:
    """A small synthetic corpus with some bigram structure (fixed seed)."""
    rng = np.random.default_rng(0)
    p = 1.0 / np.arange(1, 61)
    p /= p.sum()
    root.mkdir(parents=True, exist_ok=True)
    for split, lines in (("train", 300), ("valid", 60), ("test", 60)):
        out = []
        for _ in range(lines):
            seq = rng.choice(60, size=int(rng.integers(3, 15)), p=p)
            seq[1::2] = (seq[0::2][: len(seq[1::2])] + 1) % 60
            out.append(" ".join(f"w{i}" for i in seq))
        (root / f"{split}.txt").write_text("\n".join(out) + "\n", encoding="utf-8")
    return root


def run_cases(names: list[str], work: Path) -> dict[str, dict]:
    """Train every case with the nnlm on sys.path; what each run left, as digests and figures."""
    try:
        from nnlm.neural.parallel.ranks import train_parallel
        from nnlm.neural.run.checkpoint import load_tensors, tensors_digest
    except ModuleNotFoundError:  # a reference from before neural/ was split into packages (a25f067 and older)
        from nnlm.neural.checkpoint import load_tensors, tensors_digest

        from nnlm.neural.parallel import train_parallel

    corpus = write_corpus(work / "corpus")
    results = {}
    for name in names:
        mode, workers, first, second = CASES[name]
        out = work / name
        quiet = {"progress": False, "log": lambda s: None}
        train_parallel(out, {"corpus": str(corpus)} | TINY | first, mode, workers, **quiet)
        state = train_parallel(out, second, mode, workers, resume=True, **quiet)
        state = json.loads((out / "state.json").read_text()) if state is None else state
        final, _ = load_tensors(out / state["tensors"])
        best, _ = load_tensors(out / "model.safetensors")
        run = json.loads((out / "run.json").read_text())
        results[name] = {
            "checkpoint": tensors_digest(final), "best_weights": tensors_digest(best),
            "step": state["step"], "examples": state["examples"], "best": state["best"],
            "stop_reason": state["stop_reason"],
            "history": [{k: v for k, v in h.items() if not k.endswith("seconds")} for h in state["history"]],
            "run": {k: v for k, v in run.items() if k != "corpus"},
        }
    return results


def reference_src(revision: str, into: Path) -> Path:
    """src/ of a git revision, extracted under `into`."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", revision, "src"], check=True,
                             capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def in_subprocess(src: Path, names: list[str], work: Path) -> dict[str, dict]:
    # torch's products in the exact pass (nnlm.neural.lm.exact_product): the reference predates the per-host choice
    env = os.environ | {"PYTHONPATH": str(src), "NNLM_EXACT_PRODUCT": "torch"}
    result = subprocess.run([sys.executable, __file__, "--cases-json", ",".join(names), "--work", str(work)],
                            env=env, check=True, capture_output=True, text=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", default="57f93ec", help="git revision whose src/ is the reference")
    parser.add_argument("--only", help="comma-separated case names (default: all)")
    parser.add_argument("--cases-json", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cases_json:  # the child: run with the nnlm on PYTHONPATH, print JSON
        import nnlm

        results = run_cases(args.cases_json.split(","), Path(args.work))
        print(json.dumps({"nnlm": nnlm.__file__, "results": results}))
        return 0
    names = args.only.split(",") if args.only else list(CASES)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        versions = {"reference": reference_src(args.reference, tmp / "ref"), "current": REPO / "src"}
        got = {label: in_subprocess(src, names, tmp / label) for label, src in versions.items()}
    for label in versions:
        print(f"{label}: nnlm from {got[label]['nnlm']}")
    differ = 0
    for name in names:
        ref, cur = got["reference"]["results"][name], got["current"]["results"][name]
        same = {k: ref[k] == cur[k] for k in ref if k != "run"}
        run_diff = sorted(k for k in set(ref["run"]) | set(cur["run"]) if ref["run"].get(k) != cur["run"].get(k))
        ok = all(same.values())
        differ += not ok
        print(f"{name:18s} {'identical' if ok else 'DIFFERENT: ' + ', '.join(k for k, v in same.items() if not v)}"
              f"  (checkpoint {cur['checkpoint'][:12]}, best valid ppl {cur['best']['valid_ppl']:.6f}, "
              f"{cur['step']} steps)" + (f"; run.json differs in {', '.join(run_diff)}" if run_diff else "")
              + ("" if ok else f"; the reference: best valid ppl {ref['best']['valid_ppl']:.6f}, "
                 f"history {[round(h['valid_ppl'], 6) for h in ref['history']]} against "
                 f"{[round(h['valid_ppl'], 6) for h in cur['history']]}"))
    print(f"{len(names) - differ} of {len(names)} cases identical to {args.reference}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
