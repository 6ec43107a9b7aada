"""How close `nnlm reproduce`'s plan came to what its nets then did: the plan's rates against the run's.

For each net row of a report's results.json that was planned (a budget was given), it sets the plan's
estimates (`plan.rates`, measured on a slice before the net trained; `plan.estimates` carry the planner's
x1.15 safety) beside what happened:

- training: examples per second between validations, from the run's metrics.jsonl;
- validation inside training: seconds per pass, from the same records;
- the final scoring of valid and test: `scoring_seconds` (timed by the reproduce call itself).

Each line gives actual / planned time, without the safety factor (the rate's error) and with it (the
estimate the budget reserved); |ratio - 1| <= 0.3 is marked "within 30%".

    python benchmarks/plan_accuracy.py REPORT_DIR [REPORT_DIR ...]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from nnlm.reproduce.planner import SAFETY
from nnlm.reproduce.rates import from_history


def run_records(report: Path, row: dict) -> list[dict]:
    """The run's per-validation records (metrics.jsonl), [] when the row has no run directory."""
    path = report / row.get("run", "") / "metrics.jsonl"
    if not row.get("run") or not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def verdict(actual: float, planned: float) -> str:
    ratio = actual / planned
    return f"{ratio:5.2f}x raw, {actual / (SAFETY * planned):5.2f}x with safety" + (
        "  within 30%" if abs(ratio - 1) <= 0.3 else "  OUTSIDE 30%")


def report_lines(report: Path) -> list[str]:
    data = json.loads((report / "results.json").read_text())
    sizes = data["corpus_info"]
    lines = [f"{report}: {data['call'].get('command', '')}"]
    for key, row in data["rows"].items():
        plan = row.get("plan") or {}
        if plan.get("first"):  # planned again from its own epochs: the first plan (the slice's rates) too
            lines += plan_lines(report, sizes, key + " (first plan)", row, plan["first"])
        lines += plan_lines(report, sizes, key, row, plan)
    return lines


def plan_lines(report: Path, sizes: dict, key: str, row: dict, plan: dict) -> list[str]:
    """The lines of one plan against what its row did ([] for a row planned without rates)."""
    rates = plan.get("rates")
    if not rates:
        return []
    train_rate, score_rate = rates["train_tokens_per_s"], rates["score_tokens_per_s"]
    lines = [f"  {key} ({row.get('status')}, {row.get('epochs')} epochs; planned with "
             f"{plan.get('left_minutes')} min left on the {rates.get('score_path')} scoring path):"]
    records = run_records(report, row)
    seen = from_history(records, sizes["valid"], last=len(records))  # the planner's own reading of a run
    if seen is not None:
        rate, valid_s, n = seen.train, sizes["valid"] / seen.score, len(records)
        lines.append(f"    training     planned {train_rate:9,.0f} ex/s   actual {rate:9,.0f} ex/s   time "
                     + verdict(train_rate / rate, 1.0))
        planned_valid = sizes["valid"] / score_rate
        lines.append(f"    validation   planned {planned_valid:8.1f} s      actual {valid_s:8.1f} s "
                     f"(mean of {n})  " + verdict(valid_s, planned_valid))
    for split, seconds in (row.get("scoring_seconds") or {}).items():
        planned = sizes[split] / score_rate
        lines.append(f"    score {split:<6} planned {planned:8.1f} s      actual {seconds:8.1f} s           "
                     + verdict(seconds, planned))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", type=Path, help="directories written by nnlm reproduce --out")
    for report in parser.parse_args().reports:
        print("\n".join(report_lines(report)))


if __name__ == "__main__":
    main()
