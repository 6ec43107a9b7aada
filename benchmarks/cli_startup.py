"""Start-up time of `nnlm --help` (what a new user waits for first), against a plain reference
measured in the same run: `python -c pass` (the interpreter alone).

    python benchmarks/cli_startup.py [--repeats 15] [--other-src /work/main/src]

With --other-src, the same command is also timed with that source tree first on PYTHONPATH (e.g.
the main branch, to compare before and after a change). Runs are interleaved so that a change in
the machine's load hits all variants alike; the medians are printed, with ratios to the reference.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE_SRC = Path(__file__).resolve().parents[1] / "src"


def timed(cmd: list[str], src: Path | None) -> float:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    started = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15, help="runs of each variant (default 15)")
    parser.add_argument("--other-src", type=Path, default=None, help="another src/ to time as well (default none)")
    args = parser.parse_args()
    variants = {"python -c pass (reference)": ([sys.executable, "-c", "pass"], None),
                "nnlm --help (this tree)": ([sys.executable, "-m", "nnlm", "--help"], HERE_SRC)}
    if args.other_src:
        variants[f"nnlm --help ({args.other_src})"] = ([sys.executable, "-m", "nnlm", "--help"], args.other_src)
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.repeats):
        for name, (cmd, src) in variants.items():
            times[name].append(timed(cmd, src))
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {os.cpu_count()} cores, {args.repeats} runs each")
    reference = statistics.median(times["python -c pass (reference)"])
    for name, values in times.items():
        median = statistics.median(values)
        print(f"  {name:<45} median {median:6.3f} s  {median / reference:5.2f}x the reference")


if __name__ == "__main__":
    main()
