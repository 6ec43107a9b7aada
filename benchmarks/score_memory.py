"""Peak memory of `nnlm score` on large inputs against the model's own footprint (issue 32).

Generates, in a scratch directory outside the repository (default /tmp/nnlm-score-memory), text drawn
from a model's vocabulary with Zipf frequencies: a one-line file, a multi-line file (lines of 5-40
words) and, with --cap, a multi-line file of exactly the input cap (2 GiB). Each is scored by
`nnlm score MODEL FILE > /dev/null` under /usr/bin/time -v; the reference, measured in the same run,
is the same command on a one-line file of ten words: the model loaded and scoring set up. Printed:
peak RSS, its excess over the reference (target: <= 500 MB), wall time and tokens/s.

    nnlm ngram --corpus brown --kind kn --order 3 --save /tmp/s/kn3
    python benchmarks/score_memory.py /tmp/s/kn3 --one-line-mb 200 --multi-line-mb 1024 --cap

The generated files are deleted at the end (--keep keeps them). Needs about 3.3 GB of free disk with --cap.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

BLOCK_WORDS = 1 << 20
CAP = 2 << 30  # nnlm.io.TEXT_LIMIT


def vocabulary(model: Path) -> list[str]:
    """The model's words (its vocab.json, or a run's), markers left out."""
    data = json.loads((model / "vocab.json").read_text())
    tokens = data["tokens"] if isinstance(data, dict) else data
    return [t for t in tokens if not (t.startswith("<") and t.endswith(">"))]


def write_text(path: Path, size: int, words: list[str], one_line: bool, seed: int) -> int:
    """`size` bytes (exactly) of Zipf-drawn words; one line, or lines of 5-40 words. Returns the token count."""
    rng = np.random.default_rng(seed)
    ranks = np.arange(1, len(words) + 1, dtype=np.float64)
    p = 1.0 / ranks
    p /= p.sum()
    table = np.array([w.encode("utf-8") for w in words], dtype=object)
    written = count = 0
    with open(path, "wb") as fh:
        while written < size:
            ids = rng.choice(len(words), size=BLOCK_WORDS, p=p)
            if one_line:
                block = b" ".join(table[ids]) + b" "
            else:
                ends = np.cumsum(rng.integers(5, 41, size=BLOCK_WORDS // 5))
                seps = np.full(BLOCK_WORDS, b" ", dtype=object)
                seps[ends[ends < BLOCK_WORDS]] = b"\n"
                block = b"".join(np.stack([table[ids], seps], axis=1).ravel())
            block = block[:size - written]
            if written + len(block) == size and not one_line:
                block = block[:-1] + b"\n"
            fh.write(block)
            written += len(block)
            count += block.count(b" ") + 2 * block.count(b"\n")  # words, and a <p> per line
    return count + (1 if one_line else 0)


def write_cap(path: Path, words: list[str], seed: int) -> int:
    """Exactly CAP bytes: a 64 MB multi-line block written 32 times (drawing 2 GiB of words is slow)."""
    block = path.with_suffix(".block")
    tokens = write_text(block, CAP // 32, words, False, seed)
    data = block.read_bytes()
    block.unlink()
    with open(path, "wb") as fh:
        for _ in range(32):
            fh.write(data)
    return 32 * tokens


def measure(nnlm: list[str], model: Path, text: Path) -> dict:
    """Peak RSS (MB) and wall time of `nnlm score MODEL TEXT > /dev/null`."""
    start = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-v", *nnlm, "score", str(model), str(text), "--threads", "1"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"nnlm score failed on {text}:\n{proc.stderr[-2000:]}")
    peak_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr).group(1))
    return {"peak_mb": peak_kb / 1024, "wall_s": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", type=Path, help="a saved model directory (nnlm ngram --save, or a run directory)")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/nnlm-score-memory"), help="scratch directory")
    ap.add_argument("--one-line-mb", type=int, default=200, help="0: none")
    ap.add_argument("--multi-line-mb", type=int, default=1024, help="0: none")
    ap.add_argument("--cap", action="store_true",
                    help="also score a multi-line file of exactly the 2 GiB input cap (a 64 MB block 32 times)")
    ap.add_argument("--keep", action="store_true", help="keep the generated files")
    args = ap.parse_args()
    nnlm = [sys.executable, "-m", "nnlm"] if shutil.which("nnlm") is None else ["nnlm"]
    args.dir.mkdir(parents=True, exist_ok=True)
    words = vocabulary(args.model)
    files = [("one line, 10 words (reference)", args.dir / "ten.txt", None, True)]
    if args.one_line_mb:
        files.append((f"one line, {args.one_line_mb} MB", args.dir / "one-line.txt", args.one_line_mb << 20, True))
    if args.multi_line_mb:
        files.append((f"multi-line, {args.multi_line_mb} MB", args.dir / "multi-line.txt", args.multi_line_mb << 20,
                      False))
    if args.cap:
        files.append(("multi-line, 2 GiB (the input cap)", args.dir / "cap.txt", CAP, False))
    with open("/proc/loadavg") as fh:
        print(f"load before: {fh.read().split()[:3]}   cpu: {os.cpu_count()} cores   model: {args.model}")
    reference = None
    try:
        for label, path, size, one_line in files:
            if size is None:
                path.write_text(" ".join(words[:10]) + "\n")
                tokens = 11
            else:
                t0 = time.perf_counter()
                tokens = (write_cap(path, words, seed=1) if size == CAP else
                          write_text(path, size, words, one_line, seed=len(label)))
                print(f"  generated {path.name}: {path.stat().st_size:,} bytes in {time.perf_counter() - t0:.0f} s")
            m = measure(nnlm, args.model, path)
            if reference is None:
                reference = m["peak_mb"]
            excess = m["peak_mb"] - reference
            print(f"{label:36s} peak RSS {m['peak_mb']:8.0f} MB  over the model's {excess:6.0f} MB "
                  f"({'ok' if excess <= 500 else 'OVER 500 MB'})  {m['wall_s']:7.1f} s  "
                  + (f"{tokens / m['wall_s']:12,.0f} tokens/s" if size is not None else ""), flush=True)
            if size is not None and not args.keep:
                path.unlink()
    finally:
        if not args.keep:
            shutil.rmtree(args.dir, ignore_errors=True)
    with open("/proc/loadavg") as fh:
        print(f"load after: {fh.read().split()[:3]}")


if __name__ == "__main__":
    main()
