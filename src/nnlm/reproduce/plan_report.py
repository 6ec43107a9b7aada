"""The report's "Plan" section: which shape each net trained in and why, its planned against its actual
times, and the call's peak memory (issue 47: a planner is judged by how close its plan came to the run).

Planned times are the planner's own estimates (rates measured on a slice, times the planner's safety
factor 1.15); actual times are what the run recorded: its training with validations, and the seconds
its final scoring of valid and test took."""
from __future__ import annotations

from typing import Any

Rows = dict[str, dict[str, Any]]


def _ratio(actual: float | None, planned: float | None) -> str:
    return f"{actual / planned:.2f}" if actual and planned else ""


def _min(seconds: float | None) -> str:
    return "" if seconds is None else f"{seconds / 60:.1f} min"


def timing_rows(entry: dict[str, Any]) -> list[tuple[str, float | None, float | None]]:
    """(what, planned seconds, actual seconds) of a trained net's row."""
    plan = entry.get("plan") or {}
    est = plan.get("estimates") or {}
    scoring = entry.get("scoring_seconds") or {}
    epochs = entry.get("epochs") or 0.0
    per_epoch = (est["train_seconds"] + est["valid_seconds"]) if "train_seconds" in est else None
    rows = [("training with its validations (the grant)", 60 * plan["work_minutes"] if "work_minutes" in plan
             else None, entry.get("seconds"))]
    if per_epoch and epochs:
        rows.append((f"one epoch with its validation ({epochs:g} epochs trained)", per_epoch,
                     entry.get("seconds", 0.0) / epochs))
    rows += [(f"scoring {split}", est.get(f"{split}_seconds"), scoring.get(split)) for split in ("valid", "test")]
    return rows


def plan_lines(rows: Rows, nets: list[str], call: dict[str, Any]) -> list[str]:
    """The section's lines; none for Table 1 (its report stays as it was) or a call that recorded nothing."""
    lines: list[str] = []
    if not call.get("table"):  # Table 1 (Brown) records no table name
        return []
    for net in nets:
        entry = rows.get(net) or {}
        choice = entry.get("shape_choice")
        if not choice and not entry.get("plan"):
            continue
        if choice:
            lines += [f"{net.upper()}: **{choice['chosen']}** -- {choice['why']}.", ""]
        if entry.get("plan") and entry.get("status") != "skipped":
            lines += ["| planned against actual | planned | actual | actual / planned |", "|---|---|---|---|",
                      *(f"| {what} | {_min(p)} | {_min(a)} | {_ratio(a, p)} |" for what, p, a in timing_rows(entry)),
                      ""]
            first = (entry["plan"].get("first") or {}).get("reason")
            if first:
                lines += [f"Its first plan, from the slice's rates: {first}; planned again from its own epochs: "
                          f"{entry['plan']['reason']}.", ""]
    memory = call.get("peak_memory_mib")
    if memory:
        lines += [f"Peak memory (resident set, `getrusage` max RSS): {memory['process']:,} MiB in the call's "
                  f"process, {memory['children']:,} MiB in its largest finished child process.", ""]
    return ["## Plan", "", *lines] if lines else []
