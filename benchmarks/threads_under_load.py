"""The main job on a busy machine: MLP1 training tokens/s and `nnlm eval` time while N other
CPU-bound processes run, with the thread governor's choice (no --threads) against --threads 1
and a forced 2 threads, in the same run.

The corpus is generated (seeded): Brown's vocabulary size (17,964 words, Zipf frequencies), a
train split of exactly --batches batches of 256 tokens, a 2,000-token valid split (the per-epoch
validation, kept short) and an --eval-tokens test split that `nnlm eval --split test` scores
exactly (fp32). Each contender is a fresh process (`nnlm train --epochs 1`, then `nnlm eval`), so
OpenMP starts from its defaults every time; rounds interleave the contenders so that changes in
the other engineers' load fall on all of them alike. Training tokens/s leave out the validation.
The busy processes are pure-Python loops, bounded in time and always ended by this script.

    PYTHONPATH=src python benchmarks/threads_under_load.py --busy 2 [--batches 300] [--rounds 2]
        [--loss sampled] [--contenders governor,1,2] [--passive]

A contender NAME:POLICY (e.g. 2:active, governor:passive) runs with OMP_WAIT_POLICY=POLICY in its
environment; --passive adds '2:passive'.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

VOCAB = 17_964  # Brown's |V| under the bengio2003 protocol: MLP1's output layer
BATCH = 256
WORDS_PER_LINE = 19  # + the line's <p>: 20 tokens per line

SPIN = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"


def write_corpus(root: Path, batches: int, valid: int, test: int, seed: int = 0) -> None:
    """train/valid/test.txt over VOCAB word types; every type occurs in train, so |V| = VOCAB + markers."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, VOCAB + 1)
    p /= p.sum()

    def text(tokens: int, every_word: bool) -> str:
        lines = tokens // (WORDS_PER_LINE + 1)
        ids = rng.choice(VOCAB, size=lines * WORDS_PER_LINE, p=p)
        if every_word:
            ids[:VOCAB] = rng.permutation(VOCAB)
        return "\n".join(" ".join(f"w{i}" for i in row) for row in ids.reshape(lines, WORDS_PER_LINE)) + "\n"

    root.mkdir(parents=True, exist_ok=True)
    (root / "train.txt").write_text(text(batches * BATCH, True))
    (root / "valid.txt").write_text(text(valid, False))
    (root / "test.txt").write_text(text(test, False))


def uptime() -> str:
    """The 1, 5 and 15-minute load averages, as `uptime` prints them."""
    return ", ".join(Path("/proc/loadavg").read_text().split()[:3])


def run_contender(name: str, corpus: Path, work: Path, loss: str, env_extra: dict[str, str]) -> dict:
    """One fresh `nnlm train` of one epoch, then `nnlm eval --split test`, with this contender's threads."""
    threads = [] if name.startswith("governor") else ["--threads", name.split(":")[0]]
    env = os.environ | env_extra
    out = work / f"run-{name.replace(':', '-')}-{time.monotonic_ns()}"
    cmd = [sys.executable, "-m", "nnlm", "train", "--corpus", str(corpus), "--out", str(out), "--preset", "mlp1",
           "--epochs", "1", "--loss", loss, "--no-progress", *threads]
    started = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{name}: nnlm train failed: {proc.stderr.strip()[-400:]}")
    total = time.monotonic() - started
    log = proc.stdout
    line = next(x for x in log.splitlines() if x.startswith("training "))
    history = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    tokens = history[0]["examples"]
    train_seconds = history[0]["elapsed_seconds"] - history[0]["valid_seconds"]
    proc = subprocess.run([sys.executable, "-m", "nnlm", "eval", str(out), "--split", "test", "--json", *threads],
                          env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{name}: nnlm eval failed: {proc.stderr.strip()[-400:]}")
    result = json.loads(proc.stdout)
    chosen = re.search(r"batch \d+, (.*), cpu$", line)
    return {"train_tok_s": tokens / max(train_seconds, 1e-9), "train_seconds": train_seconds,
            "process_seconds": total, "eval_seconds": result["seconds"],
            "train_threads": chosen.group(1) if chosen else line, "eval_threads": result["threads"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--busy", type=int, default=2, help="CPU-bound processes to start (0: the machine as it is)")
    ap.add_argument("--batches", type=int, default=300, help="training batches of 256 (one epoch)")
    ap.add_argument("--eval-tokens", type=int, default=20_000, help="tokens `nnlm eval` scores (the test split)")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved rounds of all contenders")
    ap.add_argument("--loss", default="sampled", choices=("sampled", "full", "nce"))
    ap.add_argument("--contenders", default="governor,1,2", help="governor and/or thread counts, comma-separated")
    ap.add_argument("--passive", action="store_true", help="add '2:passive': 2 threads with OMP_WAIT_POLICY=PASSIVE")
    ap.add_argument("--max-seconds", type=float, default=1800.0, help="the busy processes end by themselves after this")
    args = ap.parse_args()
    contenders = [c.strip() for c in args.contenders.split(",") if c.strip()] + (["2:passive"] if args.passive else [])
    results: dict[str, list[dict]] = {c: [] for c in contenders}
    busy: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="nnlm-load-") as tmp:
        work = Path(tmp)
        write_corpus(work / "corpus", args.batches, 2_000, args.eval_tokens)
        env_cache = {"NNLM_CACHE_DIR": str(work / "cache")}  # the generated corpus is cached in the temp dir
        print(f"{os.cpu_count()} CPUs; load average before {uptime()}; {args.busy} busy processes; MLP1, "
              f"--loss {args.loss}, {args.batches} batches of {BATCH}; eval of {args.eval_tokens:,} tokens (fp32)")
        try:
            busy = [subprocess.Popen([sys.executable, "-c", SPIN.format(seconds=args.max_seconds)])
                    for _ in range(args.busy)]
            time.sleep(1.0 if busy else 0.0)
            for r in range(args.rounds):
                for name in contenders:
                    policy = name.split(":")[1].upper() if ":" in name else None
                    extra = env_cache | ({"OMP_WAIT_POLICY": policy} if policy else {})
                    res = run_contender(name, work / "corpus", work, args.loss, extra)
                    results[name].append(res)
                    print(f"  round {r + 1} {name:>10}: train {res['train_tok_s']:8,.0f} tokens/s "
                          f"({res['train_seconds']:.1f} s), eval {res['eval_seconds']:6.1f} s; "
                          f"train: {res['train_threads']}; eval: {res['eval_threads']}; load {uptime()}",
                          flush=True)
        finally:
            for p in busy:
                p.kill()
            for p in busy:
                p.wait()
    print(f"load average after {uptime()}")
    base = "1" if "1" in results and results["1"] else contenders[0]
    tok1 = float(np.median([r["train_tok_s"] for r in results[base]]))
    ev1 = float(np.median([r["eval_seconds"] for r in results[base]]))
    print(f"medians over {args.rounds} round(s); ratios against --threads {base}:")
    for name, rs in results.items():
        tok = float(np.median([r["train_tok_s"] for r in rs]))
        ev = float(np.median([r["eval_seconds"] for r in rs]))
        print(f"  {name:>10}: train {tok:8,.0f} tokens/s ({tok / tok1:.2f}x)   eval {ev:6.1f} s "
              f"(speed {ev1 / ev:.2f}x)")


if __name__ == "__main__":
    main()
