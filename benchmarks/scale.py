"""Time and peak memory per stage as the corpus grows: 1M, 14M, 140M generated tokens.

For each size, a corpus from benchmarks/scale_corpus.py (Zipf words with bigram structure, 18k
types; valid and test 1M tokens each) goes through the stages, each in a child process whose peak
RSS is read from os.wait4 (so one stage's memory never hides another's):
  prepare  text -> vocabulary + memory-mapped ids (a fresh corpus cache)
  kn5      modified Kneser-Ney of order 5 on train (`--memory GB`: the out-of-core counting path)
  kn5disk  the same model counted and estimated out of core (nnlm.ngram.kneser_ney_disk, `--memory GB`,
           default 1): its back-off tables are written as .npy files to DATA/kn5-SIZE (the counts go
           to a temporary directory in DATA), then memory-mapped and checked: P(. | context) sums
           to 1 for 64 contexts of the train stream
  trigramdisk  the deleted-interpolation trigram's tables counted and built out of core
           (nnlm.ngram.interpolated_disk, `--memory GB`, default 1), memory-mapped, and the same check
  train    one epoch of the AP News net (n = 6, h = 60, m = 100, direct connections, sampled
           softmax, one thread; `--hogwild`: two workers) via `nnlm train`; tokens/s = examples /
           (elapsed - the end-of-epoch validation), read back from metrics.jsonl; with
           `--train-minutes` the epoch is cut short and its time extrapolated from tokens/s
  score    exact perplexity of the 1M-token valid split with that net (`nnlm eval --split valid`,
           one thread; the perplexity pass's own seconds)
A stage the sizes make too long can be left out (`--stages`), e.g. train at 140M: its time is then
extrapolated from the largest measured size's tokens/s and marked as such.

Peak RSS includes the ~0.1 GB of a fresh Python with NumPy (a child starts from its parent's peak;
the parent only launches children). The reference, measured in the same run before and after the
stages: seconds to np.sort 16M random int64 keys on one core. `ref x` columns divide a stage's time
by it, so runs under different load can be compared. Children get an address-space limit (`--limit-gb`,
default 10) so that a stage too big for the machine fails with MemoryError (reported as such) instead
of pushing a shared machine into swap or the OOM killer.
Growth exponent between sizes a < b: log(t_b / t_a) / log(n_b / n_a), t the stage's CPU seconds
(user + system, from wait4; for train, the whole run's, so compare its tokens/s instead).

    PYTHONPATH=src python benchmarks/scale.py --data /work/scale-data [--sizes 1M,14M,140M]
        [--stages prepare,kn5,kn5disk,trigramdisk,train,score] [--memory GB] [--out results.jsonl]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
STAGES = ("prepare", "kn5", "kn5disk", "trigramdisk", "train", "score")
CPU_SECONDS: list[float] = []
AP_NET = ["--order", "6", "--hidden", "60", "--features", "100", "--direct", "--loss", "sampled"]


def parse_size(text: str) -> int:
    scale = {"K": 10**3, "M": 10**6, "G": 10**9}
    return int(float(text[:-1]) * scale[text[-1].upper()]) if text[-1].upper() in scale else int(text)


def label(size: int) -> str:
    """14000000 -> '14M' (directory names)."""
    return f"{size / 1e6:g}M" if size % 10**5 == 0 else str(size)


def reference_seconds() -> float:
    """np.sort of 16M random int64 keys, best of 3: the plain yardstick for this machine's load.
    Run in a child (`reference_in_child`): a child's peak RSS starts at its parent's, so the parent stays small."""
    keys = np.random.default_rng(0).integers(0, 1 << 62, 16_000_000)
    best = math.inf
    for _ in range(3):
        t = time.perf_counter()
        np.sort(keys)
        best = min(best, time.perf_counter() - t)
    return best


def run_child(argv: list[str], env: dict[str, str], limit_gb: float | None = None) -> tuple[float, float, str]:
    """Run argv; its wall seconds, its peak RSS in GB (from wait4, which reaps it), its stdout.
    Its CPU seconds (user + system) go to CPU_SECONDS[-1]: on a shared machine they, not the wall
    time, say how the work grows."""
    def limit() -> None:
        if limit_gb:
            cap = int(limit_gb * 2**30)
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=err, text=True, preexec_fn=limit)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - t
        CPU_SECONDS.append(usage.ru_utime + usage.ru_stime)
        proc.returncode = os.waitstatus_to_exitcode(status)  # so Popen does not wait for it again
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise StageFailed(f"{' '.join(argv[1:4])}: {err.read()[-300:].strip()}", seconds,
                              usage.ru_maxrss / 2**20)
        return seconds, usage.ru_maxrss / 2**20, out.read()


class StageFailed(Exception):
    def __init__(self, message: str, seconds: float, rss_gb: float) -> None:
        super().__init__(message)
        self.seconds, self.rss_gb = seconds, rss_gb


def reference_in_child() -> float:
    return float(run_child([sys.executable, __file__, "--child", "reference"], dict(os.environ))[2])


def child_stage(stage: str, corpus_dir: str, memory: float | None, out_dir: str | None = None) -> None:
    """Inside the child: one library stage; prints one JSON line of what it built."""
    if stage == "reference":
        print(reference_seconds())
        return
    from nnlm.data.corpus import load_corpus

    corpus = load_corpus(corpus_dir)
    if stage == "prepare":
        print(json.dumps({"tokens": int(len(corpus.train)), "vocab": len(corpus.vocab)}))
    elif stage == "kn5":
        from nnlm.ngram.kneser_ney import KneserNeyModel

        model = KneserNeyModel.fit(corpus.vocab, corpus.train, 5, memory_gb=memory)
        print(json.dumps({"ngrams": [int(len(k)) for k in model.tables.keys]}))
    elif stage == "kn5disk":
        from nnlm.ngram.kneser_ney_disk import fit_kneser_ney_to_disk, load_disk_tables

        out = Path(out_dir)
        shutil.rmtree(out, ignore_errors=True)
        fit_kneser_ney_to_disk(corpus.train, 5, len(corpus.vocab), memory or 1.0, out, workdir=out.parent)
        tables = load_disk_tables(out, len(corpus.vocab), 5)
        rows = np.linspace(4, len(corpus.train) - 1, 64).astype(np.int64)
        contexts = np.stack([np.asarray(corpus.train[r - 4:r], dtype=np.int64) for r in rows])
        sums = tables.distribution(contexts).sum(axis=1)
        print(json.dumps({"ngrams": [int(len(k)) for k in tables.keys], "max_sum_error": float(np.abs(sums - 1).max()),
                          "table_gb": sum(f.stat().st_size for f in out.iterdir()) / 2**30}))
    elif stage == "trigramdisk":
        from nnlm.ngram.interpolated import InterpolatedTrigram

        model = InterpolatedTrigram.fit(corpus.vocab, corpus.train, memory_gb=memory or 1.0)
        rows = np.linspace(2, len(corpus.train) - 1, 64).astype(np.int64)
        contexts = np.stack([np.asarray(corpus.train[r - 2:r], dtype=np.int64) for r in rows])
        sums = model.distribution(contexts).sum(axis=1)
        print(json.dumps({"ngrams": [int(len(model.tables["unigram"].nonzero()[0])),
                                     int(len(model.tables["bigram_keys"])), int(len(model.tables["trigram_keys"]))],
                          "max_sum_error": float(np.abs(sums - 1).max())}))


def stage(name: str, size: int, args: argparse.Namespace, corpus_dir: Path, env: dict[str, str]) -> dict:
    run_dir = args.data / f"run-{label(size)}"
    if name in ("prepare", "kn5", "kn5disk", "trigramdisk"):
        argv = [sys.executable, __file__, "--child", name, "--corpus", str(corpus_dir),
                "--child-out", str(args.data / f"kn5-{label(size)}")]
        if args.memory is not None:
            argv += ["--memory", str(args.memory)]
        seconds, rss, out = run_child(argv, env, args.limit_gb)
        return {"seconds": seconds, "rss_gb": rss, **json.loads(out.strip().splitlines()[-1])}
    if name == "train":
        shutil.rmtree(run_dir, ignore_errors=True)
        budget = ["--time-budget", str(args.train_minutes)] if args.train_minutes else []
        workers = ["--parallel", "hogwild", "--workers", "2"] if args.hogwild else []
        seconds, rss, _ = run_child([sys.executable, "-m", "nnlm", "train", "--corpus", str(corpus_dir),
                                     "--out", str(run_dir), *AP_NET, "--epochs", "1", "--threads", "1",
                                     *budget, *workers, "--no-progress", "--json"], env)
        epoch = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()][-1]
        rate = epoch["examples"] / (float(epoch["elapsed_seconds"]) - float(epoch["valid_seconds"]))
        return {"seconds": size / rate, "epoch_extrapolated": bool(epoch.get("partial")), "rss_gb": rss,
                "wall_seconds": seconds, "tokens_per_s": rate, "examples": epoch["examples"],
                "valid_seconds_in_training": float(epoch["valid_seconds"]), "valid_ppl": epoch["valid_ppl"],
                "hogwild_workers": 2 if args.hogwild else 0}
    seconds, rss, out = run_child([sys.executable, "-m", "nnlm", "eval", str(run_dir), "--split", "valid",
                                   "--threads", "1", "--json"], env)
    result = json.loads(out)  # its "seconds": the perplexity pass alone (eval also measures log Z after it)
    return {"seconds": float(result["seconds"]), "rss_gb": rss, "wall_seconds": seconds,
            "valid_ppl": result["perplexity"]["valid"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path("scale-data"),
                    help="corpora, caches, runs (git ignores ./scale-data)")
    ap.add_argument("--sizes", default="1M,14M,140M")
    ap.add_argument("--stages", default=",".join(STAGES))
    ap.add_argument("--memory", type=float, help="kn5: memory budget in GB (out-of-core counting); "
                                                           "kn5disk, trigramdisk: the same (default 1)")
    ap.add_argument("--out", type=Path, help="append one JSON line per stage and size here")
    ap.add_argument("--train-minutes", type=float, help="train: stop after this many minutes and extrapolate "
                                                          "the epoch from tokens/s (a full epoch if not given)")
    ap.add_argument("--hogwild", action="store_true", help="train: two Hogwild workers (--parallel hogwild)")
    ap.add_argument("--limit-gb", type=float, default=10.0, help="address-space limit of prepare/kn5 children")
    ap.add_argument("--child", choices=("reference", "prepare", "kn5", "kn5disk", "trigramdisk"),
                    help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    ap.add_argument("--corpus", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child_stage(args.child, args.corpus, args.memory, args.child_out)
        return
    stages = [s for s in args.stages.split(",") if s]
    unknown = set(stages) - set(STAGES)
    if unknown:
        raise SystemExit(f"unknown stages {sorted(unknown)}; choose from {', '.join(STAGES)}")
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    print(f"load before: {os.getloadavg()[0]:.2f}", flush=True)
    ref = reference_in_child()
    results: dict[tuple[str, int], dict] = {}
    for size in sizes:
        corpus_dir = args.data / f"zipf-{label(size)}"
        if not (corpus_dir / "source.json").is_file():
            sys.path.insert(0, str(HERE))
            from scale_corpus import write_scale_corpus

            write_scale_corpus(corpus_dir, size, 1_000_000)
        cache = args.data / f"cache-{label(size)}"
        env = {**os.environ, "NNLM_CACHE_DIR": str(cache)}
        for name in stages:
            if name == "prepare":
                shutil.rmtree(cache, ignore_errors=True)
            try:
                row = stage(name, size, args, corpus_dir, env)
            except StageFailed as exc:
                row = {"seconds": exc.seconds, "rss_gb": exc.rss_gb, "failed": str(exc)}
            row.update(stage=name, size=size, load=round(os.getloadavg()[0], 2), ref_seconds=ref,
                       cpu_seconds=CPU_SECONDS[-1])
            results[(name, size)] = row
            print(json.dumps(row), flush=True)
            if args.out:
                with open(args.out, "a") as fh:
                    fh.write(json.dumps(row) + "\n")
    ref_after = reference_in_child()
    print(f"\nreference (np.sort of 16M int64, 1 core): {ref:.2f} s before, {ref_after:.2f} s after; "
          f"load after: {os.getloadavg()[0]:.2f}")
    print(table(results, stages, sizes, (ref + ref_after) / 2))


def table(results: dict, stages: list[str], sizes: list[int], ref: float) -> str:
    """Markdown: per stage and size, seconds, ref multiples, peak RSS; growth exponents between sizes."""
    head = "| stage | tokens | wall s | ref x | CPU s | peak RSS GB | CPU-time exponent | RSS exponent |"
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name in stages:
        prev = None
        for size in sizes:
            row = results.get((name, size))
            if row is None:
                continue
            if "failed" in row:
                lines.append(f"| {name} | {size / 1e6:g}M | failed after {row['seconds']:.0f} s | | | "
                             f"{row['rss_gb']:.2f} | {row['failed'][-60:]} | |")
                continue
            t_exp = r_exp = ""
            if prev is not None:
                span = math.log(size / prev["size"])
                t_exp = f"{math.log(row['cpu_seconds'] / prev['cpu_seconds']) / span:.2f}"
                r_exp = f"{math.log(row['rss_gb'] / prev['rss_gb']) / span:.2f}"
            lines.append(f"| {name} | {size / 1e6:g}M | {row['seconds']:.1f} | {row['seconds'] / ref:.1f} | "
                         f"{row['cpu_seconds']:.1f} | {row['rss_gb']:.2f} | {t_exp} | {r_exp} |")
            prev = row
        if name == "train" and prev is not None and sizes[-1] > prev["size"]:
            rate = prev["tokens_per_s"]
            lines.append(f"| train (extrapolated from {prev['size'] / 1e6:g}M's {rate:,.0f} tokens/s) | "
                         f"{sizes[-1] / 1e6:g}M | {sizes[-1] / rate:.0f} | | | | | |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
