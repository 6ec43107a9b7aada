"""One big compressed text file through the CLI: time and memory of `nnlm ... --corpus FILE.gz` (issue 48).

Makes the file first if it is missing: Zipf words with bigram structure (benchmarks/scale_corpus.py),
drawn a block at a time and piped into `gzip -6` as they are drawn, so neither the text nor the
compressed file is ever held in memory. Then runs one nnlm command on it as a child process and
reports its wall time, CPU time (user + system, from wait4) and memory:
  - peak RSS (ru_maxrss, what /usr/bin/time -v reports), which counts the pages of memory-mapped
    files the process has touched (the corpus cache's ids.npy, KN tables on disk) as well as its own;
  - peak anonymous RSS (RssAnon in /proc/PID/status, sampled every 0.2 s), the memory the process
    itself holds, which --memory bounds; mapped file pages are the kernel's page cache, given back
    under pressure.
The CPU's name and the load average (other users of the machine) are printed beside the figures.

    python benchmarks/corpus_file.py /tmp/corpusfile/big.txt.gz --tokens 1370000000 -- stats --corpus {file}
    python benchmarks/corpus_file.py /tmp/corpusfile/mid.txt.gz --tokens 140000000 -- \\
        ngram --corpus {file} --kind kn --order 5 --memory 4 --save /tmp/corpusfile/kn5

`{file}` in the command is replaced by the file's path; NNLM_CACHE_DIR is --cache (default: a
`cache` directory beside the file), so the corpus is read from the file, not an older cache, unless
the cache was made by an earlier command on the same file (the output says which: `prepared` time).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generated_corpus import write_lines_to  # noqa: E402
from host import cpu_name  # noqa: E402
from scale_corpus import ZipfBigramSource  # noqa: E402


def make_gzip_corpus(path: Path, tokens: int, seed: int = 0) -> int:
    """Write about `tokens` tokens of generated text to `path`, gzip -6 compressed, streaming."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as out:
        gz = subprocess.Popen(["gzip", "-6", "-c"], stdin=subprocess.PIPE, stdout=out)
        with open(gz.stdin.fileno(), "w", encoding="utf-8", buffering=1 << 20, closefd=False) as text:
            written = write_lines_to(text, ZipfBigramSource(seed=seed), tokens, seed)
        gz.stdin.close()
        if gz.wait() != 0:
            raise SystemExit("gzip failed")
    os.replace(tmp, path)
    return written


def _status(pid: int) -> dict[str, int]:
    """VmRSS, RssAnon and RssFile of a live process, in kB (empty once it has gone)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            return {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in fh)
                    if k in ("VmRSS", "RssAnon", "RssFile")}
    except (OSError, ValueError):
        return {}


def measure(argv: list[str], env: dict[str, str]) -> dict:
    """Run argv; its exit code, wall and CPU seconds, peak RSS and peak sampled anonymous RSS (GB)."""
    peaks = {"RssAnon": 0, "RssFile": 0}
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=env)
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.2):
            for k, v in _status(proc.pid).items():
                if k in peaks:
                    peaks[k] = max(peaks[k], v)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status, usage = os.wait4(proc.pid, 0)
    done.set()
    sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"exit": proc.returncode, "wall_s": round(time.perf_counter() - started, 1),
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 1), "peak_rss_gb": round(usage.ru_maxrss / 2**20, 2),
            "peak_anon_gb": round(peaks["RssAnon"] / 2**20, 2),
            "peak_file_mapped_gb": round(peaks["RssFile"] / 2**20, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file", type=Path, help="the .gz corpus (made if missing)")
    ap.add_argument("--tokens", type=int, default=140_000_000, help="tokens to generate if the file is missing")
    ap.add_argument("--cache", type=Path, default=None, help="NNLM_CACHE_DIR (default: FILE's directory/cache)")
    ap.add_argument("command", nargs="*", help="-- then the nnlm command, {file} for the file")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = ap.parse_args(argv[:cut])
    command = [a.replace("{file}", str(args.file)) for a in argv[cut + 1:]]
    if not args.file.exists():
        t = time.perf_counter()
        written = make_gzip_corpus(args.file, args.tokens)
        print(json.dumps({"made": str(args.file), "tokens": written, "bytes": args.file.stat().st_size,
                          "seconds": round(time.perf_counter() - t, 1)}), flush=True)
    if not command:
        return
    env = dict(os.environ, NNLM_CACHE_DIR=str(args.cache or args.file.parent / "cache"))
    load_before = os.getloadavg()
    row = measure([sys.executable, "-m", "nnlm", *command], env)
    print(json.dumps({"command": "nnlm " + " ".join(command), "file_bytes": args.file.stat().st_size, **row,
                      "cpu": cpu_name(), "load_before": [round(x, 2) for x in load_before],
                      "load_after": [round(x, 2) for x in os.getloadavg()]}), flush=True)


if __name__ == "__main__":
    main()
