"""The README's main command on a busy machine: N CPU-bound processes run while `nnlm reproduce`
does its work; prints each row's status and the wall time against the budget.

    NLTK_DATA=... python benchmarks/reproduce_under_load.py --busy 4              # the 30-minute default
    NLTK_DATA=... python benchmarks/reproduce_under_load.py --busy 2 --budget-minutes 8 --models mlp1

The busy processes spin for at most the budget plus BUSY_MARGIN_MINUTES and are ended by this
script (in a finally) however the run ends. The target on the 2-core machine with --busy 4: MLP1,
MLP3 and their mixes present, MLP1's test perplexity / KN5's <= 0.90, done within the budget.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BUSY_MARGIN_MINUTES = 10.0
SPIN = "import time\nend = time.monotonic() + {seconds}\nx = 0\nwhile time.monotonic() < end:\n    x += 1\n"


def start_busy(n: int, seconds: float) -> list[subprocess.Popen]:
    """N processes that each keep a core busy for `seconds` at most."""
    return [subprocess.Popen([sys.executable, "-c", SPIN.format(seconds=seconds)]) for _ in range(n)]


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def cell(x: float | None) -> str:
    return f"{x:8.1f}" if x else f"{'':>8}"


def summary(out: Path, budget: float, wall: float) -> list[str]:
    rows = json.loads((out / "results.json").read_text())["rows"]
    lines = [f"{'row':<14} {'status':<15} {'valid':>8} {'test':>8}  note"]
    for row_id, r in rows.items():
        p = r.get("perplexity") or {}
        lines.append(f"{row_id:<14} {r.get('status', '?'):<15} {cell(p.get('valid'))} {cell(p.get('test'))}  "
                     f"{r.get('note', '')[:150]}")
    mlp1, kn5 = (rows.get(k, {}).get("perplexity", {}).get("test") for k in ("mlp1", "kn5"))
    if mlp1 and kn5:
        lines.append(f"MLP1 test / KN5 test = {mlp1:.1f} / {kn5:.1f} = {mlp1 / kn5:.3f}")
    present = [k for k in ("mlp1", "mlp2", "mlp1-em", "mlp3", "mlp4", "mlp3-em")
               if (rows.get(k) or {}).get("perplexity", {}).get("test")]
    lines.append(f"net and mix rows with a test perplexity: {', '.join(present) or 'none'}")
    lines.append(f"wall time {wall / 60:.1f} min of a {budget:g}-minute budget "
                 f"({'within' if wall <= 60 * budget else 'OVER'} it)")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--busy", type=int, required=True, help="CPU-bound processes to run alongside")
    parser.add_argument("--budget-minutes", type=float, default=None, help="passed on (default: the command's 30)")
    parser.add_argument("--models", default=None, help="passed on (default: the command's mlp1,mlp3)")
    parser.add_argument("--out", default=None, help="report directory (default: a new temporary one)")
    args = parser.parse_args()
    budget = args.budget_minutes or 30.0
    out = Path(args.out or tempfile.mkdtemp(prefix="reproduce-under-load-")) / "report"
    command = [sys.executable, "-m", "nnlm", "reproduce", "--out", str(out), "--no-progress"]
    if args.budget_minutes is not None:
        command += ["--budget-minutes", str(args.budget_minutes)]
    if args.models:
        command += ["--models", args.models]
    print(f"load before: {load()}; {os.cpu_count()} cores; {args.busy} busy processes; "
          f"command: nnlm {' '.join(command[3:])}", flush=True)
    busy = start_busy(args.busy, 60 * (budget + BUSY_MARGIN_MINUTES))
    try:
        t0 = time.monotonic()
        code = subprocess.run(command).returncode
        wall = time.monotonic() - t0
        print(f"load at the end: {load()}", flush=True)
    finally:
        stop(busy)
    if code != 0 or not (out / "results.json").exists():
        print(f"nnlm reproduce failed (exit {code})")
        return 1
    print("\n".join(summary(out, budget, wall)))
    print(f"report: {out / 'README.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
